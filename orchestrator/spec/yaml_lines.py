"""A sweep spec's YAML as nodes with lines: composed once (duplicate keys, bombs of aliases and
text that is not YAML refused with ``file:line`` and a fix), and the line of a key path, for the
errors of :mod:`orchestrator.spec.sweep` and the checks that name a spec's line."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from orchestrator.errors import SpecError

__all__ = ["MAX_NODES", "TEXT_FIX", "SpecLoader", "compose", "key_node", "node_at", "spec_line"]

MAX_NODES = 200_000
"""YAML values a spec may expand to, aliases counted each time they are used"""

_TOO_DEEP = "{path}: the YAML nests too deeply to be a sweep spec. Fix: flatten it"

TEXT_FIX = (
    "Fix: give a sweep YAML of plain UTF-8 text, e.g. sweeps/tokens.yaml (a file in another "
    "encoding: convert it, e.g. `iconv -f latin1 -t utf-8 in.yaml > out.yaml`)"
)


class SpecLoader(yaml.SafeLoader):
    """Safe loader that refuses duplicate keys."""


def compose(path: Path, text: str) -> yaml.Node:
    try:
        node = yaml.compose(text, Loader=SpecLoader)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = mark.line + 1 if mark else 0
        opened = e.context_mark.line + 1 if e.context_mark else line
        where = f"line {line}" if opened == line else f"lines {opened}-{line} ({e.context})"
        raise SpecError(
            f"{path}:{line}: not valid YAML ({e.problem}). Fix: correct the syntax at {where}, "
            "e.g. a missing closing bracket or quote, or a tab used as indentation"
        ) from None
    except yaml.reader.ReaderError as e:  # a NUL byte or another control character
        line = text.count("\n", 0, max(0, e.position)) + 1
        raise SpecError(
            f"{path}:{line}: not a YAML text file: character {_char(e.character)} (offset "
            f"{e.position}) is not allowed in YAML; a binary file? {TEXT_FIX}"
        ) from None
    except yaml.YAMLError as e:
        said = " ".join(str(e).split())
        raise SpecError(f"{path}: not valid YAML ({said}). Fix: correct the YAML syntax") from None
    except RecursionError:
        raise SpecError(_TOO_DEEP.format(path=path)) from None
    if node is None or not isinstance(node, yaml.MappingNode):
        raise SpecError(
            f"{path}:1: a sweep spec is a YAML mapping with name, grid, base, ... "
            "Fix: write one, e.g. start from sweeps/smoke-tokens.yaml"
        )
    try:
        _check_duplicates(path, node, [MAX_NODES])
    except RecursionError:
        raise SpecError(_TOO_DEEP.format(path=path)) from None
    return node


def _check_duplicates(path: Path, node: yaml.Node, budget: list[int]) -> None:
    """Refuse repeated keys; count the values visited (aliases expanded) against ``budget``."""
    budget[0] -= 1
    if budget[0] < 0:  # e.g. aliases of aliases ("billion laughs")
        raise SpecError(
            f"{path}:{node.start_mark.line + 1}: the YAML expands to more than {MAX_NODES:,} "
            "values (aliases of aliases?). Fix: write the values out, without nested aliases"
        )
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        seen_nodes: dict[str, yaml.Node] = {}
        for k, v in node.value:
            key = str(k.value)
            if key in seen and key == "<<" and k.tag == "tag:yaml.org,2002:merge":
                merged = [_source_after(seen_nodes[key]), _source_after(k)]
                raise SpecError(
                    f"{path}:{k.start_mark.line + 1}: a second '<<' merge key in one mapping "
                    f"(the first on line {seen[key]}); YAML keeps one key per name. Fix: merge "
                    f"them in one key, `<<: [{', '.join(merged)}]`"
                )
            if key in seen:
                raise SpecError(
                    f"{path}:{k.start_mark.line + 1}: key {key!r} repeats the one on "
                    f"line {seen[key]}. Fix: keep one of them."
                )
            seen_nodes[key] = k
            seen[key] = k.start_mark.line + 1
            _check_duplicates(path, v, budget)
    elif isinstance(node, yaml.SequenceNode):
        for v in node.value:
            _check_duplicates(path, v, budget)


def _char(c: int | str) -> str:
    """``U+0000`` for a character PyYAML's reader refuses (it gives an int or a str)."""
    return f"U+{c if isinstance(c, int) else ord(c[:1] or chr(0)):04X}"


def _source_after(key: yaml.Node) -> str:
    """What the spec's text says after a merge key (``<<: *a`` -> ``*a``), for a fix that
    joins two of them; ``*x`` when it is not one alias on that line."""
    line = (key.end_mark.buffer or "").splitlines()[key.end_mark.line : key.end_mark.line + 1]
    rest = line[0][key.end_mark.column :].lstrip().removeprefix(":").split("#")[0].strip()
    return rest if re.fullmatch(r"\*[^\s,\[\]{}]+", rest) else "*x"


def node_at(node: yaml.Node, loc: tuple[Any, ...]) -> tuple[yaml.Node, bool]:
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


def key_node(node: yaml.Node, loc: tuple[Any, ...]) -> yaml.Node:
    """The key node of the last element of ``loc`` (for 'unknown key' errors), else the value."""
    parent, _ = node_at(node, loc[:-1])
    if isinstance(parent, yaml.MappingNode):
        for k, _v in parent.value:
            if str(k.value) == str(loc[-1]):
                return k
    return node_at(node, loc)[0]


def spec_line(path: Path, *locs: tuple[str, ...]) -> int:
    """The line of the first of ``locs`` (key paths, e.g. ``("base", "sft", "responses")``)
    present in the spec file ``path``; 1 when none is (a check across fields that the spec
    leaves at their defaults)."""
    root = compose(path, path.read_text(encoding="utf-8"))
    for loc in locs:
        if node_at(root, loc)[1]:
            return key_node(root, loc).start_mark.line + 1
    return 1
