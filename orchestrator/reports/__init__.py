"""After the trials: laws fitted, rows stored, dashboards and the index written."""
