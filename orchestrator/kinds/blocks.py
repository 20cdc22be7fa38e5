"""The spec blocks of the sweep kinds, the table the spec loader reads (:data:`BLOCKS`).

A kind that needs a block of its own (``search:``, ``design:``; the grid's keys are the spec's)
has a block module, ``orchestrator/kinds/<kind>/spec.py``: the block's model and its refusals,
importing no spec module, so the loader can import it before any kind's behaviour (which needs
a loaded spec; :mod:`orchestrator.kinds`). The block's key is the kind's name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from orchestrator.kinds.design import spec as design
from orchestrator.kinds.lines import SpecLines
from orchestrator.kinds.search import spec as search
from orchestrator.kinds.search.spec import SearchSpec
from workloads.protocol import Workload

DesignSpec = design.DesignSpec

__all__ = ["BLOCKS", "Block", "DesignSpec", "SearchSpec"]


@dataclass(frozen=True)
class Block:
    """One kind's spec block: its model, the example its refusals name, and its checks."""

    model: type[BaseModel]
    example: str
    """the commented example sweep a refusal of the block names"""
    check_raw: Callable[[SpecLines], None]
    """refusals on the raw mapping, before the spec is validated (so they name their lines)"""
    check_beside: Callable[[Any], None]
    """the blocks it excludes, on the spec being validated (raises ValueError)"""
    check_loaded: Callable[[SpecLines, Any], None]
    """refusals of the block's values against the trial config, once the spec is loaded"""
    prepare: Callable[[Any, Workload | None], Any] = lambda block, workload: block
    """the raw block with its defaults that depend on the workload filled in"""


BLOCKS: dict[str, Block] = {
    "search": Block(
        SearchSpec, search.EXAMPLE, search.check_raw, search.check_beside, search.check_loaded
    ),
    "design": Block(
        design.DesignSpec,
        design.EXAMPLE,
        design.check_raw,
        design.check_beside,
        design.check_loaded,
        design.default_metric,
    ),
}
"""block key (the kind's name) -> the block; in the order its refusals are checked"""
