"""UTF-8 checks of the text files a sweep reads (corpus files, prompt files).

A file that is not UTF-8 (a latin-1 or cp1252 export, say) is refused naming the file, the byte
offset of its first byte that is not UTF-8, the byte and the codec's reason, with the fix; it is
never read with replacement characters. Offsets of a ``.gz`` file count its decompressed bytes.
"""

from __future__ import annotations

import codecs
import gzip
from pathlib import Path
from typing import BinaryIO, cast

__all__ = ["NotUtf8", "decode_utf8", "find_not_utf8"]

READ_BLOCK = 1 << 20
"""bytes decoded at a time when a file is scanned"""


class NotUtf8(ValueError):
    """A text file that is not UTF-8 (its message names the file, the offset and the fix)."""

    def __init__(self, path: Path, offset: int, data: bytes, reason: str, *, what: str) -> None:
        shown = " ".join(f"0x{b:02x}" for b in data[:4]) or "end of file"
        stem, dot, ext = path.name.partition(".")
        fixed = path.with_name(f"{stem}.utf8{dot}{ext}")
        iconv = "iconv -f latin1 -t utf-8"
        how = (
            f"zcat {path} | {iconv} | gzip > {fixed}"
            if path.name.endswith(".gz")
            else f"{iconv} {path} > {fixed}"
        )
        super().__init__(
            f"{what} {path} is not UTF-8 text: byte {offset:,} ({shown}): {reason}. Fix: convert "
            f"it to UTF-8, e.g. {how} (for a latin-1 file; `file -i` names the encoding), and "
            "name the converted file"
        )
        self.path, self.offset, self.reason = path, offset, reason


def decode_utf8(data: bytes, path: Path, *, what: str) -> str:
    """``data`` (the whole of ``path``) decoded as UTF-8.

    Raises:
        NotUtf8: at the first byte that is not UTF-8.
    """
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise NotUtf8(path, exc.start, data[exc.start : exc.end], exc.reason, what=what) from None


def _open(path: Path) -> BinaryIO:
    if path.name.endswith(".gz"):
        return cast(BinaryIO, gzip.open(path, "rb"))
    return path.open("rb")


def find_not_utf8(path: Path, *, what: str, limit: int | None = None) -> NotUtf8 | None:
    """The first byte of ``path`` (decompressed, for ``.gz``) that is not UTF-8, as the error to
    raise; None when the file (or its first ``limit`` bytes) is UTF-8. Reads in blocks of
    :data:`READ_BLOCK`; a character cut by ``limit`` is not an error."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    offset = 0  # bytes read before the current block
    with _open(path) as f:
        while block := f.read(READ_BLOCK if limit is None else min(READ_BLOCK, limit - offset)):
            pending = len(decoder.getstate()[0])  # bytes of a character cut by the last block
            try:
                decoder.decode(block)
            except UnicodeDecodeError as exc:
                data = exc.object[exc.start : exc.end]
                return NotUtf8(path, offset - pending + exc.start, data, exc.reason, what=what)
            offset += len(block)
            if limit is not None and offset >= limit:
                return None
        try:
            decoder.decode(b"", final=True)
        except UnicodeDecodeError as exc:
            data = exc.object[exc.start : exc.end]
            pending = len(exc.object)
            return NotUtf8(path, offset - pending + exc.start, data, exc.reason, what=what)
    return None
