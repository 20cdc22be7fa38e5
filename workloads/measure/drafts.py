"""Where a trial's draft is: the draft folder a ``draft_train`` trial saved under the run root
(by key, key prefix or ``best``), and the check that a folder is one. Shared by the workloads
that decode with a trained draft (``decode_bench``, ``serve_bench``) and by ``orchestrator
export``; no torch, nothing loaded.
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path


def find_trial_draft(
    run_root: Path, sweep: str, trial_key: str, *, label: str = "draft.trial_key"
) -> Path:
    """The draft folder saved by a draft_train trial: ``<run root>/<sweep>/trials/<key>/draft``.

    ``trial_key`` may be a unique prefix (>= 6 characters) or ``best``: the trial with the
    highest acceptance length in its ``per_prompt.json``. ``label`` names ``trial_key`` in
    error messages (the config field or the command-line argument).

    Raises:
        ValueError: no such sweep folder or trial, or an ambiguous prefix.
    """
    trials = run_root / sweep / "trials"
    found = sorted(p.parent for p in trials.glob("*/draft/arch.json"))
    known = [] if trials.is_dir() else [p.parent.name for p in run_root.glob("*/trials")]
    close = difflib.get_close_matches(sweep, known, n=1)
    if close:  # a misspelt sweep, not one still to run
        raise ValueError(
            f"draft.sweep {sweep!r} has no trials under {run_root} (did you mean {close[0]!r}?). "
            f"Fix: draft.sweep: {close[0]}"
        )
    if not found:
        spec = Path("sweeps") / f"{sweep}.yaml"  # the shipped spec of that name, if there is one
        how = f"orchestrator submit {spec}" if spec.is_file() else f"the spec with name: {sweep}"
        raise ValueError(
            f"no finished draft_train trial under {trials}. Fix: run the draft_train sweep "
            f"{sweep!r} (`{how}`, with the same --run-root) first, or use draft.source: path"
        )
    if trial_key == "best":
        return max(found, key=_acceptance_of)
    keys = ", ".join(p.parent.name for p in found[:8])
    if len(trial_key) < 6:
        raise ValueError(f"{label} {trial_key!r} is too short. Fix: >= 6 characters of {keys}")
    hits = [p for p in found if p.parent.name.startswith(trial_key)]
    if len(hits) != 1:
        what = "matches several trials" if hits else "matches no finished trial"
        raise ValueError(
            f"{label} {trial_key!r} {what} in {trials}. Fix: best, or one of {keys} (a unique "
            "prefix of >= 6 characters)"
        )
    return hits[0]


def check_draft_folder(folder: Path) -> None:
    """Refuse a ``draft.path`` that is not a draft folder saved by draft_train (no folder, no
    ``arch.json``), naming the fix.

    Raises:
        ValueError: the folder and the fix.
    """
    if not folder.is_dir():
        raise ValueError(
            f"draft.path {folder} does not exist. Fix: give a draft folder saved by draft_train "
            "(<run root>/<sweep>/trials/<key>/draft) or use draft.source: trial"
        )
    if not (folder / "arch.json").exists():
        raise ValueError(
            f"draft.path {folder} is not a draft folder (no arch.json). Fix: give the 'draft' "
            "folder of a draft_train trial (<run root>/<sweep>/trials/<key>/draft)"
        )


def _acceptance_of(draft_dir: Path) -> float:
    path = draft_dir.parent / "per_prompt.json"
    rows = json.loads(path.read_text()) if path.exists() else []
    cycles = sum(int(r["cycles"]) for r in rows)
    return sum(int(r["accepted"]) for r in rows) / cycles if cycles else 0.0
