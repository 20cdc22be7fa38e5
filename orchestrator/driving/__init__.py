"""Running a sweep: the driver loop, its proposal sources (grid, Optuna), the Ray trial task."""
