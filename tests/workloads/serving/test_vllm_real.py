"""One real vLLM run (the CPU build in ``.venv-vllm``, ``make serve-env``): a draft in the
default Scylla shape (output norm, layer-0 input norm, fc bias, a truncated vocabulary) exported
with ``--format vllm``, loaded by vLLM through the plugin, speculating; the counters read, the
greedy outputs equal to a plain server's token for token, and vLLM's acceptance length equal to
this platform's engine's on the same prompts. Skips, with the reason, where the serving
environment could not be made.

Both draft families: today's (``method: eagle``, ``make test-slow``) and one with EAGLE-3's
hidden fusion of target layers (2, 15, 27) (``method: eagle3``: vLLM gathers those layers'
states and the plugin's drafter fuses them; the default suite). The fused run goes through the
same plugin drafter (fc bias, layer-0 norm, final norm, truncated head and d2t) as today's, and
the ``eagle`` export's files are checked in ``tests/workloads/models/test_export.py``: one
server pair in CI instead of two (about 200 s of a 2-core suite).

The draft is a real trained draft, trained here in seconds: the test's two prompts and the
target's greedy continuations of them, memorised (100 steps), so it is accepted often. Any
mapping error in the export or the plugin (the d2t offsets, a norm, the bias, which hidden state
is fed back) changes what is accepted, and the two engines then disagree.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from workloads.measure import decode as engine_bench
from workloads.models.draft import DraftArch, DraftModel
from workloads.models.fusion import body_features, default_layers
from workloads.serving import bench
from workloads.serving.config import ServeBenchConfig
from workloads.serving.env import ServingEnvError, find_env

pytestmark = pytest.mark.timeout(600)

PROMPTS = [
    {"turns": ["Write a Python function that returns the square of a number."]},
    {"turns": ["Name three colours of the rainbow."]},
]
NEW_TOKENS = 24


@pytest.fixture(scope="module")
def serving_env():  # noqa: ANN201
    try:
        return find_env("auto")
    except ServingEnvError as exc:
        pytest.skip(f"no vLLM serving environment: {exc}")


def _memorised_draft(target, prompts: list[list[int]], folder: Path, fused: bool) -> None:  # noqa: ANN001
    """A Scylla-shaped draft (output norm, layer-0 norm, fc bias, 1,024 of the target's tokens
    in a non-prefix map; ``fused``: EAGLE-3's default layers fused) trained on the prompts and
    their greedy continuations."""
    model = target.model
    layers = default_layers(model.config.num_hidden_layers) if fused else ()
    embed = model.get_input_embeddings().weight.detach()
    head = model.get_output_embeddings().weight.detach()
    seqs = []
    with torch.no_grad():
        for p in prompts:
            ids = torch.tensor([p])
            out = model.generate(ids, max_new_tokens=NEW_TOKENS, do_sample=False)
            seqs.append((out, body_features(model.model, layers, input_ids=out).float()))
    used = sorted({int(t) for out, _ in seqs for t in out[0]})
    rest = [i for i in range(embed.shape[0]) if i not in set(used)][::37]
    keep = torch.tensor(sorted(used + rest[: 1024 - len(used)]))
    index = torch.full((embed.shape[0],), -100, dtype=torch.long)
    index[keep] = torch.arange(len(keep))
    torch.manual_seed(0)
    arch = DraftArch.from_target(model.config, layers=1, output_norm=True, first_input_norm=True,
                                 fusion_layers=layers)  # fmt: skip
    h_size = arch.hidden_size
    draft = DraftModel(arch, embed_weight=embed, lm_head_weight=head, draft_to_target=keep)
    opt = torch.optim.Adam([p for p in draft.parameters() if p.requires_grad], lr=2e-3)
    for _ in range(100):
        for out, h in seqs:
            n = out.shape[1]
            f = draft(h[:, : n - 2], out[:, 1 : n - 1], torch.arange(n - 2)[None])
            ce = torch.nn.functional.cross_entropy(draft.logits(f)[0], index[out[0, 2:]])
            loss = ce + torch.nn.functional.smooth_l1_loss(f, h[:, 1 : n - 1, -h_size:])
            opt.zero_grad()
            loss.backward()
            opt.step()
    draft.save(folder)


@pytest.mark.parametrize(
    "fused",
    [
        pytest.param(False, marks=pytest.mark.slow, id="eagle"),
        pytest.param(True, id="eagle3-fusion"),
    ],
)
def test_vllm_loads_speculates_and_agrees_with_this_engine(
    serving_env,
    target,
    cache_dir: Path,
    tmp_path: Path,  # noqa: ANN001
    fused: bool,
) -> None:
    sets = tmp_path / "prompts"
    sets.mkdir()
    (sets / "two.jsonl").write_text("\n".join(json.dumps(p) for p in PROMPTS) + "\n")
    cfg = ServeBenchConfig(
        draft={"source": "path", "path": str(tmp_path / "draft")},
        serve={"batch_sizes": [2], "max_new_tokens": NEW_TOKENS, "enforce_eager": True},
        prompts={"prompt_sets": sets, "num_prompts": 2},
    )
    prompts = engine_bench.bench_prompts(bench.engine_config(cfg, None), target)
    _memorised_draft(target, prompts, tmp_path / "draft", fused)
    out = tmp_path / "trial"
    m = bench.run(cfg, cache_dir=cache_dir, out_dir=out, progress=print).metrics
    # loaded through the plugin and speculating
    exported = json.loads((out / "draft-vllm" / "config.json").read_text())
    arch = "Eagle3ScyllaLlamaForCausalLM" if fused else "EagleScyllaLlamaForCausalLM"
    assert exported["architectures"] == [arch]
    log = (out / "server-speculative.log").read_text()
    assert arch in log
    if fused:
        assert exported["eagle_aux_hidden_state_layer_ids"] == [2, 15, 27]
        assert "auxiliary layers from speculative config: (2, 15, 27)" in log
    assert m["verify_steps"] > 0 and m["acceptance_rate"] > 0.3
    assert m["acceptance_length_vllm"] == pytest.approx(m["acceptance_length_counters"])
    assert m["acceptance_length"] > 1.5  # the memorised draft is accepted
    assert m["acceptance_length"] <= m["acceptance_length_vllm"]  # vLLM counts cut tokens too
    # greedy: the speculating server equals the plain one token for token (float32)
    assert m["greedy.compared"] == 2 and m["mismatches"] == 0
    # the same draft, prompts and K in this platform's engine
    assert m["engine.mismatches"] == 0
    assert m["engine.verify_steps"] == m["verify_steps"]  # the same chain, step for step
    assert m["agreement.difference"] == pytest.approx(0.0, abs=1e-9), m
    assert m["agreement.disjoint"] == 0.0
    # throughput from vLLM's own client, both servers; logs kept; no server left running
    assert m["tokens_per_s/b2"] > 0 and m["baseline.tokens_per_s/b2"] > 0
    assert m["speedup"] == pytest.approx(m["tokens_per_s/b2"] / m["baseline.tokens_per_s/b2"])
    assert m["startup_s"] > 0 and m["baseline.startup_s"] > 0
    assert (out / "server-baseline.log").exists() and (out / "bench-speculative-b2.json").exists()
