"""The cost of a sweep before and after it runs; its modules: docs/architecture.md. The
per-workload work counts live in :mod:`workloads.draft_train.cost`."""
