"""Sweep specs: every shipped YAML parses; malformed specs give one line with file:line, exit 2."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.errors import SpecError
from orchestrator.kinds import kind_of
from orchestrator.spec.grid import count_trials, expand, trial_key
from orchestrator.spec.sweep import load_spec

SWEEPS = sorted((Path(__file__).resolve().parents[3] / "sweeps").rglob("*.yaml"))
GOOD = """\
name: t
seeds: [0, 1]
grid:
  pretrain.tokens: [0, 1024]
base:
  sft: {tokens: 512}
"""


@pytest.mark.parametrize("path", SWEEPS, ids=lambda p: p.name)
def test_shipped_sweeps_parse(path: Path) -> None:
    spec = load_spec(path)
    kind = kind_of(spec)  # a search's or a design's trials are proposed as it runs
    trials = kind.expand(spec)
    assert trials or kind.planned_configs(spec, trials) or kind.preflight_configs(spec, [])
    assert kind.count(spec) >= len(trials)


@pytest.mark.parametrize("path", SWEEPS, ids=lambda p: p.name)
def test_every_shipped_key_has_a_comment(path: Path) -> None:
    for n, line in enumerate(path.read_text().splitlines(), 1):
        code = line.split("#", 1)[0]
        if re.match(r"^\s*[A-Za-z_.]+:", code) and "#" not in line:
            pytest.fail(f"{path.name}:{n}: key without a comment: {line.strip()}")


def test_trial_keys_are_stable_and_distinct(tmp_path: Path) -> None:
    p = tmp_path / "s.yaml"
    p.write_text(GOOD)
    a = expand(load_spec(p))
    p.write_text(GOOD.replace("sft: {tokens: 512}", "sft:\n    tokens: 512\n    epochs: 2"))
    b = expand(load_spec(p))  # epochs 2 is the default: same configs, same keys
    assert [t.key for t in a] == [t.key for t in b]
    assert len({t.key for t in a}) == 4
    assert a[0].key == trial_key("draft_train", a[0].config)


BAD = {
    "unknown key": ("name: t\nbase:\n  sft:\n    tokenz: 5\n", 4, "did you mean 'tokens'"),
    "top-level typo": ("name: t\nseed: [0]\n", 2, "did you mean 'seeds'"),
    "wrong type": ("name: t\nbase:\n  sft:\n    tokens: lots\n", 4, "tokens"),
    "negative budget": ("name: t\ngrid:\n  pretrain.tokens: [0, -5]\n", 3, "greater than or equal"),
    "unknown axis": (
        "name: t\ngrid:\n  pretrain.tokenz: [1]\n",
        3,
        "did you mean 'pretrain.tokens'",
    ),
    "empty axis": ("name: t\ngrid:\n  pretrain.tokens: []\n", 3, "no values"),
    "duplicate key": (
        "name: t\ngrid:\n  pretrain.tokens: [1]\n  pretrain.tokens: [2]\n",
        4,
        "repeats",
    ),
    "bad yaml": ("name: t\ngrid: [1, 2\n", 3, "not valid YAML"),
    "python tag": ("name: !!python/object/apply:os.system ['true']\n", 1, "not valid YAML"),
    "not a mapping": ("- 1\n- 2\n", 1, "mapping"),
    "bad name": ("name: 'a b/c'\n", 1, "name"),
    "impossible tree": ("name: t\nbase:\n  eval:\n    num_draft_tokens: 1\n", 4, "greater than"),
}


@pytest.mark.parametrize("case", sorted(BAD), ids=str)
def test_malformed_spec_is_one_line_with_file_line_and_exit_2(case: str, tmp_path: Path) -> None:
    text, line, needle = BAD[case]
    spec = tmp_path / "bad.yaml"
    spec.write_text(text)
    run_root = tmp_path / "runs"
    with pytest.raises(SpecError, match=re.escape(needle)):
        load_spec(spec)
    res = CliRunner().invoke(app, ["submit", str(spec), "--run-root", str(run_root)])
    assert res.exit_code == 2, res.output
    message = res.output.strip()
    assert len(message.splitlines()) == 1, message
    assert f"{spec}:{line}:" in message, message
    assert not run_root.exists()  # nothing written


def test_missing_file_is_exit_2(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["submit", str(tmp_path / "nope.yaml")])
    assert res.exit_code == 2
    assert "no such file" in res.output


def test_dry_run_lists_trials_and_writes_nothing(tmp_path: Path) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(GOOD)
    res = CliRunner().invoke(
        app, ["submit", str(spec), "--dry-run", "--run-root", str(tmp_path / "runs")]
    )
    assert res.exit_code == 0, res.output
    assert "4 trials" in res.output
    assert not (tmp_path / "runs").exists()


SMOKE = Path(__file__).resolve().parents[3] / "sweeps" / "smoke-tokens.yaml"


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["submit", "{tmp}"], "is a directory"),
        (["submit", str(SMOKE), "--address", "127.0.0.1:1"], "cannot reach the Ray cluster"),
        (["submit", str(SMOKE), "--address", "ray://127.0.0.1:1"], "cannot reach the Ray"),
        (["submit", str(SMOKE), "--address", "nonsense"], "is not a Ray address"),
        (["submit", str(SMOKE), "--db-url", "mysql:/x"], "not a database URL"),
        (["submit", str(SMOKE), "--tracking-uri", "http://127.0.0.1:1"], "MLflow at"),
        (["status", "nope"], "no results DB"),
        (["fit", "nope"], "no results DB"),
    ],
    ids=["dir", "ray", "ray-client", "ray-bad", "db-url", "tracking", "status", "fit"],
)
def test_bad_runtime_input_is_one_line_exit_2_and_writes_nothing(
    args: list[str], needle: str, tmp_path: Path
) -> None:
    run_root = tmp_path / "runs"
    args = [a.replace("{tmp}", str(tmp_path)) for a in args] + ["--run-root", str(run_root)]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2, res.output
    message = res.output.strip()
    assert len(message.splitlines()) == 1, message
    assert needle in message, message
    assert not run_root.exists() or not any(run_root.iterdir())


def test_trial_keys_recorded_before_new_config_fields_are_kept() -> None:
    # keys computed by the code before draft.input_norm, pretrain.schedule, ... and the issue-13
    # recipe fields existed: the old recipe, spelled out, keeps them
    keys = [t.key for t in expand(load_spec(SWEEPS[0].parent / "tokens-before.yaml"))][:3]
    assert keys == ["fa830070eecb3425", "68f6450e5c0f4473", "39dba5954a015628"]
    # the new default recipe (isolated packing, feature noise) is another trial: a new key
    new = [t.key for t in expand(load_spec(SWEEPS[0].parent / "tokens.yaml"))][:3]
    assert not set(new) & set(keys)


VARIANTS = GOOD.replace(
    "grid:\n  pretrain.tokens: [0, 1024]\n",
    "variants:\n  a:\n    draft.layers: 1\n  b:\n    draft.layers: 2\n    pretrain.tokens: 64\n",
)


def test_variants_expand_outermost_and_are_recorded(tmp_path: Path) -> None:
    p = tmp_path / "v.yaml"
    p.write_text(VARIANTS)
    spec = load_spec(p)
    trials = expand(spec)
    assert count_trials(spec) == 4
    assert [t.overrides for t in trials] == [
        {"variant": "a", "seed": 0},
        {"variant": "a", "seed": 1},
        {"variant": "b", "seed": 0},
        {"variant": "b", "seed": 1},
    ]
    assert trials[2].config.draft.layers == 2 and trials[2].config.pretrain.tokens == 64


@pytest.mark.parametrize(
    ("edit", "line", "needle"),
    [
        (("draft.layers: 2", "draft.layerz: 2"), 7, "did you mean 'draft.layers'"),
        (("draft.layers: 2", "draft.layers: -1"), 7, "greater than or equal"),
        (("  b:\n", "  b c:\n"), 4, "variant name"),
    ],
)
def test_bad_variants_name_the_line(
    tmp_path: Path, edit: tuple[str, str], line: int, needle: str
) -> None:
    p = tmp_path / "v.yaml"
    p.write_text(VARIANTS.replace(*edit))
    with pytest.raises(SpecError) as err:
        load_spec(p)
    assert f"v.yaml:{line}" in str(err.value) and needle in str(err.value)


@pytest.mark.parametrize("name", ["index.html", "cache", "Compare", "results.db-wal", "a--vs--b"])
def test_names_taken_by_the_run_root_are_refused(name: str, tmp_path: Path) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(f"name: {name}\nworkload: sleep\n")
    with pytest.raises(SpecError, match=r"s\.yaml:1: name: sweep name .* is taken by"):
        load_spec(spec)


def test_numbers_refuse_booleans_but_keep_ints_as_floats_and_strings_as_paths(
    tmp_path: Path,
) -> None:
    """Pydantic's lax mode reads ``true`` as 1: every spec model refuses a bool for a number."""
    from pydantic import ValidationError

    from orchestrator.kinds.search.spec import SearchParam, SearchSpec
    from workloads.config import Resources
    from workloads.decode_bench.config import DecodeBenchConfig
    from workloads.draft_train.config import DraftTrainConfig, EvalConfig
    from workloads.sleep.config import SleepConfig

    bad = [
        (Resources, {"num_cpus": True}),
        (Resources, {"memory_gb": False}),
        (SleepConfig, {"value": True}),
        (DraftTrainConfig, {"pretrain": {"mix": {"sharegpt": True}}}),
        (DraftTrainConfig, {"draft": {"vocab_tokens": True}}),
        (DecodeBenchConfig, {"decode": {"temperature": False}}),
        (SearchParam, {"int": [1, True]}),
        (SearchParam, {"float": [0.1, 1], "step": True}),
    ]
    for model, data in bad:
        with pytest.raises(ValidationError, match="not a boolean"):
            model.model_validate(data)
    assert Resources.model_validate({"num_cpus": 2, "retry_exceptions": True}).num_cpus == 2.0
    assert isinstance(SleepConfig.model_validate({"seconds": 1}).seconds, float)
    assert EvalConfig.model_validate({"prompt_sets": str(tmp_path)}).prompt_sets == tmp_path
    assert SearchParam.model_validate({"choice": [True, 2, None]}).choice == [True, 2, None]
    space = {"x": {"int": [1, 2]}}
    assert SearchSpec.model_validate({"metric": "m", "n_trials": 3, "space": space}).n_trials == 3
    path = tmp_path / "s.yaml"
    path.write_text("name: t\nworkload: sleep\nseeds: [0, true]\n")
    with pytest.raises(SpecError, match=r"s\.yaml:3: seeds: Input should be a number"):
        load_spec(path)


@pytest.mark.parametrize(
    ("workload", "example"),
    [
        ("decode_bench", "sweeps/batch.yaml"),
        ("sleep", "sweeps/sleep.yaml"),
        (None, "sweeps/tokens.yaml"),  # draft_train, the default workload
    ],
    ids=["decode_bench", "sleep", "draft_train"],
)
@pytest.mark.parametrize(
    "resources", ["{num_cpus: 0}", "{num_cpu: 1}", "3"], ids=["value", "key", "type"]
)
def test_a_resources_error_names_the_workloads_own_example(
    workload: str | None, example: str, resources: str, tmp_path: Path
) -> None:
    """A top-level block (``resources``) is not the workload's config, but the spec's workload
    still decides which shipped sweep the fix points to (issue 33)."""
    spec = tmp_path / "r.yaml"
    head = f"name: r\nworkload: {workload}\n" if workload else "name: r\n"
    spec.write_text(f"{head}resources: {resources}\n")
    with pytest.raises(SpecError) as err:
        load_spec(spec)
    message = str(err.value)
    assert "resources" in message and f"See {example} for a commented example." in message
