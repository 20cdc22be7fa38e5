"""The Optuna search (``search:`` in a sweep spec): :mod:`.spec` (the block, the spec's import
rules), :mod:`.study` (the study and the driver loop's proposals), :mod:`.kind` (the kind)."""
