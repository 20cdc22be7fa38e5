"""EAGLE-3's hidden fusion: which target layers a draft reads, and the target features that
carry them (arXiv 2503.01840 Sec. 3; vLLM 0.32 ``llama_eagle3.py`` and SpecForge).

A draft with fusion reads, per token, the hidden states entering the target's decoder layers
``layers`` (index i = the input of layer i, 0 = the token embeddings: vLLM's
``eagle_aux_hidden_state_layer_ids``, HF's ``output_hidden_states[i]``). The *target features*
of a token are those states concatenated, followed by the last-layer hidden state after the
final norm, which the draft's training targets and the decoder's verification use:
``[h_{l_1} | ... | h_{l_n} | h_last]``, width ``(n + 1) * h``. Without fusion (``layers`` empty)
the features are ``h_last`` alone, width h: today's draft input.

No torch at import for :func:`default_layers` and :func:`resolve_layers` (the dry run uses them).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def default_layers(num_layers: int) -> tuple[int, ...]:
    """EAGLE-3's low/mid/high choice for a target of ``num_layers`` decoder layers:
    ``(2, L // 2, L - 3)``, vLLM's ``get_eagle3_default_aux_hidden_state_layers`` and
    SpecForge's default (deduplicated and sorted for targets under 6 layers)."""
    return tuple(sorted({min(2, num_layers - 1), num_layers // 2, max(0, num_layers - 3)}))


def resolve_layers(
    fusion: str, layers: Sequence[int] | None, num_layers: int | None
) -> tuple[int, ...]:
    """The target layers a draft reads, ascending (the order vLLM concatenates them in): () for
    ``fusion: none``; ``layers`` sorted; or :func:`default_layers` of the target.

    Raises:
        ValueError: a layer is not below ``num_layers`` (the target's decoder layers), or the
            default is asked for a target whose layer count is unknown (``num_layers`` None).
    """
    if fusion == "none":
        return ()
    if layers is None:
        if num_layers is None:
            raise ValueError("the target's layer count is unknown: name draft.fusion_layers")
        return default_layers(num_layers)
    if num_layers is not None and max(layers) >= num_layers:
        raise ValueError(
            f"draft.fusion_layers {list(layers)}: the target has {num_layers} decoder layers, so "
            f"an index is 0 (the embeddings) .. {num_layers - 1}. Fix: e.g. "
            f"{list(default_layers(num_layers))} (EAGLE-3's default, or remove the field)"
        )
    return tuple(sorted(layers))  # vLLM concatenates its aux states in layer order


def body_features(body: Any, layers: Sequence[int], **kw: Any) -> Any:
    """Run a target's decoder stack (``model.model``) with ``kw`` and return its target
    features [B, T, (len(layers) + 1) * h] (module docstring), in the stack's dtype, on the
    device of its last hidden state (a spread target's states of earlier layers are moved).

    The stack's own output object is not returned: only the features, so that a caller that
    also needs the KV cache passes it in ``kw`` (it is extended in place)."""
    import torch

    if not layers:
        return body(**kw).last_hidden_state
    out = body(output_hidden_states=True, **kw)
    last = out.last_hidden_state  # on the output device of a target spread over devices
    return torch.cat([*(out.hidden_states[i].to(last.device) for i in layers), last], -1)


def folder_mark(layers: Sequence[int]) -> str:
    """The feature-cache folder's mark of the fused ``layers`` (``-F2.15.27``); "" for none."""
    return "-F" + ".".join(map(str, layers)) if layers else ""


def last_layer(features: Any, fused: int) -> Any:
    """[..., F] target features of ``fused`` fused layers -> [..., h] the last-layer hidden
    states, their last h = F / (fused + 1) (the features themselves when ``fused`` is 0)."""
    if not fused:
        return features
    return features[..., -(features.shape[-1] // (fused + 1)) :]
