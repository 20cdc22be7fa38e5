"""Sweep orchestration: spec validation, grid expansion, Ray execution, SQL store, MLflow."""

from orchestrator.errors import OrchestratorError, SpecError, StoreError, TrackingError

__all__ = ["OrchestratorError", "SpecError", "StoreError", "TrackingError"]
