"""Batch-adaptive tree size: the number of verified tokens k chosen from the live batch size b.

Source: Scylla, "Scaling Laws for Speculative Decoding" (arXiv 2505.07858), Sec. 3.2 and Table 5
("Opt. top_k"). With ``decode.num_draft_tokens: auto`` a ``decode_bench`` trial asks a
:class:`KLaw` for k at the start of every cycle. Two laws (``decode.k_law``):

- ``roofline``: the roofline's k_opt(b) (:func:`workloads.roofline.k_opt`: the fewest k whose
  decoding step reaches I_crit = peak FLOP/s / bandwidth) for the target's shape on the
  ``decode.hardware`` profile, at the prefix length the trial decodes;
- ``sweep:NAME``: Eq. 4, ``k = A*sqrt(1 + B/b) - C``, as fitted on the finished ``decode_bench``
  sweep NAME, read from ``<run root>/NAME/k_law.json`` (written by the sweep's fit step,
  :func:`write_sweep_k_law`).

Either way k is rounded half up and clamped to [2, k_max]: ``decode.k_max``, or the nodes of the
tree (``depth``, ``topk``) when fewer. Torch is imported only to name the GPU (``hardware: auto``
on CUDA); pydantic only by :func:`check_k_law`.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workloads.files import atomic_json
from workloads.roofline.costs import DRAFT_STEPS, k_opt
from workloads.roofline.hardware import (
    BUILTIN_PROFILES,
    LOCAL_CPU,
    HardwareProfile,
    canonical_dtype,
    datasheet_name,
    get_profile,
    profile_name,
    profile_names,
)
from workloads.roofline.models import SHAPE_KEYS, ModelShape, shape_from_dict

if TYPE_CHECKING:
    import torch

    from workloads.decode_bench.config import DecodeConfig

log = logging.getLogger(__name__)

K_MIN = 2
"""smallest k a law returns: the tree root and one draft token"""

K_LAW_FILE = "k_law.json"
"""the Eq. 4 fit of a ``decode_bench`` sweep, in the sweep's folder under the run root"""

_HW_ALIASES = {"h800-sxm", "h100-sxm", "h200-sxm", "a100-80gb", "a100-sxm", "a100-80gb-sxm"}
_HW_ALIASES |= {"cpu", "local"}
"""names :func:`workloads.roofline.get_profile` accepts beside :func:`profile_names`"""


class KLaw:
    """k (verified tokens per sequence per cycle, root included) as a function of the live batch
    size b (sequences): ``law(b) -> int`` in [2, ``k_max``], rounded half up, cached per b.

    ``fn`` gives the unrounded k at b (may be fractional, below 2 or above ``k_max``; a NaN or
    infinite value is an error). ``description`` says which law this is, for logs and metrics.
    """

    def __init__(self, fn: Callable[[int], float], *, k_max: int, description: str) -> None:
        if k_max < K_MIN:
            raise ValueError(f"k_max={k_max} must be >= {K_MIN}")
        self._fn = fn
        self.k_max = k_max
        """largest k returned"""
        self.description = description
        """one line: the law, its inputs (model, hardware, prefix, fit)"""
        self.cache: dict[int, int] = {}
        """k returned so far, by batch size"""

    def __call__(self, b: int) -> int:
        """k at batch size ``b`` (>= 1). Raises ``ValueError`` for b < 1 or a non-finite law."""
        hit = self.cache.get(b)
        if hit is not None:
            return hit
        if b < 1:
            raise ValueError(f"batch size b={b} must be >= 1")
        raw = float(self._fn(b))
        if not math.isfinite(raw):
            raise ValueError(f"{self.description}: k at b={b} is {raw}, not a number of tokens")
        k = min(max(math.floor(raw + 0.5), K_MIN), self.k_max)
        self.cache[b] = k
        log.info("k law at b=%d: k=%d (%s, unrounded %.3g)", b, k, self.description, raw)
        return k

    def __repr__(self) -> str:
        return f"KLaw({self.description!r}, k_max={self.k_max})"


def constant_k_law(k: int) -> KLaw:
    """The law of a fixed ``num_draft_tokens``: ``k`` at every batch size (>= 2)."""
    return KLaw(lambda _b: float(k), k_max=max(k, K_MIN), description=f"fixed k={k}")


def roofline_k_law(
    shape: ModelShape,
    hw: HardwareProfile,
    *,
    context_len: int,
    k_max: int = 64,
    draft_steps: int = DRAFT_STEPS,
) -> KLaw:
    """k(b) = the roofline's k_opt(b) (Scylla Sec. 3.2, Appendix C), clamped to [2, ``k_max``].

    :func:`workloads.roofline.k_opt` of ``shape`` on ``hw`` (at ``hw.bytes_per_element``) over a
    prefix of ``context_len`` tokens (s), with ``draft_steps`` draft steps per cycle (the paper's
    5, as ``orchestrator roofline`` counts them) and the accepted-token prefill of Eq. 8: the
    fewest k whose decoding step reaches I_crit; ``k_max`` when none up to ``k_max`` does.
    Raises ``ValueError`` for context_len < 0 or k_max < 2.
    """
    if context_len < 0:
        raise ValueError(f"context_len={context_len} must be >= 0 (tokens in the KV cache)")

    def fn(b: int) -> float:
        return float(k_opt(shape, hw, b, context_len, k_max=k_max, draft_steps=draft_steps).k)

    what = (
        f"roofline k_opt: {shape.name} on {hw.name} ({hw.dtype}, I_crit {hw.i_crit:.3g} "
        f"FLOP/byte), prefix s={context_len}, {draft_steps} draft steps"
    )
    return KLaw(fn, k_max=k_max, description=what)


def eq4_k_law(a: float, b_scale: float, c: float, *, k_max: int = 64, source: str = "") -> KLaw:
    """k(b) = A*sqrt(1 + B/b) - C (Scylla Eq. 4), clamped to [2, ``k_max``].

    ``a`` and ``c`` in verified tokens, ``b_scale`` (B) in sequences, >= 0. ``source`` names
    where the constants come from (shown in the description). Raises ``ValueError`` for a
    non-finite constant or B < 0.
    """
    if not all(math.isfinite(v) for v in (a, b_scale, c)) or b_scale < 0:
        raise ValueError(f"Eq. 4 constants A={a}, B={b_scale}, C={c} must be finite, B >= 0")

    def fn(b: int) -> float:
        return a * math.sqrt(1.0 + b_scale / b) - c

    what = f"Eq. 4 k = {a:.6g}*sqrt(1 + {b_scale:.6g}/b) - {c:.6g}" + (
        f" ({source})" if source else ""
    )
    return KLaw(fn, k_max=k_max, description=what)


def make_k_law(
    decode: DecodeConfig,
    *,
    model_config: Any,
    device: torch.device | str,
    dtype: str,
    run_root: Path | None,
    context_len: int,
    cache_dir: Path | None = None,
) -> KLaw:
    """The trial's k law: b (live batch size, sequences) -> k (verified tokens per sequence).

    Args:
        decode: the trial's decode config. ``num_draft_tokens`` an int gives
            :func:`constant_k_law`; ``auto`` follows ``k_law`` (``roofline`` or ``sweep:NAME``),
            ``hardware`` and ``k_max``, capped at the tree's nodes (:func:`tree_capacity` of
            ``depth`` and ``topk``).
        model_config: the target's Hugging Face config (``target.model.config``): hidden_size,
            num_hidden_layers, num_attention_heads, num_key_value_heads, head_dim,
            intermediate_size, vocab_size (:func:`shape_of`).
        device: where the target runs; with ``hardware: auto`` a CPU gets the measured
            ``local-cpu`` profile, a CUDA device the datasheet profile its name matches
            (:func:`resolve_hardware`).
        dtype: the target's dtype (``"bfloat16"``, ``"torch.float32"``, ...): bytes per element.
        run_root: the run root, where ``sweep:NAME`` finds ``NAME/k_law.json``.
        context_len: the roofline's prefix length s, tokens per sequence in the KV cache
            (e.g. the mean prompt length plus half of ``max_new_tokens``).
        cache_dir: the run's shared cache, where the ``local-cpu`` profile is measured once
            for every trial (:func:`workloads.roofline.hardware.cached_local_cpu`); None:
            once per process and dtype.

    Raises:
        ValueError: an unknown or unsupported hardware profile (GPU without a datasheet,
            datasheet with float32), ``sweep:NAME`` without a run root, a sweep folder, a
            ``k_law.json`` or an ok Eq. 4 fit (:func:`read_sweep_k_law`).
    """
    if decode.num_draft_tokens != "auto":
        return constant_k_law(int(decode.num_draft_tokens))
    k_max = min(decode.k_max, tree_capacity(decode.depth, decode.topk))
    if k_max < decode.k_max:
        log.info(
            "num_draft_tokens auto: k capped at %d, the nodes of a tree of depth %d and topk %d "
            "(decode.k_max %d)",
            k_max,
            decode.depth,
            decode.topk,
            decode.k_max,
        )
    if decode.k_law == "roofline":
        hw = resolve_hardware(decode.hardware, device=device, dtype=dtype, cache_dir=cache_dir)
        return roofline_k_law(shape_of(model_config), hw, context_len=context_len, k_max=k_max)
    name = sweep_of(decode.k_law)
    if run_root is None:
        raise ValueError(
            f"decode.k_law {decode.k_law!r} needs the run root to find sweep {name!r}. "
            "Fix: run the trial through the orchestrator (or pass run_root)"
        )
    fit = read_sweep_k_law(run_root, name)
    at = f" at {fit['condition']}" if fit.get("condition") else ""  # a sweep of several
    return eq4_k_law(
        fit["A"], fit["B"], fit["C"], k_max=k_max, source=f"fitted on sweep {name}{at}"
    )


def tree_capacity(depth: int, topk: int) -> int:
    """Nodes of the engine's tree of ``depth`` expansion steps and ``topk`` children, root
    included: 1 + topk + (depth - 1) * topk**2 (as ``workloads.engine.tree.max_nodes``)."""
    return 1 + topk + (depth - 1) * topk * topk


def check_k_law(decode: DecodeConfig, run_root: Path, *, dtype: str | None = None) -> None:
    """Submit-time check of a trial's k law (no model is loaded, nothing is measured).

    Nothing to check unless ``num_draft_tokens`` is ``auto``. ``hardware`` must name a profile
    (or be ``auto``); a datasheet profile with ``dtype`` float32 is refused (its peak is
    bf16's). ``sweep:NAME`` needs ``<run_root>/NAME`` and in it the ``k_law.json``
    that the sweep's fit wrote, with an ok Eq. 4 fit.

    Raises:
        workloads.config.ConfigError: naming ``("decode", "hardware")`` or
            ``("decode", "k_law")``, with a fix.
    """
    from workloads.config import ConfigError

    if decode.num_draft_tokens != "auto":
        return
    if decode.k_law == "roofline":
        try:
            _check_hardware_name(decode.hardware, dtype)
        except ValueError as exc:
            raise ConfigError(str(exc), ("decode", "hardware")) from exc
        return
    try:
        read_sweep_k_law(run_root, sweep_of(decode.k_law))
    except ValueError as exc:
        raise ConfigError(str(exc), ("decode", "k_law")) from exc


def shape_of(model_config: Any) -> ModelShape:
    """The roofline shape (:class:`~workloads.roofline.ModelShape`) of a Hugging Face config.

    Reads hidden_size, num_hidden_layers, num_attention_heads, intermediate_size and
    vocab_size; num_key_value_heads defaults to the head count and head_dim to hidden / heads
    (as :func:`workloads.roofline.load_model_shape`). Raises ``ValueError`` naming a missing or
    non-positive field.
    """

    cfg = {k: getattr(model_config, k, None) for k in SHAPE_KEYS}
    name = str(getattr(model_config, "name_or_path", "") or "").rstrip("/").rsplit("/", 1)[-1]
    return shape_from_dict(
        cfg,
        name=name or str(getattr(model_config, "model_type", "") or "target"),
        where="the target's config",
        fix=". Fix: decode.k_law: sweep:NAME",
    )


def resolve_hardware(
    name: str, *, device: torch.device | str, dtype: str, cache_dir: Path | None = None
) -> HardwareProfile:
    """The hardware profile of ``decode.hardware`` for a target on ``device`` at ``dtype``.

    ``auto``: ``local-cpu`` (measured once per process and dtype, or with ``cache_dir`` once
    per run: :func:`workloads.roofline.hardware.cached_local_cpu`) on a CPU; on CUDA the
    datasheet profile whose name (h800, h100, h200, a100) appears as a word in the GPU's name
    (``torch.cuda.get_device_name``; the SXM datasheets); any other device type is refused.
    Otherwise ``name`` is passed to :func:`workloads.roofline.get_profile`.

    Raises:
        ValueError: a GPU without a datasheet profile, an unknown name, or a datasheet profile
            at float32 (each with a fix).
    """
    dt = canonical_dtype(dtype)
    key = name.strip().lower()
    dev_type = device.type if not isinstance(device, str) else device.split(":")[0]
    if key == "auto":
        if dev_type == "cpu":
            key = LOCAL_CPU
        elif dev_type == "cuda":
            gpu = _gpu_name(device)
            key = datasheet_name(gpu) or ""
            if not key:
                raise ValueError(
                    f"decode.hardware auto: the GPU {gpu!r} has no datasheet profile "
                    f"({', '.join(sorted(BUILTIN_PROFILES))}). Fix: set decode.hardware to the "
                    "closest of them, or use decode.k_law: sweep:NAME"
                )
        else:
            raise ValueError(
                f"decode.hardware auto: no profile for device type {dev_type!r}. Fix: set "
                f"decode.hardware to one of {', '.join(profile_names())}"
            )
    try:
        _check_hardware_name(key, dt)
    except ValueError as exc:
        said = f" (decode.hardware auto on {dev_type})" if name.strip().lower() == "auto" else ""
        raise ValueError(f"{exc}{said}") from None
    return get_profile(key, dtype=dt, cache_dir=cache_dir)


def sweep_of(k_law: str) -> str:
    """NAME of ``sweep:NAME``; raises ``ValueError`` for any other text."""
    if not k_law.startswith("sweep:") or not k_law[6:]:
        raise ValueError(f"decode.k_law {k_law!r} is not sweep:NAME")
    return k_law[6:]


def read_sweep_k_law(run_root: Path, name: str) -> dict[str, Any]:
    """The ok Eq. 4 fit of sweep ``name``: ``<run_root>/<name>/k_law.json``'s ``eq4`` mapping
    (A, B, C, status "ok", the fitted batch sizes ``x`` and best k ``y``, ...).

    Raises:
        ValueError: no folder ``<run_root>/<name>`` (listing the sweeps with a usable fit, and
            how many fits were left out as unusable), no ``k_law.json`` in it (the sweep is not a
            finished, fitted decode_bench sweep), an unreadable file, or a fit whose status is
            not ok (quoting it); each with a fix.
    """
    folder = Path(run_root) / name
    file = folder / K_LAW_FILE
    if not folder.is_dir():
        raise ValueError(
            f"decode.k_law sweep:{name}: no sweep {name!r} under the run root {run_root} "
            f"({_usable_sweeps_text(Path(run_root))}). Fix: name a finished decode_bench sweep "
            "of this run root, or use k_law: roofline"
        )
    if not file.is_file():
        raise ValueError(
            f"decode.k_law sweep:{name}: {file} does not exist, so sweep {name!r} has no Eq. 4 "
            "fit (it is not a decode_bench sweep, or it has not finished and been fitted). "
            f"Fix: let it finish (or run `orchestrator fit {name}`), or use k_law: roofline"
        )
    try:
        eq4 = _read_eq4(file)
    except ValueError as exc:
        raise ValueError(
            f"decode.k_law sweep:{name}: {file} is not a k-law file ({exc}). "
            f"Fix: refit the sweep (`orchestrator fit {name}`)"
        ) from None
    if unusable_eq4(eq4):
        raise ValueError(
            f"decode.k_law sweep:{name}: its Eq. 4 fit is not usable (status: "
            f"{eq4.get('status')!r}). Fix: a decode_bench sweep with >= 4 batch sizes whose "
            "best k changes with b, or use k_law: roofline"
        )
    return eq4


def unusable_eq4(eq4: Mapping[str, Any]) -> str:
    """Why an Eq. 4 fit (a ``k_law.json``'s ``eq4`` mapping) cannot drive ``sweep:NAME``, or
    ``""`` when it can: its status must be ``"ok"`` and A, B, C finite numbers."""
    if eq4.get("status") != "ok":
        return f"status {eq4.get('status')!r}"
    bad = [p for p in ("A", "B", "C") if not _finite_number(eq4.get(p))]
    return f"{', '.join(bad)} not finite" if bad else ""


def _finite_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _read_eq4(file: Path) -> dict[str, Any]:
    """The ``eq4`` mapping of a ``k_law.json``; ``ValueError`` when the file is not one."""
    try:
        return dict(json.loads(file.read_text(encoding="utf-8"))["eq4"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(str(exc)) from None


def _usable_sweeps_text(run_root: Path) -> str:
    """The sweeps of ``run_root`` whose ``k_law.json`` is usable, and how many fits were left
    out as unusable (with why), for the error of an unknown ``sweep:NAME``."""
    usable: list[str] = []
    skipped: list[str] = []
    for file in sorted(run_root.glob(f"*/{K_LAW_FILE}")):
        try:
            why = unusable_eq4(_read_eq4(file))
        except ValueError:
            why = "unreadable"
        if why:
            skipped.append(f"{file.parent.name}: {why}")
        else:
            usable.append(file.parent.name)
    text = f"sweeps with a usable Eq. 4 fit there: {', '.join(usable) or 'none'}"
    if skipped:
        s = "s" if len(skipped) != 1 else ""
        text += f"; {len(skipped)} unusable fit{s} left out ({'; '.join(skipped)})"
    return text


def write_sweep_k_law(
    folder: Path, eq4: Mapping[str, Any], *, sweep: str, target: str = ""
) -> Path:
    """Write ``<folder>/k_law.json`` for ``k_law: sweep:<sweep>`` trials and return its path.

    ``folder`` is the sweep's folder under the run root; ``eq4`` is the sweep's Eq. 4 fit as
    plain data (``analysis.eq4.Eq4Fit.to_dict()``: status, A, B, C, x, y, r2, ...),
    written even when its status is not ok (readers then refuse it, quoting the status);
    ``target`` names the model the sweep decoded; a ``condition`` key in ``eq4`` (e.g.
    ``"temperature=0"``) says which of a sweep's conditions was fitted. Raises ``OSError`` when
    it cannot write.
    """
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / K_LAW_FILE
    payload = {
        "sweep": sweep,
        "target": target,
        "form": "num_draft_tokens = A*sqrt(1 + B/batch_size) - C (Scylla Eq. 4)",
        "eq4": {k: _json_safe(v) for k, v in eq4.items()},
    }
    return atomic_json(path, payload, allow_nan=False)


def _check_hardware_name(name: str, dtype: str | None) -> None:
    if name.strip().lower() == "auto":
        return
    try:
        key = profile_name(name)
    except ValueError as exc:
        raise ValueError(f"decode.hardware {exc} (or auto; orchestrator roofline --help)") from None
    if key == LOCAL_CPU or dtype is None or dtype.strip().lower() == "auto":
        return  # dtype auto: bfloat16 on CUDA, float32 on a CPU; known only on the worker
    if canonical_dtype(dtype) == "float32":
        raise ValueError(
            f"decode.hardware {name!r} is a dense bf16/fp16 datasheet profile and the target "
            "runs in float32 (another peak). Fix: target.dtype bfloat16, or decode.hardware "
            "local-cpu"
        )


def _gpu_name(device: torch.device | str) -> str:
    import torch

    return str(torch.cuda.get_device_name(device))


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    return value
