"""Real data for draft training and evaluation: ShareGPT, chat, pretraining text, prompts."""

from workloads.data.chat import chat_prompt_ids, render_chat
from workloads.data.corpus import (
    DEFAULT_MIX,
    SOURCES,
    Document,
    corpus_fingerprint,
    iter_pretrain_documents,
    pack_documents,
    stdlib_files,
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
    "ROLE_MAP",
    "SHAREGPT_MAX_PROMPT_CHARS",
    "SOURCES",
    "Conversation",
    "Document",
    "PromptSet",
    "ShareGPTReadStats",
    "chat_prompt_ids",
    "corpus_fingerprint",
    "default_sharegpt_path",
    "iter_pretrain_documents",
    "iter_sharegpt_conversations",
    "load_prompt_sets",
    "normalize_conversation",
    "pack_documents",
    "read_sharegpt",
    "render_chat",
    "split_conversations",
    "stdlib_files",
]
