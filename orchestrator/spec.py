"""Sweep specs: a YAML file parsed once into typed, validated models.

Every error names ``file:line`` and a fix. A spec names a workload, the ``base`` trial config,
a ``grid`` of axes (dotted field paths of the trial config, each a list of values), ``seeds`` and
the Ray ``resources`` of one trial::

    name: tokens
    workload: draft_train
    seeds: [0, 1]
    grid:
      pretrain.tokens: [0, 8192, 16384]
    base:
      sft: {tokens: 16384}
    resources: {num_cpus: 1}
"""

from __future__ import annotations

import copy
import difflib
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from orchestrator.errors import SpecError
from workloads.config import DecodeBenchConfig, DraftTrainConfig, Resources

WORKLOADS: dict[str, type[BaseModel]] = {
    "draft_train": DraftTrainConfig,
    "decode_bench": DecodeBenchConfig,
}
"""workload name -> its trial config model"""

MAX_TRIALS = 10_000
"""a larger grid needs an explicit confirmation"""


class SweepSpec(BaseModel):
    """A validated sweep: what to run, over which grid, with which resources."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    """sweep name, the key of the sweep in the results DB and MLflow"""
    workload: Literal["draft_train", "decode_bench"] = "draft_train"
    """what each trial runs"""
    description: str = ""
    """free text shown in the dashboard"""
    seeds: list[int] = Field(default_factory=lambda: [0], min_length=1)
    """one trial per grid point and seed"""
    grid: dict[str, list[Any]] = Field(default_factory=dict)
    """axis (dotted field path of the trial config) -> values"""
    base: dict[str, Any] = Field(default_factory=dict)
    """trial config shared by every grid point"""
    resources: Resources = Resources()
    """Ray resources of one trial"""

    @field_validator("seeds")
    @classmethod
    def _unique_seeds(cls, v: list[int]) -> list[int]:
        if len(set(v)) != len(v):
            raise ValueError("seeds repeat a value; list each seed once")
        return v

    @field_validator("grid")
    @classmethod
    def _nonempty_axes(cls, v: dict[str, list[Any]]) -> dict[str, list[Any]]:
        for axis, values in v.items():
            if not values:
                raise ValueError(f"grid axis {axis!r} has no values; give at least one")
        return v

    @property
    def config_model(self) -> type[BaseModel]:
        """The trial config model of the workload."""
        return WORKLOADS[self.workload]


class _Loader(yaml.SafeLoader):
    """Safe loader that refuses duplicate keys."""


def _compose(path: Path, text: str) -> yaml.Node:
    try:
        node = yaml.compose(text, Loader=_Loader)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = mark.line + 1 if mark else 0
        raise SpecError(
            f"{path}:{line}: not valid YAML ({e.problem}). Fix the syntax there."
        ) from None
    except yaml.YAMLError as e:
        raise SpecError(f"{path}: not valid YAML ({e}).") from None
    if node is None or not isinstance(node, yaml.MappingNode):
        raise SpecError(
            f"{path}:1: a sweep spec is a YAML mapping with name, grid, base, ... "
            "Example: see sweeps/smoke-tokens.yaml"
        )
    _check_duplicates(path, node)
    return node


def _check_duplicates(path: Path, node: yaml.Node) -> None:
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for k, v in node.value:
            key = str(k.value)
            if key in seen:
                raise SpecError(
                    f"{path}:{k.start_mark.line + 1}: key {key!r} repeats the one on "
                    f"line {seen[key]}. Fix: keep one of them."
                )
            seen[key] = k.start_mark.line + 1
            _check_duplicates(path, v)
    elif isinstance(node, yaml.SequenceNode):
        for v in node.value:
            _check_duplicates(path, v)


def _node_at(node: yaml.Node, loc: tuple[Any, ...]) -> tuple[yaml.Node, bool]:
    """The deepest YAML node along ``loc``; the bool says whether the whole path was found."""
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            match = [(k, v) for k, v in node.value if str(k.value) == str(part)]
            if not match:
                return node, False
            node = match[0][1]
        elif (
            isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value)
        ):
            node = node.value[part]
        else:
            return node, False
    return node, True


def _key_node(node: yaml.Node, loc: tuple[Any, ...]) -> yaml.Node:
    """The key node of the last element of ``loc`` (for 'unknown key' errors), else the value."""
    parent, _ = _node_at(node, loc[:-1])
    if isinstance(parent, yaml.MappingNode):
        for k, _v in parent.value:
            if str(k.value) == str(loc[-1]):
                return k
    return _node_at(node, loc)[0]


def _fields_at(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """Field names of the nested model reached by ``loc`` (for did-you-mean)."""
    for part in loc:
        field = model.model_fields.get(str(part))
        ann = field.annotation if field else None
        if not (isinstance(ann, type) and issubclass(ann, BaseModel)):
            return []
        model = ann
    return list(model.model_fields)


def _explain(
    path: Path,
    root: yaml.Node,
    err: ValidationError,
    *,
    prefix: tuple[Any, ...],
    model: type[BaseModel],
    line_node: yaml.Node | None = None,
) -> SpecError:
    """Turn the first pydantic error into a one-line SpecError with file:line and a fix."""
    e = err.errors()[0]
    loc = tuple(e["loc"])
    where = ".".join(str(p) for p in prefix + loc) or "<top>"
    if e["type"] == "extra_forbidden":
        node = line_node or _key_node(root, prefix + loc)
        options = _fields_at(model, loc[:-1])
        close = difflib.get_close_matches(str(loc[-1]), options, n=1)
        hint = f"did you mean {close[0]!r}" if close else f"known keys: {', '.join(options)}"
        msg = f"unknown key {where!r} ({hint})"
    else:
        node = line_node or _node_at(root, prefix + loc)[0]
        msg = f"{where}: {e['msg']}"
        if "input" in e and not isinstance(e["input"], dict | list):
            msg += f" (got {e['input']!r})"
    return SpecError(
        f"{path}:{node.start_mark.line + 1}: {msg}. Fix the value there "
        "(see sweeps/tokens.yaml for a commented example)."
    )


def _set_path(d: dict[str, Any], dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    for p in parts[:-1]:
        d = d.setdefault(p, {})
        if not isinstance(d, dict):
            raise KeyError(dotted)
    d[parts[-1]] = value


def _axis_exists(model: type[BaseModel], dotted: str) -> bool:
    parts = dotted.split(".")
    for i, p in enumerate(parts):
        field = model.model_fields.get(p)
        if field is None:
            return False
        ann = field.annotation
        if i < len(parts) - 1:
            if not (isinstance(ann, type) and issubclass(ann, BaseModel)):
                return False
            model = ann
    return True


def load_spec(path: Path) -> SweepSpec:
    """Read and validate a sweep YAML, including every grid point's trial config.

    Raises:
        SpecError: missing file, bad YAML, unknown key, wrong type, impossible value, empty or
            unknown grid axis; the message names ``file:line`` and a fix.
    """
    path = Path(path)
    if path.is_dir():
        raise SpecError(f"{path}: is a directory. Fix: give a sweep YAML, e.g. sweeps/tokens.yaml")
    if not path.is_file():
        raise SpecError(f"{path}: no such file. Fix: give a sweep YAML, e.g. sweeps/tokens.yaml")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise SpecError(f"{path}: cannot read it as UTF-8 text ({e})") from None
    root = _compose(path, text)
    try:
        data = yaml.load(text, Loader=_Loader)  # noqa: S506 - _Loader is a SafeLoader
    except yaml.constructor.ConstructorError as e:
        line = e.problem_mark.line + 1 if e.problem_mark else 0
        raise SpecError(
            f"{path}:{line}: not valid YAML for a spec ({e.problem}); tags such as "
            "!!python/object are refused (safe loading only). Fix: plain values."
        ) from None
    try:
        spec = SweepSpec.model_validate(data)
    except ValidationError as err:
        raise _explain(path, root, err, prefix=(), model=SweepSpec) from None
    model = spec.config_model
    try:
        model.model_validate(spec.base)
    except ValidationError as err:
        raise _explain(path, root, err, prefix=("base",), model=model) from None
    for axis, values in spec.grid.items():
        axis_node = _key_node(root, ("grid", axis))
        if axis == "seed" or not _axis_exists(model, axis):
            hint = "list seeds under 'seeds:'" if axis == "seed" else "use a dotted field path"
            options = [k for k in _dotted_fields(model) if k != "seed"]
            close = difflib.get_close_matches(axis, options, n=1)
            hint = f"did you mean {close[0]!r}?" if close else hint
            raise SpecError(
                f"{path}:{axis_node.start_mark.line + 1}: grid axis {axis!r} is not a "
                f"field of {spec.workload}; {hint}"
            )
        for i, value in enumerate(values):
            cfg = merge_overrides(spec.base, {axis: value})
            try:
                model.model_validate(cfg)
            except ValidationError as err:
                raise _explain(
                    path,
                    root,
                    err,
                    prefix=(),
                    model=model,
                    line_node=_node_at(root, ("grid", axis, i))[0],
                ) from None
    return spec


def _dotted_fields(model: type[BaseModel], prefix: str = "") -> list[str]:
    out = []
    for name, field in model.model_fields.items():
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            out += _dotted_fields(ann, f"{prefix}{name}.")
        else:
            out.append(prefix + name)
    return out


def merge_overrides(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of ``base`` with each dotted-path override set."""
    cfg = copy.deepcopy(base)
    for k, v in overrides.items():
        _set_path(cfg, k, v)
    return cfg
