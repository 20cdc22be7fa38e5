"""A vLLM OpenAI-compatible server started and stopped by this process.

The server runs in its own process group on 127.0.0.1 (a free port unless one is given), its
output goes to a log file kept as the trial's artifact, readiness is ``GET /health`` answering
200, and it is stopped by PID (SIGTERM to its group, SIGKILL after a grace period), also when the
code inside the ``with`` block raises. A guard (:mod:`workloads.serving._guard`) owns the group
and ends it when this process dies without stopping it (a cancelled or killed Ray worker), so
no server or vLLM engine process outlives its trial.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
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

_GUARD = Path(__file__).with_name("_guard.py")


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


def group_alive(pgid: int) -> bool:
    """True while any process of group ``pgid`` is alive (zombies included)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


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
    _pgid: int | None = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def pid(self) -> int | None:
        """The process group of the server (its guard's pid); None when stopped."""
        return self._pgid

    @property
    def _exit_file(self) -> Path:
        return self.log_path.with_suffix(".exit")

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
        self._exit_file.unlink(missing_ok=True)
        env = {**os.environ, "VLLM_HOST_IP": HOST, **self.env}
        t0 = time.perf_counter()
        guard = [sys.executable, str(_GUARD), str(os.getpid()), str(self._exit_file)]
        launched = subprocess.run(
            [*guard, str(self.log_path), "--", *self.command()], env=env, capture_output=True,
            text=True, stdin=subprocess.DEVNULL, timeout=60, check=False,
        )  # fmt: skip
        try:
            self._pgid = int(launched.stdout.split()[0])
        except (IndexError, ValueError):
            why = launched.stderr[-500:]
            raise ServerError(f"the server's guard did not start: {why}") from None
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

    def _exited(self) -> str | None:
        """The server's exit code when it has exited (its guard wrote it), else None."""
        try:
            return self._exit_file.read_text().strip() or "?"
        except OSError:
            return None if self._pgid is not None and group_alive(self._pgid) else "?"

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.ready_timeout_s
        while time.monotonic() < deadline:
            code = self._exited()
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
        pgid, self._pgid = self._pgid, None
        if pgid is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while group_alive(pgid) and time.monotonic() < deadline:
            time.sleep(0.2)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)

    def get(self, path: str, *, timeout_s: float = 30.0) -> str:
        """GET ``path`` as text.

        Raises:
            ServerError: an HTTP error, or the connection failed (:meth:`_failed`).
        """
        try:
            with urllib.request.urlopen(self.url + path, timeout=timeout_s) as r:
                return str(r.read().decode())
        except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:
            raise self._failed(f"GET {path}", exc) from None

    def _failed(self, what: str, exc: BaseException) -> ServerError:
        """A failed request: an HTTP error with the server's message, or a lost connection
        said with the server's state: its exit code (waiting up to 5 s for its guard to write
        it) and its log's tail."""
        if isinstance(exc, urllib.error.HTTPError):
            return ServerError(f"{what}: HTTP {exc.code}: {exc.read().decode()[:500]}")
        code = self._exited()
        deadline = time.monotonic() + 5.0
        while code is None and time.monotonic() < deadline:
            time.sleep(0.1)
            code = self._exited()
        state = f"exited with code {code}" if code is not None else "is still running"
        return ServerError(
            f"{what} failed ({type(exc).__name__}: {exc}); the vLLM server {state}; its log "
            f"({self.log_path}) ends:\n{tail(self.log_path)}"
        )

    def post(self, path: str, body: dict[str, Any], *, timeout_s: float = 600.0) -> Any:
        """POST ``body`` as JSON to ``path``; the decoded JSON answer.

        Raises:
            ServerError: an HTTP error (with the server's message), or the connection failed.
        """
        req = urllib.request.Request(
            self.url + path, data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )  # fmt: skip
        try:
            with urllib.request.urlopen(req, timeout=timeout_s) as r:
                return json.loads(r.read().decode())
        except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:
            raise self._failed(f"POST {path}", exc) from None
