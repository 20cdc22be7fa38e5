"""The ``sleep`` workload (a diagnostic): config and run. Nothing is imported here."""
