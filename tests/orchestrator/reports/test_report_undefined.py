"""The decode report with undefined metrics (issue 16, item 8) and the k law it leaves behind.

A completed trial may report NaN for a metric it cannot define (a speedup without the AR
baseline, ``mismatches`` when sampling, an acceptance length without a cycle): the fit, its
console lines and the dashboard show ``n/a`` for it and never crash. The fit also writes
``<run root>/<sweep>/k_law.json``, which ``decode.k_law: sweep:<name>`` trials read.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from orchestrator.reports.fit import fit_sweep
from tests.orchestrator.reports.test_report_decode import _store
from workloads.config import ConfigError
from workloads.decode_bench.checks import check_k_laws
from workloads.decode_bench.config import DecodeBenchConfig
from workloads.engine.k_law import K_LAW_FILE, read_sweep_k_law


def _eq4_results() -> dict[tuple[int, int], float | None]:
    """Best k falls with b as Eq. 4 has it: k = 8*sqrt(1 + 15/b), rounded."""
    best = {b: round(8 * math.sqrt(1 + 15 / b)) for b in (1, 2, 4, 16, 64)}
    ks = sorted(set(best.values()))
    return {(b, k): 10.0 * b - abs(k - best[b]) for b in best for k in ks}


def test_undefined_metrics_are_n_a_in_the_lines_and_the_page(tmp_path: Path) -> None:
    store, sweep_id = _store(tmp_path, {(1, 2): 5.0, (1, 4): 6.0, (2, 4): 9.0})
    for t in store.trials(sweep_id):  # no AR baseline, no cycle: undefined
        store.log_metrics(t.id, {"speedup": math.nan, "acceptance_length": math.nan})
        store.log_metrics(t.id, {"mismatches": math.nan, "ar_tokens_per_s": math.nan})
    dashboard = tmp_path / "b" / "dashboard.html"
    rep = fit_sweep(store, sweep_id, "b", dashboard)
    *per_b, crossing = rep.lines
    assert [line.split(":")[0] for line in per_b] == ["b=1", "b=2"]
    assert all("speedup over AR n/ax, acceptance length n/a" in line for line in per_b)
    assert crossing.startswith("speedup crossing 1: none (not enough points")
    page = dashboard.read_text(encoding="utf-8")
    trials = page.split("id='trials'", 1)[1].split("</table>", 1)[0]
    heads = re.findall(r"<th>(.*?)</th>", trials)
    for row in re.findall(r"<tr>(.*?)</tr>", trials.split("<tbody>", 1)[1]):
        cells = dict(zip(heads, re.findall(r"<td[^>]*>(.*?)</td>", row), strict=True))
        assert cells["speedup"] == "n/a" and cells["mismatches"] == "n/a", cells
        assert cells["error"] == ""
    body = re.sub(r"<script.*?</script>", " ", page, flags=re.DOTALL)
    assert not re.search(r"\bnan\b", body, flags=re.IGNORECASE)


def test_the_fit_writes_the_k_law_that_sweep_trials_read(tmp_path: Path) -> None:
    store, sweep_id = _store(tmp_path, _eq4_results())
    fit_sweep(store, sweep_id, "b", tmp_path / "b" / "dashboard.html")
    assert (tmp_path / "b" / K_LAW_FILE).is_file()
    eq4 = read_sweep_k_law(tmp_path, "b")
    assert eq4["status"] == "ok" and eq4["x"] == [1, 2, 4, 16, 64]
    auto = DecodeBenchConfig.model_validate(
        {"decode": {"num_draft_tokens": "auto", "k_law": "sweep:b"}}
    )
    check_k_laws([auto], tmp_path)  # the submit-time check finds it


def test_a_fit_without_eq4_leaves_a_k_law_that_submit_refuses(tmp_path: Path) -> None:
    store, sweep_id = _store(tmp_path, {(1, 2): 5.0, (1, 4): 6.0})
    fit_sweep(store, sweep_id, "b", tmp_path / "b" / "dashboard.html")
    auto = DecodeBenchConfig.model_validate(
        {"decode": {"num_draft_tokens": "auto", "k_law": "sweep:b"}}
    )
    try:
        check_k_laws([auto], tmp_path)
    except ConfigError as exc:
        assert exc.field == ("decode", "k_law") and "not usable" in str(exc)
    else:
        raise AssertionError("a sweep without an Eq. 4 fit was accepted as a k law")


def test_a_report_elsewhere_writes_no_k_law(tmp_path: Path) -> None:
    """``orchestrator report --out DIR`` (persist=False) changes nothing a trial reads."""
    store, sweep_id = _store(tmp_path, _eq4_results())
    fit_sweep(store, sweep_id, "b", tmp_path / "out" / "b.html", persist=False)
    assert not list(tmp_path.rglob(K_LAW_FILE))


def test_trials_without_a_throughput_are_left_out_and_said_to_be(tmp_path: Path) -> None:
    store, sweep_id = _store(tmp_path, {(1, 2): 5.0, (1, 4): 6.0, (2, 2): 7.0, (4, 2): 1.0})
    for t in store.trials(sweep_id):
        if t.overrides["decode.batch_size"] == 4 or t.overrides["decode.num_draft_tokens"] == 4:
            store.log_metrics(t.id, {"tokens_per_s": math.nan})  # nothing generated
    rep = fit_sweep(store, sweep_id, "b", tmp_path / "b" / "dashboard.html")
    assert rep.lines[0] == (
        "2 completed trials with tokens_per_s n/a left out of the fits: b=1 k=4, b=4 k=2"
    )
    assert [line.split(":")[0] for line in rep.lines[1:-1]] == ["b=1", "b=2"]
    assert rep.lines[-1].startswith("speedup crossing 1: none")
    assert "best k 2, 5.0 tok/s" in rep.lines[1]
