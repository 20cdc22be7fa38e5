"""``sft.regen_engine: vllm``: :class:`VllmReplies` against the fake of vLLM's HTTP surface
(``fake_vllm.py``): the requests it sends, one server for all batches started on the first,
stopped by PID on close. The real server: ``test_replies_real.py`` (slow) and
``benchmarks/regen_bench.py``."""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

import pytest

from workloads.config import TargetConfig
from workloads.serving import replies
from workloads.serving.env import ServingEnv
from workloads.serving.server import group_alive
from workloads.training.regenerate import RegenSettings

FAKE = Path(__file__).with_name("fake_vllm.py")


def _fake_env(tmp_path: Path) -> ServingEnv:
    exe = tmp_path / "python"
    exe.write_text(f'#!/bin/sh\nexec {sys.executable} {FAKE} "$@"\n')
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return ServingEnv(python=exe, vllm_version="fake", torch_version="fake")


def _replies(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **kw: object) -> replies.VllmReplies:
    env = _fake_env(tmp_path)
    monkeypatch.setattr(replies, "find_env", lambda python: env)
    settings = RegenSettings(max_new_tokens=5, max_prompt_tokens=64, batch_size=2,
                             engine="vllm", **kw)  # type: ignore[arg-type]  # fmt: skip
    return replies.VllmReplies(
        python="auto", target=TargetConfig(model=str(tmp_path / "model")), cache_dir=tmp_path,
        settings=settings, eos_ids=frozenset({6}), max_model_len=512,
        log_path=tmp_path / "regen-server.log", say=print,
    )  # fmt: skip


def _bodies(log: Path) -> list[dict]:
    return [json.loads(x[5:]) for x in log.read_text().splitlines() if x.startswith("body ")]


def test_batches_are_sent_at_once_to_one_server_stopped_by_pid(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gen = _replies(tmp_path, monkeypatch, temperature=0.0)
    # the fake continues prompt[-1] + 1, + 2, ...; EOS 6 ends the first reply, kept in it
    assert gen([[9, 1], [3, 4]], 0) == [[2, 3, 4, 5, 6], [5, 6]]
    pid = gen._server.pid if gen._server else None
    assert gen([[20]], 1) == [[21, 22, 23, 24, 25]]
    assert gen._server is not None and gen._server.pid == pid  # one server for every batch
    cmd = " ".join(gen._server.command())
    assert "--max-model-len 512" in cmd and "--max-num-seqs 2" in cmd
    gen.close()
    gen.close()  # idempotent
    assert pid is not None and not group_alive(pid)
    log = (tmp_path / "regen-server.log").read_text()
    assert log.count("fake vLLM starting") == 1
    body = _bodies(tmp_path / "regen-server.log")[0]
    assert body["temperature"] == 0.0 and body["max_tokens"] == 5
    assert body["stop_token_ids"] == [6] and body["return_token_ids"] is True
    assert "seed" not in body  # greedy


def test_sampled_replies_are_seeded_by_their_place_not_by_who_asks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gen = _replies(tmp_path, monkeypatch, temperature=0.7, seed=3)
    try:
        gen([[1], [2]], 0)
        gen([[3], [4]], 1)
    finally:
        gen.close()
    seeds = {b["prompt"][0]: b["seed"] for b in _bodies(tmp_path / "regen-server.log")}
    assert seeds == {p: 3 * 1_000_003 + p - 1 for p in (1, 2, 3, 4)}


def test_a_generator_never_called_starts_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gen = _replies(tmp_path, monkeypatch, temperature=0.0)
    gen.close()
    assert not (tmp_path / "regen-server.log").exists()
