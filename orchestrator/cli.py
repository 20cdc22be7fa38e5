"""``orchestrator``: submit sweeps, show their trials, refit their laws, rebuild and compare
dashboards, export drafts.

This module only assembles the commands (:mod:`orchestrator.commands`). Every user mistake
ends in one line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any, TypeVar

import typer
from rich.text import Text
from typer.core import TyperCommand

from orchestrator._secrets import redact
from orchestrator.commands import sweep
from orchestrator.commands.export import export
from orchestrator.commands.render import err
from orchestrator.commands.report import compare, report
from orchestrator.commands.roofline import roofline
from orchestrator.commands.setup import loopback_ray as _loopback_ray
from orchestrator.errors import OrchestratorError

__all__ = ["_loopback_ray", "app", "main"]

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,  # a traceback's locals would show --db-url passwords
    help="Scaling-law sweeps for speculative decoding (draft training on Ray, "
    "tracked in MLflow and SQL, laws fitted, dashboards written).",
)

F = TypeVar("F", bound=Callable[..., Any])


class _Command(TyperCommand):
    """A command whose ``--help`` row shows no ``<bool>`` metavar (typer's rich help adds one)."""

    def get_help_option(self, ctx: Any) -> Any:  # typer vendors click: its own Context type
        option = super().get_help_option(ctx)
        if option is not None:
            option.metavar = ""
        return option


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
            # a Text, not markup: paths and values in the message are printed as they are
            line = Text.assemble(("error:", "bold red"), f" {message}")
            err.print(line, highlight=False, soft_wrap=True, emoji=False)
            raise typer.Exit(2) from None

    return wrapper  # type: ignore[return-value]


for _command in (
    sweep.submit,
    sweep.status,
    sweep.fit,
    sweep.retry,
    sweep.cancel,
    roofline,
    export,
    report,
    compare,
):
    app.command(_command.__name__, cls=_Command)(_one_line_errors(_command))


def main() -> None:
    """Console entry point."""
    app()


if __name__ == "__main__":
    main()
