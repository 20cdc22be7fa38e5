"""Benchmark: the data path at paper scale, on this CPU.

Four measurements, on a tiny random-weight LLaMA target (a ``config.json`` written to a work
folder, ``load_target(weights="random")``; hidden 64, 2 layers, the builtin SmolLM2 tokenizer)
and a local jsonl corpus written from ShareGPT's pretraining split (``--corpus-mb`` MB):

1. **Cache build** for 100/200/400 chunks (``ensure_features`` from a
   :class:`~workloads.data.shards.StreamRows` of the corpus, each size in a fresh folder,
   sizes interleaved over ``--repeats`` rounds, medians): wall time, the counted work (rows
   packed, rows through the target; tokens tokenised during the build) and the time ratio per
   doubling (target: <= 2.3x). The second call on a full folder (all hits, every chunk's
   checksum verified) is timed too.
2. **Tokenisation throughput** of the jsonl corpus into the token-shard cache
   (``corpus_tokens``, whole corpus, fresh cache per run) with 1 and 2 processes, tokens/s each,
   in the same run. ``TOKENIZERS_PARALLELISM=false`` throughout, so one process is one core.
3. **Online mode memory**: for each token budget (1M and 4M), a fresh subprocess trains a tiny
   draft (1 layer, draft vocabulary truncated to ``--draft-vocab`` ids) over the whole budget
   with :class:`~workloads.training.online_features.OnlineFeatures` on ``StreamRows`` (``repeat:
   true``) and reports its peak RSS (``ru_maxrss``) and its resident memory sampled after every
   step (target: <= +10% from 1M to 4M, for both; memory-mapped shard pages count once read).
4. **Online = cached**: the same draft trained on cached and on online features of the same
   rows (a corpus of one line per document, so rows hold several: the block-diagonal masks
   count; feature noise on): the largest absolute difference of the per-step losses (target:
   <= 1e-5).

Times are wall-clock (the load average is printed). Prints a table per part and the measured
ratios; ``--out`` writes everything as JSON. Exit code 0 whether or not a target is met (the
``checks`` say), 2 for bad arguments.

    python -m benchmarks.data_bench --out runs-bench/data_bench.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

os.environ["TOKENIZERS_PARALLELISM"] = "false"  # before tokenizers is imported: 1 process = 1 core

import torch  # noqa: E402
from transformers import PreTrainedModel  # noqa: E402

from benchmarks import harness  # noqa: E402
from benchmarks.data_report import print_report  # noqa: E402
from workloads.data import iter_pretrain_documents  # noqa: E402
from workloads.data.shards import WORK, StreamRows, corpus_rows, corpus_tokens  # noqa: E402
from workloads.draft_train.config import CorpusSource  # noqa: E402
from workloads.models.draft import DraftModel  # noqa: E402
from workloads.models.target import Target, load_target  # noqa: E402
from workloads.training.feature_cache import CacheStats, ensure_features  # noqa: E402
from workloads.training.features import tokenizer_fingerprint  # noqa: E402
from workloads.training.loop import StageLog, train_stage  # noqa: E402
from workloads.training.online_features import OnlineFeatures  # noqa: E402

PARTS = ("cache", "tokenize", "online", "equal")
"""the measurements, in the order they run"""

TARGETS = {"cache_per_doubling": 2.3, "rss_ratio": 1.10, "online_vs_cached": 1e-5}
"""the issue's targets: time per doubling, peak RSS 4M/1M, max |loss difference|"""

_TINY = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 49152,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "tie_word_embeddings": False,
}
"""the tiny target's config.json (vocabulary: the builtin tokenizer's 49,152 ids)"""


def _args(argv: list[str] | None) -> argparse.Namespace:
    ap = harness.parser("data_bench", description=__doc__.split("\n\n")[0])
    harness.add_out(ap, None, "write the results as JSON here")
    ap.add_argument("--quick", action="store_true", help="tiny sizes (a smoke run, about a minute)")
    ap.add_argument(
        "--parts",
        nargs="+",
        default=list(PARTS),
        metavar="PART",
        help=f"which measurements ({', '.join(PARTS)}; default all)",
    )
    ap.add_argument("--chunks", type=int, nargs="+", help="cache sizes in chunks (100 200 400)")
    ap.add_argument("--rows-per-chunk", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=64, help="tokens per row (cache, equality)")
    ap.add_argument("--repeats", type=int, help="rounds of the cache build (3; quick 1)")
    ap.add_argument("--corpus-mb", type=float, help="size of the jsonl corpus (8; quick 0.3)")
    ap.add_argument(
        "--procs", type=int, nargs="+", default=[1, 2], help="tokenising processes to compare"
    )
    ap.add_argument("--budgets", type=int, nargs="+", help="online token budgets (1000000 4000000)")
    ap.add_argument("--online-seq-len", type=int, default=64)
    ap.add_argument("--online-batch", type=int, default=128, help="rows per online step")
    ap.add_argument(
        "--draft-vocab", type=int, default=256, help="draft vocabulary (online and equality runs)"
    )
    slow = "2 threads make the tiny models' small ops many times slower"
    harness.add_threads(ap, 1, f"torch threads (1: on a busy 2-core machine, {slow})")
    harness.add_cache(
        ap, "--cache", "where the builtin tokenizer is kept (read once from the GGUF)"
    )
    ap.add_argument(
        "--work-dir", type=Path, help="scratch folder (default a temporary one, removed at the end)"
    )
    ap.add_argument("--online-child", help=argparse.SUPPRESS)  # internal: one online run
    args = ap.parse_args(argv)
    quick = args.quick
    defaults: dict[str, tuple[Any, Any]] = {
        "chunks": ([10, 20, 40], [100, 200, 400]),
        "repeats": (1, 3),
        "corpus_mb": (0.3, 8.0),
        "budgets": ([1 << 15, 1 << 17], [1_000_000, 4_000_000]),
    }
    for name, (small, full) in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, small if quick else full)
    bad = [p for p in args.parts if p not in PARTS]
    if bad:
        ap.error(f"--parts {' '.join(bad)}: not a part. Fix: choose from {' '.join(PARTS)}")
    if min(args.chunks) < 1 or args.chunks != sorted(set(args.chunks)):
        ap.error(
            f"--chunks {' '.join(map(str, args.chunks))}: sizes must be >= 1 and increasing. "
            "Fix: --chunks 100 200 400"
        )
    for name in ("rows_per_chunk", "repeats", "online_batch", "threads", "draft_vocab"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.seq_len < 8 or args.online_seq_len < 8:
        ap.error("--seq-len and --online-seq-len must be >= 8")
    if not 0 < args.corpus_mb <= 1024:
        ap.error(f"--corpus-mb {args.corpus_mb}: must be in (0, 1024]")
    if min(args.procs) < 1:
        ap.error("--procs: process counts must be >= 1")
    if args.draft_vocab > _TINY["vocab_size"]:  # type: ignore[operator]
        ap.error(f"--draft-vocab must be at most the target's {_TINY['vocab_size']}")
    step_tokens = args.online_batch * args.online_seq_len
    if min(args.budgets) < step_tokens:
        ap.error(
            f"--budgets {min(args.budgets)}: smaller than one step ({step_tokens} tokens = "
            "--online-batch x --online-seq-len). Fix: larger budgets"
        )
    return args


# --- set-up -----------------------------------------------------------------------------------


def _tiny_target(work: Path, cache: Path, seed: int = 0) -> Target:
    """The tiny random-weight target (config.json under ``work/tiny-target``), float32, CPU."""
    folder = work / "tiny-target"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(_TINY))
    return load_target(str(folder), cache_dir=cache, weights="random", seed=seed)


def _write_corpus(path: Path, megabytes: float, *, lines: bool = False) -> dict[str, int]:
    """A jsonl corpus (``{"text": ...}`` per line) of ShareGPT pretraining texts, about
    ``megabytes`` MB, one conversation per document (``lines``: one line per
    document, short ones); returns its documents and bytes."""
    limit, docs, size = int(megabytes * 1e6), 0, 0
    with path.open("w", encoding="utf-8") as f:
        for doc in iter_pretrain_documents(mix={"sharegpt": 1.0}):
            texts = [t for t in doc.text.split("\n") if t.strip()] if lines else [doc.text]
            for text in texts:
                line = json.dumps({"text": text}, ensure_ascii=False) + "\n"
                f.write(line)
                docs, size = docs + 1, size + len(line.encode())
            if size >= limit:
                break
    return {"documents": docs, "bytes": size}


def _draft(target: PreTrainedModel, vocab: int) -> DraftModel:
    """A fresh 1-layer draft whose vocabulary is the target's first ``vocab`` ids."""
    return harness.fresh_draft(target, keep=torch.arange(vocab))


RECIPE = {"lr": 3e-3, "warmup_steps": 2}
"""the draft's training settings besides :func:`benchmarks.harness.stage_settings`'"""


# --- 1. cache build ---------------------------------------------------------------------------


@dataclass
class CacheRun:
    """One cache size: medians over the rounds, and the work counted in the last round."""

    chunks: int
    rows: int
    tokens: int
    build_s: float
    """wall seconds of the first ``ensure_features`` call (fresh folder), median"""
    warm_s: float
    """wall seconds of a second call (all hits, every checksum verified), median"""
    rows_packed: int
    target_rows: int
    tokenised: int
    """tokens the shard cache tokenised during the build (0: the stream was cached before)"""


def bench_cache(
    target: Target, rows: StreamRows, args: argparse.Namespace, work: Path
) -> list[CacheRun]:
    """Build each size in a fresh folder, sizes interleaved over ``args.repeats`` rounds."""
    manifest = {
        "target": "tiny-random",
        "stage": "pretrain",
        "seq_len": args.seq_len,
        "tokenizer": tokenizer_fingerprint(target.tokenizer),
        "packing": "isolated",
    }
    times: dict[int, list[tuple[float, float]]] = {c: [] for c in args.chunks}
    work_done: dict[int, tuple[int, int, int]] = {}
    ensure_features(  # untimed warm-up: first forward, lazy imports, file system caches
        work / "features-warmup",
        rows=rows,
        n_rows=min(args.chunks) * args.rows_per_chunk,
        rows_per_chunk=args.rows_per_chunk,
        target_model=target.model,
        manifest=manifest,
    )
    shutil.rmtree(work / "features-warmup")
    for r in range(args.repeats):
        for c in args.chunks:
            folder = work / f"features-{c}-{r}"
            n = c * args.rows_per_chunk
            before = WORK.tokens

            def ensure() -> CacheStats:
                return ensure_features(
                    folder, rows=rows, n_rows=n, rows_per_chunk=args.rows_per_chunk,  # noqa: B023
                    target_model=target.model, manifest=manifest,
                )[1]  # fmt: skip

            t0 = time.perf_counter()
            stats = ensure()  # cold: builds every chunk
            t1 = time.perf_counter()
            warm = ensure()  # warm: finds them all
            t2 = time.perf_counter()
            assert stats.misses == c and warm.hits == c, "a fresh folder builds every chunk"
            times[c].append((t1 - t0, t2 - t1))
            work_done[c] = (stats.rows_packed, stats.target_rows, WORK.tokens - before)
            shutil.rmtree(folder)
    return [
        CacheRun(
            chunks=c,
            rows=c * args.rows_per_chunk,
            tokens=c * args.rows_per_chunk * args.seq_len,
            build_s=statistics.median(t[0] for t in times[c]),
            warm_s=statistics.median(t[1] for t in times[c]),
            rows_packed=work_done[c][0],
            target_rows=work_done[c][1],
            tokenised=work_done[c][2],
        )
        for c in args.chunks
    ]


def per_doubling(a: float, b: float, size_a: int, size_b: int) -> float:
    """The growth of ``a -> b`` per doubling of the size ``size_a -> size_b``:
    ``(b / a) ** (1 / log2(size_b / size_a))`` (2.0 = linear)."""
    return float((b / a) ** (1 / math.log2(size_b / size_a)))


# --- 2. tokenisation --------------------------------------------------------------------------


@dataclass
class TokenizeRun:
    """The whole jsonl corpus tokenised into a fresh shard cache by ``procs`` processes."""

    procs: int
    tokens: int
    documents: int
    seconds: float
    tokens_per_s: float


def bench_tokenize(
    corpus: list[CorpusSource], tokenizer: Any, procs: list[int], work: Path
) -> list[TokenizeRun]:
    fp = tokenizer_fingerprint(tokenizer)
    out = []
    for p in procs:
        cache = work / f"tokens-{p}"
        docs = WORK.documents
        t0 = time.perf_counter()
        size = corpus_tokens(
            corpus, tokenizer, tokenizer_fp=fp, cache_dir=cache, need=1 << 40, num_proc=p
        )
        dt = time.perf_counter() - t0
        assert size.complete, "need exceeds any corpus written here"
        out.append(TokenizeRun(p, size.tokens, WORK.documents - docs, dt, size.tokens / dt))
        shutil.rmtree(cache)
    return out


# --- 3. online memory (one subprocess per budget) ---------------------------------------------


def _online_child(spec: dict[str, Any]) -> dict[str, Any]:
    """Train over a whole budget with online features; the process's peak RSS (in a fresh
    process, so the peak is this run's alone)."""
    torch.set_num_threads(int(spec["threads"]))
    work, L, batch = Path(spec["work"]), int(spec["seq_len"]), int(spec["batch"])
    target = _tiny_target(work, Path(spec["cache"]))
    rows = corpus_rows(
        [CorpusSource(source=spec["corpus"])],
        target.tokenizer,
        tokenizer_fp=tokenizer_fingerprint(target.tokenizer),
        cache_dir=Path(spec["tokens"]),
        seq_len=L,
        packing="isolated",
        n_rows=int(spec["budget"]) // L,
        repeat=True,
        num_proc=1,
    )
    feats = OnlineFeatures(rows, target.model, batch=batch)
    draft = _draft(target.model, int(spec["draft_vocab"]))
    rss_setup = _rss_kib()
    rss_train = [rss_setup]

    def sample(step: int, total: int, loss: float) -> None:
        rss_train.append(_rss_kib())

    t0 = time.perf_counter()
    log = train_stage(draft, feats, harness.stage_settings(batch, **RECIPE), on_step=sample)
    seconds = time.perf_counter() - t0
    return {
        "budget": int(spec["budget"]),
        "tokens_seen": log.tokens_seen,
        "steps": len(log.loss),
        "train_s": seconds,
        "target_rows": feats.target_rows,
        "final_loss": log.loss[-1],
        "rss_setup_kib": rss_setup,
        "rss_train_max_kib": max(rss_train),
        "rss_end_kib": rss_train[-1],
        "peak_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
    }


def _rss_kib() -> int:
    """The process's resident memory now, KiB (``/proc/self/statm``; the peak where absent)."""
    try:
        resident = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return resident * os.sysconf("SC_PAGE_SIZE") // 1024


def bench_online(args: argparse.Namespace, work: Path, corpus: Path) -> list[dict[str, Any]]:
    out = []
    for budget in args.budgets:
        spec = {
            "budget": budget,
            "seq_len": args.online_seq_len,
            "batch": args.online_batch,
            "work": str(work.resolve()),
            "cache": str(args.cache.resolve()),
            "corpus": str(corpus.resolve()),
            "tokens": str((work / "tokens-online").resolve()),
            "draft_vocab": args.draft_vocab,
            "threads": args.threads,
        }
        cmd = [sys.executable, "-m", "benchmarks.data_bench", "--online-child", json.dumps(spec)]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=harness.ROOT)
        if done.returncode != 0:
            raise RuntimeError(f"online run for {budget:,} tokens failed:\n{done.stderr[-3000:]}")
        out.append(json.loads(done.stdout.strip().splitlines()[-1]))
    return out


# --- 4. online = cached -----------------------------------------------------------------------


def bench_equal(target: Target, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Max |difference| per loss series between cached and online features of the same rows
    (a corpus of short documents, so rows hold several: the block-diagonal masks count)."""
    path = work / "short.jsonl"
    _write_corpus(path, 0.2, lines=True)
    n = 8 * args.rows_per_chunk
    rows = corpus_rows(
        [CorpusSource(source=str(path))],
        target.tokenizer,
        tokenizer_fp=tokenizer_fingerprint(target.tokenizer),
        cache_dir=work / "tokens-short",
        seq_len=args.seq_len,
        packing="isolated",
        n_rows=n,
        repeat=False,
        num_proc=1,
    )
    cached, _ = ensure_features(
        work / "features-equal",
        rows=rows,
        n_rows=n,
        rows_per_chunk=args.rows_per_chunk,
        target_model=target.model,
        manifest={"target": "tiny-random", "seq_len": args.seq_len},
    )
    online = OnlineFeatures(rows, target.model)
    s = harness.stage_settings(4, epochs=2, feature_noise=0.2, **RECIPE)
    logs: list[StageLog] = [
        train_stage(_draft(target.model, args.draft_vocab), f, s) for f in (cached, online)
    ]
    diff = {
        key: max(
            abs(x - y) for x, y in zip(getattr(logs[0], key), getattr(logs[1], key), strict=True)
        )
        for key in ("loss", "loss_reg", "loss_cls", "top1")
    }
    starts = int((rows.packed(torch.arange(n)).position_ids == 0).sum())
    return {
        "rows": n,
        "steps": len(logs[0].loss),
        "docs_per_row": starts / n,
        "max_abs_diff": diff,
        "first_loss": logs[0].loss[0],
        "last_loss": logs[0].loss[-1],
    }


def run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """All the parts asked for; the results as a JSON-able dict."""
    torch.set_num_threads(args.threads)
    res: dict[str, Any] = {
        "settings": {
            k: str(v) if isinstance(v, Path) else v
            for k, v in vars(args).items()
            if k != "online_child"
        },
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "torch": torch.__version__,
            "platform": platform.platform(),
            "load_average_start": os.getloadavg()[0],
        },
        "targets": TARGETS,
        "checks": {},
    }
    t_all = time.perf_counter()
    target = _tiny_target(work, args.cache)
    corpus_path = work / "corpus.jsonl"
    res["corpus"] = _write_corpus(corpus_path, args.corpus_mb)
    corpus = [CorpusSource(source=str(corpus_path))]
    fp = tokenizer_fingerprint(target.tokenizer)
    if "cache" in args.parts:
        before = WORK.tokens
        rows = corpus_rows(
            corpus,
            target.tokenizer,
            tokenizer_fp=fp,
            cache_dir=work / "tokens-rows",
            seq_len=args.seq_len,
            packing="isolated",
            repeat=True,
            num_proc=1,
            n_rows=args.chunks[-1] * args.rows_per_chunk,
        )
        res["rows_source"] = {"rows": rows.rows, "tokenised_once": WORK.tokens - before}
    if "cache" in args.parts:
        runs = bench_cache(target, rows, args, work)
        res["cache"] = [asdict(r) for r in runs]
        res["cache_doubling"] = [
            {
                "from": a.chunks,
                "to": b.chunks,
                **{
                    k: per_doubling(getattr(a, f), getattr(b, f), a.chunks, b.chunks)
                    for k, f in (
                        ("time", "build_s"),
                        ("warm", "warm_s"),
                        ("rows_packed", "rows_packed"),
                        ("target_rows", "target_rows"),
                    )
                },
            }
            for a, b in zip(runs, runs[1:], strict=False)
        ]
        res["cache_worst"] = max((d["time"] for d in res["cache_doubling"]), default=0.0)
        res["checks"]["cache_linear"] = res["cache_worst"] <= TARGETS["cache_per_doubling"]
    if "tokenize" in args.parts:
        toks = bench_tokenize(corpus, target.tokenizer, args.procs, work)
        res["tokenize"] = [asdict(t) for t in toks]
        res["tokenize_speedup"] = toks[-1].tokens_per_s / toks[0].tokens_per_s
    if "online" in args.parts:
        corpus_tokens(
            corpus,
            target.tokenizer,
            tokenizer_fp=fp,
            cache_dir=work / "tokens-online",
            need=1 << 40,
            num_proc=1,
        )  # the children only read the shards
        res["online"] = bench_online(args, work, corpus_path)
        peaks = [o["peak_rss_kib"] for o in res["online"]]
        train = [o["rss_train_max_kib"] for o in res["online"]]
        res["rss_ratio"] = peaks[-1] / peaks[0]
        res["rss_train_ratio"] = train[-1] / train[0]
        worst = max(res["rss_ratio"], res["rss_train_ratio"])
        res["checks"]["rss_flat"] = worst <= TARGETS["rss_ratio"]
    if "equal" in args.parts:
        res["equal"] = bench_equal(target, args, work)
        worst = max(res["equal"]["max_abs_diff"].values())
        res["checks"]["online_equals_cached"] = worst <= TARGETS["online_vs_cached"]
    res["elapsed_s"] = time.perf_counter() - t_all
    res["machine"]["load_average_end"] = os.getloadavg()[0]
    return res


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    if args.online_child:
        print(json.dumps(_online_child(json.loads(args.online_child))))
        return 0
    own = args.work_dir is None
    work = Path(tempfile.mkdtemp(prefix="data_bench-")) if own else args.work_dir
    work.mkdir(parents=True, exist_ok=True)
    try:
        res = run(args, work)
    finally:
        if own:
            shutil.rmtree(work, ignore_errors=True)
    print(
        f"data_bench: {', '.join(args.parts)}; {args.threads} torch threads, "
        f"{os.cpu_count()} CPUs (load average {res['machine']['load_average_start']:.1f} at the "
        f"start, {res['machine']['load_average_end']:.1f} at the end); {res['elapsed_s']:.0f} s"
    )
    print_report(res)
    if args.out:
        harness.write_json(args.out, res)
        print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
