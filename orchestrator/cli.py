"""``orchestrator``: submit sweeps, show their trials, refit their laws, rebuild and compare
dashboards, export drafts.

This module only assembles the commands (:mod:`orchestrator.commands`). Every user mistake
ends in one line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import typer
from rich.text import Text
from typer._click.exceptions import NoArgsIsHelpError, UsageError  # typer vendors click
from typer.core import TyperArgument, TyperCommand, TyperGroup

from orchestrator._secrets import redact
from orchestrator.commands import sweep
from orchestrator.commands.export import export
from orchestrator.commands.plan import plan
from orchestrator.commands.render import err
from orchestrator.commands.report import compare, report
from orchestrator.commands.roofline import roofline
from orchestrator.commands.setup import loopback_ray as _loopback_ray
from orchestrator.commands.usage import usage_line
from orchestrator.errors import OrchestratorError

__all__ = ["_loopback_ray", "app", "main"]


def _no_bool_metavar(option: Any) -> Any:
    """The ``--help`` option without the ``<bool>`` metavar typer's rich help gives it."""
    if option is not None:
        option.metavar = ""
    return option


def _say_error(message: str) -> None:
    """Print ``error: message`` on stderr as one line."""
    # a Text, not markup: paths and values in the message are printed as they are
    line = Text.assemble(("error:", "bold red"), f" {message}")
    err.print(line, highlight=False, soft_wrap=True, emoji=False)


@contextmanager
def _usage_in_one_line(ctx: Any, args: Sequence[str]) -> Iterator[None]:
    """Turn a usage error typer raises while parsing ``args`` in ``ctx`` (a bad number, a
    missing argument, an unknown option or command) into one line with a fix and exit code 2;
    bare ``orchestrator`` still prints the help."""
    try:
        yield
    except NoArgsIsHelpError:
        raise
    except UsageError as exc:
        _say_error(usage_line(exc, args, ctx))
        raise typer.Exit(2) from None


class _Group(TyperGroup):
    """The top-level ``orchestrator``: its ``--help`` row reads like a flag (no ``<bool>``);
    an unknown command or option is one line with a fix."""

    def get_help_option(self, ctx: Any) -> Any:  # typer vendors click: its own Context type
        return _no_bool_metavar(super().get_help_option(ctx))

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        with _usage_in_one_line(ctx, list(args)):  # a copy: parsing consumes the list
            return super().parse_args(ctx, args)

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        with _usage_in_one_line(ctx, list(args)):
            return super().resolve_command(ctx, args)


app = typer.Typer(
    cls=_Group,
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,  # a traceback's locals would show --db-url passwords
    help="Scaling-law sweeps for speculative decoding (draft training on Ray, "
    "tracked in MLflow and SQL, laws fitted, dashboards written).",
)

F = TypeVar("F", bound=Callable[..., Any])


class _Command(TyperCommand):
    """A command whose ``--help`` row shows no ``<bool>`` metavar (typer's rich help adds one)
    and whose arguments read ``SPEC``, ``[SWEEP]`` in the usage line and in errors (typer
    writes ``{spec}`` and ``'spec'``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.help = unwrap_paragraphs(self.help)
        for param in self.params:
            if isinstance(param, TyperArgument) and param.metavar is None and param.name:
                param.metavar = param.name.upper()

    def get_help_option(self, ctx: Any) -> Any:  # typer vendors click: its own Context type
        return _no_bool_metavar(super().get_help_option(ctx))

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        """typer's parsing; its usage errors (a non-number for a numeric flag, a missing
        argument, an unknown option) become one line with a fix and exit code 2."""
        with _usage_in_one_line(ctx, list(args)):  # a copy: parsing consumes the list
            return super().parse_args(ctx, args)

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if isinstance(param, TyperArgument):
                name = param.metavar or (param.name or "").upper()
                name = name if param.required else f"[{name}]"
                pieces.append(name + ("..." if param.nargs != 1 else ""))
            else:
                pieces.extend(param.get_usage_pieces(ctx))
        return pieces


def unwrap_paragraphs(text: str | None) -> str | None:
    """A docstring's paragraphs each on one line (rich help keeps a paragraph's line breaks
    after the first, so the terminal's wrapping would break sentences mid-line), a ``- ``
    list item on a line of its own; RST double backticks become plain text."""
    if text is None:
        return None
    out = []
    for paragraph in inspect.cleandoc(text).split("\n\n"):
        lines: list[str] = []
        for line in paragraph.splitlines():
            item = line.strip()
            if lines and not item.startswith("- "):  # a list item keeps its own line
                lines[-1] += " " + item
            else:
                lines.append(item)
        out.append("\n".join(lines))
    return "\n\n".join(out).replace("``", "")


def _one_line_errors(fn: F) -> F:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (OrchestratorError, ValueError) as e:
            message = redact(
                str(e),
                kwargs.get("db_url"),
                kwargs.get("tracking_uri"),
                kwargs.get("address") or os.environ.get("RAY_ADDRESS"),
            )
            _say_error(message)
            raise typer.Exit(2) from None

    return wrapper  # type: ignore[return-value]


for _command in (
    sweep.submit,
    sweep.status,
    sweep.fit,
    sweep.mirror,
    sweep.retry,
    sweep.cancel,
    roofline,
    export,
    report,
    compare,
    plan,
):
    app.command(_command.__name__, cls=_Command)(_one_line_errors(_command))


def main() -> None:
    """Console entry point."""
    app()


if __name__ == "__main__":
    main()
