"""``orchestrator export``: write a trained draft in the layout a serving engine loads.

The conversion is :mod:`workloads.models.export` (engine rules as data, each with its source file);
this command finds the trial's draft folder (:func:`workloads.measure.drafts.find_trial_draft`),
loads the target's token embedding where the format needs it, and prints what it wrote and how
to load it. Registered in :mod:`orchestrator.cli`, which turns ``ValueError`` (including
:class:`workloads.models.export.ExportError`) into one line and exit code 2.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from orchestrator.commands.options import flag

out_console = Console()

_FORMATS_HELP = (
    "eagle (eagle-llm 1.2.1 cnets.Model), sglang (LlamaForCausalLMEagle), vllm "
    "(EagleLlamaForCausalLM, or this project's vLLM plugin: EagleScyllaLlamaForCausalLM, and "
    "Eagle3ScyllaLlamaForCausalLM for a draft with hidden fusion), or hf (this project's own "
    "layout: every variant, loads back); eagle and sglang refuse a draft with hidden fusion"
)


def export(
    sweep: Annotated[str, typer.Argument(help="sweep name (its folder under the run root)")],
    trial: Annotated[
        str,
        typer.Argument(
            help="trial key, a unique prefix of it (>= 6 characters), or best (highest "
            "acceptance length)"
        ),
    ],
    *,
    fmt: Annotated[str, typer.Option("--format", help=_FORMATS_HELP)],
    out: Annotated[Path, typer.Option("--out", help="folder to write (must be new or empty)")],
    run_root: Annotated[
        Path, typer.Option("--run-root", help="run root the sweep was submitted with")
    ] = Path("runs"),
    target: Annotated[
        str | None,
        typer.Option(
            "--target",
            help="the target the draft was trained for (its token embedding goes into the "
            "engine formats): builtin name, local path or hub id (default: the one its trial "
            "trained on, else smollm2-135m-instruct)",
        ),
    ] = None,
    cache_dir: Annotated[
        Path | None,
        typer.Option(
            "--cache-dir", help="where the converted target is cached (default: <run root>/cache)"
        ),
    ] = None,
    dtype: Annotated[
        str, typer.Option("--dtype", help="weights' element type: float32, bfloat16 or float16")
    ] = "float32",
    overwrite: Annotated[
        bool, flag("--overwrite", help="replace a non-empty --out folder")
    ] = False,
) -> None:
    """Export a trained draft for EAGLE, SGLang, vLLM or as a self-describing HF folder.

    Writes config.json and safetensors with the key names the engine's EAGLE-1/2 draft class
    loads (embed_tokens, fc, layers.N.*; no lm_head: the engines take the target's). vllm takes
    every draft: one stock EAGLE-1 cannot hold (fc bias, norms, a truncated vocabulary) is
    written for this project's vLLM plugin (make serve-env installs it). A draft eagle or sglang
    cannot load as is is refused with the reason and the fix, and nothing is written.

    Example: orchestrator export tokens best --format sglang --out exported/sglang
    """
    from workloads.measure.drafts import find_trial_draft
    from workloads.models import export as ex

    fmt = fmt.strip().lower()
    if fmt not in ex.FORMATS:
        raise ValueError(f"--format {fmt!r} is not one of {list(ex.FORMATS)}. Fix: --format hf")
    if dtype not in ex.DTYPES:
        raise ValueError(f"--dtype {dtype!r} is not one of {list(ex.DTYPES)}")
    run_root = run_root.resolve()
    trials = run_root / sweep / "trials"
    if not any(trials.glob("*/draft/arch.json")):
        raise ValueError(
            f"no trained draft under {trials}. Fix: pass the --run-root and SWEEP a draft_train "
            "sweep was submitted with (orchestrator submit sweeps/tokens.yaml)"
        )
    if trial != "best" and len(trial) < 6:
        raise ValueError(f"TRIAL {trial!r} is too short: give >= 6 characters of a key, or best")
    folder = find_trial_draft(run_root, sweep, trial, label="TRIAL")
    draft = ex.read_draft(folder)
    ex.check(draft, fmt)  # before loading the target: refusals are instant and write nothing
    ex.check_out(out, overwrite=overwrite)

    embed = head = None
    if fmt != "hf":
        from workloads.models.draft import trained_target
        from workloads.models.target import load_target
        from workloads.models.target_source import DEFAULT_TARGET

        target = target or trained_target(folder) or DEFAULT_TARGET
        out_console.print(f"loading the target {target!r} for its token embedding...")
        tgt = load_target(target, cache_dir=cache_dir or run_root / "cache")
        model: Any = tgt.model
        embed = model.get_input_embeddings().weight.detach()
        head = model.get_output_embeddings().weight.detach()
    result = ex.export_draft(
        draft, fmt, out.resolve(), embed_weight=embed, lm_head_weight=head, dtype=dtype,
        overwrite=overwrite,
    )  # fmt: skip
    out_console.print(
        f"exported {folder.parent.name} ({draft.arch.layers} layers, draft vocabulary "
        f"{draft.draft_to_target.shape[0]}) as {fmt}: {result.out}",
        highlight=False,
    )
    for name in result.files:
        size = (result.out / name).stat().st_size
        out_console.print(f"  {name}  {size / 2**20:.1f} MiB", highlight=False)
    out_console.print(f"load it with: {result.usage}", highlight=False, soft_wrap=True)
