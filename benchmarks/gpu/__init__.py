"""The parts of ``benchmarks/gpu_check.py``: the ``train`` check (:mod:`.train_check`), the
``decode`` check (:mod:`.decode_check`, its cells in :mod:`.cells`, its ``modes`` section in
:mod:`.modes`) and what both share (:mod:`.common`). Imports nothing eagerly."""
