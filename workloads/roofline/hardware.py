"""Hardware profiles for the roofline: peak FLOP/s, memory bandwidth and bytes per element.

Scylla (arXiv 2505.07858) Sec. 3.2: the critical arithmetic intensity I_crit = peak FLOP/s /
memory bandwidth separates memory-bound from compute-bound decoding steps. Datasheet profiles
are dense (no 2:4 sparsity) bf16/fp16 tensor-core peaks; ``local-cpu`` is measured here by a
short torch micro-benchmark (torch is imported only inside :func:`measure_local_cpu` and
:func:`cached_local_cpu`), once per process, or once per cache folder for all the trials of a
run (:func:`cached_local_cpu`).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import hashlib
import json
import logging
import platform
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workloads.files import atomic_json

logger = logging.getLogger(__name__)

LOCAL_CPU = "local-cpu"
"""Name of the measured profile of this machine's CPU."""

DTYPE_BYTES: dict[str, int] = {"bfloat16": 2, "float16": 2, "float32": 4}
"""Bytes per element of the supported dtypes (canonical names)."""

_DTYPE_ALIASES = {
    "bf16": "bfloat16",
    "fp16": "float16",
    "half": "float16",
    "fp32": "float32",
    "float": "float32",
}


@dataclass(frozen=True, kw_only=True)
class HardwareProfile:
    """One accelerator (or CPU) at one dtype, as the roofline sees it."""

    name: str
    """profile name, e.g. "h800" or "local-cpu" """
    peak_flops: float
    """peak dense FLOP/s at ``dtype``"""
    bandwidth: float
    """memory bandwidth, bytes/s"""
    dtype: str
    """element type of weights, activations and KV cache, e.g. "bfloat16" """
    bytes_per_element: int
    """bytes of one element of ``dtype``"""
    source: str
    """where the numbers come from (datasheet, or the measurement and its settings)"""

    @property
    def i_crit(self) -> float:
        """Critical arithmetic intensity, FLOP/byte: peak_flops / bandwidth (Scylla Sec. 3.2)."""
        return self.peak_flops / self.bandwidth


def _datasheet(name: str, tflops: float, tb_s: float, source: str) -> HardwareProfile:
    return HardwareProfile(
        name=name,
        peak_flops=tflops * 1e12,
        bandwidth=tb_s * 1e12,
        dtype="bfloat16",
        bytes_per_element=2,
        source=source,
    )


BUILTIN_PROFILES: dict[str, HardwareProfile] = {
    # NVIDIA H800 SXM5 datasheet: BF16 tensor core 1,979 TFLOPS with sparsity (989 dense),
    # HBM3 3.35 TB/s. The paper's hardware (Eq. 4).
    "h800": _datasheet(
        "h800", 989, 3.35, "NVIDIA H800 SXM datasheet: 989 TFLOP/s dense bf16, 3.35 TB/s"
    ),
    # NVIDIA H100 Tensor Core GPU datasheet, H100 SXM column: BF16 1,979 TFLOPS sparse (989
    # dense), 3.35 TB/s.
    "h100": _datasheet(
        "h100", 989, 3.35, "NVIDIA H100 SXM datasheet: 989 TFLOP/s dense bf16, 3.35 TB/s"
    ),
    # NVIDIA H200 datasheet, H200 SXM column: BF16 1,979 TFLOPS sparse (989 dense), HBM3e
    # 4.8 TB/s.
    "h200": _datasheet(
        "h200", 989, 4.8, "NVIDIA H200 SXM datasheet: 989 TFLOP/s dense bf16, 4.8 TB/s"
    ),
    # NVIDIA A100 datasheet, A100 80GB SXM column: BF16 312 TFLOPS dense (624 sparse),
    # 2,039 GB/s.
    "a100": _datasheet(
        "a100", 312, 2.039, "NVIDIA A100 80GB SXM datasheet: 312 TFLOP/s dense bf16, 2.039 TB/s"
    ),
}
"""Datasheet profiles (dense bf16), by lower-case name."""

_HW_ALIASES = {
    "h800-sxm": "h800",
    "h100-sxm": "h100",
    "h200-sxm": "h200",
    "a100-80gb": "a100",
    "a100-sxm": "a100",
    "a100-80gb-sxm": "a100",
    "cpu": LOCAL_CPU,
    "local": LOCAL_CPU,
}


def profile_names() -> list[str]:
    """Names :func:`get_profile` accepts: the datasheet profiles, then ``local-cpu``."""
    return [*sorted(BUILTIN_PROFILES), LOCAL_CPU]


def profile_name(name: str) -> str:
    """The profile ``name`` means: a datasheet key (``h200``) or ``local-cpu``; case-insensitive,
    ``_`` read as ``-``, ``-sxm`` suffixes, ``cpu`` and ``local`` accepted. The one place a
    hardware name is resolved (``--hardware``, ``decode.hardware``, :func:`get_profile`).

    Raises:
        ValueError: an unknown name: ``'<name>' is not a hardware profile.`` with the closest
            name and the known ones (callers prefix the flag or field).
    """
    key = name.strip().lower().replace("_", "-")
    key = _HW_ALIASES.get(key, key)
    if key == LOCAL_CPU or key in BUILTIN_PROFILES:
        return key
    close = difflib.get_close_matches(key, profile_names(), n=1, cutoff=0.5)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    raise ValueError(
        f"{name!r} is not a hardware profile.{hint} Fix: use one of {', '.join(profile_names())} "
        "(datasheet GPUs, or this machine's measured CPU)"
    )


def canonical_dtype(dtype: str) -> str:
    """``"bf16"`` -> ``"bfloat16"`` etc.; raises ``ValueError`` for an unsupported dtype."""
    key = dtype.strip().lower().removeprefix("torch.")
    key = _DTYPE_ALIASES.get(key, key)
    if key not in DTYPE_BYTES:
        raise ValueError(
            f"dtype {dtype!r} is not supported. Fix: use one of {', '.join(DTYPE_BYTES)}"
        )
    return key


def get_profile(
    name: str,
    *,
    dtype: str | None = None,
    threads: int | None = None,
    cache_dir: Path | None = None,
) -> HardwareProfile:
    """The hardware profile ``name`` at ``dtype``.

    ``name`` is a datasheet profile (``h800``, ``h100``, ``h200``, ``a100``; case-insensitive,
    ``-sxm`` suffixes accepted) or ``local-cpu``, which runs :func:`measure_local_cpu` once per
    (dtype, threads) in this process and reuses the result; with ``cache_dir`` once per CPU model,
    dtype, threads and torch version for every process sharing that folder
    (:func:`cached_local_cpu`). ``dtype`` defaults to ``bfloat16`` for datasheet profiles
    (``float16`` has the same peak; ``float32`` is refused) and to ``float32`` for
    ``local-cpu``. ``threads`` and ``cache_dir`` only apply to
    ``local-cpu`` (default threads: torch's current thread count).

    Raises ``ValueError`` for an unknown name (:func:`profile_name`) or an unsupported dtype.
    """
    key = profile_name(name)
    if key == LOCAL_CPU:
        dt = canonical_dtype(dtype or "float32")
        if cache_dir is not None:
            return cached_local_cpu(cache_dir, dtype=dt, threads=threads)[0]
        return _measured(dt, threads)
    prof = BUILTIN_PROFILES[key]
    dt = canonical_dtype(dtype or prof.dtype)
    if dt == "float32":
        raise ValueError(
            f"hardware {key!r} is a dense bf16/fp16 datasheet profile; float32 has another peak. "
            "Fix: --dtype bfloat16 (or float16), or --hardware local-cpu"
        )
    return dataclasses.replace(prof, dtype=dt, bytes_per_element=DTYPE_BYTES[dt])


@functools.cache
def _measured(dtype: str, threads: int | None) -> HardwareProfile:
    return measure_local_cpu(dtype=dtype, threads=threads)


def cached_local_cpu(
    cache_dir: Path, *, dtype: str = "float32", threads: int | None = None
) -> tuple[HardwareProfile, bool]:
    """The ``local-cpu`` profile shared by every trial with this ``cache_dir``: measured once,
    then read back.

    The file is ``<cache_dir>/hardware/local-cpu-<dtype>-<threads>t-<id>.json`` (``id``: a hash
    of the CPU model name, from ``/proc/cpuinfo`` or :func:`platform.processor`, and of the torch
    version, so another machine or torch measures anew); it is written atomically (temporary
    file, then ``os.replace``) under a file lock, so concurrent trials measure once. A file that
    cannot be read or names another CPU, dtype, thread count or torch is measured over.
    ``threads`` defaults to torch's current thread count.

    Returns:
        The profile and whether it was read from the cache (False: measured by this call).

    Raises:
        ValueError: an unsupported dtype or ``threads < 1``. OSError: the folder is not writable.
    """
    from filelock import FileLock

    dt = canonical_dtype(dtype)
    used = _torch_threads() if threads is None else threads
    if used < 1:
        raise ValueError(f"threads={used} must be >= 1. Fix: --threads 2")
    path, key = _cache_entry(cache_dir, dt, used)
    found = _read_cached(path, key)
    if found is not None:
        return found, True
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        found = _read_cached(path, key)  # another trial measured while this one waited
        if found is not None:
            return found, True
        prof = _measured(dt, used)
        atomic_json(path, {**key, "profile": dataclasses.asdict(prof)})
    logger.info("local-cpu profile cached in %s", path)
    return prof, False


def _cache_entry(cache_dir: Path, dtype: str, threads: int) -> tuple[Path, dict[str, Any]]:
    """The cached local-cpu profile's file and the key it must hold (CPU model, dtype,
    threads, torch version)."""
    key = {"cpu": cpu_model_name(), "dtype": dtype, "threads": threads, "torch": torch_version()}
    digest = hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]
    return Path(cache_dir) / "hardware" / f"{LOCAL_CPU}-{dtype}-{threads}t-{digest}.json", key


def torch_version() -> str:
    """The installed torch's version (``torch.__version__``), read from its package metadata
    so that reading a cached profile does not import torch (1.5 s)."""
    import importlib.metadata

    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:  # not pip-installed: ask torch itself
        import torch

        return str(torch.__version__)


def _torch_threads() -> int:
    import torch

    return int(torch.get_num_threads())


def cpu_model_name() -> str:
    """This machine's CPU model (``/proc/cpuinfo``'s ``model name``, else
    :func:`platform.processor` or the machine type)."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:  # not Linux: platform's answer below
        text = ""
    for line in text.splitlines():
        field, _, value = line.partition(":")
        if field.strip().lower() == "model name" and value.strip():
            return value.strip()
    return platform.processor() or platform.machine() or "unknown"


def read_local_cpu(
    cache_dir: Path, *, dtype: str = "float32", threads: int = 1
) -> HardwareProfile | None:
    """The ``local-cpu`` profile :func:`cached_local_cpu` measured under ``cache_dir`` for this
    CPU, dtype, thread count and torch, read only (nothing measured or written); None when
    there is none. Raises ``ValueError`` for an unsupported dtype."""
    dt = canonical_dtype(dtype)
    return _read_cached(*_cache_entry(cache_dir, dt, threads))


def datasheet_name(gpu_name: str) -> str | None:
    """The datasheet profile a CUDA device name means (``"NVIDIA H200"`` -> ``"h200"``), or
    None (a GPU without a profile here, e.g. ``"NVIDIA L40S"``)."""
    low = gpu_name.lower()
    for key in sorted(BUILTIN_PROFILES):
        if re.search(rf"(?<![a-z0-9]){key}(?![a-z0-9])", low):
            return key
    return None


def hardware_fingerprint(*, device: str, threads: int = 1, gpu_name: str | None = None) -> str:
    """What a trial ran on, as text: ``cpu:<CPU model>:<threads>t`` (:func:`cpu_model_name`,
    the trial's torch threads) or ``gpu:<profile>`` (the datasheet profile the GPU's name means,
    else the name in lower case). Trials are matched on it to calibrate predicted seconds."""
    if device == "cuda":
        name = gpu_name or "unknown"
        return f"gpu:{datasheet_name(name) or name.strip().lower()}"
    return f"cpu:{cpu_model_name()}:{threads}t"


def fingerprint_id(fingerprint: str) -> float:
    """A :func:`hardware_fingerprint` as a number (its SHA-1's first 40 bits, exact in a float
    and in a metric column): trial metrics are numbers."""
    return float(int(hashlib.sha1(fingerprint.encode()).hexdigest()[:10], 16))


def _read_cached(path: Path, key: dict[str, Any]) -> HardwareProfile | None:
    """The profile in ``path`` when it was measured under ``key``; None when absent or not."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if {k: data.get(k) for k in key} != key:
            return None
        prof = HardwareProfile(**data["profile"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    numbers = (prof.peak_flops, prof.bandwidth)
    ok = all(isinstance(v, int | float) and 0 < v < float("inf") for v in numbers)
    return prof if ok and prof.name == LOCAL_CPU and prof.dtype == key["dtype"] else None


def measure_local_cpu(
    dtype: str = "float32", threads: int | None = None, seconds: float = 2.0
) -> HardwareProfile:
    """Measure this CPU's matmul FLOP/s and memory bandwidth with torch (about ``seconds`` s).

    FLOP/s: square matmuls of ``dtype`` (after an untimed warm-up), the size doubled from 256 up
    to 2048 while the next size still fits twice in what is left of half the budget, then the
    best of as many repeats as that half allows (2*n^3
    FLOPs each). Bandwidth: the best of repeated copies of a 128 MiB tensor into another,
    counting the bytes read plus the bytes written (bytes/s). ``threads`` sets torch's intra-op
    thread count for the measurement and is restored afterwards. Returns a profile named
    ``local-cpu``.

    Raises ``ValueError`` for an unsupported dtype or ``threads < 1``.
    """
    import torch

    dt_name = canonical_dtype(dtype)
    if threads is not None and threads < 1:
        raise ValueError(f"threads={threads} must be >= 1. Fix: --threads 2")
    dt = getattr(torch, dt_name)
    budget = max(float(seconds), 0.2) / 2
    previous = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        used = torch.get_num_threads()
        flops, n = _matmul_flops(dt, budget)
        bandwidth, mib = _copy_bandwidth(dt, budget)
    finally:
        torch.set_num_threads(previous)
    source = (
        f"measured: best {n}x{n} matmul and {mib} MiB copy (read+write), {dt_name}, "
        f"{used} threads, torch {torch.__version__}"
    )
    logger.info("local-cpu: %.3g FLOP/s, %.3g B/s (%s)", flops, bandwidth, source)
    return HardwareProfile(
        name=LOCAL_CPU,
        peak_flops=flops,
        bandwidth=bandwidth,
        dtype=dt_name,
        bytes_per_element=DTYPE_BYTES[dt_name],
        source=source,
    )


def _matmul_flops(dt: Any, budget: float) -> tuple[float, int]:
    """Best matmul FLOP/s within ``budget`` seconds, and the matrix size used."""
    import torch

    torch.mm(torch.ones(64, 64, dtype=dt), torch.ones(64, 64, dtype=dt))  # library warm-up
    deadline = time.perf_counter() + budget
    n = 256
    while True:
        a = torch.ones(n, n, dtype=dt)
        b = torch.ones(n, n, dtype=dt)
        start = time.perf_counter()
        torch.mm(a, b)
        elapsed = time.perf_counter() - start
        if n >= 2048 or 8 * elapsed > (deadline - time.perf_counter()) / 2:
            break  # the next size would not leave time for a second product
        n *= 2
    best = elapsed
    for _ in range(50):
        if time.perf_counter() + best > deadline:
            break
        start = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - start)
    return 2.0 * n**3 / best, n


def _copy_bandwidth(dt: Any, budget: float) -> tuple[float, int]:
    """Best copy bandwidth (bytes read + written per second) within ``budget``, and MiB copied."""
    import torch

    deadline = time.perf_counter() + budget
    mib = 128
    src = torch.ones(mib * 2**20 // torch.empty((), dtype=dt).element_size(), dtype=dt)
    dst = torch.empty_like(src)
    start = time.perf_counter()
    dst.copy_(src)  # first touch of dst's pages: not counted
    first = time.perf_counter() - start
    best = float("inf")
    for _ in range(50):
        start = time.perf_counter()
        dst.copy_(src)
        best = min(best, time.perf_counter() - start)
        if time.perf_counter() + min(best, first) > deadline:
            break
    return 2.0 * src.numel() * src.element_size() / best, mib
