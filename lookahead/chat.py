"""Chat mode: the text is the assistant's reply being written, after the conversation so far.

Instruct models are trained on conversations in their chat template, not on raw text. The
context is the model's own template with the reply as the final, unfinished assistant message:
exactly transformers' `apply_chat_template(messages + [{"role": "assistant", "content": reply}],
continue_final_message=True)`. An empty reply is the generation prompt (`add_generation_prompt`),
where the model starts its reply. Callers heal trailing whitespace before this (a template may
trim it), so the reply given here never ends in whitespace that the template could drop.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable

from transformers import PreTrainedTokenizerBase

ROLES = ("system", "user", "assistant")
MAX_MESSAGES = 200


def check_messages(messages: object, check_content: Callable[[str, str], str]) -> list[dict] | None:
    """`messages` as a list of {"role", "content"} dicts, or None (plain text); ValueError naming what is wrong."""
    if messages is None:
        return None
    if not isinstance(messages, list) or len(messages) > MAX_MESSAGES:
        raise ValueError(f"messages must be a list of at most {MAX_MESSAGES} {{'role', 'content'}} dicts, got "
                         f"{type(messages).__name__}")
    checked = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or set(message) != {"role", "content"}:
            raise ValueError(f"messages[{i}] must be a dict with exactly the keys 'role' and 'content'")
        if message["role"] not in ROLES:
            raise ValueError(f"messages[{i}]['role'] must be one of {list(ROLES)}, got {message['role']!r}")
        checked.append({"role": message["role"],
                        "content": check_content(f"messages[{i}]['content']", message["content"])})
    return checked


def as_dicts(messages: tuple[tuple[str, str], ...] | None) -> list[dict] | None:
    """Checked messages, kept as hashable (role, content) pairs, back as the dicts templates take."""
    return None if messages is None else [{"role": role, "content": content} for role, content in messages]


def check_template(tokenizer: PreTrainedTokenizerBase, model_name: str) -> None:
    if not tokenizer.chat_template:
        raise ValueError(f"{model_name} has no chat template: use plain text (leave out messages), or a chat model")


def chat_prompt(tokenizer: PreTrainedTokenizerBase, messages: list[dict], reply: str) -> str:
    """The conversation rendered by the model's template, ending inside the assistant's `reply`."""
    if not reply:
        return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return tokenizer.apply_chat_template(
        [*messages, {"role": "assistant", "content": reply}], continue_final_message=True, tokenize=False
    )


ENCODINGS_KEPT = 8  # one call reads its text several times (a comparison: each model's listing and distribution)


def encode(tokenizer: PreTrainedTokenizerBase, text: str, messages: list[dict] | None, **options) -> tuple[dict, int]:
    """The tokenizer's encoding of what the model sees (the text's own, or the conversation ending in
    `text`), and where `text` begins in the string encoded. `options` go to the tokenizer (offsets, masks).
    The last few are kept (a 3k-token text takes ~5 ms): callers read an encoding, never change it."""
    return _encoded(tokenizer, text, None if messages is None else json.dumps(messages), tuple(sorted(options.items())))


@functools.lru_cache(maxsize=ENCODINGS_KEPT)
def _encoded(tokenizer: PreTrainedTokenizerBase, text: str, messages: str | None, options: tuple) -> tuple[dict, int]:
    if messages is None:
        return tokenizer(text, **dict(options)), 0
    prompt = chat_prompt(tokenizer, json.loads(messages), text)
    return tokenizer(prompt, add_special_tokens=False, **dict(options)), _reply_start(prompt, text)


def context_ids(tokenizer: PreTrainedTokenizerBase, text: str, messages: list[dict] | None) -> list[int]:
    """The token ids the model sees: the text's own (plain), or the conversation ending in `text` (chat)."""
    return encode(tokenizer, text, messages)[0]["input_ids"]


def _reply_start(prompt: str, reply: str) -> int:
    """Where the reply begins in the rendered conversation (a template may trim the reply's ends)."""
    trimmed = reply.strip()
    return len(prompt) - len(reply) if prompt.endswith(reply) else prompt.rindex(trimmed) if trimmed else len(prompt)
