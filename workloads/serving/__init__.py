"""Serving: drafts served by a real vLLM server and measured there (``serve_bench``).

- :mod:`~workloads.serving.env`: the separate vLLM environment (``make serve-env``);
- :mod:`~workloads.serving.server`: a server started on 127.0.0.1 and stopped by PID;
- :mod:`~workloads.serving.metrics`: vLLM's speculative-decoding counters;
- :mod:`~workloads.serving.bench`: one trial (export, servers, greedy pass, ``vllm bench serve``);
- :mod:`~workloads.serving.report`: its metrics, the greedy comparison, the agreement with this
  platform's engine;
- :mod:`~workloads.serving.checks`: the checks at submit (``CHECKS``);
- :mod:`~workloads.serving.workload`: the ``serve_bench`` :class:`~workloads.protocol.Workload`;
- ``vllm_plugin/``: the package installed into vLLM's environment (the drafter class and the
  benchmark client's entry point); never imported here.

Light to import: torch and the target are imported inside :func:`bench.run`.
"""

from workloads.serving.config import ServeBenchConfig
from workloads.serving.env import ServingEnv, ServingEnvError, find_env
from workloads.serving.server import ServerError, VllmServer

__all__ = [
    "ServeBenchConfig",
    "ServerError",
    "ServingEnv",
    "ServingEnvError",
    "VllmServer",
    "find_env",
]
