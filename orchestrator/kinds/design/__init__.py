"""The adaptive design (``design:`` in a sweep spec); its modules: docs/architecture.md.

Layers: :mod:`.spec` follows ``orchestrator/spec``'s import rules and :mod:`.records`
``orchestrator/store``'s (tests/test_imports.py)."""
