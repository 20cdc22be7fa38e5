"""What the benchmarks share: their command lines (one-line refusals, the usual options), JSON
output, timing, the results store of a run root, the target, a fresh draft and its training
settings, ShareGPT prompts and the vLLM trial.

Every benchmark is a module of this package, run from the repository root as
``python -m benchmarks.<name> ...``. This module imports only the standard library (the GPU
checks use it on a machine with torch and transformers alone); the store, data and serving
helpers import their packages when called.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    import pandas as pd

    from orchestrator.store.results import ResultsStore
    from orchestrator.store.rows import SweepInfo
    from workloads.models.draft import DraftModel
    from workloads.models.target import Target
    from workloads.serving.config import ServeBenchConfig
    from workloads.training.loop import StageSettings

ROOT = Path(__file__).resolve().parents[1]
"""the repository root (the working directory of the subprocesses a benchmark starts)"""


# -- the command line -----------------------------------------------------------------------


def parser(name: str, **kwargs: Any) -> argparse.ArgumentParser:
    """An :class:`argparse.ArgumentParser` (``kwargs`` as for it) whose errors are one line,
    ``<name>: error: <message>``, and exit code 2; its sub-commands' parsers alike."""

    class OneLine(argparse.ArgumentParser):
        def error(self, message: str) -> NoReturn:
            self.exit(2, f"{name}: error: {message}\n")

    return OneLine(**kwargs)


def refusal(name: str, message: str) -> int:
    """Print ``<name>: <message>`` on stderr (a refusal's one line); return its exit code, 2."""
    print(f"{name}: {message}", file=sys.stderr)
    return 2


def refuse(name: str, message: str) -> NoReturn:
    """:func:`refusal`, then exit with code 2."""
    raise SystemExit(refusal(name, message))


def add_run_root(p: argparse.ArgumentParser, help: str | None = None, **kwargs: Any) -> None:
    """``--run-root DIR`` (default ``runs``): where ``orchestrator submit`` wrote."""
    kwargs = {"default": Path("runs"), **kwargs}
    p.add_argument("--run-root", type=Path, help=help, **kwargs)


def add_out(p: argparse.ArgumentParser, default: Path | None, help: str) -> None:
    """``--out PATH``: the output folder or file (``default``; None: write nothing)."""
    p.add_argument("--out", type=Path, default=default, help=help)


def add_json(p: argparse.ArgumentParser) -> None:
    """``--json FILE``: also write the results there."""
    p.add_argument("--json", type=Path, default=None, help="also write the results here")


def add_threads(p: argparse.ArgumentParser, default: int = 2, help: str | None = None) -> None:
    """``--threads N``: torch's CPU threads."""
    p.add_argument("--threads", type=int, default=default, help=help)


def add_cache(
    p: argparse.ArgumentParser, flag: str = "--cache-dir", help: str | None = None
) -> None:
    """``--cache-dir DIR`` (or ``flag``; default ``runs/cache``): the converted target's cache."""
    p.add_argument(flag, type=Path, default=Path("runs/cache"), help=help)


# -- output ---------------------------------------------------------------------------------


def json_safe(value: Any) -> Any:
    """``value`` as JSON can hold it: NaN and infinities as None, numpy scalars as Python
    numbers (arrays as lists), objects with ``to_dict()`` as their dict, tuples as lists,
    anything else not JSON (paths, dtypes) as its ``str``."""
    if isinstance(value, dict):
        return {str(k) if not isinstance(k, str) else k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    if hasattr(value, "to_dict") and not isinstance(value, type):
        return json_safe(value.to_dict())
    if type(value).__module__ == "numpy" and hasattr(value, "tolist"):
        return json_safe(value.tolist())
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, bool | int | str):
        return value
    return str(value)


def write_json(path: Path, data: Any, *, indent: int = 1, echo: bool = False) -> None:
    """Write ``data`` (through :func:`json_safe`) to ``path``, its folder made if missing;
    ``echo``: print the same text first."""
    text = json.dumps(json_safe(data), indent=indent, allow_nan=False)
    if echo:
        print(text)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


# -- timing ---------------------------------------------------------------------------------


def median_ms(fns: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """Median milliseconds of each call over ``repeats`` rounds, the calls interleaved round by
    round after one untimed warm-up round."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    for r in range(repeats + 1):  # round 0 warms up
        for k, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            if r:
                times[k].append(1000 * (time.perf_counter() - t0))
    return {k: statistics.median(v) for k, v in times.items()}


# -- the results store of a run root --------------------------------------------------------


@contextlib.contextmanager
def results(
    run_root: Path, db_url: str | None = None, *, must_exist: bool = False
) -> Iterator[ResultsStore]:
    """The results store of ``run_root`` (``<run root>/results.db``; ``db_url`` instead where
    given), closed on exit. A missing SQLite file is created, empty, unless ``must_exist``.

    Raises:
        OrchestratorError: ``must_exist`` and there is none, with the fix.
    """
    from orchestrator.store.access import open_store

    store = open_store(run_root, db_url, must_exist=must_exist)
    try:
        yield store
    finally:
        store.close()


def sweep_metrics(store: ResultsStore, name: str) -> tuple[SweepInfo, pd.DataFrame]:
    """Sweep ``name`` and its completed trials' metrics table; exits with a message naming the
    fix when the DB holds no such sweep."""
    info = store.get_sweep(name)
    if info is None:
        sys.exit(f"no sweep {name!r} in the DB; run `orchestrator submit` for it first")
    df = store.metrics_frame(info.id)
    return info, df[df["state"] == "completed"]


# -- models and data ------------------------------------------------------------------------


def target(threads: int, cache_dir: Path, name: str | None = None) -> Target:
    """Torch on ``threads`` CPU threads, then the target ``name`` (default: the platform's,
    SmolLM2-135M-Instruct) loaded from ``cache_dir``, float32."""
    import torch

    from workloads.models.target import DEFAULT_TARGET, load_target

    torch.set_num_threads(threads)
    return load_target(name or DEFAULT_TARGET, cache_dir=cache_dir)


def fresh_draft(model: Any, layers: int = 1, keep: Any = None, seed: int = 0) -> DraftModel:
    """A random-weight draft of ``layers`` decoder layers (output norm on) drawn after
    ``torch.manual_seed(seed)``, sharing the target ``model``'s embedding and LM head; ``keep``:
    its vocabulary's target ids (``draft_to_target``; None: the whole vocabulary)."""
    import torch

    from workloads.models.draft import DraftArch, DraftModel

    torch.manual_seed(seed)
    arch = DraftArch.from_target(model.config, layers=layers, output_norm=True)
    emb, head = model.get_input_embeddings().weight, model.get_output_embeddings().weight
    assert isinstance(emb, torch.Tensor) and isinstance(head, torch.Tensor)
    return DraftModel(arch, embed_weight=emb, lm_head_weight=head, draft_to_target=keep)


def stage_settings(batch_size: int, **changes: Any) -> StageSettings:
    """One epoch of draft training at ``batch_size`` rows: lr 1e-3, no warm-up or weight decay,
    gradient clip 0.5, EAGLE's loss weights (1.0, 0.1), seed 0; ``changes`` override them."""
    from workloads.training.loop import StageSettings

    fields: dict[str, Any] = dict(epochs=1, lr=1e-3, warmup_steps=0, weight_decay=0.0, seed=0)
    fields |= {"grad_clip": 0.5, "w_reg": 1.0, "w_cls": 0.1} | changes
    return StageSettings(batch_size=batch_size, **fields)


def sft_prompts(tokenizer: Any, conversations: list[Any], n: int, max_len: int) -> list[list[int]]:
    """The first ``n`` first-turn prompts (chat template applied, token ids) of at most
    ``max_len`` tokens among ``conversations`` (ShareGPT's SFT split or its head)."""
    from workloads.data import chat_prompt_ids

    prompts = [chat_prompt_ids(tokenizer, c.first_user_text) for c in conversations]
    return [p for p in prompts if len(p) <= max_len][:n]


# -- the vLLM trial -------------------------------------------------------------------------


def served_draft(name: str, cfg: ServeBenchConfig, run_root: Path) -> Path:
    """The draft_train folder ``cfg`` serves from ``run_root``; a refusal of ``name`` (one line,
    exit code 2) when there is none."""
    from workloads.serving import bench

    try:
        return bench.find_served_draft(cfg, run_root.resolve())
    except ValueError as exc:
        refuse(name, str(exc))


def serve(cfg: ServeBenchConfig, run_root: Path, out_dir: Path) -> dict[str, float]:
    """One ``serve_bench`` trial of ``cfg`` on ``run_root``'s cache and drafts, its files under
    ``out_dir``, progress printed; its metrics."""
    from workloads.serving import bench

    root = run_root.resolve()
    done = bench.run(
        cfg, cache_dir=run_root / "cache", out_dir=out_dir, run_root=root, progress=print
    )
    return done.metrics
