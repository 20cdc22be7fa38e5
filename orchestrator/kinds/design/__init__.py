"""The adaptive design (``design:`` in a sweep spec); its modules: docs/architecture.md.

Layers: :mod:`.spec` (the block) follows ``orchestrator/spec``'s import rules
(tests/test_imports.py); the decisions' table is the store's
(:mod:`orchestrator.store.decisions`)."""
