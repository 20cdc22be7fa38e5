"""Pieces shared by the speculative and the autoregressive batch decoders (private).

A GPU's rules the decoders follow (checked on the CPU by ``tests/workloads/gpu_rules.py``):

- **one device per op**: a target spread over GPUs (``device_map: auto``) takes its input ids
  on its embedding's device and gives hidden states and logits on its LM head's device
  (:class:`Placement`); the engine moves what crosses between them with ``.to()``;
- **host syncs**: the cycle reads device data on the host once (the tokens it emitted); the
  timers record CUDA events and are read once at the end of a call (:class:`Timer`).

Shape legend: B rows, L longest prompt, h hidden, V target vocabulary.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel

from workloads.models.fusion import body_features, last_layer
from workloads.models.kv_cache import CACHE_KW, RaggedStaticCache, additive_mask, layer_masks
from workloads.models.target import input_device, output_device


@dataclass(frozen=True)
class Placement:
    """Where a target's inputs go and where its hidden states and logits come out.

    ``input``: the token embedding's device (token ids, positions, masks, the KV cache's
    lengths, the draft and its tree); ``output``: the final norm's and LM head's device (last
    hidden states, logits, sampling). The same device unless the target is spread.
    """

    input: torch.device
    output: torch.device

    @classmethod
    def of(cls, target: PreTrainedModel) -> Placement:
        return cls(input=input_device(target), output=output_device(target))

    @property
    def devices(self) -> tuple[torch.device, ...]:
        return (self.input,) if self.input == self.output else (self.input, self.output)


class Timer:
    """Wall seconds of spans of a decoding call, with at most one host sync per read.

    On a CPU a mark is ``time.perf_counter()`` (ops run synchronously). On CUDA a mark records
    one event per device of the placement (no sync: CPU and GPU overlap); :meth:`seconds`
    synchronises once and sums each span's elapsed time, taking per span the longest over the
    devices (a spread forward starts on the first device and ends on the last).

    Args:
        devices: the devices whose work the spans time.
    """

    def __init__(self, devices: Sequence[torch.device]) -> None:
        self.cuda = [d for d in dict.fromkeys(devices) if d.type == "cuda"]
        self._spans: dict[str, list[tuple[object, object]]] = {}
        self.syncs = 0  # host syncs this timer made (tests read it)
        self._dirty = False  # events recorded since the last sync

    def mark(self) -> object:
        """A point in time on every device (an event each on CUDA)."""
        if not self.cuda:
            return time.perf_counter()
        self._dirty = True
        events = []
        for dev in self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record(torch.cuda.current_stream(dev))
            events.append(ev)
        return events

    def add(self, name: str, start: object, end: object | None = None) -> None:
        """Count the span from ``start`` to ``end`` (default: now) under ``name``."""
        self._spans.setdefault(name, []).append((start, self.mark() if end is None else end))

    def sync(self) -> None:
        """Wait for every device's queued work (one host sync per device)."""
        for dev in self.cuda:
            torch.cuda.synchronize(dev)
        self.syncs += 1 if self.cuda else 0
        self._dirty = False

    def now(self) -> float:
        """Host wall time after the devices are done (a sync on CUDA): for whole calls."""
        self.sync()
        return time.perf_counter()

    def seconds(self, name: str) -> float:
        """Total seconds of the spans under ``name`` (one sync on CUDA, shared by all names)."""
        spans = self._spans.get(name, [])
        if not self.cuda:
            return sum(float(e) - float(s) for s, e in spans)  # type: ignore[arg-type,misc]
        if spans and self._dirty:
            self.sync()
        total = 0.0
        for s, e in spans:
            pairs = zip(s, e, strict=True)  # type: ignore[call-overload]
            total += max(a.elapsed_time(b) for a, b in pairs) / 1000.0
        return total


def right_pad(rows: list[list[int]], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Ragged rows -> ids [B, L] (0-padded) and lengths [B], built on the host, moved once."""
    width = max(map(len, rows))
    ids = torch.tensor([r + [0] * (width - len(r)) for r in rows], dtype=torch.long)
    return ids.to(device), torch.tensor([len(r) for r in rows]).to(device)


def pick(logits_bv: torch.Tensor, temperature: float, gen: torch.Generator | None) -> torch.Tensor:
    """Greedy (temperature 0) or sampled next token per row: [B, V] -> [B], on the logits'
    device (``gen`` must be on it)."""
    if temperature == 0:
        return logits_bv.argmax(-1)
    probs = torch.softmax(logits_bv.float() / temperature, -1)
    return torch.multinomial(probs, 1, generator=gen)[:, 0]


def prefill(
    target: PreTrainedModel,
    prompts: list[list[int]],
    cache: RaggedStaticCache,
    *,
    layers: tuple[int, ...] = (),
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Run the prompts through the target and commit them to ``cache`` (empty before).

    Returns:
        target features [B, L, F] (F = h, or with fusion ``layers`` (len(layers) + 1) * h:
        :mod:`workloads.models.fusion`) and the last prompt position's logits [B, V] (float32),
        both on the placement's output device; lengths [B] on the input device.
    """
    dev = input_device(target)
    ids, lengths = right_pad(prompts, dev)
    b, length = ids.shape
    key_ok = torch.arange(length, device=dev)[None] < lengths[:, None]
    causal = torch.ones(length, length, dtype=torch.bool, device=dev).tril()
    cache.stage(length)
    allowed = cache.allowed(causal[None] & key_ok[:, None, :])
    pos = torch.arange(length, device=dev).expand(b, -1)
    h = body_features(
        target.model,
        layers,
        input_ids=ids,
        position_ids=pos,
        attention_mask=layer_masks(target.config, additive_mask(allowed, target.dtype), pos),
        **{CACHE_KW: cache},
        use_cache=True,
    )
    # padding slots stay beyond each row's length: overwritten next
    cache.commit(None, lengths, [len(p) for p in prompts])
    idx = (lengths - 1).to(h.device)[:, None, None].expand(b, 1, h.shape[2])
    last = h.gather(1, idx)[:, 0]
    return h, target.lm_head(last_layer(last, len(layers))).float(), lengths


def finished(tokens: list[int], eos_ids: frozenset[int], max_new_tokens: int) -> bool:
    """Whether a row is done: it emitted EOS or reached ``max_new_tokens``."""
    return len(tokens) >= max_new_tokens or tokens[-1] in eos_ids


def row_bucket(live: int, rows: int, fixed: bool) -> int:
    """Rows to keep in the batch when ``live`` of its ``rows`` still decode.

    Eager steps drop finished rows at once (``live``). Fixed-shape steps (CUDA graphs,
    ``torch.compile``) keep the batch at ``rows`` until ``live`` fits the next smaller power of
    two, then shrink to it, so a batch of b0 rows sees at most log2(b0) + 2 batch sizes (finished
    rows in between are frozen: they commit nothing).
    """
    if not fixed:
        return live
    size = 1 << max(live - 1, 0).bit_length()  # the smallest power of two >= live
    return rows if size >= rows else size


def rows_to_keep(live: list[bool], keep: int) -> list[int]:
    """Indices of the ``keep`` rows to keep (ascending): every live row, then finished ones to
    fill a fixed-shape bucket (:func:`row_bucket`; they stay frozen)."""
    done = [i for i, a in enumerate(live) if not a]
    return sorted([i for i, a in enumerate(live) if a] + done[: keep - sum(live)])
