"""The adaptive design (``design:`` in a sweep spec), in one package: :mod:`.spec` (the spec
section and its checks), :mod:`.driver` (``DesignProposals``: the rule of :mod:`analysis.design`
asked each step with the free slots and fresh costs, its decisions recorded; the budget
refusal), :mod:`.records` (the decisions' rows in the results DB, used by the store),
:mod:`.report` (the dashboard's Design section data). The rule itself is a pure function in
:mod:`analysis.design`; the section's HTML is :mod:`dashboards.design_section`'s template.

Layers: :mod:`.spec` follows ``orchestrator/spec``'s import rules and :mod:`.records`
``orchestrator/store``'s (tests/test_imports.py)."""
