"""Submit-time check of training budgets against their data (no trial, no feature written).

A budget larger than its corpus would extract features until packing runs out, deep into a
trial; here it is refused before the sweep starts, with both sizes and the fix.

* ``pretrain.corpus`` up to :data:`EXACT_TOKENS` tokens: the corpus is tokenised as far as the
  budget and its size is exact. The shards are written into a folder of the check's own
  (:class:`_Staging`) and moved into the token-shard cache the trials read
  (:mod:`workloads.data.shards`, under the trials' cache dir) only when the sweep's budgets are
  accepted, so a refusal leaves nothing; a dry run tokenises into a temporary folder that is
  removed, and reads a cache that already knows the size without writing to it.
* Larger budgets, or the builtin mix: an upper bound that needs no tokenising. A byte-level BPE
  token covers at least one byte of UTF-8 text (and each document adds one EOS), so a source of
  B bytes holds at most about B tokens; a weighted corpus ends when a source runs out, so it holds
  at most ``min(B_i / w_i)``. A budget over the bound cannot be met; one under it is checked
  exactly by the trial (``CorpusTooSmall``, with both sizes). Streamed hub datasets (``hf:``)
  have no size to check before they are read.
* ``sft.tokens`` against the SFT split of ShareGPT (:func:`check_sft_budget`): the same
  bytes-to-tokens bound over the chats as the trial renders them.

A budget over its data is :class:`BudgetTooLarge` (blamed on the budget's line); a corpus that
cannot be read (a file that is not UTF-8, a record of another type) a plain ``ValueError``
(blamed on ``pretrain.corpus``).
"""

from __future__ import annotations

import contextlib
import gzip
import logging
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from workloads.draft_train.config import CorpusSource, DraftTrainConfig

log = logging.getLogger(__name__)

EXACT_TOKENS = 20_000_000
"""budgets up to this many tokens are checked by tokenising the corpus at submit (about a
minute on two cores at ~300K tokens/s; the shards are reused by the trials)"""

GZ_READ_LIMIT = 256 * 2**20
"""gzip files up to this size are decompressed to count their bytes; larger ones are unknown"""

EOS_SLACK = 1.05
"""bytes-to-tokens bound slack for the EOS token each document adds (documents of >= 20 bytes)"""


class BudgetTooLarge(ValueError):
    """A training budget larger than its data holds (the message has both sizes and the fix)."""


def _file_bytes(path: Path) -> int | None:
    """Uncompressed bytes of a corpus file, an upper bound of its text bytes; None if unknown."""
    name = path.name
    if name.endswith(".gz"):  # counted by reading (gzip's own size field wraps at 4 GiB)
        if path.stat().st_size > GZ_READ_LIMIT:
            return None
        total = 0
        with gzip.open(path, "rb") as g:
            while block := g.read(1 << 20):
                total += len(block)
        return total
    if name.endswith(".parquet"):
        import pyarrow.parquet as pq

        meta = pq.ParquetFile(path).metadata
        return sum(
            meta.row_group(g).column(c).total_uncompressed_size
            for g in range(meta.num_row_groups)
            for c in range(meta.num_columns)
        )
    return path.stat().st_size


def source_bytes(src: CorpusSource) -> int | None:
    """An upper bound of the UTF-8 text bytes of one source; None when unknown (``hf:``)."""
    if src.kind == "hf":
        return None
    if src.kind == "builtin":
        return builtin_bytes(src.source)
    from workloads.data.sources import expand_files

    sizes = [_file_bytes(p) for p in expand_files(src.source)]
    return None if any(s is None for s in sizes) else sum(s for s in sizes if s is not None)


def builtin_bytes(name: str) -> int:
    """An upper bound of a builtin source's UTF-8 text bytes: the stdlib files' sizes, or the
    whole ShareGPT JSON file's size (its pretrain split's text is part of it, JSON-escaped)."""
    if name == "stdlib":
        from workloads.data.corpus import stdlib_files

        return sum(p.stat().st_size for p in stdlib_files())
    from workloads.data.sharegpt import default_sharegpt_path

    return default_sharegpt_path().stat().st_size


def corpus_token_bound(corpus: Sequence[CorpusSource]) -> int | None:
    """At most this many tokens in the corpus's mixed stream; None when a source's size is
    unknown. The stream ends when a source runs out: ``min(B_i / w_i)`` over weights summing
    to 1, times :data:`EOS_SLACK`."""
    total = sum(s.weight for s in corpus)
    bounds = []
    for s in corpus:
        b = source_bytes(s)
        if b is None:
            return None
        bounds.append(b / (s.weight / total))
    return int(min(bounds) * EOS_SLACK)


def mix_token_bound(mix: dict[str, float]) -> int:
    """At most this many tokens in the builtin mix's stream: all its sources' bytes (the mix
    is by characters, so the stream may end sooner; this bound is loose but never wrong)."""
    return int(sum(builtin_bytes(name) for name, w in mix.items() if w > 0) * EOS_SLACK)


def _local(corpus: Sequence[CorpusSource] | None) -> bool:
    """Whether every source is on this machine (builtin or files, no ``hf:``)."""
    return corpus is not None and all(s.kind != "hf" for s in corpus)


def check_sources(corpus: Sequence[CorpusSource]) -> None:
    """Every source can be read: its files exist (a glob matches), and the first record of its
    first non-empty file holds the ``text_field`` (a ``.txt`` file is checked by its size only:
    it is one document), and the first MiB of each file is UTF-8; ``hf:`` sources need the hub
    (:func:`check_hub_sources`). Cheap: a record or two per source and at most 64 MiB read,
    whatever the budget, so a wrong field is not found by a GPU trial.

    Raises:
        ValueError: naming the source, the file and the fix.
    """
    from workloads.data.sources import _file_documents, check_utf8, expand_files

    check_hub_sources(corpus)
    for src in corpus:
        if src.kind != "files":
            continue
        files = expand_files(src.source)
        if all(f.stat().st_size == 0 for f in files):
            raise ValueError(
                f"pretrain.corpus source {src.source!r}: its files are empty. Fix: name files "
                "with text in them"
            )
        check_utf8(files)  # the head of each file; the trial (and the exact check) read all
        first = next(f for f in files if f.stat().st_size > 0)
        if not first.name.endswith(".txt"):
            next(_file_documents(first, source=src.source, text_field=src.text_field), None)


def check_hub_sources(corpus: Sequence[CorpusSource]) -> None:
    """``hf:`` sources are streamed from the hub by the trials: refuse them when the hub cannot
    be reached from here (offline, or no network), before anything is written.

    Raises:
        ValueError: naming the dataset, why, and the fix (a local copy).
    """
    import os

    from workloads.models.target_source import HF_ENDPOINT, _unreachable

    for src in corpus:
        if src.kind != "hf":
            continue
        offline = any(
            os.environ.get(v, "").strip().lower() in ("1", "true", "yes", "on")
            for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
        )
        why = (
            "HF_HUB_OFFLINE is set"
            if offline
            else _unreachable(os.environ.get("HF_ENDPOINT") or HF_ENDPOINT, 5.0)
        )
        if why is not None:
            raise ValueError(
                f"pretrain.corpus source {src.source!r} is streamed from the Hugging Face hub, "
                f"which cannot be reached: {why}. Fix: run where the hub is reachable, or "
                "download the dataset's files and name them (e.g. source: /data/c4/*.json.gz)"
            )


def _tokens(n: int) -> str:
    return f"{n:,} tokens"


def _budget(cfg: DraftTrainConfig) -> int:
    """Tokens the trial packs: ``pretrain.tokens`` rounded up to whole rows."""
    p = cfg.pretrain
    return -(-p.tokens // p.seq_len) * p.seq_len


def _tokenizer(cfg: DraftTrainConfig, cache_dir: Path) -> Any | None:
    """The target's tokenizer without its weights, nothing written; None when it is not on
    this machine."""
    from workloads.models.target import target_tokenizer

    return target_tokenizer(cfg.target.model, cfg.target.weights, cache_dir)


def _too_big(cfg: DraftTrainConfig, have: int, how: str) -> BudgetTooLarge:
    need = _budget(cfg)
    rows = max(1, have // cfg.pretrain.seq_len) * cfg.pretrain.seq_len if have else 0
    limit = (
        f"at most {rows:,}"
        if not how
        else f"well under {rows:,} (an upper bound from the text's bytes: the trial checks the "
        "exact size)"
    )
    fix = (
        f"Fix: pretrain.tokens {limit}, more sources (or a larger weight on the "
        "larger ones), or pretrain.repeat: true to go over the corpus more than once"
        if cfg.pretrain.corpus is not None
        else "Fix: name a corpus at this scale in pretrain.corpus (local files or hf:<id>), "
        "or a smaller pretrain.tokens"
    )
    return BudgetTooLarge(
        f"pretrain.tokens {cfg.pretrain.tokens:,} needs {_tokens(need)} but the "
        f"{'corpus' if cfg.pretrain.corpus is not None else 'builtin mix'} holds "
        f"{how}{_tokens(have)}. {fix}"
    )


class _Staging:
    """A folder of the corpus check's own for the token shards it writes, removed on exit.

    With ``keep`` it lies in the trials' cache dir and :meth:`adopt` moves what it holds into
    ``<cache_dir>/tokens`` (each folder only when none of them is there yet: the mixed index
    and its sources' shards go together); folders above it that the check created are removed
    again when they stay empty. Without ``keep`` (a dry run) it is a temporary folder outside.
    """

    def __init__(self, cache_dir: Path, *, keep: bool) -> None:
        self.cache_dir, self.keep = cache_dir, keep
        self._created = [p for p in (cache_dir / "tokens", cache_dir, *cache_dir.parents)]
        self._created = [p for p in self._created if not p.exists()]
        self.root = Path()

    def __enter__(self) -> _Staging:
        if self.keep:
            try:
                (self.cache_dir / "tokens").mkdir(parents=True, exist_ok=True)
                self.root = Path(tempfile.mkdtemp(prefix=".corpus-check-", dir=self.cache_dir))
                return self
            except OSError:  # the cache dir cannot be written (refused by its own check)
                self.keep = False
        self.root = Path(tempfile.mkdtemp(prefix="specscale-corpus-check-"))
        return self

    def adopt(self) -> None:
        """Move the staged folders into the cache (see the class docstring)."""
        staged = sorted((self.root / "tokens").iterdir()) if self.keep else []
        dest = self.cache_dir / "tokens"
        if not staged or any((dest / p.name).exists() for p in staged):
            return  # partly cached already: the trial extends what is there
        for p in staged:
            try:
                os.rename(p, dest / p.name)
            except OSError:  # another submit got there first: its copy is the same
                log.info("corpus check: %s is cached already", p.name)

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
        for p in self._created:  # deepest first; a folder another process filled stays
            with contextlib.suppress(OSError):
                p.rmdir()


def _exact_size(
    cfg: DraftTrainConfig, tokenizer: Any, need: int, cache_dir: Path, *, dry_run: bool
) -> int:
    """Tokens of the corpus's mixed stream up to ``need``, refused when short (see
    :func:`check_budget`); the shards kept for the trials unless refused or a dry run.

    Raises:
        BudgetTooLarge: fewer than ``need`` tokens (and not ``pretrain.repeat``).
        ValueError: the corpus cannot be read (no token to repeat, a file that is not UTF-8,
            a record of another type, ...).
    """
    from workloads.data.shards import cached_corpus_size, corpus_tokens
    from workloads.training.features import tokenizer_fingerprint

    p, fp = cfg.pretrain, tokenizer_fingerprint(tokenizer)
    assert p.corpus is not None
    size = cached_corpus_size(p.corpus, tokenizer_fp=fp, cache_dir=cache_dir, need=need)
    if size is not None:
        _refuse_short(cfg, size.tokens, need)
        return size.tokens
    with _Staging(cache_dir, keep=not dry_run) as stage:
        size = corpus_tokens(
            p.corpus,
            tokenizer,
            tokenizer_fp=fp,
            cache_dir=stage.root,
            need=need,
            progress=lambda msg: log.info("corpus check: %s", msg),
        )
        _refuse_short(cfg, size.tokens, need)
        stage.adopt()
    return size.tokens


def _refuse_short(cfg: DraftTrainConfig, have: int, need: int) -> None:
    if have >= need:
        return
    if not cfg.pretrain.repeat:
        raise _too_big(cfg, have, "")
    raise ValueError(
        "pretrain.corpus holds no token to repeat (its files hold no document). "
        "Fix: name files with text in them"
    )


def check_budget(cfg: DraftTrainConfig, cache_dir: Path, *, dry_run: bool = False) -> str:
    """Refuse a pretraining budget the corpus cannot meet; return how it was checked.

    Args:
        cfg: the trial config (its ``pretrain`` and ``target``).
        cache_dir: the trials' cache dir (``--cache-dir``, default ``<run root>/cache``): the
            exact check reads the token shards there and leaves its own for the trials.
        dry_run: write nothing (the shards of an exact check go to a temporary folder).

    Raises:
        BudgetTooLarge: the budget exceeds the corpus (exact) or its upper bound, with both
            sizes.
        ValueError: the corpus cannot be read (see :func:`_exact_size`).
    """
    p, need = cfg.pretrain, _budget(cfg)
    if not p.tokens:
        return "not needed"
    if p.repeat:  # any size will do, but not an empty corpus
        need = min(need, 1) if _local(p.corpus) else 0
        if not need:
            return "not needed"
    if p.corpus is None:
        if need <= 1_000_000:  # the builtin mix holds ~10M tokens: no reading for small budgets
            return "small"
        bound = mix_token_bound(dict(p.mix))
        if need > bound:
            raise _too_big(cfg, bound, "at most ")
        return "bound"
    if need <= EXACT_TOKENS and _local(p.corpus):
        tokenizer = _tokenizer(cfg, cache_dir)
        if tokenizer is not None:
            _exact_size(cfg, tokenizer, need, cache_dir, dry_run=dry_run)
            return "exact"
    corpus_bound = corpus_token_bound(p.corpus)
    if corpus_bound is None:
        return "unknown (a streamed hub dataset)"
    if need > corpus_bound:
        raise _too_big(cfg, corpus_bound, "at most ")
    return "bound"


def sft_token_bound(cfg: DraftTrainConfig) -> tuple[int, int]:
    """``(conversations, at most this many tokens)`` of the SFT split as the trial renders it:
    each chat's UTF-8 bytes plus the template's (:data:`~workloads.data.chat.TEMPLATE_BYTES`,
    :data:`~workloads.data.chat.TURN_BYTES`), capped at ``4 * seq_len`` (a chat is cut there);
    with ``sft.responses: target``, the first user turn (at most ``seq_len`` minus the reply,
    longer prompts are skipped) and a reply of at most ``regen_reply_tokens``."""
    from workloads.data.chat import TEMPLATE_BYTES, TURN_BYTES
    from workloads.data.sharegpt import read_sharegpt, split_conversations

    s = cfg.sft
    convs = split_conversations(read_sharegpt()[0])["sft"]
    total = 0
    for c in convs:
        if s.responses == "target":
            prompt = len(c.first_user_text.encode()) + TURN_BYTES + TEMPLATE_BYTES
            total += min(prompt, s.seq_len - s.regen_reply_tokens) + s.regen_reply_tokens
        else:
            chat = sum(len(text.encode()) + TURN_BYTES for _, text in c.turns) + TEMPLATE_BYTES
            total += min(chat, 4 * s.seq_len)
    return len(convs), total


def check_sft_budget(cfg: DraftTrainConfig) -> str:
    """Refuse an ``sft.tokens`` budget the SFT split cannot meet (an upper bound from the
    text's bytes, :func:`sft_token_bound`; one under it is checked exactly by the trial).

    Raises:
        BudgetTooLarge: with both sizes and the fix.
    """
    s = cfg.sft
    if not s.tokens:
        return "not needed"
    need = -(-s.tokens // s.seq_len) * s.seq_len
    n_convs, bound = sft_token_bound(cfg)
    if need <= bound:
        return "bound"
    rows = bound // s.seq_len * s.seq_len
    replies = (
        f" with the target's replies of at most {s.regen_reply_tokens} tokens"
        if s.responses == "target"
        else ""
    )
    raise BudgetTooLarge(
        f"sft.tokens {s.tokens:,} needs {_tokens(need)} (rows of {s.seq_len}) but the SFT split "
        f"({n_convs:,} ShareGPT conversations{replies}) holds well under {bound:,} tokens (an "
        f"upper bound from the text's bytes: the trial checks the exact size). Fix: sft.tokens "
        f"well under {rows:,}, and sft.epochs for more passes over them"
    )
