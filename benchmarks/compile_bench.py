"""Benchmark: does ``torch.compile`` bring a small verification forward closer to one
autoregressive step on this CPU?

Prints, in one process with the same threads and cache, the ratio verify(n) / AR(1) for n in
``--ns``, per mode:

- ``eager``: the target's forward as is;
- ``compiled``: ``torch.compile`` (inductor, ``dynamic=False``: one graph per n) with
  ``torch._inductor.config.freezing = True`` (frozen weights folded in and prepacked for oneDNN);
- ``compiled-unfrozen`` (``--unfrozen``): inductor without freezing;
- ``onednn`` (``--onednn``): eager, every ``nn.Linear`` (LM head included) through oneDNN with
  its weight prepacked once (:class:`OneDNNLinear`) instead of MKL's sgemm.

Every forward runs on a transformers ``StaticCache`` holding ``--prefix`` random token ids
(prefilled once); the n new tokens overwrite the same positions each call, and the logits of
all n positions are computed. Times: the median of ``--reps`` calls after two warm-ups, the
modes interleaved call by call. Also prints compile seconds, compiled over eager and the largest
logit difference from the first mode; ``--json FILE`` writes them.

    python -m benchmarks.compile_bench --json runs/compile_bench.json
"""

from __future__ import annotations

import argparse
import copy
import inspect
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
from transformers import PreTrainedModel, StaticCache

from benchmarks import harness
from workloads.models.target import DEFAULT_TARGET

Forward = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
"""(ids [1, n], positions [n]) -> logits [1, n, V]"""


def _forward(model: PreTrainedModel, cache: StaticCache) -> Forward:
    """The forward on ``cache``: transformers >= 5.2x takes ``cache=`` and writes at the cache's
    own length (rewound by :func:`_rewind`); older ones take ``past_key_values=`` and write at
    ``cache_position``."""
    new_api = "cache" in inspect.signature(type(model.model).forward).parameters

    def fwd(ids: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        if new_api:
            out = model(input_ids=ids, position_ids=pos[None], cache=cache, use_cache=True)
        else:
            out = model(
                input_ids=ids,
                position_ids=pos[None],
                cache_position=pos,
                past_key_values=cache,
                use_cache=True,
            )
        return out.logits  # type: ignore[no-any-return]

    return fwd


def _rewind(cache: StaticCache, length: int) -> None:
    """Set the cache's length back to ``length`` tokens in place (the next forward overwrites
    what followed); a no-op where the write position is passed in (``cache_position``)."""
    for layer in cache.layers:
        counter = getattr(layer, "cumulative_length", None)
        if isinstance(counter, torch.Tensor):
            counter.fill_(length)


def _compiled(model: PreTrainedModel, cache: StaticCache, *, freezing: bool) -> Forward:
    """``torch.compile`` of the forward on ``cache``; freezing is read when a graph is compiled,
    so it is set around each call (the first call of each n compiles)."""
    import torch._inductor.config as inductor_config

    inner = torch.compile(_forward(model, cache), backend="inductor", dynamic=False)

    def fwd(ids: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        previous = inductor_config.freezing
        inductor_config.freezing = freezing
        try:
            return inner(ids, pos)  # type: ignore[no-any-return]
        finally:
            inductor_config.freezing = previous

    return fwd


class OneDNNLinear(torch.nn.Module):
    """An ``nn.Linear`` through oneDNN (``torch.ops.mkldnn._linear_pointwise``) with its weight
    reordered once into oneDNN's blocked layout; float32 in and out, the same product up to
    rounding. ``weight`` and ``bias`` stay (where the layer lives, what ties to it)."""

    def __init__(self, lin: torch.nn.Linear) -> None:
        super().__init__()
        self.weight, self.bias = lin.weight, lin.bias
        self.packed = torch.ops.mkldnn._reorder_linear_weight(lin.weight.detach())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bias = None if self.bias is None else self.bias.detach()
        out: torch.Tensor = torch.ops.mkldnn._linear_pointwise(
            x.contiguous(), self.packed, bias, "none", [], ""
        )
        return out


def onednn_copy(model: PreTrainedModel) -> PreTrainedModel:
    """A deep copy of ``model`` whose every ``nn.Linear`` is a :class:`OneDNNLinear`.

    Raises:
        ValueError: this torch has no oneDNN (mkldnn) CPU backend.
    """
    if not torch.backends.mkldnn.is_available():
        raise ValueError("mode onednn needs torch's oneDNN (mkldnn) CPU backend")
    twin = copy.deepcopy(model)
    for module in list(twin.modules()):
        for name, child in list(module.named_children()):
            if type(child) is torch.nn.Linear:
                setattr(module, name, OneDNNLinear(child))
    return twin


def measure(
    model: PreTrainedModel,
    *,
    prefix: int,
    ns: list[int],
    reps: int,
    modes: list[str],
    seed: int = 0,
) -> dict[str, Any]:
    """Median seconds of a forward of n new tokens after ``prefix`` tokens, per mode and n.

    Returns ``{"seconds": {mode: {n: s}}, "ratio_to_ar": {mode: {n: s_n / s_1}},
    "compile_s": {mode: {n: first-call seconds}}, "compiled_over_eager": {mode: {n: ratio}},
    "max_abs_logit_diff_vs_first_mode": {mode: {n: max |logits - the first mode's|}}}``
    (``n = 1`` must be in ``ns``: it is the AR step every ratio is taken against).

    Raises:
        ValueError: 1 not in ``ns``, an unknown mode, ``reps`` < 1.
    """
    if 1 not in ns or reps < 1:
        raise ValueError("ns must include 1 (the AR step) and reps must be >= 1")
    config = model.config
    vocab = int(config.vocab_size)
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (1, prefix + max(ns)), generator=gen)
    cache = StaticCache(config=config, max_cache_len=prefix + max(ns))
    with torch.no_grad():  # inductor's freezing needs grad off, not inference tensors
        _forward(model, cache)(ids[:, :prefix], torch.arange(prefix))
        fwds: dict[str, Forward] = {}
        for mode in modes:
            if mode == "eager":
                fwds[mode] = _forward(model, cache)
            elif mode == "compiled":
                fwds[mode] = _compiled(model, cache, freezing=True)
            elif mode == "compiled-unfrozen":
                fwds[mode] = _compiled(model, cache, freezing=False)
            elif mode == "onednn":
                fwds[mode] = _forward(onednn_copy(model), cache)
            else:
                raise ValueError(f"unknown mode {mode!r}")
        compile_s: dict[str, dict[int, float]] = {m: {} for m in modes}
        times: dict[str, dict[int, list[float]]] = {m: {n: [] for n in ns} for m in modes}
        args = {n: (ids[:, prefix : prefix + n], torch.arange(prefix, prefix + n)) for n in ns}
        diff: dict[str, dict[int, float]] = {m: {} for m in modes}
        for n in ns:  # first calls: compilation, then one more warm-up
            first: torch.Tensor | None = None
            for mode, fwd in fwds.items():
                t0 = time.perf_counter()
                logits = fwd(*args[n])
                compile_s[mode][n] = time.perf_counter() - t0
                first = logits.clone() if first is None else first
                diff[mode][n] = float((logits - first).abs().max())
                _rewind(cache, prefix)
                fwd(*args[n])
                _rewind(cache, prefix)
        for _ in range(reps):
            for n in ns:
                for mode, fwd in fwds.items():
                    t0 = time.perf_counter()
                    fwd(*args[n])
                    times[mode][n].append(time.perf_counter() - t0)
                    _rewind(cache, prefix)
    seconds = {m: {n: statistics.median(t) for n, t in by_n.items()} for m, by_n in times.items()}
    out: dict[str, Any] = {
        "seconds": seconds,
        "ratio_to_ar": {m: {n: s[n] / s[1] for n in ns} for m, s in seconds.items()},
        "compile_s": compile_s,
        "max_abs_logit_diff_vs_first_mode": diff,
    }
    if "eager" in seconds:
        out["compiled_over_eager"] = {
            m: {n: s[n] / seconds["eager"][n] for n in ns}
            for m, s in seconds.items()
            if m != "eager"
        }
    return out


def _report(res: dict[str, Any], ns: list[int]) -> None:
    print(f"\n{'mode':<20}" + "".join(f"{f'n={n} ms':>11}" for n in ns) + "   verify(n)/AR(1)")
    for mode, s in res["seconds"].items():
        ratios = " ".join(f"{res['ratio_to_ar'][mode][n]:.2f}" for n in ns if n != 1)
        print(f"{mode:<20}" + "".join(f"{1000 * s[n]:>11.1f}" for n in ns) + f"   {ratios}")
    for mode, r in res.get("compiled_over_eager", {}).items():
        print(f"{mode} / eager: " + ", ".join(f"n={n} {r[n]:.2f}" for n in ns))
    for mode, c in res["compile_s"].items():
        d = res["max_abs_logit_diff_vs_first_mode"][mode]
        print(
            f"first call ({mode}): "
            + ", ".join(f"n={n} {c[n]:.1f}s" for n in ns)
            + "; max |logit diff| vs eager: "
            + ", ".join(f"{d[n]:.2g}" for n in ns)
        )


def _args(argv: list[str]) -> argparse.Namespace:
    ap = harness.parser("compile_bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--prefix", type=int, default=256, help="tokens already in the cache")
    ap.add_argument("--ns", default="1,2,4,8", help="new tokens per forward (must include 1)")
    ap.add_argument("--reps", type=int, default=20, help="timed calls per mode and n")
    harness.add_threads(ap)
    ap.add_argument("--unfrozen", action="store_true", help="also inductor without freezing")
    ap.add_argument(
        "--onednn", action="store_true", help="also eager with oneDNN-prepacked linears"
    )
    harness.add_cache(ap)
    harness.add_json(ap)
    args = ap.parse_args(argv)
    try:
        args.ns = sorted({int(x) for x in args.ns.split(",") if x.strip()})
    except ValueError:
        ap.error(f"--ns {args.ns!r} is not a comma list of integers. Example: --ns 1,2,4,8")
    if not args.ns or 1 not in args.ns or min(args.ns) < 1:
        ap.error("--ns must hold 1 (the AR step) and positive token counts. Example: --ns 1,2,4,8")
    if args.prefix < 1 or args.reps < 1 or args.threads < 1:
        ap.error("--prefix, --reps and --threads must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = _args(sys.argv[1:] if argv is None else argv)
    target = harness.target(args.threads, args.cache_dir)
    modes = ["eager", "compiled"] + (["compiled-unfrozen"] if args.unfrozen else [])
    modes += ["onednn"] if args.onednn else []
    print(
        f"target {DEFAULT_TARGET} float32, {args.threads} threads, prefix {args.prefix}, "
        f"torch {torch.__version__}, median of {args.reps}"
    )
    res = measure(target.model, prefix=args.prefix, ns=args.ns, reps=args.reps, modes=modes)
    _report(res, args.ns)
    if args.json:
        harness.write_json(args.json, {"settings": vars(args) | {"modes": modes}} | res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
