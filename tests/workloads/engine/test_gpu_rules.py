"""The decoding engine under a GPU's rules, on the CPU (see :mod:`tests.workloads.gpu_rules`),
for both draft families (last-layer features and EAGLE-3's hidden fusion):
one device per op with a spread target, a budget of host syncs per cycle, graphs captured and
steps compiled once per shape bucket and never again on a repeat call, and failures of a
capture reported, not hidden."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from tests.workloads.gpu_rules import DEVICE_1, DeviceMix, DeviceTags, HostSyncs, spread_target
from tests.workloads.tiny import (
    WINDOW,
    greedy_reference,
    tiny_draft,
    tiny_gemma_target,
    tiny_target,
)
from workloads.engine import batch as _batch
from workloads.engine import steps as _steps
from workloads.engine.ar_decode import ar_generate
from workloads.engine.batch import Timer
from workloads.engine.steps import Graphed, Steps, StepStats
from workloads.engine.tree import accept_greedy
from workloads.engine.tree_decode import TreeShape, generate
from workloads.models.kv_cache import layer_masks

PROMPTS = [[1, 2, 3], [4, 5, 6, 7, 8], [9] * 11, [3, 1], [2] * 6, [7, 8], [5], [6, 6, 6]]
SHAPE = TreeShape(depth=3, topk=2, num_draft_tokens=6)


@pytest.fixture(scope="module")
def target() -> torch.nn.Module:
    return tiny_target()


@pytest.fixture(scope="module", params=[(), (0, 1)], ids=["last-layer", "fused-0-1"])
def draft(target: torch.nn.Module, request: pytest.FixtureRequest) -> torch.nn.Module:
    """Today's draft, and one with EAGLE-3's hidden fusion of both target layers (the verify
    step then returns the fused features, the pending pairs carry them): every rule below
    holds for both."""
    return tiny_draft(target, fusion_layers=request.param)


def _eos(target: torch.nn.Module, prompts: list[list[int]], n: int) -> frozenset[int]:
    """EOS ids that stop some rows early and leave others running (rows leave at different
    cycles): the 3rd greedy token of the first two prompts."""
    ref = ar_generate(target, prompts, max_new_tokens=n, eos_ids=frozenset()).tokens
    return frozenset({ref[0][2], ref[1][2]}) - {t for r in ref[2:4] for t in r}


# --- one device per op -----------------------------------------------------------------------


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_a_spread_target_keeps_one_device_per_op(
    target: torch.nn.Module,
    draft: torch.nn.Module,
    monkeypatch: pytest.MonkeyPatch,
    temperature: float,
) -> None:
    """Final norm and LM head on device 1: prefill, cycles, both accept rules, rows leaving,
    and the AR loop run without an op that mixes devices, and give the unspread output."""
    prompts, n = PROMPTS[:3], 8
    eos = _eos(target, prompts, n)
    kw = {"max_new_tokens": n, "shape": SHAPE, "eos_ids": eos, "temperature": temperature}
    plain = generate(target, draft, prompts, generator=torch.Generator().manual_seed(0), **kw)
    with spread_target(target, monkeypatch) as mode:
        gen = torch.Generator(device=DEVICE_1).manual_seed(0)  # sampling runs on device 1
        spread = generate(target, draft, prompts, generator=gen, **kw)
        ar = ar_generate(target, prompts, max_new_tokens=n, eos_ids=eos)
    assert spread.tokens == plain.tokens and spread.cycles >= 2
    assert ar.cycles >= 2 and mode.ops > 1000 and not mode.mixes_seen
    assert any(len(t) < n for t in spread.tokens)  # a row left the batch


def test_device_rule_has_power(
    target: torch.nn.Module, draft: torch.nn.Module, monkeypatch: pytest.MonkeyPatch
) -> None:
    # an engine told the wrong placement (everything on device 0) mixes devices at once
    with spread_target(target, monkeypatch):
        monkeypatch.setattr(_batch, "output_device", lambda _m: torch.device("cpu"))
        with pytest.raises(DeviceMix):
            generate(target, draft, PROMPTS[:2], max_new_tokens=4, shape=SHAPE,
                     eos_ids=frozenset())  # fmt: skip
    # the accept rule itself: today's moves the argmax; the old one compared across devices
    toks = torch.tensor([[1, 2, 3]])
    depth, lpar = torch.tensor([[0, 1, 2]]), torch.tensor([[0, 0, 1]])
    with DeviceTags():
        logits = torch.randn(1, 3, 8, device=DEVICE_1)
        accept_greedy(toks, depth, lpar, logits, 2)
        with pytest.raises(DeviceMix):
            _ = toks == logits.argmax(-1)


# --- host syncs per cycle --------------------------------------------------------------------

SYNC_BUDGET = 1
"""host reads per decoding cycle: the tokens each row emitted (with how many, and whether KV
entries move), in one transfer; the host needs them to return the tokens and to know which rows
finished. Everything else (tree, accept, cache commit, timers) stays on the device."""


@pytest.mark.parametrize(("b", "temperature"), [(1, 0.0), (8, 0.0), (8, 0.8)])
def test_host_syncs_per_cycle_within_budget(
    target: torch.nn.Module, draft: torch.nn.Module, b: int, temperature: float
) -> None:
    prompts = PROMPTS[:b]
    with HostSyncs() as rec:
        res = generate(
            target, draft, prompts, max_new_tokens=12, shape=SHAPE, eos_ids=frozenset(),
            temperature=temperature, generator=torch.Generator().manual_seed(0),
        )  # fmt: skip
    prompt_phase = 1  # the first token of every row
    assert res.cycles >= 3
    assert len(rec.seen) <= prompt_phase + SYNC_BUDGET * res.cycles, rec.seen
    with HostSyncs() as rec:
        ar = ar_generate(target, prompts, max_new_tokens=6, eos_ids=frozenset())
    assert len(rec.seen) <= prompt_phase + ar.cycles, rec.seen


def test_host_sync_recorder_has_power() -> None:
    x = torch.ones(3)
    with HostSyncs() as rec:
        int(x.max())
        torch.equal(x, x)
        x.tolist()
    assert rec.seen == ["__int__", "equal", "tolist"]


def test_timer_syncs_once_per_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """On CUDA the spans are events: marks record, one sync reads them all."""
    syncs: list[object] = []

    class Event:
        def __init__(self, enable_timing: bool = False) -> None:
            self.t = 0.0

        def record(self, stream: object = None) -> None:
            self.t = float(len(syncs))

        def elapsed_time(self, other: Event) -> float:
            return 1.0

    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda dev=None: None)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda dev=None: syncs.append(dev))
    devs = [torch.device("cuda", 0), torch.device("cuda", 1)]
    timer = Timer(devs)
    for _ in range(40):  # 40 cycles x 2 spans
        a = timer.mark()
        timer.add("draft", a)
        b = timer.mark()
        timer.add("verify", b)
    assert syncs == []  # nothing waited inside the cycles
    assert timer.seconds("draft") == pytest.approx(0.04)
    assert timer.seconds("verify") == pytest.approx(0.04)
    assert syncs == devs  # one sync of each device for both reads


# --- graphs and compiled steps: captured and compiled once per bucket --------------------------


def test_graphs_capture_once_per_bucket_and_never_again(
    target: torch.nn.Module, draft: torch.nn.Module
) -> None:
    """``graphs`` without the capture itself (no CUDA here): the shapes a capture would be
    made for. A batch of 8 shrinking to 1 meets the buckets 8, 4, 2, 1, each with 3 steps
    (verify, the draft's pending pairs, a tree level); a second identical call captures none."""
    n = 10
    eos = _eos(target, PROMPTS, n)
    steps = Steps(target, draft, "graphs", capture=False)
    kw = {"max_new_tokens": n, "shape": SHAPE, "eos_ids": eos, "steps": steps}
    first = generate(target, draft, PROMPTS, **kw)  # type: ignore[arg-type]
    assert any(len(t) < n for t in first.tokens) and any(len(t) == n for t in first.tokens)
    assert steps.stats.captures <= 4 * 3 and steps.stats.late == 0
    captured = steps.stats.captures
    again = generate(target, draft, PROMPTS, **kw)  # type: ignore[arg-type]
    assert again.tokens == first.tokens
    assert steps.stats.captures == captured  # nothing recaptured
    eager = generate(target, draft, PROMPTS, max_new_tokens=n, shape=SHAPE, eos_ids=eos)
    assert eager.tokens == first.tokens  # bucketed, frozen rows: the same output


def test_compiled_steps_compile_once_and_never_again(
    target: torch.nn.Module, draft: torch.nn.Module
) -> None:
    """``compile`` with dynamo's eager backend (graphs counted, no code generation): a batch
    of 2 meets the buckets 2 and 1; a second identical call compiles nothing."""
    prompts, n = PROMPTS[:2], 8
    torch._dynamo.reset()
    steps = Steps(target, draft, "compile", backend="eager")
    kw = {"max_new_tokens": n, "shape": SHAPE, "eos_ids": frozenset(), "steps": steps}
    first = generate(target, draft, prompts, **kw)  # type: ignore[arg-type]
    compiled = steps.stats.compiles
    # 2 buckets x 3 steps (verify, pending pairs, a tree level), one graph each
    assert compiled == 2 * 3 and steps.stats.late == 0  # late: no compile inside the timers
    again = generate(target, draft, prompts, **kw)  # type: ignore[arg-type]
    assert steps.stats.compiles == compiled
    eager = generate(target, draft, prompts, max_new_tokens=n, shape=SHAPE, eos_ids=frozenset())
    assert first.tokens == again.tokens == eager.tokens


def test_graph_key_separates_dtypes() -> None:
    a, b = torch.zeros(2, 3), torch.zeros(2, 3, dtype=torch.bfloat16)
    assert Graphed.key([a], None) != Graphed.key([b], None)
    assert Graphed.key([a], None) == Graphed.key([a.clone()], None)


def test_capture_failure_is_reported_and_out_of_memory_raised(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stats = StepStats()
    step = Graphed(lambda x, cache: x + 1, "verify", stats)  # capture=True: no CUDA here
    assert step(torch.zeros(2), None).tolist() == [1.0, 1.0]  # ran eagerly ...
    assert len(stats.fallbacks) == 1 and stats.metrics()["compile.fallbacks"] == 1.0  # ... said

    def oom(*_: object) -> None:
        raise torch.cuda.OutOfMemoryError("CUDA out of memory")

    monkeypatch.setattr(Graphed, "_capture", oom)
    with pytest.raises(torch.cuda.OutOfMemoryError):
        Graphed(lambda x, cache: x, "verify", StepStats())(torch.zeros(3), None)


# --- memory: no float32 [B, n, V] logits at temperature 0, no [B, K, V] oracle pass ------------


class _BigFloats(TorchDispatchMode):
    """Records the shapes of float32 tensors of at least ``numel`` elements that ops create."""

    def __init__(self, numel: int) -> None:
        super().__init__()
        self.numel, self.seen = numel, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and t.dtype == torch.float32 and t.numel() >= self.numel:
                self.seen.append((str(func), tuple(t.shape)))
        return out


def test_greedy_verification_keeps_the_targets_dtype() -> None:
    """A bf16 target at T = 0: the verify logits stay bf16 and no float32 [B, n, V] tensor is
    made (greedy needs only an argmax); the control, T > 0, makes its float32 probabilities."""
    target = tiny_target(vocab=512).to(torch.bfloat16)
    draft = tiny_draft(target).cast_to(torch.bfloat16)
    prompts, n = PROMPTS[:4], SHAPE.num_draft_tokens
    steps = Steps(target, draft)
    kw = {"max_new_tokens": 6, "shape": SHAPE, "eos_ids": frozenset(), "steps": steps}
    with _BigFloats(len(prompts) * n * 512) as rec:
        res = generate(target, draft, prompts, **kw)  # type: ignore[arg-type]
    assert res.cycles >= 2 and rec.seen == []
    with _BigFloats(len(prompts) * n * 512) as rec:
        generate(target, draft, prompts, temperature=0.8, **kw)  # type: ignore[arg-type]
    assert rec.seen  # the recorder sees the sampling path's float32 [B, n, V]


def test_oracle_children_without_a_vocabulary_pass() -> None:
    from workloads.engine.oracle_draft import OracleDraft

    v = 50_000
    oracle = OracleDraft([[5, 7, 9, 11, 13]], v)
    h = oracle(torch.zeros(1, 2, 1), torch.zeros(1, 2, dtype=torch.long), torch.tensor([[0, 1]]))
    with _BigFloats(v) as rec:
        lp, ids = oracle.top_candidates(h, 3)
    assert rec.seen == []
    # the reference in float64: a float32 sum over 50,000 terms rounds by the CPU's order
    ref_lp, ref_ids = torch.log_softmax(oracle.logits(h).double(), -1).topk(3, -1)
    assert ids[..., 0].tolist() == [[9, 11]] == ref_ids[..., 0].tolist()  # the proposal first
    assert torch.allclose(lp.double(), ref_lp, atol=2e-6)
    assert (ids[..., 1:] != ids[..., :1]).all()  # the others are other tokens


def test_each_steps_compiles_its_own_code(target: torch.nn.Module, draft: torch.nn.Module) -> None:
    """dynamo keeps compiled graphs and counts recompiles (limit 64, then eager without a word)
    per code object: steps sharing one would, over a process's trials, run eagerly unnoticed."""
    a, b = (Steps(target, draft, "compile", backend="eager") for _ in range(2))
    code = [s._verify._torchdynamo_orig_callable.__code__ for s in (a, b)]  # type: ignore[attr-defined]
    assert code[0] is not code[1] and code[0].co_name != code[1].co_name


def test_graphs_of_a_replaced_cache_are_dropped(
    target: torch.nn.Module, draft: torch.nn.Module
) -> None:
    """A replaced cache's graphs would replay into its freed buffers: they go with it, and graphs
    key on the cache's serial number (an ``id`` is reused once an object is freed)."""
    steps = Steps(target, draft, "graphs", capture=False)
    kw = {"shape": SHAPE, "eos_ids": frozenset(), "steps": steps}
    generate(target, draft, PROMPTS[:2], max_new_tokens=4, **kw)  # type: ignore[arg-type]
    old = steps._caches["target"]
    assert steps._verify.graphs  # type: ignore[attr-defined]
    generate(target, draft, PROMPTS[:4], max_new_tokens=4, **kw)  # more rows: new caches
    new = steps._caches["target"]
    assert new is not old and new.serial != old.serial
    keys = steps._verify.graphs  # type: ignore[attr-defined]
    assert keys and all(k[-2] != old.serial for k in keys)


@pytest.mark.parametrize(("depth", "topk", "k"), [(3, 2, 1), (0, 2, 4), (2, 0, 4)])
def test_a_tree_that_cannot_decode_is_refused(depth: int, topk: int, k: int) -> None:
    with pytest.raises(ValueError, match="num_draft_tokens >= 2"):
        TreeShape(depth=depth, topk=topk, num_draft_tokens=k)


# --- a sliding-window target: the rules hold with a mask per layer type ------------------------

BF16 = torch.bfloat16
GEMMA_PROMPTS = [[1, 2, 3], [(7 * i) % 64 for i in range(2 * WINDOW + 3)], [5] * WINDOW]
"""rows shorter than the tiny Gemma's window, twice as long, and as long"""


@pytest.fixture(scope="module")
def gemma() -> Any:
    return tiny_gemma_target()


def test_a_spread_sliding_window_target_keeps_one_device_per_op_and_the_sync_budget(
    gemma: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The per-layer-type masks are made where the mask lives: no op mixes devices with the
    final norm and LM head on device 1, the host reads once per cycle, and the output is the
    unspread one."""
    draft, n = tiny_draft(gemma), 10
    kw = {"max_new_tokens": n, "shape": SHAPE, "eos_ids": frozenset()}
    plain = generate(gemma, draft, GEMMA_PROMPTS, **kw)  # type: ignore[arg-type]
    with spread_target(gemma, monkeypatch) as mode, HostSyncs() as rec:
        spread = generate(gemma, draft, GEMMA_PROMPTS, **kw)  # type: ignore[arg-type]
    assert spread.tokens == plain.tokens and spread.cycles >= 3
    assert mode.ops > 1000 and not mode.mixes_seen
    assert len(rec.seen) <= 1 + SYNC_BUDGET * spread.cycles, rec.seen


def test_compiled_steps_of_a_sliding_window_target_compile_once_and_stay_lossless(
    gemma: Any,
) -> None:
    """``compile`` (dynamo's eager backend) traces the verify step with its mask mapping and
    the draft's scaled embedding: 3 steps compiled once, without a graph break (a host read
    in a step splits it: more graphs), none again on a repeat call, and the greedy output of a
    row longer than the window."""
    prompts, n = GEMMA_PROMPTS[1:2], 8
    draft = tiny_draft(gemma)
    torch._dynamo.reset()
    steps = Steps(gemma, draft, "compile", backend="eager")
    kw = {"max_new_tokens": n, "shape": SHAPE, "eos_ids": frozenset(), "steps": steps}
    first = generate(gemma, draft, prompts, **kw)  # type: ignore[arg-type]
    assert steps.stats.compiles == 3 and steps.stats.late == 0  # verify, pending pairs, level
    again = generate(gemma, draft, prompts, **kw)  # type: ignore[arg-type]
    assert steps.stats.compiles == 3
    assert first.tokens == again.tokens == [greedy_reference(gemma, p, n) for p in prompts]


def test_greedy_verification_of_a_bf16_sliding_window_target_keeps_its_dtype(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A bfloat16 target's masks per layer type are bfloat16, the window's hidden keys at
    bfloat16's minimum (not float32's, which rounds to -inf), and no float32 [B, n, V] logits
    are made at T = 0."""
    target: Any = tiny_gemma_target(vocab=512)
    target = target.to(BF16)
    draft = tiny_draft(target).cast_to(BF16)
    masks: list[dict[str, torch.Tensor]] = []

    def spy(config: Any, mask: torch.Tensor, query_bn: torch.Tensor) -> Any:
        masks.append(layer_masks(config, mask, query_bn))
        return masks[-1]

    monkeypatch.setattr(_steps, "layer_masks", spy)  # the verify step's
    steps = Steps(target, draft)
    kw = {"max_new_tokens": 6, "shape": SHAPE, "eos_ids": frozenset(), "steps": steps}
    with _BigFloats(len(GEMMA_PROMPTS) * SHAPE.num_draft_tokens * 512) as rec:
        res = generate(target, draft, GEMMA_PROMPTS, **kw)  # type: ignore[arg-type]
    assert res.cycles >= 2 and rec.seen == []
    assert len(masks) == res.cycles
    assert {m.dtype for d in masks for m in d.values()} == {BF16}
    sliding = torch.cat([d["sliding_attention"].flatten() for d in masks])
    assert torch.isfinite(sliding).all() and float(sliding.min()) == torch.finfo(BF16).min
