"""Security checks: no unsafe deserialisation, loopback-only local servers, no leaked passwords.

The end-to-end password check (a real submit on PostgreSQL with a password in ``--db-url``)
is ``test_cli_submit_with_foreign_mlflow_run_id_and_db_password`` in test_tracking_edge.py;
dashboard escaping is tests/dashboards/test_escaping.py.
"""

from __future__ import annotations

import ast
import json
import logging
import os
import subprocess
import sys
import traceback
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator._secrets import passwords, redact
from orchestrator.cli import app
from orchestrator.commands.setup import loopback_ray
from orchestrator.errors import OrchestratorError, TrackingError
from orchestrator.tracking.tracker import Tracker

ROOT = Path(__file__).resolve().parents[3]
SMOKE = ROOT / "sweeps" / "smoke-tokens.yaml"
SOURCE_DIRS = ("orchestrator", "workloads", "analysis", "dashboards", "benchmarks", "tests")
SECRET = "s3cretZ9"

# -- deserialisation ----------------------------------------------------------------------------

UNSAFE = {
    "pickle.load",
    "pickle.loads",
    "pickle.Unpickler",
    "cPickle.load",
    "cPickle.loads",
    "dill.load",
    "dill.loads",
    "cloudpickle.load",
    "cloudpickle.loads",
    "joblib.load",
    "pd.read_pickle",
    "pandas.read_pickle",
    "marshal.load",
    "marshal.loads",
    "shelve.open",
    "yaml.unsafe_load",
    "yaml.full_load",
    "yaml.load_all",
}
SAFE_LOADERS = {"SafeLoader", "CSafeLoader", "yaml.SafeLoader", "yaml.CSafeLoader"}


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


def _kw(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _is_true(node: ast.expr | None) -> bool:
    return isinstance(node, ast.Constant) and node.value is True


def _safe_loader_classes(paths: list[Path]) -> set[str]:
    """The names of the classes in ``paths`` that subclass a SafeLoader (one level), which a
    module may import from another (e.g. ``SpecLoader`` of ``orchestrator/spec/yaml_lines.py``)."""
    return {
        c.name
        for path in paths
        for c in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
        if isinstance(c, ast.ClassDef) and any(_dotted(b) in SAFE_LOADERS for b in c.bases)
    }


def _problems(path: Path, project_loaders: frozenset[str] = frozenset()) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    safe_loaders = SAFE_LOADERS | project_loaders | _safe_loader_classes([path])
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.ImportFrom)
            and node.module in ("pickle", "torch", "dill")
            and any(a.name in ("load", "loads", "Unpickler") for a in node.names)
        ):
            found.append(f"{path}:{node.lineno}: from {node.module} import load")
        if not isinstance(node, ast.Call):
            continue
        name, where = _dotted(node.func), f"{path}:{node.lineno}"
        if name in UNSAFE:
            args = node.args
            round_trip = (  # pickle.loads(pickle.dumps(x)) of our own object, in a test
                name == "pickle.loads"
                and "tests" in path.parts
                and args
                and isinstance(args[0], ast.Call)
                and _dotted(args[0].func) == "pickle.dumps"
            )
            if not round_trip:
                found.append(f"{where}: {name}")
        elif name.endswith("torch.load") and not _is_true(_kw(node, "weights_only")):
            found.append(f"{where}: torch.load without weights_only=True")
        elif name in ("np.load", "numpy.load") and _is_true(_kw(node, "allow_pickle")):
            found.append(f"{where}: {name}(allow_pickle=True)")
        elif name == "yaml.load" and _dotted(_kw(node, "Loader") or ast.Constant(0)) not in (
            safe_loaders
        ):
            found.append(f"{where}: yaml.load without a SafeLoader")
        elif name in ("eval", "exec"):
            found.append(f"{where}: {name}()")
        elif name.startswith("subprocess.") and _is_true(_kw(node, "shell")):
            found.append(f"{where}: {name}(shell=True)")
    return found


def _sources() -> list[Path]:
    return sorted(
        p for d in SOURCE_DIRS for p in (ROOT / d).rglob("*.py") if ".venv" not in p.parts
    )


def test_nothing_is_deserialised_unsafely() -> None:
    """torch.load only with weights_only=True; no pickle, marshal, shelve, joblib or unsafe YAML
    loading anywhere in the source tree (tests included); no eval/exec; no shell=True."""
    sources = _sources()
    assert len(sources) > 50
    loaders = frozenset(_safe_loader_classes(sources))
    problems = [p for path in sources for p in _problems(path, loaders)]
    assert not problems, "\n".join(problems)


def test_the_scan_catches_what_it_looks_for(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import pickle, torch, yaml, numpy as np\n"
        "pickle.load(open('x', 'rb'))\n"
        "torch.load('x.pt')\n"
        "torch.load('x.pt', weights_only=False)\n"
        "yaml.load('a: 1', Loader=yaml.Loader)\n"
        "np.load('x.npy', allow_pickle=True)\n"
        "eval('1')\n"
    )
    assert len(_problems(bad)) == 6
    good = tmp_path / "good.py"
    good.write_text(
        "import torch, yaml\n"
        "class L(yaml.SafeLoader): pass\n"
        "torch.load('x.pt', weights_only=True)\n"
        "yaml.load('a: 1', Loader=L)\n"
        "yaml.safe_load('a: 1')\n"
    )
    assert _problems(good) == []
    elsewhere = tmp_path / "elsewhere.py"  # L imported from the module that defines it
    elsewhere.write_text("import yaml\nfrom good import L\nyaml.load('a: 1', Loader=L)\n")
    assert len(_problems(elsewhere)) == 1  # unknown on its own
    assert _problems(elsewhere, frozenset(_safe_loader_classes([good]))) == []


def test_checkpoints_are_safetensors() -> None:
    """torch.save only writes export formats other engines read (SGLang's token map, EAGLE's
    pytorch_model.bin); our own checkpoints and drafts are safetensors."""
    savers = set()
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and _dotted(node.func) == "torch.save":
                savers.add(path.relative_to(ROOT).as_posix())
    assert savers <= {"workloads/models/export.py"}, savers
    for module in ("workloads/training/checkpoint.py", "workloads/models/draft.py"):
        text = (ROOT / module).read_text(encoding="utf-8")
        assert "from safetensors.torch import" in text, module


# -- servers bind to loopback -------------------------------------------------------------------

_LISTENERS = """
import json, sys, psutil
from orchestrator.cli import _loopback_ray
assert "ray" not in sys.modules
_loopback_ray(None)  # what `orchestrator submit` does without --address
from orchestrator.driving.runner import init_ray
init_ray(None, num_cpus=1)
import ray
me = psutil.Process()
found = []
for p in [me, *me.children(recursive=True)]:
    try:
        conns = p.net_connections(kind="inet")
        name = p.name()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        continue
    for c in conns:
        if c.status == psutil.CONN_LISTEN or (c.type == 2 and not c.raddr):  # TCP listen, UDP
            found.append([name, c.laddr.ip, c.laddr.port])
print("LISTENERS " + json.dumps(found))
ray.shutdown()
"""


def test_local_ray_listens_on_loopback_only() -> None:
    """The local Ray the CLI starts (no --address) opens no port on another interface: GCS,
    raylet, agents and workers all bind to loopback. Without ``_loopback_ray`` Ray 2.60 resolves
    ``_node_ip_address="127.0.0.1"`` to the machine's address and listens on ``::``/0.0.0.0
    (ray-project/ray#7418; Ray's own move away from such binds: #55484, #59852)."""
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    res = subprocess.run(
        [sys.executable, "-c", _LISTENERS],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env=env,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    line = next(x for x in res.stdout.splitlines() if x.startswith("LISTENERS "))
    listeners = json.loads(line.removeprefix("LISTENERS "))
    assert listeners, "found no Ray listeners at all"
    outside = [x for x in listeners if x[1] not in ("127.0.0.1", "::1", "::ffff:127.0.0.1")]
    assert not outside, outside


def test_cli_never_shows_traceback_locals() -> None:
    assert app.pretty_exceptions_show_locals is False


# -- passwords ------------------------------------------------------------------------------------


def test_redact() -> None:
    url = f"postgresql://alice:{SECRET}@db:5432/x"
    assert passwords(url) == {SECRET}
    assert (
        redact(f"failed: {url} ({SECRET})", url) == "failed: postgresql://alice:***@db:5432/x (***)"
    )
    encoded = "postgresql://alice:p%40ss%2Fw@db/x"
    assert passwords(encoded) == {"p%40ss%2Fw", "p@ss/w"}
    assert "p@ss/w" not in redact("auth p@ss/w failed", encoded)
    assert redact("nothing", None, "sqlite:///x.db", "postgresql://alice@db/x") == "nothing"


@pytest.mark.parametrize(
    "args",
    [
        ["submit", str(SMOKE), "--db-url", f"postgresql://postgres:{SECRET}@127.0.0.1:1/test"],
        ["submit", str(SMOKE), "--db-url", f"postgresql://postgres:{SECRET}@127.0.0.1:x/test"],
        ["submit", str(SMOKE), "--tracking-uri", f"http://u:{SECRET}@127.0.0.1:1"],
        ["status", "s", "--db-url", f"postgresql://postgres:{SECRET}@127.0.0.1:1/test"],
        ["fit", "s", "--db-url", f"postgresql://postgres:{SECRET}@127.0.0.1:1/test"],
    ],
    ids=["submit-db", "submit-bad-port", "submit-tracking", "status", "fit"],
)
def test_cli_errors_and_logs_never_show_a_password(
    args: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")
    monkeypatch.delenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", raising=False)  # submit sets it
    caplog.set_level(logging.DEBUG)
    res = CliRunner().invoke(app, [*args, "--run-root", str(tmp_path / "runs")])
    assert res.exit_code == 2, res.output
    assert "***" in res.output, res.output
    assert SECRET not in res.output
    assert SECRET not in caplog.text


def test_tracker_errors_never_show_the_password(monkeypatch: pytest.MonkeyPatch) -> None:
    """MLflow quotes the request URL in HTTP errors; the TrackingError (message, repr and
    printed traceback) does not carry the password."""
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")
    with pytest.raises(TrackingError) as info:
        Tracker(f"http://u:{SECRET}@127.0.0.1:1")
    printed = "".join(traceback.format_exception(info.value))
    assert SECRET not in str(info.value) and SECRET not in printed
    assert "http://u:***@127.0.0.1:1" in str(info.value)


def test_ray_job_passwords_go_to_a_private_file_not_the_job_info(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--ray-job``: a URL with a password is not in the job's runtime_env (shown by ``ray job
    list``) but in a 0600 file under the run root, which the job's driver reads and removes."""
    from orchestrator.driving import ray_job

    sent: list[dict[str, object]] = []

    def submit(address: str, entrypoint: str, env: dict[str, object], meta: dict[str, str]) -> str:
        sent.append({"entrypoint": entrypoint, "runtime_env": env, "metadata": meta})
        return "raysubmit_test"

    monkeypatch.setattr(ray_job, "_submit", submit)
    db_url, tracking = f"postgresql://u:{SECRET}@127.0.0.1:1/x", "http://mlflow:5000"
    run_root = tmp_path / "run"
    kwargs = {"run_root": run_root, "cache_dir": None, "working_dir": ROOT}
    spec = ROOT / "sweeps" / "sleep.yaml"
    job = ray_job.submit_job(
        "http://head:8265", spec, db_url=db_url, tracking_uri=tracking, **kwargs
    )
    assert job == "raysubmit_test" and SECRET not in json.dumps(sent)
    env = sent[0]["runtime_env"]["env_vars"]  # type: ignore[index]
    assert env["MLFLOW_TRACKING_URI"] == tracking and "SPECSCALE_DB_URL" not in env
    urls = Path(env[ray_job.URLS_FILE_VAR])
    assert urls.parent == run_root / ".ray-jobs"
    assert (urls.stat().st_mode & 0o777, urls.parent.stat().st_mode & 0o777) == (0o600, 0o700)

    # the job's driver: --db-url from the file (then removed), --tracking-uri from its env
    monkeypatch.setenv(ray_job.URLS_FILE_VAR, str(urls))
    res = CliRunner().invoke(app, ["status", "s", "--run-root", str(tmp_path / "r")])
    assert res.exit_code == 2 and "postgresql://u:***@127.0.0.1:1/x" in res.output, res.output
    assert SECRET not in res.output and not urls.exists()

    # a job that cannot read the file stops with the reason
    monkeypatch.setenv(ray_job.URLS_FILE_VAR, str(tmp_path / "elsewhere.json"))
    res = CliRunner().invoke(app, ["status", "s", "--run-root", str(tmp_path / "r")])
    assert res.exit_code == 2 and "cannot read the job's DB and tracking URLs" in res.output
    monkeypatch.delenv(ray_job.URLS_FILE_VAR)

    # a refused submission leaves no file behind; without a password nothing is written
    def refuse(*_args: object) -> str:
        raise OrchestratorError("the Ray job server refused the job")

    monkeypatch.setattr(ray_job, "_submit", refuse)
    with pytest.raises(OrchestratorError):
        ray_job.submit_job("http://head:8265", spec, db_url=db_url, tracking_uri=None, **kwargs)
    assert not list((run_root / ".ray-jobs").iterdir())
    monkeypatch.setattr(ray_job, "_submit", submit)
    plain = "postgresql://u@db/x"
    ray_job.submit_job("http://head:8265", spec, db_url=plain, tracking_uri=tracking, **kwargs)
    assert sent[-1]["runtime_env"]["env_vars"] == {  # type: ignore[index]
        "SPECSCALE_DB_URL": plain,
        "MLFLOW_TRACKING_URI": tracking,
    }
    assert not list((run_root / ".ray-jobs").iterdir())


@pytest.mark.parametrize(
    ("address", "kept"),
    [
        (None, True),
        ("127.0.0.1:6379", True),
        ("ray://localhost:10001", True),
        ("10.0.0.5:6379", False),
        ("ray://head:10001", False),
    ],
)
def test_a_loopback_cluster_address_keeps_loopback(
    address: str | None, kept: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A driver of a cluster bound to 127.0.0.1 must not have its address rewritten to the
    machine's network address (it would wait for the cluster forever)."""
    monkeypatch.delenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", raising=False)
    loopback_ray(address)
    assert (os.environ.get("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER") == "0") is kept
