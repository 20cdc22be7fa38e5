"""The ``decode_bench`` workload: config, run and checks. Nothing is imported here."""
