"""``orchestrator <command> --help``: a boolean switch shows no value placeholder (``<bool>``,
``BOOLEAN``) and no ``--x/--no-x`` pair, as if it took a value or had a twin."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from orchestrator.cli import app

COMMANDS = [
    "submit", "status", "fit", "mirror", "retry", "cancel", "roofline", "export", "report",
    "compare", "plan",
]  # fmt: skip

SWITCHES = {
    "submit": ["--dry-run", "--ray-job", "--yes"],
    "retry": ["--failed", "--cancelled"],
    "export": ["--overwrite"],
}
"""the boolean options of each command (present: True)"""


def _help(command: str) -> str:
    res = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert res.exit_code == 0, res.output
    return res.output


def test_every_command_is_covered() -> None:
    assert sorted(c.name or "" for c in app.registered_commands) == sorted(COMMANDS)


@pytest.mark.parametrize("command", COMMANDS)
def test_help_shows_no_boolean_metavar(command: str) -> None:
    text = _help(command)
    rows = [line for line in text.splitlines() if re.search(r"│\s+-", line)]
    assert rows, text
    for switch in SWITCHES.get(command, []):
        row = next((r for r in rows if re.search(rf"\s{switch}\s", r)), None)
        assert row is not None, f"{switch} not in {command} --help:\n{text}"
    assert any(re.search(r"│\s+--help\s", r) for r in rows)  # its own row is checked too
    for row in rows:
        assert not re.search(r"<bool>|BOOLEAN", row, re.IGNORECASE), row
    assert "--no-" not in text and not re.search(r"--[a-z-]+\s*/\s*--", text), text


@pytest.mark.parametrize("command", COMMANDS)
def test_help_paragraphs_wrap_at_the_terminal_not_mid_sentence(command: str) -> None:
    """Each paragraph of a command's description is one line at 200 columns (rich keeps a
    docstring's line breaks after its first paragraph); no RST double backticks."""
    text = _help(command).split("╭")[0]  # the description, before the option boxes
    assert "``" not in text, text
    body = [line.strip() for line in text.splitlines()[2:] if line.strip()]
    for line in body:  # a line ends a sentence, or the terminal wrapped it (near 200 columns)
        done = line.endswith((".", ":", ")", ";")) or line.startswith("Example:")
        assert done or len(line) > 150, f"{command}: {line!r}"


def test_submit_help_names_the_three_kinds_of_spec() -> None:
    text = " ".join(_help("submit").split())
    assert "grid: (every combination), a search: (an Optuna study) or a design:" in text
    assert "--dry-run --hardware h200 --devices 8" in text
