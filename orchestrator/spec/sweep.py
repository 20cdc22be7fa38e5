"""Sweep specs: a YAML file parsed once into typed, validated models.

Every error names ``file:line`` and a fix. A spec has a ``grid`` or the block of another sweep
kind (``search``, ``design``: :data:`orchestrator.kinds.blocks.BLOCKS`, each block's model and
refusals with its kind); the keys: docs/sweep-spec.md.
"""

from __future__ import annotations

import copy
import difflib
import re
import types
from pathlib import Path
from typing import Any, Union, get_args, get_origin

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from orchestrator.errors import SpecError
from orchestrator.kinds.blocks import BLOCKS, DesignSpec, SearchSpec
from orchestrator.spec.yaml_lines import TEXT_FIX, SpecLoader, compose, key_node, node_at
from workloads.config import NoBoolNumbers, Resources
from workloads.protocol import Workload
from workloads.registry import WORKLOADS

RESERVED_NAMES = frozenset({"index.html", "cache", "compare", "mlartifacts"})
"""run-root entries a sweep's folder (``<run root>/<sweep>``) must not take"""


class SweepSpec(NoBoolNumbers):
    """A validated sweep: what to run, over which grid (or search), with which resources."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    """sweep name, the key of the sweep in the results DB and MLflow"""
    workload: str = "draft_train"
    """what each trial runs: a name of :data:`workloads.registry.WORKLOADS`"""
    description: str = ""
    """free text shown in the dashboard"""
    seeds: list[int] = Field(default_factory=lambda: [0], min_length=1)
    """one trial per grid point and seed"""
    grid: dict[str, list[Any]] = Field(default_factory=dict)
    """axis (dotted field path of the trial config) -> values"""
    base: dict[str, Any] = Field(default_factory=dict)
    """trial config shared by every grid point"""
    search: SearchSpec | None = None
    """an Optuna search over config fields instead of a grid (see SearchSpec)"""
    variants: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """named recipes compared side by side: name -> dotted overrides applied on top of base
    (before the grid point); one trial per variant x grid point x seed"""
    resources: Resources = Resources()
    """Ray resources of one trial"""
    design: DesignSpec | None = None
    """an adaptive design over one law axis instead of a grid (see DesignSpec)"""

    @model_validator(mode="before")
    @classmethod
    def _block_defaults(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        workload = WORKLOADS.get(str(data.get("workload", "draft_train")))
        blocks = {k: b.prepare(data[k], workload) for k, b in BLOCKS.items() if k in data}
        return {**data, **blocks} if blocks else data

    @field_validator("name", mode="before")
    @classmethod
    def _plain_name(cls, v: Any) -> Any:
        if isinstance(v, str) and v and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", v):
            raise ValueError(
                f"sweep name {v!r} may use only ASCII letters, digits, '.', '_' and '-', and must "
                "start with a letter or digit (it names a folder and an MLflow run), e.g. tokens-2"
            )
        return v

    @field_validator("name")
    @classmethod
    def _not_reserved(cls, v: str) -> str:
        low = v.lower()
        if low in RESERVED_NAMES or low.startswith(("results.db", "mlflow.db")) or "--vs--" in v:
            taken = ", ".join(sorted(RESERVED_NAMES))
            raise ValueError(
                f"sweep name {v!r} is taken by the run root's own files ({taken}, results.db*, "
                "mlflow.db*) or contains '--vs--' (compare pages); choose another name"
            )
        return v

    @field_validator("workload")
    @classmethod
    def _registered(cls, v: str) -> str:
        if v not in WORKLOADS:
            names = [repr(n) for n in WORKLOADS]
            close = difflib.get_close_matches(v, list(WORKLOADS), n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise ValueError(
                f"Input should be {', '.join(names[:-1])} or {names[-1]} (the registered "
                f"workloads), not {v!r}; {hint}a new workload is added to WORKLOADS in "
                "workloads/registry.py"
            )
        return v

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

    @field_validator("variants")
    @classmethod
    def _variant_names(cls, v: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        for name, overrides in v.items():
            if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", str(name)):
                raise ValueError(f"variant name {name!r} must be letters, digits, '.', '_' or '-'")
            if not isinstance(overrides, dict) or not overrides:
                raise ValueError(
                    f"variant {name!r} needs a mapping of dotted fields to values, "
                    "e.g. {draft.layers: 2}"
                )
        return v

    @model_validator(mode="after")
    def _blocks_apart(self) -> SweepSpec:
        for key, block in BLOCKS.items():  # a kind's block and the blocks it excludes
            if getattr(self, key) is not None:
                block.check_beside(self)
        return self

    @property
    def config_model(self) -> type[BaseModel]:
        """The trial config model of the workload."""
        return WORKLOADS[self.workload].config_model

    @property
    def workload_info(self) -> Workload:
        """The workload's registry entry (config model, run, preflight, report)."""
        return WORKLOADS[self.workload]


def _fields_at(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """Field names (YAML spelling) of the nested model reached by ``loc`` (for did-you-mean).

    Follows ``Model | None`` fields, the values of ``dict[str, Model]`` fields and the items of
    ``list[Model]`` fields.
    """
    parts = [str(p) for p in loc]
    while parts:
        part = parts.pop(0)
        field = next((f for n, f in model.model_fields.items() if (f.alias or n) == part), None)
        ann = field.annotation if field else None
        if get_origin(ann) in (Union, types.UnionType):
            args = [a for a in get_args(ann) if a is not type(None)]
            ann = args[0] if len(args) == 1 else None
        if get_origin(ann) is dict and parts:
            parts.pop(0)  # the dict key, e.g. a search-space field
            ann = get_args(ann)[1]
        elif get_origin(ann) is list and parts:
            parts.pop(0)  # the item's index, e.g. a pretrain.corpus source
            ann = get_args(ann)[0]
        if not (isinstance(ann, type) and issubclass(ann, BaseModel)):
            return []
        model = ann
    return [f.alias or n for n, f in model.model_fields.items()]


def _explain(
    path: Path,
    root: yaml.Node,
    err: ValidationError,
    *,
    prefix: tuple[Any, ...],
    model: type[BaseModel],
    line_node: yaml.Node | None = None,
    workload: object = None,
) -> SpecError:
    """Turn the first pydantic error into a one-line SpecError with file:line and a fix; the
    example named is the block's (search, design), else that of the workload whose config is
    ``model``, else that of ``workload`` (the spec's, for its top-level keys)."""
    errors = err.errors()
    # an unknown key first: a typo also shows up as the missing key it was meant to be
    e = next((x for x in errors if x["type"] == "extra_forbidden"), errors[0])
    loc = _field_loc(e["loc"])
    where = ".".join(str(p) for p in prefix + loc)  # empty: a validator of the whole config
    # a union (e.g. an int or 'auto'): one error per member, said together
    union = [x for x in errors if _field_loc(x["loc"]) == loc and tuple(x["loc"]) != loc]
    if e["type"] == "extra_forbidden":
        node = line_node or key_node(root, prefix + loc)
        options = _fields_at(model, loc[:-1])
        close = difflib.get_close_matches(str(loc[-1]), options, n=1)
        hint = f"did you mean {close[0]!r}" if close else f"known keys: {', '.join(options)}"
        msg = f"unknown key {where!r} ({hint})"
    else:
        node = line_node or node_at(root, prefix + loc)[0]
        said = [x["msg"].removeprefix("Value error, ") for x in (union or [e])]
        msg = f"{where + ': ' if where else ''}{' or '.join(dict.fromkeys(said))}"
        if "input" in e and not isinstance(e["input"], dict | list):
            msg += f" (got {e['input']!r})"
    block = BLOCKS.get(str((prefix + loc)[0])) if prefix + loc else None
    example = (
        block.example
        if block is not None
        else next((w.example for w in WORKLOADS.values() if w.config_model is model), "")
        or getattr(WORKLOADS.get(str(workload)), "example", "")
        or "sweeps/tokens.yaml"
    )
    fix = {
        "missing": f"add {loc[-1]!r} there" if loc else "",
        "extra_forbidden": "rename or remove the key",
    }.get(e["type"]) or "correct the value there"
    fix = "" if "Fix:" in msg else f" Fix: {fix}."  # a validator's own fix is the fix
    return SpecError(
        f"{path}:{node.start_mark.line + 1}: {msg.rstrip('.')}.{fix} "
        f"See {example} for a commented example."
    )


def _field_loc(loc: Any) -> tuple[Any, ...]:
    """A pydantic error location without the union member tags ('constrained-int',
    "literal['auto']", 'function-after[...]'), which name no field of the spec."""
    return tuple(p for p in loc if not (isinstance(p, str) and ("[" in p or "-" in p)))


def _set_path(d: dict[str, Any], dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    for p in parts[:-1]:
        d = d.setdefault(p, {})
        if not isinstance(d, dict):
            raise KeyError(dotted)
    d[parts[-1]] = value


def is_config_field(model: type[BaseModel], dotted: str) -> bool:
    """Whether ``dotted`` (e.g. ``draft.layers``) is a field path of the trial config ``model``."""
    return _axis_exists(model, dotted)


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
    return read_spec(path)[0]


def read_spec(path: Path) -> tuple[SweepSpec, str]:
    """:func:`load_spec` and the text it validated (stored with the sweep, read once).

    Raises:
        SpecError: as :func:`load_spec`.
    """
    path = Path(path)
    if path.is_dir():
        raise SpecError(f"{path}: is a directory. Fix: give a sweep YAML, e.g. sweeps/tokens.yaml")
    if not path.is_file():
        raise SpecError(f"{path}: no such file. Fix: give a sweep YAML, e.g. sweeps/tokens.yaml")
    try:
        data = path.read_bytes()
    except OSError as e:
        raise SpecError(
            f"{path}: cannot read it ({e.strerror or e}). Fix: check that the file is readable "
            "by you, or give another sweep YAML, e.g. sweeps/tokens.yaml"
        ) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise SpecError(
            f"{path}:{line}: cannot read it as UTF-8 text (byte {data[e.start]:#04x} at "
            f"offset {e.start}: {e.reason}); a binary file, or text in another encoding? "
            f"{TEXT_FIX}"
        ) from None
    return parse_spec(text, path), text


def stored_spec(info: Any) -> SweepSpec:
    """The spec a sweep was registered with (its row's ``spec_yaml``), validated again.

    Raises:
        SpecError: as :func:`load_spec`, naming the stored copy.
    """
    return parse_spec(info.spec_yaml, Path(f"{info.spec_path} (as stored in the results DB)"))


def parse_spec(text: str, path: Path) -> SweepSpec:
    """Validate the sweep YAML ``text`` as :func:`load_spec` does; ``path`` names it in errors
    (e.g. the spec stored in the results DB, re-read by ``orchestrator retry``).

    Raises:
        SpecError: as :func:`load_spec`.
    """
    root = compose(path, text)
    try:
        data = yaml.load(text, Loader=SpecLoader)  # noqa: S506 - SpecLoader is a SafeLoader
    except yaml.constructor.ConstructorError as e:
        line = e.problem_mark.line + 1 if e.problem_mark else 0
        raise SpecError(
            f"{path}:{line}: not valid YAML for a spec ({e.problem}); tags such as "
            "!!python/object are refused (safe loading only). Fix: plain values."
        ) from None
    if isinstance(data, dict):  # the kinds' blocks, on their own lines
        for block in BLOCKS.values():
            block.check_raw(_Lines(path, root, data))
    try:
        spec = SweepSpec.model_validate(data)
    except ValidationError as err:
        workload = data.get("workload", "draft_train") if isinstance(data, dict) else None
        raise _explain(path, root, err, prefix=(), model=SweepSpec, workload=workload) from None
    if "seed" in spec.base:
        line = key_node(root, ("base", "seed")).start_mark.line + 1
        seeds_now = "seeds: [0] (the default)" if "seeds" not in data else f"seeds: {spec.seeds}"
        raise SpecError(
            f"{path}:{line}: base.seed {spec.base['seed']!r} would be overridden: every trial "
            f"takes its seed from seeds: (here {seeds_now}). Fix: remove base.seed and list "
            f"the seed under seeds:, e.g. seeds: [{spec.base['seed']!r}]"
        )
    model = spec.config_model
    try:
        base = model.model_validate(spec.base)
    except ValidationError as err:
        raise _explain(path, root, err, prefix=("base",), model=model) from None
    _check_workers(path, root, spec, base)
    for axis, values in spec.grid.items():
        _check_field(path, root, spec, ("grid", axis), "grid axis")
        for i, value in enumerate(values):
            cfg = merge_overrides(spec.base, {axis: value})
            value_node = node_at(root, ("grid", axis, i))[0]
            try:
                point = model.model_validate(cfg)
            except ValidationError as err:
                raise _explain(
                    path, root, err, prefix=(), model=model, line_node=value_node
                ) from None
            _check_workers(path, root, spec, point, value_node)
    for name, overrides in spec.variants.items():
        for field in overrides:
            _check_field(path, root, spec, ("variants", name, field), "variant field")
        variant_node = node_at(root, ("variants", name))[0]
        try:
            variant = model.model_validate(merge_overrides(spec.base, overrides))
        except ValidationError as err:
            raise _explain(
                path, root, err, prefix=(), model=model, line_node=variant_node
            ) from None
        _check_workers(path, root, spec, variant, variant_node)
    for key, block in BLOCKS.items():
        value = getattr(spec, key)
        if value is not None:
            block.check_loaded(_Lines(path, root, data, spec), value)
    return spec


class _Lines:
    """The spec file being loaded, as a kind's block checks ask for it
    (:class:`orchestrator.kinds.lines.SpecLines`); ``spec`` once it is validated."""

    def __init__(
        self, path: Path, root: yaml.Node, data: dict[str, Any], spec: SweepSpec | None = None
    ) -> None:
        self.path, self.root, self.data, self.spec = path, root, data, spec

    def line(self, loc: tuple[Any, ...]) -> int:
        return key_node(self.root, loc).start_mark.line + 1

    def value_line(self, loc: tuple[Any, ...]) -> int:
        return node_at(self.root, loc)[0].start_mark.line + 1

    def field_path(self, loc: tuple[Any, ...]) -> str:
        return ".".join(str(p) for p in _field_loc(loc))

    def _spec(self) -> SweepSpec:
        assert self.spec is not None, "asked before the spec was validated"
        return self.spec

    def explain(
        self,
        err: ValidationError,
        *,
        model: type[BaseModel] | None = None,
        prefix: tuple[Any, ...] = (),
        at: tuple[Any, ...] | None = None,
    ) -> SpecError:
        node = node_at(self.root, at)[0] if at is not None else None
        model = model or self._spec().config_model
        return _explain(self.path, self.root, err, prefix=prefix, model=model, line_node=node)

    def config(self, overrides: dict[str, Any]) -> BaseModel:
        spec = self._spec()
        return spec.config_model.model_validate(merge_overrides(spec.base, overrides))

    def check_field(self, loc: tuple[str, ...], what: str) -> None:
        _check_field(self.path, self.root, self._spec(), loc, what)

    def check_workers(self, config: BaseModel, at: tuple[Any, ...]) -> None:
        node = node_at(self.root, at)[0]
        _check_workers(self.path, self.root, self._spec(), config, node)


def _check_workers(
    path: Path,
    root: yaml.Node,
    spec: SweepSpec,
    config: BaseModel,
    line_node: yaml.Node | None = None,
) -> None:
    """Training on workers against the spec's resources: DeepSpeed needs GPUs, and each
    NCCL worker needs whole GPUs (``num_gpus`` a multiple of ``train.workers``)."""
    train = getattr(config, "train", None)
    if train is None or not train.on_workers:
        return
    gpus = spec.resources.num_gpus

    def line(key: str) -> int:
        node = line_node or node_at(root, ("base", "train", key))[0]
        return node.start_mark.line + 1

    if train.deepspeed is not None and not gpus:
        raise SpecError(
            f"{path}:{line('deepspeed')}: train.deepspeed is for GPU clusters and "
            "resources.num_gpus is 0. Fix: set resources.num_gpus (one per worker: "
            f"{train.workers}), or remove train.deepspeed to train with DDP on CPUs"
        )
    if gpus and gpus % train.workers:
        raise SpecError(
            f"{path}:{line('workers')}: train.workers {train.workers} cannot share "
            f"resources.num_gpus {gpus:g}: each worker needs whole GPUs. Fix: num_gpus: "
            f"{train.workers} (one per worker) or another multiple of train.workers"
        )


def _check_field(
    path: Path, root: yaml.Node, spec: SweepSpec, loc: tuple[str, ...], what: str
) -> None:
    """Refuse a grid axis or search field that is not a dotted field of the trial config."""
    field = loc[-1]
    if field != "seed" and _axis_exists(spec.config_model, field):
        return
    options = [k for k in _dotted_fields(spec.config_model) if k != "seed"]
    close = difflib.get_close_matches(field, options, n=1)
    if field == "seed":
        hint = (
            "Fix: list seeds under 'seeds:'"
            if loc[0] in ("grid", "variants")
            else "Fix: remove it; a search runs with the seed under 'seeds:'"
        )
    elif close:
        hint = f"did you mean {close[0]!r}? Fix: rename it {close[0]}"
    else:
        where = spec.config_model.__module__.replace(".", "/") + ".py"
        hint = (
            f"Fix: use a dotted field path of {spec.config_model.__name__} ({where}), "
            f"e.g. {options[-1]!r}"
        )
    line = key_node(root, loc).start_mark.line + 1
    problem = "is not allowed" if field == "seed" else f"is not a field of {spec.workload}"
    raise SpecError(f"{path}:{line}: {what} {field!r} {problem}; {hint}")


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
