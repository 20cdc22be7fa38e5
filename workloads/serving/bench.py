"""``serve_bench``: a trained draft served by a real vLLM server, against the same server without
speculation, and against this platform's engine on the same prompts.

One trial: export the draft (``--format vllm``), then per server (the baseline without
speculation first, then the speculating one; each started on a free 127.0.0.1 port, its
start-up timed apart, its log kept, stopped by PID):

1. greedy pass: every prompt as token ids at temperature 0, one request at a time, the output
   token ids and (speculating) the per-request acceptance kept; the Prometheus counters read
   before and after;
2. throughput: vLLM's own benchmark client (``vllm bench serve``) at each concurrency b of
   ``serve.batch_sizes`` (EOS ignored, ``max_new_tokens`` each, at least 2b requests).

Then the speculating server's greedy outputs are compared token for token with the baseline's,
and this platform's engine decodes the same prompts with a chain of K draft tokens (depth K,
topk 1, K + 1 verified tokens) for the train-to-serve agreement. Docs: docs/serving.md.
"""

from __future__ import annotations

import json
import logging
import subprocess
import time
from functools import partial
from pathlib import Path
from typing import Any, cast

from workloads.config import TargetConfig
from workloads.decode_bench.config import (
    BaselineConfig,
    DecodeBenchConfig,
    DecodeConfig,
    DraftSourceConfig,
)
from workloads.models.draft import TRAINED_WITH
from workloads.models.export import exported_vllm_method
from workloads.result import Progress, TrialResult
from workloads.serving.config import ServeBenchConfig
from workloads.serving.env import ServingEnv, find_env
from workloads.serving.metrics import ServerRun, parse_spec_counters
from workloads.serving.server import ServerError, VllmServer, tail

log = logging.getLogger(__name__)


class ServedBelowEngine(RuntimeError):
    """vLLM served the draft at an acceptance length whose 95% CI lies wholly below this
    engine's on the same prompts: the server ran another draft than the one trained (a fused
    draft under ``eagle``, an embedding convention lost), so its figures are no measurement."""


def check_agreement(m: dict[str, Any]) -> None:
    """Raise :class:`ServedBelowEngine` when ``m`` (a trial's metrics) has vLLM's acceptance
    CI disjoint from and below this engine's (``agreement.disjoint``, ``.difference``)."""
    if m.get("agreement.disjoint") == 1.0 and float(m["agreement.difference"]) < 0:
        raise ServedBelowEngine(
            f"vLLM served the draft at acceptance length {m['acceptance_length']:.3f} "
            f"[{m['acceptance_length_ci_low']:.3f}, {m['acceptance_length_ci_high']:.3f}], this "
            f"engine decoded it at {m['engine.acceptance_length']:.3f} "
            f"[{m['engine.acceptance_length_ci_low']:.3f}, "
            f"{m['engine.acceptance_length_ci_high']:.3f}] on the same prompts: the server did "
            "not run the trained draft. Fix: serve the export with the method it names "
            "(orchestrator export prints it) and the plugin installed (make serve-env)"
        )


def served_text(tokenizer: Any, ids: list[int]) -> str:
    """The text of prompt ``ids`` as a server re-tokenizes it: without a leading BOS where the
    tokenizer adds one itself (Gemma's), so the server sees ``ids``, not two BOS tokens."""
    text = str(tokenizer.decode(ids, skip_special_tokens=False))
    bos = getattr(tokenizer, "bos_token_id", None)
    if ids and ids[0] == bos and tokenizer(text)["input_ids"][:2] == [bos, bos]:
        text = str(tokenizer.decode(ids[1:], skip_special_tokens=False))
    return text

SERVED_NAME = "target"
"""``--served-model-name`` of both servers"""


def find_served_draft(cfg: ServeBenchConfig, run_root: Path | None) -> Path:
    """The draft folder a trial serves (``draft.source``).

    Raises:
        ValueError: no such folder; for ``source: sweep`` no finished trial of the sweep, or
            none (or several) trained on ``pretrain.tokens`` with ``seed``.
    """
    d = cfg.draft
    if d.source == "path":
        folder = Path(cast(str, d.path)).expanduser()
    else:
        if run_root is None:
            raise ValueError(f"draft.source {d.source!r} needs the run root (run it via submit)")
        from workloads.measure.drafts import find_trial_draft

        if d.source == "trial":
            folder = find_trial_draft(run_root, cast(str, d.sweep), cast(str, d.trial_key))
        else:
            folder = _draft_of_budget(run_root, cast(str, d.sweep), cfg.pretrain.tokens, cfg.seed)
    if not (folder / "arch.json").exists():
        raise ValueError(
            f"draft.path {folder} is not a draft folder (no arch.json). Fix: give the 'draft' "
            "folder of a draft_train trial (<run root>/<sweep>/trials/<key>/draft)"
        )
    return folder


def _draft_of_budget(run_root: Path, sweep: str, tokens: int | None, seed: int) -> Path:
    if tokens is None:
        raise ValueError(
            "draft.source 'sweep' needs pretrain.tokens (the budget of the draft to serve). "
            "Fix: grid: {pretrain.tokens: [...]} or draft.source: trial"
        )
    trials = run_root / sweep / "trials"
    records = sorted(trials.glob(f"*/draft/{TRAINED_WITH}"))
    if not records:
        old = any(trials.glob("*/draft/arch.json"))
        why = (
            f"its drafts were saved before {TRAINED_WITH} was written (2026-12-03): resubmit "
            "that sweep into a new run root, or use draft.source: trial with a trial_key"
            if old
            else f"run `orchestrator submit sweeps/{sweep}.yaml` with the same --run-root first"
        )
        raise ValueError(f"no finished draft_train trial under {trials}. Fix: {why}")
    hits = []
    for rec in records:
        trained = json.loads(rec.read_text())
        if trained.get("pretrain", {}).get("tokens") == tokens and trained.get("seed") == seed:
            hits.append(rec.parent)
    if len(hits) != 1:
        what = "several trials" if hits else "no finished trial"
        raise ValueError(
            f"pretrain.tokens {tokens} with seed {seed} matches {what} of sweep {sweep!r} "
            f"({trials}). Fix: a budget and seed the sweep trained, or draft.source: trial"
        )
    return hits[0]


def engine_config(cfg: ServeBenchConfig, folder: Path | None) -> DecodeBenchConfig:
    """The ``decode_bench`` config that decodes the same prompts as the servers with the same
    draft in this platform's engine: a chain of K (depth K, topk 1, K + 1 verified tokens),
    batch size 1, temperature 0, no baselines (``folder`` None: a fresh draft, for checks). K is
    the server's at b = 1, where the greedy pass runs (``serve.schedule``'s, at least 1)."""
    k = max(1, cfg.serve.k_at(1))
    draft = (
        DraftSourceConfig()
        if folder is None
        else DraftSourceConfig(source="path", path=str(folder))
    )
    return DecodeBenchConfig(
        seed=cfg.seed,
        device="auto",
        target=cfg.target,
        draft=draft,
        decode=DecodeConfig(
            batch_size=1,
            depth=k,
            topk=1,
            num_draft_tokens=k + 1,
            max_new_tokens=cfg.serve.max_new_tokens,
            temperature=0.0,
        ),  # fmt: skip
        prompts=cfg.prompts,
        baselines=BaselineConfig(autoregressive=False, hf_generate=False),
        warmup=0,
    )


def server_args(cfg: ServeBenchConfig, draft_dir: Path | None) -> list[str]:
    """Flags of one server (``draft_dir`` None: the baseline without speculation)."""
    s = cfg.serve
    args = [
        "--served-model-name", SERVED_NAME, "--dtype", cfg.target.dtype,
        "--max-model-len", str(s.max_model_len), "--seed", str(cfg.seed),
        "--max-num-seqs", str(max(s.batch_sizes)),
    ]  # fmt: skip
    if s.enforce_eager:
        args.append("--enforce-eager")
    if draft_dir is not None:
        spec = {
            "method": exported_vllm_method(draft_dir),
            "model": str(draft_dir),
            "num_speculative_tokens": s.num_speculative_tokens,
        }
        if s.schedule is not None:
            spec["num_speculative_tokens_per_batch_size"] = [list(r) for r in s.schedule]
        args += [
            "--speculative-config",
            json.dumps(spec),
            "--per-request-spec-decode-metrics",
            "summary",
        ]
    return args


def greedy_pass(server: VllmServer, prompts: list[list[int]], max_new_tokens: int) -> ServerRun:
    """Every prompt at temperature 0, one at a time; output ids, per-request acceptance and the
    counters over the pass."""
    run = ServerRun()
    before = parse_spec_counters(server.get("/metrics"))
    for ids in prompts:
        body = {
            "model": SERVED_NAME, "prompt": ids, "max_tokens": max_new_tokens,
            "temperature": 0.0, "return_token_ids": True,
        }  # fmt: skip
        answer = server.post("/v1/completions", body)
        choice = answer["choices"][0]
        run.outputs.append([int(t) for t in choice["token_ids"]])
        spec = ((answer.get("metrics") or {}).get("speculative_decoding")) or {}
        if spec:
            run.per_request.append(_request_counts(spec))
    run.counters = parse_spec_counters(server.get("/metrics")) - before
    return run


def _request_counts(spec: dict[str, Any]) -> tuple[int, int]:
    """(accepted draft tokens, verification steps) of one request from vLLM 0.32's per-request
    summary (``SpeculativeDecodingMetrics``: ``num_accepted_draft_tokens``, ``num_spec_steps``).
    vLLM counts a draft token accepted in the last step even where ``max_tokens`` then cuts it
    from the output (docs/serving.md, "Which acceptance length")."""
    return int(spec["num_accepted_draft_tokens"]), int(spec["num_spec_steps"])


def bench_client(
    env: ServingEnv,
    server: VllmServer,
    *,
    tokenizer: str,
    dataset: Path,
    b: int,
    n_requests: int,
    max_new_tokens: int,
    out: Path,
    seed: int,
) -> dict[str, Any]:
    """Run ``vllm bench serve`` (``python -m specscale_vllm.bench_serve``) at concurrency ``b``;
    its result JSON (``output_throughput`` tokens/s, ``mean_tpot_ms``, ...), saved as ``out``.

    Raises:
        ServerError: the client failed (its output's last lines in the message).
    """
    cmd = [
        str(env.python), "-m", "specscale_vllm.bench_serve", "--backend", "vllm",
        "--base-url", server.url, "--model", SERVED_NAME, "--tokenizer", tokenizer,
        "--dataset-name", "custom", "--dataset-path", str(dataset), "--skip-chat-template",
        "--disable-shuffle", "--custom-output-len", str(max_new_tokens), "--ignore-eos",
        "--num-prompts", str(n_requests), "--max-concurrency", str(b), "--temperature", "0",
        "--num-warmups", str(min(b, 2)), "--seed", str(seed), "--disable-tqdm",
        "--save-result", "--result-dir", str(out.parent), "--result-filename", out.name,
    ]  # fmt: skip
    log_path = out.with_suffix(".log")
    with log_path.open("w") as f:
        proc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=3600, check=False)
    if proc.returncode != 0 or not out.exists():
        raise ServerError(
            f"vllm bench serve at b={b} failed (exit {proc.returncode}); {log_path} ends:\n"
            f"{tail(log_path)}"
        )
    return cast(dict[str, Any], json.loads(out.read_text()))


def serve_and_measure(
    cfg: ServeBenchConfig,
    env: ServingEnv,
    *,
    target_path: str,
    draft_dir: Path | None,
    prompts: list[list[int]],
    dataset: Path,
    out_dir: Path,
    say: Progress,
) -> ServerRun:
    """Start one server (baseline when ``draft_dir`` is None), measure it, stop it."""
    s = cfg.serve
    name = "speculative" if draft_dir is not None else "baseline"
    server = VllmServer(
        python=env.python, model=target_path, args=server_args(cfg, draft_dir),
        log_path=out_dir / f"server-{name}.log", port=s.port, ready_timeout_s=s.ready_timeout_s,
        env={"VLLM_CPU_KVCACHE_SPACE": f"{s.kv_cache_gb:g}", "VLLM_PLUGINS": "specscale"},
    )  # fmt: skip
    t0 = time.perf_counter()
    with server:
        say(f"{name} server ready on {server.url} in {server.startup_s:.0f} s (pid {server.pid})")
        run = greedy_pass(server, prompts, s.max_new_tokens)
        run.startup_s = server.startup_s
        for b in s.batch_sizes:
            run.bench[b] = bench_client(
                env, server, tokenizer=target_path, dataset=dataset, b=b,
                n_requests=max(2 * b, len(prompts)), max_new_tokens=s.max_new_tokens,
                out=out_dir / f"bench-{name}-b{b}.json", seed=cfg.seed,
            )  # fmt: skip
            say(f"{name} b={b}: {run.bench[b]['output_throughput']:.1f} output tok/s")
    log.info("%s server measured in %.0f s", name, time.perf_counter() - t0)
    return run


def run(
    cfg: ServeBenchConfig,
    *,
    cache_dir: Path,
    out_dir: Path,
    run_root: Path | None = None,
    progress: Progress | None = None,
) -> TrialResult:
    """Run one trial; its metrics are :func:`workloads.serving.report.trial_metrics`'s.

    Raises:
        ServingEnvError: no serving environment (the message names ``make serve-env``).
        ValueError: a draft that cannot be found or exported, a target vLLM cannot load.
        ServerError: a server that died, never became ready or answered an error (its log's
            last lines in the message); both servers are stopped by then.
        ServedBelowEngine: vLLM's acceptance CI wholly below this engine's (served.json kept).
    """
    from workloads.measure import decode as engine_bench
    from workloads.models import export as ex
    from workloads.models.target import load_target
    from workloads.serving.report import greedy_comparison, trial_metrics

    say = progress or (lambda msg: log.info("%s", msg))
    env = find_env(cfg.serve.python)
    folder = find_served_draft(cfg, run_root)
    target = load_target(
        cfg.target.model, cache_dir=cache_dir, dtype=cfg.target.dtype, device="auto",
        weights=cfg.target.weights, seed=cfg.seed,
    )  # fmt: skip
    target_path = served_target_path(cfg.target, cache_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    draft = ex.read_draft(folder)
    model: Any = target.model
    exported = ex.export_draft(
        draft, "vllm", out_dir / "draft-vllm", dtype=cfg.target.dtype, overwrite=True,
        embed_weight=model.get_input_embeddings().weight.detach(),
        lm_head_weight=model.get_output_embeddings().weight.detach(),
    )  # fmt: skip
    dcfg = engine_config(cfg, folder)
    prompts = engine_bench.bench_prompts(dcfg, target)
    dataset = out_dir / "prompts.jsonl"
    with dataset.open("w") as f:
        for ids in prompts:
            text = served_text(target.tokenizer, ids)
            f.write(json.dumps({"prompt": text}) + "\n")
    say(f"vLLM {env.vllm_version} serving {folder} (K={cfg.serve.num_speculative_tokens})")
    measure = partial(
        serve_and_measure, cfg, env, target_path=target_path, prompts=prompts, dataset=dataset,
        out_dir=out_dir, say=say,
    )  # fmt: skip
    base = measure(draft_dir=None) if cfg.serve.baseline else None
    spec = measure(draft_dir=exported.out)
    ours = None
    if cfg.serve.compare_engine and cfg.serve.k_at(1) > 0:  # K = 0: no speculation to compare
        say("this platform's engine: the same prompts, a chain of K")
        ours = engine_bench.run(dcfg, cache_dir=cache_dir, out_dir=out_dir / "engine").metrics
    greedy, diverged = greedy_comparison(target, prompts, base, spec) if base else (None, [])
    result = TrialResult(artifact_paths=sorted(out_dir.glob("server-*.log")))
    result.metrics.update(trial_metrics(cfg, spec, base, ours, greedy))
    (out_dir / "served.json").write_text(json.dumps(result.metrics, indent=1, default=str))
    (out_dir / "divergences.json").write_text(json.dumps(diverged, indent=1))
    result.artifact_paths += [out_dir / "served.json", out_dir / "divergences.json", dataset]
    check_agreement(result.metrics)
    return result


def served_target_path(target: TargetConfig, cache_dir: Path) -> str:
    """What vLLM loads as the target: the builtin's converted safetensors folder in the cache,
    else ``target.model`` as given (a local folder or a hub id).

    Raises:
        ValueError: a random-weight target (vLLM loads weights from a folder or the hub).
    """
    from workloads.models.target import builtin_target, materialize_builtin

    if target.weights == "random":
        raise ValueError(
            "target.weights 'random': vLLM loads a target's weights from a folder or the hub. "
            "Fix: target.weights: pretrained"
        )
    if builtin_target(target.model) is not None:
        return str(materialize_builtin(cache_dir, target.model))
    return target.model
