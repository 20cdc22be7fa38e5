"""Document-isolated packing (issue 13): rows, target features and draft losses of a packed row
equal those of each document alone; joined packing is the behaviour before it.

A tiny random-weight LLaMA target (seconds): the attention masking is under test, not the model.
"""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from workloads.data import (
    attention_allowed,
    pack_token_documents,
    same_segment,
    segment_ids,
)
from workloads.models.draft import DraftArch, DraftModel
from workloads.training.features import target_hidden
from workloads.training.loop import position_losses

V, H = 96, 32


@pytest.fixture(scope="module")
def tiny_target() -> LlamaForCausalLM:
    torch.manual_seed(0)
    cfg = LlamaConfig(
        hidden_size=H, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=V, max_position_embeddings=256,
    )  # fmt: skip
    cfg._attn_implementation = "sdpa"
    return LlamaForCausalLM(cfg).eval()


@pytest.fixture(scope="module")
def tiny_draft(tiny_target: LlamaForCausalLM) -> DraftModel:
    torch.manual_seed(1)
    arch = DraftArch.from_target(tiny_target.config, layers=1, output_norm=True)
    return DraftModel(
        arch,
        embed_weight=tiny_target.get_input_embeddings().weight,
        lm_head_weight=tiny_target.get_output_embeddings().weight,
    ).eval()


def _docs(*lengths: int, mask_from: int = 0) -> list[tuple[list[int], list[int]]]:
    g = torch.Generator().manual_seed(sum(lengths))
    return [
        (torch.randint(1, V, (n,), generator=g).tolist(), [int(i >= mask_from) for i in range(n)])
        for n in lengths
    ]


def test_isolated_positions_restart_at_every_document_and_row() -> None:
    rows = pack_token_documents(_docs(5, 7, 9), seq_len=8, n_rows=2, packing="isolated")
    assert rows.position_ids.tolist() == [
        [0, 1, 2, 3, 4, 0, 1, 2],  # doc 0, then doc 1 begins
        [0, 1, 2, 3, 0, 1, 2, 3],  # doc 1 goes on as a segment of its own, then doc 2
    ]
    assert segment_ids(rows.position_ids).tolist()[1] == [1, 1, 1, 1, 2, 2, 2, 2]
    joined = pack_token_documents(_docs(5, 7, 9), seq_len=8, n_rows=2, packing="joined")
    assert torch.equal(joined.input_ids, rows.input_ids)
    assert joined.position_ids.tolist() == [list(range(8))] * 2
    assert attention_allowed(joined.position_ids) is None  # one segment: plain causal


def test_packing_refuses_too_few_tokens_and_unknown_modes() -> None:
    with pytest.raises(ValueError, match="fewer than the 24 asked for"):
        pack_token_documents(_docs(5, 7), seq_len=8, n_rows=3, packing="isolated")
    with pytest.raises(ValueError, match="packing 'packed' is not one of"):
        pack_token_documents(_docs(9), seq_len=8, n_rows=1, packing="packed")  # type: ignore[arg-type]


def test_target_features_of_b_packed_after_a_equal_b_alone(tiny_target: LlamaForCausalLM) -> None:
    (a, _), (b, _) = _docs(11, 13)
    row = torch.tensor([a + b])
    iso = pack_token_documents(_docs(11, 13), seq_len=24, n_rows=1, packing="isolated")
    h_row = target_hidden(tiny_target, row, iso.position_ids).float()
    h_b = target_hidden(tiny_target, torch.tensor([b]), torch.arange(13)[None]).float()
    h_a = target_hidden(tiny_target, torch.tensor([a]), torch.arange(11)[None]).float()
    torch.testing.assert_close(h_row[:, 11:], h_b, atol=2e-3, rtol=0)  # float16 storage
    torch.testing.assert_close(h_row[:, :11], h_a, atol=2e-3, rtol=0)
    joined = target_hidden(tiny_target, row, torch.arange(24)[None]).float()
    assert (joined[:, 11:] - h_b).abs().max() > 0.05  # joined rows see document A


def _losses(draft: DraftModel, ids: list[int], mask: list[int], hid: torch.Tensor, pos: list[int]):  # noqa: ANN202
    with torch.no_grad():
        return position_losses(
            draft, torch.tensor([ids]), torch.tensor([mask]).bool(), hid, torch.tensor([pos])
        )


def test_per_token_draft_losses_of_a_packed_row_equal_each_document_alone(
    tiny_target: LlamaForCausalLM, tiny_draft: DraftModel
) -> None:
    docs = _docs(9, 12)
    rows = pack_token_documents(docs, seq_len=21, n_rows=1, packing="isolated")
    hid = target_hidden(tiny_target, rows.input_ids, rows.position_ids)
    ids, pos = rows.input_ids[0].tolist(), rows.position_ids[0].tolist()
    reg, cls, _, weight = _losses(tiny_draft, ids, [1] * 21, hid, pos)
    for start, (d_ids, _) in zip((0, 9), docs, strict=True):
        n = len(d_ids)
        alone = target_hidden(tiny_target, torch.tensor([d_ids]), torch.arange(n)[None])
        reg_1, cls_1, _, w_1 = _losses(tiny_draft, d_ids, [1] * n, alone, list(range(n)))
        torch.testing.assert_close(reg[0, start : start + n - 2], reg_1[0], atol=1e-3, rtol=1e-3)
        torch.testing.assert_close(cls[0, start : start + n - 2], cls_1[0], atol=1e-3, rtol=1e-3)
        assert w_1.bool().all()
    # the two positions whose x_{t+2} lies in the next document predict nothing
    assert weight[0].tolist() == [1.0] * 7 + [0.0, 0.0] + [1.0] * 10


class _Oracle(torch.nn.Module):
    """A draft forward that checks its inputs are (h_t, x_{t+1}) and outputs h_{t+1}.

    Rows are built so that token x_t = t + 1 and hidden h_t = t (every channel)."""

    def forward(self, hidden, next_ids, position_ids, attention_mask=None):  # noqa: ANN001, ANN201
        t = hidden[..., 0].round().long()
        assert torch.equal(next_ids, t + 2), "input at t must pair h_t with x_{t+1}"
        return hidden + 1


def test_input_h_t_and_x_t1_predicts_h_t1_and_x_t2(tiny_draft: DraftModel) -> None:
    t = 16
    ids = torch.arange(1, t + 1)[None]
    hid = torch.arange(t).float()[None, :, None].expand(1, t, H).contiguous()
    reg, cls, agree, weight = position_losses(
        tiny_draft, ids, torch.ones(1, t, dtype=torch.bool), hid, forward=_Oracle()
    )
    assert float(reg.abs().max()) == 0.0  # predicted h_{t+1} exactly
    assert bool(agree.bool().all())  # so the same next-token argmax as the target's h_{t+1}
    p = torch.softmax(tiny_draft.logits(hid[:, 1:-1]), -1)
    torch.testing.assert_close(cls, -(p * p.log()).sum(-1))  # CE(p, p) = entropy of h_{t+1}'s
    assert bool(weight.bool().all())


def test_loss_counts_only_positions_whose_x_t2_is_masked_in() -> None:
    mask = torch.tensor([[0, 0, 0, 1, 1, 0, 1, 1]]).bool()
    pos = torch.tensor([[0, 1, 2, 3, 4, 0, 1, 2]])
    counted = mask[:, 2:] & same_segment(pos, 2)
    # x_{t+2} at columns 2..7 -> masked in at 3, 4, 6, 7; column 6 (t = 4) crosses a boundary
    assert counted[0].tolist() == [False, True, True, False, False, True]
