"""Keeps a server from outliving the process that started it (stdlib only).

``python _guard.py WATCH_PID EXIT_FILE LOG -- CMD...``: forks; the parent prints the child's pid
and exits at once, so the guard is nobody's direct child (Ray kills a dead worker's direct
children with SIGKILL, which no cleanup survives). The guard starts a new session (its own
process group), runs CMD in it with stdout and stderr to LOG, and then:

- when CMD exits: writes its exit code to EXIT_FILE, kills what is left of the group, exits;
- when WATCH_PID (the trial's process) is gone, or on SIGTERM: SIGTERM to the group, SIGKILL
  after a grace period, so vLLM's engine process (a child of the API server) goes too.
"""

import os
import signal
import subprocess
import sys
import time

GRACE_S = 20.0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _end_group(server: "subprocess.Popen[bytes]") -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    os.killpg(0, signal.SIGTERM)
    deadline = time.monotonic() + GRACE_S
    while server.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    os.killpg(0, signal.SIGKILL)  # the guard too: nothing of the group is left


def main(argv: list[str]) -> None:
    watch, exit_file, log = int(argv[0]), argv[1], argv[2]
    cmd = argv[argv.index("--") + 1 :]
    if os.fork() > 0:
        os._exit(0)
    os.setsid()
    print(os.getpid(), flush=True)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    server = subprocess.Popen(cmd, stdin=subprocess.DEVNULL)
    while True:
        code = server.poll()
        if code is not None:
            with open(exit_file, "w") as f:
                f.write(str(code))
            _end_group(server)
        if stop or not _alive(watch):
            _end_group(server)
        time.sleep(0.5)


if __name__ == "__main__":
    main(sys.argv[1:])
