"""The ``draft_train`` workload: config, run, checks and cost. Nothing is imported here."""
