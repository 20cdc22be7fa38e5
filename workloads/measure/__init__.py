"""The engine measured on a draft: where a trial's draft is (``drafts.py``) and the timed
decoding benchmark (``decode.py``), shared by ``decode_bench`` and ``serve_bench``. Nothing is
imported here."""
