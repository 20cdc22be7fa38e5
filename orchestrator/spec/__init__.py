"""Sweep specs: the YAML parsed once into typed models, and the grid of trials."""
