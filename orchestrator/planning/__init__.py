"""``orchestrator plan``: from measured laws to a training-and-serving plan (imports nothing)."""
