"""A GPU rule checked on the CPU: no large host allocation inside a step that trains on a device.

On a GPU, a tensor created on the host inside the training step (a CPU ``torch.rand``, a
``torch.zeros`` without ``device=``) is built by the CPU, often serially, and then copied over
PCIe from pageable memory: issue 22 measured 3.5 s a step for [8, 2046, 4096] of feature noise
against ~0.3 s for an 8B target's forward on an H200. This machine has no GPU, so the device is
emulated:

- the training device is tagged :data:`EMULATED_DEVICE`, ``torch.device("cpu", 1)``: torch
  accepts index 1 for the CPU, the tensors land on the plain CPU, but every factory call and copy
  aimed at the tag carries it in its ``device`` argument, which a ``TorchDispatchMode`` sees
  (``aten.empty``, ``aten.rand``, ``aten._to_copy``, ... with ``device=cpu:1``);
- a factory call aimed at the host carries ``device=cpu`` (torch fills in its default device) or
  none at all: :class:`NoLargeHostAllocations` records each such call whose result holds more
  than ``limit`` elements.

What the emulation cannot see: work on host tensors that existed before the step (rows of
features held in RAM; they are the data, not the step's allocations), and copies to the host
(``.cpu()`` of a CPU tensor is a no-op here). ``device=t.device`` reads the plain CPU here, so
code under test must take the device it allocates on from the training device, as
:func:`workloads.training.loop.training_device` provides (small allocations pass either way).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

EMULATED_DEVICE = torch.device("cpu", 1)
"""the tag standing for a GPU: a CPU device with index 1"""

LARGE = 1_000_000
"""elements above which a host allocation inside a step is a fault (4 MB in float32)"""


def aimed_at_host(device: object) -> bool:
    """Whether a factory call's ``device`` argument is the host (not the emulated device)."""
    if device is None:
        return True  # torch's default device, the CPU
    dev = torch.device(device)  # type: ignore[call-overload]
    return dev.type == "cpu" and dev != EMULATED_DEVICE


@dataclass(frozen=True)
class HostAllocation:
    """One large host allocation seen inside the mode."""

    op: str
    """the aten overload, e.g. ``aten.rand.default``"""
    elements: int
    """elements of its largest result"""
    device: str
    """its ``device`` argument as written (``None`` = torch's default)"""


class NoLargeHostAllocations(TorchDispatchMode):
    """Records factory calls aimed at the host whose results exceed ``limit`` elements.

    A factory call is an op with a ``device`` keyword (all of torch's factories have one, as
    keyword-only): one without tensor inputs (``empty``, ``zeros``, ``rand``, ``arange``,
    ``randperm``, ...) is aimed at its ``device`` argument or, if None, the host; one with
    tensor inputs (``*_like``, ``_to_copy``, ``new_*``) only where ``device`` is given (else it
    follows its input). Use as a context manager; :meth:`check` raises if any was seen.
    """

    def __init__(self, limit: int = LARGE) -> None:
        super().__init__()
        self.limit = limit
        self.found: list[HostAllocation] = []

    def __torch_dispatch__(
        self,
        func: Any,  # noqa: ANN401
        types: Any,  # noqa: ANN401
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:  # noqa: ANN401
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if "device" in kwargs or _is_factory(func):
            device = kwargs.get("device")
            has_tensor_input = any(isinstance(x, torch.Tensor) for x in tree_leaves(args))
            if (device is not None or not has_tensor_input) and aimed_at_host(device):
                sizes = [t.numel() for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
                if sizes and max(sizes) > self.limit:
                    self.found.append(HostAllocation(str(func), max(sizes), str(device)))
        return out

    def check(self) -> None:
        """Raise AssertionError naming every large host allocation seen."""
        assert not self.found, (
            f"host allocations above {self.limit} elements inside a step on the device: "
            + "; ".join(f"{a.op} {a.elements} elements (device={a.device})" for a in self.found)
        )


def _is_factory(func: Any) -> bool:  # noqa: ANN401
    """Whether an aten overload takes a ``device`` keyword (a factory)."""
    schema = getattr(func, "_schema", None)
    return schema is not None and any(a.name == "device" for a in schema.arguments)
