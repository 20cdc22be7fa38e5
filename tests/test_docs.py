"""The README and docs/ stay true: every command they show exists, every link resolves.

Every fenced shell block (```sh, ```bash, ```shell, ```console) of README.md and docs/*.md is
split into commands (``\\`` continuations joined, ``#`` comments dropped), and so is every inline
code span that starts like a command (``orchestrator ``, ``make ``, ``python -m benchmarks.``):

- ``orchestrator <cmd> ...``: ``<cmd>`` is a command of :data:`orchestrator.cli.app` and every
  ``--option`` the line uses is in that command's ``--help`` (typer's CliRunner, no Ray);
- ``make <target>``: the target is in the Makefile;
- ``python -m benchmarks.X ...``: ``benchmarks/X.py`` exists and it (or the harness it shares,
  ``benchmarks/harness.py``) declares every ``--option`` used;
- a path under ``sweeps/`` or ``benchmarks/`` named in a command exists;
- anything else in a shell block must be in :data:`ALLOWED` with the reason it is not run here.

Also: README.md links every docs page; every relative link (and its ``#anchor``) resolves; the
trial config field tables of docs/sweep-spec.md match the workloads' config models, and its key
tables match the spec models. Fast (seconds), nothing written.
"""

from __future__ import annotations

import functools
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import typer
from pydantic import BaseModel
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.spec.sweep import SweepSpec
from workloads.config import Resources
from workloads.registry import WORKLOADS

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [README, *DOCS]

SHELL = {"sh", "bash", "shell", "console"}
"""fence languages whose lines are commands"""
OTHER = {"text", "yaml", "python", "json", "toml"}
"""fence languages that hold no commands (a fence must name one of these or a shell)"""

ALLOWED = {
    "mlflow ui": "MLflow's own CLI (installed with the package): `submit` prints this line; "
    "tests/orchestrator/driving/test_submit_e2e.py drives an `mlflow server` and its web UI",
    "ray job logs": "Ray's CLI against a cluster's job server; "
    "tests/orchestrator/driving/test_cluster.py reads a submitted job's logs through "
    "ray.job_submission.JobSubmissionClient",
}
"""commands that are neither orchestrator, make nor a benchmark -> why they are not checked here"""

COMMAND_START = ("orchestrator ", "make ", "python -m benchmarks.")
"""inline code spans that start like this are commands and are checked too"""

_FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", re.M | re.S)
_OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
_ENV = re.compile(r"^[A-Z_][A-Z0-9_]*=\S*$")
_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$", re.M)
_PATH = re.compile(r"^(sweeps|benchmarks)/\S+\.(yaml|py)$")


@dataclass(frozen=True)
class Command:
    """One command shown in a page: where, and the text (continuations joined, no comment)."""

    page: str
    line: int
    text: str

    def __str__(self) -> str:
        return f"{self.page}:{self.line}: {self.text}"


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _without_fences(text: str) -> str:
    """The page with fenced blocks blanked out (line numbers kept)."""
    return _FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)


def _strip_comment(line: str) -> str:
    """``line`` without a shell comment (``#`` at the start or after whitespace)."""
    return re.split(r"(?:^|\s)#", line, maxsplit=1)[0].rstrip()


def _shell_commands(page: Path) -> Iterator[Command]:
    text = page.read_text(encoding="utf-8")
    for m in _FENCE.finditer(text):
        lang = m.group(1).strip()
        if lang not in SHELL:
            continue
        first = text.count("\n", 0, m.start(2)) + 1
        pending: list[str] = []
        start = first
        for i, raw in enumerate(m.group(2).splitlines()):
            line = _strip_comment(raw)
            if not pending:
                start = first + i
            if line.endswith("\\"):
                pending.append(line[:-1].strip())
                continue
            pending.append(line.strip())
            joined = " ".join(p for p in pending if p)
            pending = []
            if joined:
                yield Command(_rel(page), start, joined)
        assert not pending, f"{_rel(page)}:{start}: a `\\` continuation ends the block"


def _inline_commands(page: Path) -> Iterator[Command]:
    text = _without_fences(page.read_text(encoding="utf-8"))
    for m in re.finditer(r"(?<!`)`([^`]+)`(?!`)", text):
        span = " ".join(m.group(1).split())
        if "\n\n" not in m.group(1) and span.startswith(COMMAND_START):
            yield Command(_rel(page), text.count("\n", 0, m.start()) + 1, span)


SHELL_COMMANDS = [c for p in PAGES for c in _shell_commands(p)]
INLINE_COMMANDS = [c for p in PAGES for c in _inline_commands(p)]


def _tokens(text: str) -> list[str]:
    try:
        words = shlex.split(text)
    except ValueError:
        words = text.split()
    while words and _ENV.match(words[0]):  # VAR=value before the command
        words.pop(0)
    return words


@functools.cache
def _commands() -> dict[str, Any]:
    group = typer.main.get_command(app)
    return dict(group.commands)  # type: ignore[attr-defined]


@functools.cache
def _help(command: str | None) -> str:
    """The ``--help`` text of ``orchestrator <command>`` (of the app for None)."""
    args = [command, "--help"] if command else ["--help"]
    res = CliRunner().invoke(app, args, env={"COLUMNS": "240", "NO_COLOR": "1", "TERM": "dumb"})
    assert res.exit_code == 0, res.output
    return res.output


@functools.cache
def _make_targets() -> frozenset[str]:
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    return frozenset(re.findall(r"^([A-Za-z0-9][A-Za-z0-9_.-]*)\s*:(?!=)", text, re.M))


def _check_paths(cmd: Command, words: list[str]) -> None:
    for w in words:
        if _PATH.match(w):
            assert (ROOT / w).is_file(), f"{cmd}: {w} does not exist"


def _check_orchestrator(cmd: Command, words: list[str]) -> None:
    rest = words[1:]
    sub = rest[0] if rest and not rest[0].startswith("-") else None
    if sub is not None:
        assert sub in _commands(), f"{cmd}: no command {sub!r} (have {sorted(_commands())})"
    known = set(_OPTION.findall(_help(sub)))
    used = set(_OPTION.findall(" ".join(rest)))
    unknown = sorted(used - known)
    where = f"orchestrator {sub} --help" if sub else "orchestrator --help"
    assert not unknown, f"{cmd}: {unknown} not in `{where}` (it has {sorted(known)})"


def _check_make(cmd: Command, words: list[str]) -> None:
    targets = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
    assert targets, f"{cmd}: `make` without a target"
    missing = [t for t in targets if t not in _make_targets()]
    assert not missing, f"{cmd}: {missing} not in the Makefile ({sorted(_make_targets())})"


def _check_benchmark(cmd: Command, words: list[str]) -> None:
    script = ROOT / (words[2].replace(".", "/") + ".py")
    assert script.is_file(), f"{cmd}: {words[2]} has no {_rel(script)}"
    source = script.read_text(encoding="utf-8")
    if "harness." in source:
        source += (ROOT / "benchmarks" / "harness.py").read_text(encoding="utf-8")
    used = set(_OPTION.findall(" ".join(words[3:]))) - {"--help"}  # argparse's own
    missing = sorted(o for o in used if f'"{o}"' not in source)
    assert not missing, f"{cmd}: {words[2]} declares no {missing}"


def check_command(cmd: Command) -> None:
    """Fail unless ``cmd`` is a real orchestrator command, make target or benchmark, or is in
    :data:`ALLOWED`."""
    words = _tokens(cmd.text)
    assert words, f"{cmd}: empty command"
    _check_paths(cmd, words)
    if words[0] == "orchestrator":
        _check_orchestrator(cmd, words)
    elif words[0] == "make":
        _check_make(cmd, words)
    elif words[:2] == ["python", "-m"] and len(words) > 2 and words[2].startswith("benchmarks."):
        _check_benchmark(cmd, words)
    else:
        text = " ".join(words)
        assert any(text.startswith(p) for p in ALLOWED), (
            f"{cmd}: not an orchestrator command, make target or benchmark; run it in a test "
            "or add it to ALLOWED in tests/test_docs.py with the reason"
        )


@pytest.mark.parametrize("cmd", SHELL_COMMANDS, ids=str)
def test_shell_block_command(cmd: Command) -> None:
    check_command(cmd)


@pytest.mark.parametrize("cmd", INLINE_COMMANDS, ids=str)
def test_inline_command(cmd: Command) -> None:
    check_command(cmd)


def test_commands_were_found() -> None:
    found = {c.text.split()[0] for c in SHELL_COMMANDS}
    assert {"orchestrator", "make", "python"} <= found
    assert len(SHELL_COMMANDS) >= 30, len(SHELL_COMMANDS)
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for m in _FENCE.finditer(text):
            lang = m.group(1).strip()
            line = text.count("\n", 0, m.start()) + 1
            assert lang in SHELL | OTHER, f"{_rel(page)}:{line}: fence language {lang!r}"


def test_the_two_setup_commands_are_make_run_and_make_test() -> None:
    text = README.read_text(encoding="utf-8")
    section = text.split("## The two set-up commands", 1)[1].split("\n## ", 1)[0]
    assert re.findall(r"\| `(make \w+)` \|", section) == ["make run", "make test"]
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert "orchestrator submit sweeps/tokens.yaml" in makefile.split("\nrun:", 1)[1]


def test_readme_links_every_docs_page() -> None:
    assert DOCS, "docs/ has no pages"
    targets = {t.split("#", 1)[0] for t in _LINK.findall(README.read_text(encoding="utf-8"))}
    missing = [_rel(p) for p in DOCS if _rel(p) not in targets]
    assert not missing, f"README.md does not link {missing}"


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


@functools.cache
def _anchors(page: Path) -> frozenset[str]:
    seen: dict[str, int] = {}
    out = set()
    for m in _HEADING.finditer(_without_fences(page.read_text(encoding="utf-8"))):
        base = _slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return frozenset(out)


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_links_are_relative_and_resolve(page: Path) -> None:
    text = _without_fences(page.read_text(encoding="utf-8"))
    for m in _LINK.finditer(text):
        target = m.group(1)
        where = f"{_rel(page)}:{text.count(chr(10), 0, m.start()) + 1}: ({target})"
        if re.match(r"^[a-z]+://", target):
            assert "github.com" not in target, f"{where}: link the repository's file relatively"
            continue
        assert not target.startswith("/"), f"{where}: links between pages are relative"
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        assert dest.exists(), f"{where}: {path} does not exist"
        if anchor:
            assert dest.suffix == ".md", f"{where}: an anchor into a file that is not a page"
            assert anchor in _anchors(dest), f"{where}: no heading #{anchor} in {_rel(dest)}"


# --- docs/sweep-spec.md against the spec and config models -------------------------------------


def _fmt_default(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, list):
        return "[" + ", ".join(_fmt_default(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_fmt_default(v)}" for k, v in value.items()) + "}"
    return str(value)


def _fields(model: BaseModel, prefix: str = "") -> dict[str, str]:
    """Dotted leaf field -> its default (as the docs write it), from a default instance."""
    out: dict[str, str] = {}
    for name in type(model).model_fields:
        value = getattr(model, name)
        if isinstance(value, BaseModel):
            out |= _fields(value, f"{prefix}{name}.")
        else:
            out[f"{prefix}{name}"] = _fmt_default(value)
    return out


def _table_after(text: str, heading: str) -> dict[str, str]:
    """First-column key -> second-column text of the first table after ``heading``."""
    lines = text.split(heading + "\n", 1)[1].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = {}
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        m = re.fullmatch(r"`([^`]+)`", cells[0])
        if m:
            rows[m.group(1)] = cells[1].strip("`")
    return rows


SPEC_DOC = ROOT / "docs" / "sweep-spec.md"


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_sweep_spec_lists_every_trial_config_field(name: str) -> None:
    workload = WORKLOADS[name]
    heading = f"### `{name}` ({workload.config_model.__name__})"
    text = SPEC_DOC.read_text(encoding="utf-8")
    assert heading in text, f"docs/sweep-spec.md has no section {heading!r}"
    documented = _table_after(text, heading)
    actual = _fields(workload.config_model())
    assert sorted(documented) == sorted(actual), "fields differ from the config model"
    wrong = {k: (documented[k], v) for k, v in actual.items() if documented[k] != v}
    assert not wrong, f"defaults (docs, model) differ: {wrong}"


def test_sweep_spec_lists_every_top_level_and_resources_key() -> None:
    text = SPEC_DOC.read_text(encoding="utf-8")
    assert sorted(_table_after(text, "## Top-level keys")) == sorted(SweepSpec.model_fields)
    assert sorted(_table_after(text, "### `resources:`")) == sorted(Resources.model_fields)
