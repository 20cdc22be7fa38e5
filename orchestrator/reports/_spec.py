"""What the reports read of a sweep's stored spec (``SweepInfo.spec_yaml``): its description and
the config fields it varies.

The stored text was validated when the sweep was submitted; it is read leniently here (an old
or hand-edited row gives empty answers, never an error), so a page can always be written.
"""

from __future__ import annotations

from typing import Any

import yaml


def spec_data(spec_yaml: str) -> dict[str, Any]:
    """The stored spec as a mapping; empty when it is blank or not a YAML mapping."""
    try:
        data = yaml.safe_load(spec_yaml) if spec_yaml else None
    except yaml.YAMLError:
        return {}
    return data if isinstance(data, dict) else {}


def spec_description(spec_yaml: str) -> str:
    """The spec's ``description`` (free text shown on the dashboards), "" when it has none."""
    text = spec_data(spec_yaml).get("description")
    return str(text).strip() if text is not None else ""


def varied_fields(spec_yaml: str) -> list[str]:
    """Config fields the sweep varies, in the spec's order: its grid axes, then the fields of
    its search space, then its design's axis (a spec has one of the three)."""
    data = spec_data(spec_yaml)
    search = data.get("search")
    space = search.get("space") if isinstance(search, dict) else None
    design = data.get("design")
    axis = design.get("axis") if isinstance(design, dict) else None
    fields: list[str] = []
    for block in (data.get("grid"), space, {axis: None} if isinstance(axis, str) else None):
        if isinstance(block, dict):
            fields += [str(k) for k in block if str(k) not in fields]
    return fields
