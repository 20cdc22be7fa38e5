"""MLflow tracking: one parent run per sweep, one child run per trial."""
