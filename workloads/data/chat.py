"""Chat rendering with the tokenizer's chat template, and the assistant-token mask for SFT.

A base model's tokenizer has no chat template (Gemma-3-270M's GGUF carries none): its chats are
rendered with :data:`PLAIN_TEMPLATE`, plain ``Role:`` headers with each reply ended by the EOS
token, so SFT, the target's regenerated replies and evaluation prompts all read one format
(docs/workloads.md#base-targets).
"""

from __future__ import annotations

from typing import Any

from workloads.data.sharegpt import Conversation

__all__ = [
    "PLAIN_TEMPLATE",
    "TEMPLATE_BYTES",
    "TURN_BYTES",
    "chat_prompt_ids",
    "chat_template_of",
    "render_chat",
]

TEMPLATE_BYTES = 512
"""bytes a chat template adds to a chat besides its turns, at most (a default system prompt and
the generation header; SmolLM2's ChatML adds ~130): with :data:`TURN_BYTES`, a bound on a
rendered chat's tokens from its text's UTF-8 bytes (a byte-level BPE token covers >= 1 byte)"""

TURN_BYTES = 64
"""bytes a chat template adds around each turn, at most (ChatML: ``<|im_start|>assistant\\n``
and ``<|im_end|>\\n``, 33)"""


PLAIN_TEMPLATE = (  # newlines only inside {{ }}: transformers' Jinja trims those after a tag
    "{{ bos_token or '' }}{% for m in messages %}{% if not loop.first %}{{ '\n\n' }}{% endif %}"
    "{{ (m['role'] | capitalize) + ':\n' + m['content'] }}"
    "{% if m['role'] == 'assistant' %}{{ eos_token }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '\n\nAssistant:\n' }}{% endif %}"
)
"""the chat template of a tokenizer without one (a base model): ``User:\n<text>`` per turn,
``Assistant:\n<reply><eos>`` per reply, turns joined by a blank line, the generation prompt
``\n\nAssistant:\n``. The blank line opens a turn rather than ending one, so every piece
``render_chat`` tokenizes alone ends in text or EOS: a byte-level BPE splits a trailing
``\n\n`` otherwise than ``\n\nAssistant`` (SmolLM2's, Llama-3's), SentencePiece (Gemma's) alike"""


def chat_template_of(tokenizer: Any) -> str:
    """The tokenizer's own chat template, or :data:`PLAIN_TEMPLATE` when it has none.

    Raises:
        ValueError: it has none and no EOS token either, so a reply could not end.
    """
    own = getattr(tokenizer, "chat_template", None)
    if own:
        return str(own)
    if getattr(tokenizer, "eos_token", None) is None:
        raise ValueError(
            "the target's tokenizer has neither a chat template nor an EOS token, so a chat "
            "cannot be rendered. Fix: a target whose tokenizer has one of them"
        )
    return PLAIN_TEMPLATE


def _messages(turns: tuple[tuple[str, str], ...]) -> list[dict[str, str]]:
    return [{"role": role, "content": text} for role, text in turns]


def _render(tokenizer: Any, turns: tuple[tuple[str, str], ...], *, gen: bool = False) -> str:
    text = tokenizer.apply_chat_template(
        _messages(turns), tokenize=False, add_generation_prompt=gen,
        chat_template=chat_template_of(tokenizer),
    )  # fmt: skip
    assert isinstance(text, str), "apply_chat_template(tokenize=False) must return a str"
    return text


def _encode(tokenizer: Any, text: str) -> list[int]:
    ids = tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"]
    return list(ids)


def render_chat(tokenizer: Any, conv: Conversation, max_tokens: int) -> tuple[list[int], list[int]]:
    """Tokenize a conversation with the chat template and mark the assistant replies.

    The template is rendered for each growing prefix of turns and the new text of each turn is
    tokenized on its own (turn texts start at a template special token, so the pieces tokenize
    as the whole does; this is asserted). In an assistant turn the mask is 1 on the tokens that
    overlap the reply text (character offsets) and on the first special token after it (the end
    of turn, ``<|im_end|>`` for ChatML), 0 on the role header and on anything after the end
    token; it is 0 on system and user turns. Needs a fast tokenizer (offset mapping).

    Args:
        tokenizer: a Hugging Face tokenizer with a chat template.
        conv: the conversation.
        max_tokens: keep at most this many tokens (later turns are not rendered).

    Returns:
        ``(input_ids, assistant_mask)``, two lists of the same length ``<= max_tokens``.

    Raises:
        ValueError: ``max_tokens < 1``.
    """
    if max_tokens < 1:
        raise ValueError(f"max_tokens={max_tokens} must be >= 1. Fix: e.g. max_tokens=2048.")
    special = set(tokenizer.all_special_ids)
    ids: list[int] = []
    mask: list[int] = []
    prev_text = ""
    n_rendered = 0
    for i, (role, content) in enumerate(conv.turns):
        if len(ids) >= max_tokens:
            break
        full = _render(tokenizer, conv.turns[: i + 1])
        assert full.startswith(prev_text), "chat template is not prefix-stable"
        piece = full[len(prev_text) :]
        if role == "assistant":
            header = _render(tokenizer, conv.turns[:i], gen=True)[len(prev_text) :]
            assert piece.startswith(header + content), "assistant turn text not found in render"
            body_start, body_end = len(header), len(header) + len(content)
            enc = tokenizer(
                piece, add_special_tokens=False, return_offsets_mapping=True, verbose=False
            )
            piece_ids = list(enc["input_ids"])
            in_end_turn = False
            for tok_id, (start, stop) in zip(piece_ids, enc["offset_mapping"], strict=True):
                if start < body_end and stop > body_start:  # overlaps the reply text
                    mask.append(1)
                elif start >= body_end and not in_end_turn and tok_id in special:
                    mask.append(1)  # the end-of-turn token
                    in_end_turn = True
                else:
                    mask.append(0)
            ids += piece_ids
        else:
            piece_ids = _encode(tokenizer, piece)
            ids += piece_ids
            mask += [0] * len(piece_ids)
        prev_text = full
        n_rendered = i + 1
    if n_rendered:
        whole = _encode(tokenizer, _render(tokenizer, conv.turns[:n_rendered]))
        assert whole == ids, "turn-by-turn tokenization differs from the full render"
    return ids[:max_tokens], mask[:max_tokens]


def chat_prompt_ids(tokenizer: Any, user_text: str) -> list[int]:
    """Token ids of a one-user-turn chat followed by the assistant header (generation prompt).

    Returns:
        ``input_ids`` (list of int) ready to decode a reply from; includes the template's default
        system turn if it adds one.
    """
    return _encode(tokenizer, _render(tokenizer, (("user", user_text),), gen=True))
