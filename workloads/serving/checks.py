"""Checks of a ``serve_bench`` sweep at submit, before anything is written (no model loaded).

Each refusal is a :class:`~workloads.config.ConfigError` naming the field at fault and a fix:
no serving environment (say ``make serve-env``), a draft that cannot be found, a fixed port in
use, a target vLLM cannot load (random weights; a local folder without ``config.json``), a fused
draft on a target class vLLM cannot serve with ``eagle3`` (Gemma-3's).
The prompts are checked as ``decode_bench``'s (:func:`check_serve_prompts`). A
``draft_train`` sweep that regenerates its SFT replies in vLLM (``sft.regen_engine: vllm``) gets
the environment and target checks too (:func:`check_regen_configs`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from workloads.checks import check_bench_prompts, check_targets
from workloads.config import ConfigError, TargetConfig
from workloads.draft_train.config import DraftTrainConfig
from workloads.protocol import Preflight
from workloads.serving.config import ServeBenchConfig

if TYPE_CHECKING:
    from workloads.serving.env import ServingEnv


def check_configs(configs: Sequence[ServeBenchConfig], run_root: Path) -> None:
    """Run every check over the distinct configs (see the module docstring).

    Raises:
        ConfigError: the first problem found.
    """
    from workloads.models.draft import check_trained_target
    from workloads.serving.bench import find_served_draft
    from workloads.serving.env import ServingEnvError, find_env
    from workloads.serving.server import port_in_use

    envs: dict[str, ServingEnv] = {}
    for python in sorted({c.serve.python for c in configs}):
        try:
            envs[python] = find_env(python)
        except ServingEnvError as exc:
            raise ConfigError(str(exc), ("serve", "python")) from exc
    for c in configs:
        if c.serve.port and port_in_use(c.serve.port):
            raise ConfigError(
                f"serve.port {c.serve.port} on 127.0.0.1 is in use. Fix: serve.port: 0 (a free "
                "port is picked for each server) or another port",
                ("serve", "port"),
            )
        _check_target(c.target)
        try:
            folder = find_served_draft(c, run_root)
        except ValueError as exc:
            field = {"sweep": ("pretrain", "tokens"), "trial": ("draft", "trial_key")}
            raise ConfigError(str(exc), field.get(c.draft.source, ("draft", "path"))) from exc
        check_trained_target(folder, c.target.model)
        _check_eagle3(c, folder, envs[c.serve.python])


def _check_eagle3(c: ServeBenchConfig, folder: Path, env: ServingEnv) -> None:
    """A draft with hidden fusion is served with ``method: eagle3``, which needs a target
    class that hands vLLM the fused layers' states (:func:`~workloads.serving.env.
    supports_eagle3`); vLLM 0.32's Gemma-3 class does not."""
    import json

    from workloads.models.target_source import target_architecture
    from workloads.serving.env import supports_eagle3

    arch = folder / "arch.json"
    fused = json.loads(arch.read_text()).get("fusion_layers") if arch.is_file() else None
    name = target_architecture(c.target.model)
    if not fused or name is None or supports_eagle3(env, name):
        return
    raise ConfigError(
        f"the draft {folder} fuses target layers {fused} (draft.fusion: eagle3) and is served "
        f"with method eagle3, but vLLM {env.vllm_version}'s {name} does not implement "
        "SupportsEagle3 (it cannot hand the drafter those layers' states). Fix: serve a draft "
        "trained with draft.fusion: none on this target, or a target class that supports it",
        ("draft", "source"),
    )


def check_regen_configs(configs: Sequence[DraftTrainConfig]) -> None:
    """``sft.regen_engine: vllm`` with replies to regenerate: the environment at
    ``sft.regen_python`` imports vLLM, and vLLM can load the target.

    Raises:
        ConfigError: blaming ``sft.regen_python`` or ``target.*``, with the fix.
    """
    from workloads.serving.env import ServingEnvError, find_env

    used = [
        c for c in configs
        if c.sft.regen_engine == "vllm" and c.sft.responses == "target" and c.sft.tokens > 0
    ]  # fmt: skip
    for python in sorted({c.sft.regen_python for c in used}):
        try:
            find_env(python)
        except ServingEnvError as exc:
            fix = " (or sft.regen_engine: engine, this platform's AR loop)"
            raise ConfigError(str(exc).replace("serve.python", "sft.regen_python") + fix,
                              ("sft", "regen_python")) from exc  # fmt: skip
    for c in used:
        _check_target(c.target)


def _check_target(target: TargetConfig) -> None:
    """vLLM loads the target from a folder with config.json and weights, or from the hub."""
    if target.weights == "random":
        raise ConfigError(
            "target.weights 'random': vLLM loads a target's weights from a folder or the hub, "
            "so it cannot serve a random-weight target. Fix: target.weights: pretrained",
            ("target", "weights"),
        )
    local = Path(target.model).expanduser()
    if local.is_dir() and not (local / "config.json").exists():
        raise ConfigError(
            f"target.model {local} has no config.json: vLLM cannot load it. Fix: a Hugging Face "
            "model folder (config.json + safetensors) or a builtin target "
            "(smollm2-135m-instruct, gemma-3-270m)",
            ("target", "model"),
        )


def check_serving(configs: Sequence[ServeBenchConfig], run_root: Path, **_: object) -> None:
    """The serving environment imports vLLM and the plugin, each draft can be found, a fixed
    ``serve.port`` is free, and vLLM can load the target (:func:`check_configs`).

    Raises:
        ConfigError: blaming the field at fault, with the fix.
    """
    check_configs(configs, run_root)


def check_serve_prompts(
    configs: Sequence[ServeBenchConfig],
    run_root: Path,
    *,
    cache_dir: Path | None = None,
    **_: object,
) -> None:
    """Every prompt a serving trial sends fits the target, as :func:`check_bench_prompts` (the
    same prompts: this platform's engine decodes them too).

    Raises:
        ConfigError: blaming ``prompts.prompt_sets``.
    """
    from workloads.serving.bench import engine_config

    check_bench_prompts([engine_config(c, None) for c in configs], run_root, cache_dir=cache_dir)


CHECKS: tuple[Preflight, ...] = (check_targets, check_serving, check_serve_prompts)
"""the checks of a ``serve_bench`` sweep at submit, in the order they run"""
