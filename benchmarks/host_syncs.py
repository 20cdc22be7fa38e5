"""Host syncs per decoding cycle, counted by the CPU recorder of the GPU rules.

Counts the torch calls of one ``generate`` call that read device data on the host
(``.item()``, ``.tolist()``, ``bool(t)``, ``torch.equal``, ...; each a sync on CUDA), on a tiny
random Llama target and a 1-layer random draft, tree depth 3, topk 2, 6 verified tokens,
at b = 1 and b = 8, temperature 0 and 0.8. Prints the count per cycle (the prompt phase's
included, spread over the cycles) and where they came from::

    python -m benchmarks.host_syncs
"""

from __future__ import annotations

import argparse
import collections

import torch

from tests.workloads.gpu_rules import HostSyncs
from tests.workloads.tiny import tiny_draft, tiny_target
from workloads.engine.tree_decode import TreeShape, generate

PROMPTS = [[1, 2, 3], [4, 5, 6, 7, 8], [9] * 11, [3, 1], [2] * 6, [7, 8], [5], [6, 6, 6]]


def main(argv: list[str] | None = None) -> None:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args(argv)
    target = tiny_target()
    draft = tiny_draft(target)
    shape = TreeShape(depth=3, topk=2, num_draft_tokens=6)
    print(f"{'b':>3} {'T':>4} {'cycles':>6} {'syncs':>6} {'per cycle':>9}  by kind")
    for b in (1, 8):
        for temperature in (0.0, 0.8):
            with HostSyncs() as rec:
                res = generate(
                    target, draft, PROMPTS[:b], max_new_tokens=32, shape=shape,
                    eos_ids=frozenset(), temperature=temperature,
                    generator=torch.Generator().manual_seed(0),
                )  # fmt: skip
            kinds = dict(collections.Counter(rec.seen))
            per = len(rec.seen) / res.cycles
            n = len(rec.seen)
            print(f"{b:>3} {temperature:>4} {res.cycles:>6} {n:>6} {per:>9.2f}  {kinds}")


if __name__ == "__main__":
    main()
