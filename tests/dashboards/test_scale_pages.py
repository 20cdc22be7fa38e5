"""Pages at paper scale: random-weight targets named, downsampled losses at their steps."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from dashboards.sweep_page import write_sweep_dashboard


def _page(tmp_path: Path, random: list[float] | None) -> str:
    trials = pd.DataFrame(
        {"trial_key": ["a", "b"], "state": ["completed", "completed"],
         "pretrain.tokens": [1000, 2000], "acceptance_length": [1.0, 1.1]}
    )  # fmt: skip
    if random is not None:
        trials["target.random_weights"] = random
    path = write_sweep_dashboard(tmp_path / "page.html", sweep_name="s", trials=trials, review=None)
    return path.read_text()


def test_random_weights_are_named_on_the_page(tmp_path: Path) -> None:
    text = _page(tmp_path, [1.0, 1.0])
    assert "Random-weight target</strong> in 2 trials" in text
    assert "acceptance length and the laws fitted on it are meaningless" in text


def test_pretrained_targets_get_no_warning(tmp_path: Path) -> None:
    assert "Random-weight target" not in _page(tmp_path, [0.0, 0.0])
    assert "Random-weight target" not in _page(tmp_path, None)


def test_downsampled_loss_points_sit_at_their_steps() -> None:
    """A series averaged down to points of ``stride`` steps is drawn at steps stride, 2·stride."""
    from dashboards.sweep_page import _loss_figure

    trials = pd.DataFrame(
        {"trial_key": ["a", "b"], "state": ["completed"] * 2, "pretrain.tokens": [1, 2],
         "pretrain/series_stride": [1500.0, float("nan")]}
    )  # fmt: skip
    curves = {"a": {"pretrain/loss": [2.0, 1.0]}, "b": {"pretrain/loss": [3.0, 2.5, 2.0]}}
    fig = _loss_figure(curves, trials, "pretrain.tokens")
    assert fig is not None
    xs = {trace.legendgroup: list(trace.x) for trace in fig.data}
    assert xs == {"a": [1500, 3000], "b": [1, 2, 3]}
