"""Atomic file writes: the one way this project replaces a file other processes may read."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

__all__ = ["atomic_json", "atomic_write"]


def atomic_write(path: Path, data: str | bytes) -> Path:
    """Write ``data`` (text as UTF-8) to ``path`` through a temporary file beside it (named with
    this process's pid, so concurrent writers do not collide), then ``os.replace``: a reader sees
    the old file or the new one, never a part. The parent folder must exist. Returns ``path``.

    Raises:
        OSError: the write or the rename failed (the temporary file is removed).
    """
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        if isinstance(data, bytes):
            tmp.write_bytes(data)
        else:
            tmp.write_text(data, encoding="utf-8")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def atomic_json(path: Path, obj: Any, **dumps: Any) -> Path:
    """:func:`atomic_write` of ``json.dumps(obj, **dumps)`` plus a newline (``indent=1`` unless
    given)."""
    dumps.setdefault("indent", 1)
    return atomic_write(path, json.dumps(obj, **dumps) + "\n")
