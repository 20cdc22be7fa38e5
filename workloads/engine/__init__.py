"""The batched tree decoder and what only it uses: speculative decoding of a target with a draft.

``tree_decode`` (the decode loop: draft a tree, verify it in one target forward, accept, commit),
``tree`` (draft trees, masks and acceptance, EAGLE-2 Sec. 4), ``steps`` (the compiled and
graph-captured forwards, kept across calls), ``batch`` (rows, devices and timers of a batch),
``ar_decode`` (the autoregressive baseline on the same cache), ``oracle_draft`` (a draft that
proposes a known continuation), ``k_law`` (k chosen per live batch size, Scylla Sec. 3.2) and
``step_cost`` (measured cost of one draft and one target step).

May import: ``workloads.config``, ``workloads.result``, ``workloads.models``,
``workloads.roofline``. Nothing is imported here, so the torch modules load without pydantic.
"""
