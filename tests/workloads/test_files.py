"""workloads.files: the atomic write replaces a file whole and leaves no temporary file, also
when the write fails."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workloads.files import atomic_json, atomic_write


def test_text_bytes_and_json_replace_the_file_and_leave_nothing_else(tmp_path: Path) -> None:
    p = tmp_path / "a.json"
    atomic_write(p, "old")
    assert atomic_write(p, b"\x00\x01") == p and p.read_bytes() == b"\x00\x01"
    atomic_json(p, {"x": [1, 2]})
    assert json.loads(p.read_text()) == {"x": [1, 2]} and p.read_text().endswith("\n")
    assert [q.name for q in tmp_path.iterdir()] == ["a.json"]


def test_a_failed_write_keeps_the_old_file_and_removes_the_temporary(tmp_path: Path) -> None:
    p = tmp_path / "a.json"
    atomic_write(p, "old")
    with pytest.raises(TypeError):
        atomic_json(p, {"x": object()})  # not JSON: fails before anything is written
    with pytest.raises(TypeError):
        atomic_write(p, 3)  # type: ignore[arg-type]
    assert p.read_text() == "old" and [q.name for q in tmp_path.iterdir()] == ["a.json"]
