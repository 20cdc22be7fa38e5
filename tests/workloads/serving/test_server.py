"""VllmServer's lifecycle and the greedy pass, against a fake of vLLM's HTTP surface
(``fake_vllm.py``); the real server is covered by ``test_vllm_real.py``."""

from __future__ import annotations

import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from workloads.serving.bench import greedy_pass
from workloads.serving.server import ServerError, VllmServer, free_port, group_alive

FAKE = Path(__file__).with_name("fake_vllm.py")


def _python(tmp_path: Path) -> Path:
    """An executable that runs the fake server whatever module it is asked for."""
    exe = tmp_path / "python"
    exe.write_text(f'#!/bin/sh\nexec {sys.executable} {FAKE} "$@"\n')
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return exe


def _server(tmp_path: Path, mode: str = "ok", **kw: object) -> VllmServer:
    return VllmServer(
        python=_python(tmp_path), model="m", args=[], log_path=tmp_path / "server.log",
        env={"FAKE_VLLM_MODE": mode, "FAKE_VLLM_DELAY": "1.5"}, **kw,  # type: ignore[arg-type]
    )  # fmt: skip


def test_ready_then_measured_then_stopped_by_pid(tmp_path: Path) -> None:
    server = _server(tmp_path)
    with server:
        pid = server.pid
        assert pid is not None and group_alive(pid)
        assert server.startup_s >= 1.0  # /health answered 503 for 1.5 s first
        assert server.url.startswith("http://127.0.0.1:")
        run = greedy_pass(server, [[1, 2, 7], [3, 9]], max_new_tokens=6)
    assert not group_alive(pid)
    assert run.outputs == [[8, 9, 10, 11, 12, 13], [10, 11, 12, 13, 14, 15]]
    assert run.per_request == [(3, 3), (3, 3)]  # (accepted, steps): 3 steps emitting 2 tokens each
    assert run.counters.num_drafts == 6 and run.counters.acceptance_length == 2.0
    assert run.counters.acceptance_rate == pytest.approx(1 / 3)
    assert run.counters.per_position_rates() == [1.0, 0.0, 0.0]
    assert "request" in (tmp_path / "server.log").read_text()  # the log is kept


def test_a_server_that_dies_fails_with_its_log_and_leaves_nothing(tmp_path: Path) -> None:
    with pytest.raises(ServerError, match="exited with code 3") as err, _server(tmp_path, "die"):
        pass
    assert "boom: the fake server died" in str(err.value)


def test_a_server_killed_mid_request_is_said_with_its_exit_code_and_log(tmp_path: Path) -> None:
    with pytest.raises(ServerError) as err, _server(tmp_path, "die_on_request") as server:
        greedy_pass(server, [[1, 2, 7]], max_new_tokens=6)
    said = str(err.value)  # not a bare RemoteDisconnected
    assert "POST /v1/completions failed" in said and "exited with code 7" in said, said
    assert "boom: the fake server died on a request" in said


def test_a_server_never_ready_is_killed_after_the_timeout(tmp_path: Path) -> None:
    server = _server(tmp_path, "never_ready", ready_timeout_s=3.0)
    with pytest.raises(ServerError, match="not ready after 3 s"):
        server.__enter__()
    log = (tmp_path / "server.log").read_text()
    assert "fake vLLM starting" in log
    assert server.pid is None  # stopped


def test_an_error_inside_the_block_still_stops_the_server(tmp_path: Path) -> None:
    server = _server(tmp_path)
    with pytest.raises(RuntimeError, match="trial failed"), server:
        pid = server.pid
        raise RuntimeError("trial failed")
    assert pid is not None and not group_alive(pid)


def test_a_port_in_use_is_refused_before_starting(tmp_path: Path) -> None:
    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()
        with (
            pytest.raises(ServerError, match=f"port {port} on 127.0.0.1 is in use"),
            _server(tmp_path, port=port),
        ):
            pass
    assert not (tmp_path / "server.log").exists()


def test_a_killed_trial_process_takes_its_server_with_it(tmp_path: Path) -> None:
    """SIGKILL of the process that started the server (as Ray does to a cancelled worker):
    the guard ends the server's process group."""
    script = tmp_path / "trial.py"
    script.write_text(
        "import os, signal, sys\n"
        f"sys.path.insert(0, {str(Path(__file__).resolve().parents[3])!r})\n"
        "from pathlib import Path\n"
        "from workloads.serving.server import VllmServer\n"
        f"s = VllmServer(python=Path({str(_python(tmp_path))!r}), model='m', args=[],\n"
        f"               log_path=Path({str(tmp_path / 'server.log')!r}))\n"
        "s.__enter__()\n"
        "print(s.pid, flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert out.returncode == -signal.SIGKILL, out.stderr
    pgid = int(out.stdout.split()[0])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and group_alive(pgid):
        time.sleep(0.2)
    assert not group_alive(pgid)
