"""Keys and values as MLflow accepts them on every store: mended keys, cut values, params in
batches a server takes, a trial run's short name (used by :mod:`orchestrator.tracking.tracker`).

Upstream limits worked around (docs/operations.md, "Tracking edge cases"): keys through
:func:`mlflow_key` (mlflow/mlflow#12940, #12943; verl-project/verl#984; ray-project/ray#1463);
long param values through :func:`flatten` (mlflow/mlflow#4992, #10512).
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
from collections.abc import Iterator, Mapping
from typing import Any

from mlflow.entities import Param

__all__ = [
    "MAX_ERROR_TAG_LEN",
    "MAX_KEY_LEN",
    "MAX_PARAM_VALUE_LEN",
    "MAX_TAG_VALUE_LEN",
    "METRICS_PER_BATCH",
    "SWEEP_RUN_NAME_LEN",
    "batches",
    "cap",
    "flatten",
    "mlflow_key",
    "run_name",
]

MAX_PARAM_VALUE_LEN = 6000
"""MLflow's limit on a param value, characters."""
MAX_TAG_VALUE_LEN = 8000
"""MLflow's limit on a tag value, characters."""
MAX_KEY_LEN = 250
"""MLflow's limit on a param, metric or tag key, characters; keys are also kept within this many
UTF-8 bytes, so no path segment of a file-backed store exceeds the usual 255-byte file name."""
MAX_ERROR_TAG_LEN = 5000
"""Characters of a trial's error text kept in the ``specscale.error`` tag."""
METRICS_PER_BATCH = 1000
_PARAMS_PER_BATCH = 100
_BATCH_BYTES = 500_000
"""bytes of JSON-escaped params per log_batch request (MLflow servers refuse requests > 1 MB)"""
_RUN_NAME_LEN = 120
SWEEP_RUN_NAME_LEN = 250
"""MLflow's runs.name column is VARCHAR(250)"""
_KEY_CHARS = re.compile(r"[^\w.\- /]")


def flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Flatten a nested config into MLflow params: dotted keys, string values.

    Nested mappings recurse (``{"pretrain": {"tokens": 5}}`` -> ``{"pretrain.tokens": "5"}``);
    strings stay as they are; other values (numbers, bools, None, lists) are JSON-encoded.
    Values over :data:`MAX_PARAM_VALUE_LEN` characters are cut and end in
    ``...[sha256:<12 hex of the full value>]``. Keys go through :func:`mlflow_key`.
    """
    out: dict[str, str] = {}
    for key, value in d.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(flatten(value, prefix=f"{name}."))
            continue
        text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
        out[mlflow_key(name)] = cap(text, MAX_PARAM_VALUE_LEN)
    return out


def mlflow_key(name: str) -> str:
    """``name`` as a key MLflow accepts on every platform and store; the same name, same key.

    Names of letters (any script), digits, ``_ - . /`` and spaces that are normalised relative
    paths (no empty, ``.`` or ``..`` segment) of at most 250 UTF-8 bytes come back unchanged.
    Others are mended: other characters and bad segments become ``_``, the name is cut to fit,
    and ``-<8 hex of sha256(name)>`` is appended.

    Examples: ``"pretrain.tokens"`` -> itself; ``"acc:humaneval"`` -> ``"acc_humaneval-<hash>"``.
    """
    mended = _KEY_CHARS.sub("_", name)
    mended = "/".join(
        "_" * max(1, len(seg)) if seg in ("", ".", "..") else seg for seg in mended.split("/")
    )
    if mended.startswith(".."):
        mended = "_" + mended
    if mended == name and posixpath.normpath(name) == name and _fits(name, MAX_KEY_LEN):
        return name
    suffix = "-" + hashlib.sha256(name.encode()).hexdigest()[:8]
    head = mended
    while not _fits(head + suffix, MAX_KEY_LEN) or head.endswith("/"):
        head = head[:-1]
    return head + suffix


def _fits(text: str, limit: int) -> bool:
    return len(text.encode()) <= limit


def cap(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    suffix = f"...[sha256:{hashlib.sha256(text.encode()).hexdigest()[:12]}]"
    return text[: limit - len(suffix)] + suffix


def _short_value(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def run_name(trial_key: str, overrides: Mapping[str, Any] | None) -> str:
    parts = [trial_key[:8]]
    for name, value in flatten(dict(overrides or {})).items():
        parts.append(f"{name.rsplit('.', 1)[-1]}={_short_value(_maybe_number(value))}")
    name = " ".join(parts)
    return name if len(name) <= _RUN_NAME_LEN else name[: _RUN_NAME_LEN - 3] + "..."


def _maybe_number(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def batches(params: list[Param]) -> Iterator[list[Param]]:
    """``params`` in log_batch-sized lists: <= 100 params and <= 500 KB of JSON-escaped text."""
    batch: list[Param] = []
    size = 0
    for p in params:
        cost = len(json.dumps(p.key)) + len(json.dumps(p.value))  # \uXXXX escapes counted
        if batch and (len(batch) == _PARAMS_PER_BATCH or size + cost > _BATCH_BYTES):
            yield batch
            batch, size = [], 0
        batch.append(p)
        size += cost
    if batch:
        yield batch
