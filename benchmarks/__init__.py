"""Benchmarks of speed and memory, and the experiments behind docs/results.md.

Each is a module run from the repository root, ``python -m benchmarks.<name> --help``; what they
share is :mod:`benchmarks.harness`. The GPU checks are ``python -m benchmarks.gpu_check train``
and ``... decode`` (their parts in :mod:`benchmarks.gpu`). Nothing is imported here.
"""
