"""One line, with a fix, for a command-line mistake typer finds before a command runs: a bad
value of a numeric flag, a missing argument, an unknown option or command.

:mod:`orchestrator.cli` prints the line and exits 2; typer would print a boxed error with no fix.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from typer._click.exceptions import MissingParameter, UsageError  # typer vendors click

from orchestrator._secrets import redact

__all__ = ["usage_line"]

_EXAMPLE_IN_HELP = re.compile(r"\be\.g\. (-?\d+(?:\.\d+)?)\b")


def usage_line(exc: UsageError, args: Sequence[str], ctx: Any = None) -> str:
    """The one line for ``exc``, raised while parsing ``args`` (the command line after the
    command's name) in ``ctx`` (typer's context, for the usage line when ``exc`` has none).

    A numeric option's bad value reads ``--prefix -1 must be a whole number >= 0. Fix: e.g.
    --prefix 10000 (the default)``; any other mistake keeps typer's message and gets the
    command's usage as its fix. Passwords of URLs among ``args`` are masked.
    """
    param = getattr(exc, "param", None)
    kind = _number_kind(param)
    if kind is not None and not isinstance(exc, MissingParameter):
        line = _number_line(param, kind, _given(param, args))
    else:
        line = _with_usage(exc, exc.ctx or ctx)
    return redact(line, *args)


def _number_kind(param: Any) -> type | None:
    """``int`` or ``float`` for an option typer converts to that type, else None."""
    if param is None or getattr(param, "param_type_name", None) != "option":
        return None
    kind = getattr(getattr(param, "type_descriptor", None), "annotation", None)
    return kind if kind in (int, float) else None


def _given(param: Any, args: Sequence[str]) -> str | None:
    """The value ``args`` give ``param`` (``--opt v`` or ``--opt=v``; the last one wins)."""
    value = None
    for i, arg in enumerate(args):
        for opt in param.opts:
            if arg == opt and i + 1 < len(args):
                value = args[i + 1]
            elif arg.startswith(f"{opt}="):
                value = arg[len(opt) + 1 :]
    return value


def _number_line(param: Any, kind: type, value: str | None) -> str:
    """``--opt value must be <rule>. Fix: e.g. --opt <example>``."""
    opt = max(param.opts, key=len)
    lo, hi = getattr(param, "min", None), getattr(param, "max", None)
    rule = "a whole number" if kind is int else "a number"
    if lo is not None and hi is not None:
        rule += f" from {lo} to {hi}"
    elif lo is not None:
        rule += f" >= {lo}"
    elif hi is not None:
        rule += f" <= {hi}"
    shown = opt if value is None else f"{opt} {_quoted(value)}"
    return f"{shown} must be {rule}. Fix: e.g. {opt} {_example(param, lo, hi)}"


def _example(param: Any, lo: float | None, hi: float | None) -> str:
    """The option's default (if a number in range), else the help's ``e.g. N``, else its
    minimum, else 1."""
    default = param.default
    if (
        isinstance(default, int | float)
        and not isinstance(default, bool)
        and (lo is None or default >= lo)
        and (hi is None or default <= hi)
    ):
        return f"{_plain(default)} (the default)"
    found = _EXAMPLE_IN_HELP.search(param.help or "")
    if found:
        return found.group(1)
    return _plain(lo) if lo is not None else "1"


def _plain(x: float) -> str:
    """``60.0`` -> ``60``, ``0.05`` -> ``0.05``."""
    return str(int(x)) if float(x).is_integer() else repr(x)


def _quoted(value: str) -> str:
    """A value that reads as a number as it is (``-1``, ``1.5``), any other quoted (``'abc'``)."""
    try:
        float(value)
    except ValueError:
        return repr(value)
    return value


def _with_usage(exc: UsageError, ctx: Any) -> str:
    """typer's message, then the usage line of ``ctx``'s command as the fix."""
    message = " ".join(exc.format_message().split())
    if "Fix:" in message:
        return message
    if message and message[-1] not in ".!?":
        message += "."
    if ctx is None:
        return f"{message} Fix: see orchestrator --help"
    usage = " ".join([ctx.command_path, *ctx.command.collect_usage_pieces(ctx)])
    return f"{message} Fix: {usage} (see {ctx.command_path} --help)"
