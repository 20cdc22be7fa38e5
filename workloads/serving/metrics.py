"""vLLM's speculative-decoding counters and the acceptance lengths computed from them.

Counters (Prometheus ``/metrics``, vLLM 0.32 ``vllm/v1/spec_decode/metrics.py``):
``vllm:spec_decode_num_drafts`` (verification steps over all requests),
``vllm:spec_decode_num_draft_tokens`` (tokens proposed), ``vllm:spec_decode_num_accepted_tokens``
and ``vllm:spec_decode_num_accepted_tokens_per_pos`` (label ``position``). vLLM's acceptance
length is ``1 + accepted / drafts``: emitted tokens per verification step of one request, the
same pooled definition this project's engine reports as ``acceptance_length``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

_PREFIX = "vllm:spec_decode_"


@dataclass(frozen=True)
class SpecCounters:
    """One reading of the counters (totals since the server started).

    Attributes:
        num_drafts: verification steps (one per request per step).
        num_draft_tokens: draft tokens proposed.
        num_accepted_tokens: draft tokens accepted.
        accepted_per_pos: accepted tokens at draft position 0, 1, ...
    """

    num_drafts: float = 0.0
    num_draft_tokens: float = 0.0
    num_accepted_tokens: float = 0.0
    accepted_per_pos: tuple[float, ...] = ()

    def __sub__(self, before: SpecCounters) -> SpecCounters:
        n = max(len(self.accepted_per_pos), len(before.accepted_per_pos))
        pos = [_at(self.accepted_per_pos, i) - _at(before.accepted_per_pos, i) for i in range(n)]
        return SpecCounters(
            num_drafts=self.num_drafts - before.num_drafts,
            num_draft_tokens=self.num_draft_tokens - before.num_draft_tokens,
            num_accepted_tokens=self.num_accepted_tokens - before.num_accepted_tokens,
            accepted_per_pos=tuple(pos),
        )

    @property
    def acceptance_length(self) -> float:
        """``1 + accepted / drafts`` (NaN without drafts)."""
        if self.num_drafts <= 0:
            return float("nan")
        return 1.0 + self.num_accepted_tokens / self.num_drafts

    @property
    def acceptance_rate(self) -> float:
        """accepted / proposed draft tokens (NaN without drafts)."""
        if self.num_draft_tokens <= 0:
            return float("nan")
        return self.num_accepted_tokens / self.num_draft_tokens

    def per_position_rates(self) -> list[float]:
        """Share of verification steps whose draft token at position i was accepted."""
        if self.num_drafts <= 0:
            return [float("nan")] * len(self.accepted_per_pos)
        return [a / self.num_drafts for a in self.accepted_per_pos]


def _at(values: tuple[float, ...], i: int) -> float:
    return values[i] if i < len(values) else 0.0


def parse_spec_counters(text: str) -> SpecCounters:
    """Read the counters from a ``/metrics`` page (summed over label sets such as the model
    name; zeros when the server does not speculate)."""
    totals: dict[str, float] = {}
    per_pos: dict[int, float] = {}
    for family in text_string_to_metric_families(text):
        if not family.name.startswith(_PREFIX):
            continue
        for s in family.samples:
            if not s.name.endswith("_total"):
                continue  # the _created samples
            name = s.name[len(_PREFIX) : -len("_total")]
            if name == "num_accepted_tokens_per_pos":
                i = int(s.labels.get("position", 0))
                per_pos[i] = per_pos.get(i, 0.0) + s.value
            else:
                totals[name] = totals.get(name, 0.0) + s.value
    return SpecCounters(
        num_drafts=totals.get("num_drafts", 0.0),
        num_draft_tokens=totals.get("num_draft_tokens", 0.0),
        num_accepted_tokens=totals.get("num_accepted_tokens", 0.0),
        accepted_per_pos=tuple(per_pos.get(i, 0.0) for i in range(max(per_pos, default=-1) + 1)),
    )


@dataclass
class ServerRun:
    """What one server measured.

    Attributes:
        startup_s: launch to ``/health`` 200.
        outputs: greedy output token ids per prompt.
        per_request: per prompt (accepted draft tokens, verification steps) as vLLM counts them
            (the response's ``metrics.speculative_decoding``; speculating server only).
        counters: the spec-decode counters over the greedy pass.
        bench: per b, the benchmark client's result JSON.
    """

    startup_s: float = float("nan")
    outputs: list[list[int]] = field(default_factory=list)
    per_request: list[tuple[int, int]] = field(default_factory=list)
    counters: SpecCounters = field(default_factory=SpecCounters)
    bench: dict[int, dict[str, Any]] = field(default_factory=dict)
