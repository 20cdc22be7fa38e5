"""benchmarks/compile_bench.py (issue 16, item 4): its static-cache forward equals a full forward
at every repetition (the cache is rewound in place), its ratios, its argument errors; the
compiled path on a tiny model (slow: inductor compiles for a minute or more); the oneDNN mode
(issue 22: every linear through oneDNN with prepacked weights) gives the eager logits."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, PreTrainedModel, StaticCache

from benchmarks import compile_bench
from workloads.models.target import random_model


def _tiny() -> PreTrainedModel:
    config = LlamaConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=100, max_position_embeddings=512,
    )  # fmt: skip
    return random_model(config, dtype=torch.float32, device=torch.device("cpu"), seed=0)


def test_each_repetition_sees_the_same_prefix() -> None:
    model = _tiny()
    ids = torch.randint(0, 100, (1, 20), generator=torch.Generator().manual_seed(0))
    cache = StaticCache(config=model.config, max_cache_len=20)
    with torch.no_grad():
        full = model(input_ids=ids).logits[:, 16:]
        fwd = compile_bench._forward(model, cache)
        fwd(ids[:, :16], torch.arange(16))
        for _ in range(3):  # without the rewind the second call would write past the end
            out = fwd(ids[:, 16:], torch.arange(16, 20))
            compile_bench._rewind(cache, 16)
            torch.testing.assert_close(out, full, rtol=1e-5, atol=1e-5)


def test_measure_gives_ratios_to_the_ar_step() -> None:
    res = compile_bench.measure(_tiny(), prefix=16, ns=[1, 2, 4], reps=2, modes=["eager"])
    s = res["seconds"]["eager"]
    assert set(s) == {1, 2, 4} and all(v > 0 for v in s.values())
    assert res["ratio_to_ar"]["eager"][1] == 1.0
    assert res["ratio_to_ar"]["eager"][4] == pytest.approx(s[4] / s[1])
    assert res["compiled_over_eager"] == {}
    with pytest.raises(ValueError, match="must include 1"):
        compile_bench.measure(_tiny(), prefix=16, ns=[2, 4], reps=2, modes=["eager"])


@pytest.mark.slow
def test_the_compiled_forward_with_frozen_weights_equals_eager() -> None:
    res = compile_bench.measure(_tiny(), prefix=16, ns=[1, 2], reps=2, modes=["eager", "compiled"])
    diffs = res["max_abs_logit_diff_vs_first_mode"]["compiled"]
    assert max(diffs.values()) < 1e-4, diffs
    assert set(res["compiled_over_eager"]["compiled"]) == {1, 2}


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="no oneDNN")
def test_the_onednn_mode_equals_eager_and_leaves_the_model_alone() -> None:
    model = _tiny()
    res = compile_bench.measure(model, prefix=16, ns=[1, 2, 4], reps=2, modes=["eager", "onednn"])
    diffs = res["max_abs_logit_diff_vs_first_mode"]["onednn"]
    assert max(diffs.values()) < 1e-4, diffs
    assert set(res["compiled_over_eager"]["onednn"]) == {1, 2, 4}
    assert all(
        type(m) is not compile_bench.OneDNNLinear for m in model.modules()
    )  # a copy was patched
    twin = compile_bench.onednn_copy(model)
    assert (
        sum(type(m) is compile_bench.OneDNNLinear for m in twin.modules()) == 2 * 7 + 1
    )  # + the head


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--ns", "2,4"], "--ns must hold 1"),
        (["--ns", "1,x"], "not a comma list of integers"),
        (["--reps", "0"], "must be >= 1"),
        (["--prefix", "0"], "must be >= 1"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        compile_bench.main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("compile_bench: error: ") and err.count("\n") == 1 and says in err
