"""Checks at submit, before anything is written: what would make every trial fail, and the
combinations of sinks that would lose or mix results.

The workload's own checks come from its registry entry
(:attr:`workloads.protocol.Workload.preflight`); this module runs them over the distinct configs
the sweep kind names (a grid's points, a search's base and its choices) and names the spec's
line of the field at fault.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from orchestrator.errors import OrchestratorError, SpecError
from orchestrator.spec.sweep import SweepSpec, is_config_field
from orchestrator.spec.yaml_lines import spec_line
from workloads.config import ConfigError


def preflight(
    spec_path: Path,
    sweep: SweepSpec,
    configs: list[Any],
    run_root: Path,
    *,
    cache_dir: Path | None = None,
    dry_run: bool = False,
) -> None:
    """Run the workload's checks over ``configs`` (the sweep kind's: a grid's distinct
    configs, a search's base and its choices, a design's candidates).

    Raises:
        SpecError: ``file:line: message``, the line of the field at fault when one is.
    """
    distinct = list({c.model_dump_json(): c for c in configs}.values())
    for check in sweep.workload_info.preflight:
        try:
            check(distinct, run_root, cache_dir=cache_dir, dry_run=dry_run)
        except ValueError as exc:
            fields = (exc.field, *exc.also) if isinstance(exc, ConfigError) else ()
            fields = tuple(f for f in fields if f) or _named_field(sweep, str(exc))
            raise SpecError(f"{spec_path}:{_line(spec_path, sweep, *fields)}: {exc}") from exc


def _named_field(sweep: SweepSpec, message: str) -> tuple[tuple[str, ...], ...]:
    """The config field a plain ``ValueError`` of a check starts with (``"device 'cuda' ..."``,
    ``"prompts.prompt_sets ... is not a directory"``): the workloads' messages name the field
    first; () when the first word is not a field of the trial config."""
    first = re.split(r"[\s:]", message.strip(), maxsplit=1)[0]
    return (
        (tuple(first.split(".")),) if first and is_config_field(sweep.config_model, first) else ()
    )


def _line(spec_path: Path, sweep: SweepSpec, *fields: tuple[str, ...]) -> int:
    """The spec line of a config field: its grid axis, search dimension, variant override or
    base entry (then the base block above it). Several fields (a constraint between them): the
    first of them that the spec sets, else the nearest block above the first; no field: the
    ``base`` block (1 when the spec has none)."""
    locs: list[tuple[str, ...]] = []
    for f in fields:
        dotted = ".".join(f)
        locs += [("grid", dotted), ("search", "space", dotted), ("base", *f)]
        locs += [("variants", name, dotted) for name in sweep.variants]
    locs += [("base", *f[:i]) for f in fields for i in range(len(f) - 1, 0, -1)]
    return spec_line(spec_path, *locs, ("base",))


def check_folder(flag: str, folder: Path) -> None:
    """Refuse a folder that cannot be created: it, or the nearest existing folder above it, is a
    file or is not writable.

    Raises:
        OrchestratorError: naming the flag and the fix.
    """
    existing = next(p for p in (folder, *folder.resolve().parents) if p.exists())
    if not existing.is_dir():
        raise OrchestratorError(
            f"{flag} {folder}: {existing} is a file, not a folder. Fix: give a folder (it is "
            "created if missing)"
        )
    if not os.access(existing, os.W_OK | os.X_OK):
        raise OrchestratorError(
            f"{flag} {folder}: {existing} is not writable. Fix: give a folder you can write to"
        )
