"""What a kind's block checks may ask of the spec file being loaded (:class:`SpecLines`): the
lines of its keys and values, its trial configs, the loader's own refusals. The loader
(:mod:`orchestrator.spec.sweep`) implements it; a block module imports no spec module."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, ValidationError

from orchestrator.errors import SpecError


class SpecLines(Protocol):
    """The spec file being loaded, for refusals that name ``file:line`` and a fix."""

    path: Path
    """the file, as errors name it"""
    data: dict[str, Any]
    """the spec's raw mapping"""

    def line(self, loc: tuple[Any, ...]) -> int:
        """The line of the key at ``loc`` (e.g. ``("design", "axis")``), else of its nearest
        parent present."""

    def value_line(self, loc: tuple[Any, ...]) -> int:
        """The line of the value at ``loc`` (e.g. ``("design", "values", 2)``)."""

    def field_path(self, loc: tuple[Any, ...]) -> str:
        """A pydantic error location as a dotted config field (union member tags dropped)."""

    def explain(
        self,
        err: ValidationError,
        *,
        model: type[BaseModel] | None = None,
        prefix: tuple[Any, ...] = (),
        at: tuple[Any, ...] | None = None,
    ) -> SpecError:
        """The loader's one-line refusal of a pydantic error of ``model`` (None: the trial
        config model) found under ``prefix`` (``at``: the value whose line it names)."""

    def config(self, overrides: dict[str, Any]) -> BaseModel:
        """The spec's base with the dotted ``overrides``, validated by the trial config model.

        Raises:
            ValidationError: the model refuses it.
        """

    def check_field(self, loc: tuple[str, ...], what: str) -> None:
        """Refuse a key at ``loc`` that is not a dotted field of the trial config."""

    def check_workers(self, config: BaseModel, at: tuple[Any, ...]) -> None:
        """Refuse training on workers the spec's resources cannot hold (the value at ``at``)."""
