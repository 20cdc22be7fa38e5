"""A GPU's rules, enforced on the CPU: one device per op, and a count of host syncs.

- :class:`DeviceTags` (a ``TorchFunctionMode``) gives every tensor a device *tag*: 0 unless it
  came out of a module placed on "device 1" (e.g. a spread target's final norm and LM head), a
  factory or ``.to()`` asked for ``torch.device("cpu", 1)``, or an op on tag-1 tensors. An op
  whose tensor arguments carry two tags fails, as it would across two GPUs; ``.to()`` and
  ``copy_`` move between tags (legal on GPUs too). A tag-1 tensor reports its device as
  ``cpu:1``, so code that allocates "where x lives" (``device=x.device``) gets tag 1, as on
  ``cuda:1``. Parameters and 0-dim tensors are wildcards (weights are placed by the model;
  a CPU scalar mixes with any device in torch).
- :class:`HostSyncs` records the torch functions called that read device data on the host (a
  sync on CUDA): ``.item()``, ``.tolist()``, ``bool(t)``, ``nonzero``, ``torch.equal`` ...

Both only see torch-level calls: a check of what the code asks of torch, not of a driver.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

DEVICE_1 = torch.device("cpu", 1)
"""what the emulation calls the second GPU (a real torch device: CPU ops ignore the index)"""

SYNCING = {
    "item", "tolist", "__bool__", "__float__", "__int__", "__index__", "nonzero", "argwhere",
    "numpy", "cpu", "masked_select", "unique", "unique_consecutive", "__array__", "equal",
    "allclose", "__repr__", "__format__",
}  # fmt: skip
"""tensor functions that read device data on the host (a sync on CUDA)"""

_MOVES = {"to", "cuda", "copy_", "detach", "__get__"}
_TAG = "_gpu_rules_device"


class DeviceMix(AssertionError):
    """An op mixed tensors of two devices without a ``.to()``."""


def tag_of(t: torch.Tensor) -> int | None:
    """The tensor's device tag (None: a wildcard)."""
    if isinstance(t, nn.Parameter) or t.dim() == 0:
        return None
    return getattr(t, _TAG, 0)


def _set_tag(out: Any, tag: int) -> None:
    for t in tree_flatten(out)[0]:
        if isinstance(t, torch.Tensor) and not isinstance(t, nn.Parameter):
            setattr(t, _TAG, tag)


def _device_tag(dev: Any) -> int | None:
    if isinstance(dev, str):
        dev = torch.device(dev)
    if isinstance(dev, torch.device):
        return dev.index or 0
    return None


class DeviceTags(TorchFunctionMode):
    """Fails any op that mixes device tags (module doc). ``ops`` counts the ops checked."""

    def __init__(self) -> None:
        super().__init__()
        self.ops = 0
        self.mixes_seen: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        kwargs = kwargs or {}
        if func == torch.Tensor.device.__get__:
            dev = func(*args)
            return DEVICE_1 if getattr(args[0], _TAG, 0) == 1 else dev
        out = func(*args, **kwargs)
        name = getattr(func, "__name__", "")
        flat = tree_flatten((args, kwargs))[0]
        asked = _device_tag(kwargs.get("device"))
        if name in _MOVES:
            for a in flat[1:]:
                asked = _device_tag(a) if asked is None else asked
                if asked is None and isinstance(a, torch.Tensor) and name == "to":
                    asked = tag_of(a)
            if name in ("copy_", "detach") or asked is None:  # copy_: self keeps its place
                asked = getattr(args[0], _TAG, 0) if isinstance(args[0], torch.Tensor) else 0
            _set_tag(out, asked)
            return out
        tags = {tag_of(t) for t in flat if isinstance(t, torch.Tensor)} - {None}
        self.ops += 1
        if len(tags) > 1:
            shapes = [tuple(t.shape) for t in flat if isinstance(t, torch.Tensor)]
            msg = f"{name} mixes devices {sorted(tags)} (tensor shapes {shapes})"
            self.mixes_seen.append(msg)
            raise DeviceMix(msg)
        _set_tag(out, asked if asked is not None else (tags.pop() if tags else 0))
        return out


def on_device_1(*modules: nn.Module) -> list[Any]:
    """Tag the outputs of ``modules`` as device 1 (forward hooks; remove them when done)."""

    def hook(_m: nn.Module, _inp: Any, out: Any) -> None:
        _set_tag(out, 1)

    return [m.register_forward_hook(hook) for m in modules]


@contextmanager
def spread_target(target: nn.Module, monkeypatch: Any) -> Iterator[DeviceTags]:
    """Run ``target`` (a transformers causal LM) as if spread over two GPUs: its final norm
    and LM head on device 1, the rest on device 0; the engine's placement says so. Yields the
    active :class:`DeviceTags`."""
    from workloads.engine import batch as _batch

    monkeypatch.setattr(_batch, "output_device", lambda _model: DEVICE_1)
    handles = on_device_1(target.model.norm, target.lm_head)  # type: ignore[arg-type]
    try:
        with DeviceTags() as mode:
            yield mode
    finally:
        for h in handles:
            h.remove()


class HostSyncs(TorchFunctionMode):
    """Records the names of the torch functions called that read tensor data on the host."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        name = getattr(func, "__name__", "")
        if name in SYNCING:
            self.seen.append(name)
        return func(*args, **(kwargs or {}))
