"""A vLLM OpenAI-compatible server started and stopped by this process.

The server runs in its own process group on 127.0.0.1 (a free port unless one is given), its
output goes to a log file kept as the trial's artifact, readiness is ``GET /health`` answering
200, and it is stopped by PID (SIGTERM to its group, SIGKILL after a grace period), also when the
code inside the ``with`` block raises.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

HOST = "127.0.0.1"
"""servers bind to loopback only"""


class ServerError(RuntimeError):
    """The server died or never became ready; the message ends with its log's last lines."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def port_in_use(port: int) -> bool:
    """True when something accepts connections on 127.0.0.1:``port``."""
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((HOST, port)) == 0


def tail(path: Path, lines: int = 15) -> str:
    """The last ``lines`` lines of a text file ('' when it is missing)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


@dataclass
class VllmServer:
    """``python -m vllm.entrypoints.openai.api_server`` as a context manager.

    Attributes:
        python: the serving environment's interpreter.
        model: the target (a local HF folder or a hub id).
        args: further server flags (``--dtype``, ``--speculative-config`` ...).
        log_path: where the server's stdout and stderr go.
        port: 0 picks a free port.
        ready_timeout_s: seconds to wait for ``/health``.
        env: extra environment variables for the server.
        startup_s: seconds from launch to ready (set on enter).
    """

    python: Path
    model: str
    args: Sequence[str]
    log_path: Path
    port: int = 0
    ready_timeout_s: float = 600.0
    env: dict[str, str] = field(default_factory=dict)
    startup_s: float = float("nan")
    _proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    def command(self) -> list[str]:
        """The server's command line."""
        return [
            str(self.python), "-m", "vllm.entrypoints.openai.api_server", "--model", self.model,
            "--host", HOST, "--port", str(self.port), *self.args,
        ]  # fmt: skip

    def __enter__(self) -> VllmServer:
        if self.port == 0:
            self.port = free_port()
        elif port_in_use(self.port):
            raise ServerError(
                f"port {self.port} on {HOST} is in use. Fix: serve.port: 0 (a free one)"
            )
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "VLLM_HOST_IP": HOST, **self.env}
        t0 = time.perf_counter()
        with self.log_path.open("ab") as log:
            self._proc = subprocess.Popen(
                self.command(), stdout=log, stderr=subprocess.STDOUT, env=env,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.perf_counter() - t0
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def _wait_ready(self) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + self.ready_timeout_s
        while time.monotonic() < deadline:
            code = self._proc.poll()
            if code is not None:
                raise ServerError(
                    f"vLLM server exited with code {code} before it was ready; its log "
                    f"({self.log_path}) ends:\n{tail(self.log_path)}"
                )
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(1.0)
        raise ServerError(
            f"vLLM server not ready after {self.ready_timeout_s:.0f} s; its log "
            f"({self.log_path}) ends:\n{tail(self.log_path)}"
        )

    def stop(self, grace_s: float = 30.0) -> None:
        """SIGTERM the server's process group, SIGKILL it after ``grace_s``; idempotent."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                return
            try:
                proc.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
        with contextlib.suppress(ProcessLookupError):  # workers it spawned in the same group
            os.killpg(proc.pid, signal.SIGKILL)

    def get(self, path: str, *, timeout_s: float = 30.0) -> str:
        """GET ``path`` as text."""
        with urllib.request.urlopen(self.url + path, timeout=timeout_s) as r:
            return str(r.read().decode())

    def post(self, path: str, body: dict[str, Any], *, timeout_s: float = 600.0) -> Any:
        """POST ``body`` as JSON to ``path``; the decoded JSON answer.

        Raises:
            ServerError: an HTTP error (with the server's message).
        """
        req = urllib.request.Request(
            self.url + path, data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )  # fmt: skip
        try:
            with urllib.request.urlopen(req, timeout=timeout_s) as r:
                return json.loads(r.read().decode())
        except urllib.error.HTTPError as exc:
            raise ServerError(
                f"POST {path}: HTTP {exc.code}: {exc.read().decode()[:500]}"
            ) from None
