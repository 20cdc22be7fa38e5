"""Training checkpoints: draft weights, AdamW state and a JSON record, in safetensors only.

A checkpoint is a folder ``<name>/`` with ``model.safetensors`` (the draft's trainable weights),
``optimizer.safetensors`` (AdamW moments and step counts, flattened) and ``state.json`` (the step
and whatever the caller keeps, e.g. the loss curve so far). It is written to a temporary folder
and renamed, so a crash never leaves half a checkpoint; nothing is loaded with pickle.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from workloads.models.draft import DraftModel

_STEP = re.compile(r"^(?P<prefix>.+)-step-(?P<step>\d{7})$")


def checkpoint_name(prefix: str, step: int) -> str:
    """Folder name of the checkpoint after ``step`` optimiser steps of ``prefix``."""
    return f"{prefix}-step-{step:07d}"


def save_checkpoint(
    folder: Path, draft: DraftModel, opt: torch.optim.Optimizer, state: dict[str, Any]
) -> Path:
    """Write ``folder`` atomically (a finished checkpoint of that name is left as it is).

    Args:
        folder: the checkpoint folder, e.g. ``<dir>/checkpoint_name(prefix, step)``.
        draft: its trainable weights are saved (the frozen embedding and LM head are not).
        opt: an AdamW (or any optimiser whose state is tensors and numbers per parameter).
        state: JSON-serialisable record (step, loss curve, ...).

    Returns:
        ``folder``.
    """
    if (folder / "state.json").exists():
        return folder
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    save_file(dict(draft.trainable_state()), str(tmp / "model.safetensors"))
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, Any] = {}
    for pid, pstate in opt.state_dict()["state"].items():
        for k, v in pstate.items():
            if isinstance(v, torch.Tensor):
                tensors[f"{pid}.{k}"] = v.detach().contiguous()
            else:
                scalars[f"{pid}.{k}"] = v
    save_file(tensors, str(tmp / "optimizer.safetensors"))
    record = {"state": state, "optimizer_scalars": scalars}
    (tmp / "state.json").write_text(json.dumps(record))
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)
    return folder


def load_checkpoint(folder: Path, draft: DraftModel, opt: torch.optim.Optimizer) -> dict[str, Any]:
    """Load weights and optimiser state saved by :func:`save_checkpoint`; return its record.

    Raises:
        FileNotFoundError: ``folder`` is not a finished checkpoint.
        ValueError: the checkpoint does not fit this draft or optimiser.
    """
    record = json.loads((folder / "state.json").read_text())
    try:
        draft.load_state_dict(load_file(str(folder / "model.safetensors")), strict=False)
    except RuntimeError as e:
        raise ValueError(f"checkpoint {folder} does not fit this draft: {e}") from e
    flat = load_file(str(folder / "optimizer.safetensors"))
    scalars: dict[str, Any] = record["optimizer_scalars"]
    per_param: dict[int, dict[str, Any]] = {}
    for name, value in [*flat.items(), *scalars.items()]:
        pid, key = name.split(".", 1)
        per_param.setdefault(int(pid), {})[key] = value
    sd = opt.state_dict()
    sd["state"] = per_param
    try:
        opt.load_state_dict(sd)
    except (ValueError, KeyError) as e:
        raise ValueError(f"checkpoint {folder} does not fit this optimiser: {e}") from e
    return dict(record["state"])


def latest_checkpoint(directory: Path, prefix: str, max_step: int | None = None) -> Path | None:
    """The finished ``prefix`` checkpoint with the most steps (at most ``max_step``), or None."""
    best: tuple[int, Path] | None = None
    if not directory.is_dir():
        return None
    for p in directory.iterdir():
        m = _STEP.match(p.name)
        if not m or m["prefix"] != prefix or not (p / "state.json").exists():
            continue
        step = int(m["step"])
        if (max_step is None or step <= max_step) and (best is None or step > best[0]):
            best = (step, p)
    return None if best is None else best[1]


def prune_checkpoints(directory: Path, prefix: str, keep: int) -> list[Path]:
    """Delete all but the ``keep`` newest finished ``prefix`` checkpoints in ``directory``
    (``train.keep_checkpoints``: a draft of an 8B target is ~2.8 GiB per checkpoint).

    Unfinished (``.tmp``) folders are left to :func:`save_checkpoint`. Returns what was deleted.

    Raises:
        ValueError: ``keep`` < 1 (the newest checkpoint is what a retry resumes from).
    """
    if keep < 1:
        raise ValueError(f"keep={keep}: at least the newest checkpoint must be kept")
    if not directory.is_dir():
        return []
    found = []
    for p in directory.iterdir():
        m = _STEP.match(p.name)
        if m and m["prefix"] == prefix and (p / "state.json").exists():
            found.append((int(m["step"]), p))
    old = [p for _, p in sorted(found)[:-keep]]
    for p in old:
        shutil.rmtree(p, ignore_errors=True)
    return old
