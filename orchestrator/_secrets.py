"""Keep passwords of database and tracking URLs out of messages (private).

Store URLs are masked where they are named (:func:`orchestrator.store.results.mask_url`);
this covers text that quotes a URL without our help, such as a third-party exception's message.
"""

from __future__ import annotations

import re
from urllib.parse import unquote, urlsplit

_USERINFO = re.compile(r"//[^/@:\s]*:([^@/\s]+)@")


def passwords(url: str | None) -> set[str]:
    """The password of ``url`` as written and %-decoded (empty set when it has none)."""
    if not url:
        return set()
    found = set(_USERINFO.findall(url))
    try:
        parsed = urlsplit(url).password
    except ValueError:
        parsed = None
    if parsed:
        found.add(parsed)
    found |= {unquote(s) for s in found}
    return {s for s in found if s and s != "***"}


def redact(text: str, *urls: str | None) -> str:
    """``text`` with every password of ``urls`` replaced by ``***``."""
    for url in urls:
        for secret in sorted(passwords(url), key=len, reverse=True):
            text = text.replace(secret, "***")
    return text
