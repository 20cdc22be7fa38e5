"""Real data for draft training and evaluation: ShareGPT, chat, pretraining text, prompts."""

from workloads.data.chat import chat_prompt_ids, render_chat
from workloads.data.corpus import (
    DEFAULT_MIX,
    SOURCES,
    Document,
    corpus_fingerprint,
    iter_pretrain_documents,
    pack_documents,
    pack_pretrain_rows,
    stdlib_files,
    tokenize_documents,
)
from workloads.data.packing import (
    PACKINGS,
    PackedRows,
    Packing,
    attention_allowed,
    pack_token_documents,
    same_segment,
    segment_ids,
)
from workloads.data.prompts import (
    BUILTIN_PROMPT_SETS,
    HUMANEVAL_INSTRUCTION,
    SHAREGPT_MAX_PROMPT_CHARS,
    PromptSet,
    load_prompt_sets,
)
from workloads.data.sharegpt import (
    ROLE_MAP,
    Conversation,
    ShareGPTReadStats,
    default_sharegpt_path,
    iter_sharegpt_conversations,
    normalize_conversation,
    read_sharegpt,
    split_conversations,
)

__all__ = [
    "BUILTIN_PROMPT_SETS",
    "DEFAULT_MIX",
    "HUMANEVAL_INSTRUCTION",
    "PACKINGS",
    "ROLE_MAP",
    "SHAREGPT_MAX_PROMPT_CHARS",
    "SOURCES",
    "Conversation",
    "Document",
    "PackedRows",
    "Packing",
    "PromptSet",
    "ShareGPTReadStats",
    "attention_allowed",
    "chat_prompt_ids",
    "corpus_fingerprint",
    "default_sharegpt_path",
    "iter_pretrain_documents",
    "iter_sharegpt_conversations",
    "load_prompt_sets",
    "normalize_conversation",
    "pack_documents",
    "pack_pretrain_rows",
    "pack_token_documents",
    "read_sharegpt",
    "render_chat",
    "same_segment",
    "segment_ids",
    "split_conversations",
    "stdlib_files",
    "tokenize_documents",
]
