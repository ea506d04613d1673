"""Token healing for text that ends in whitespace.

"The cat " tokenizes as [..., " cat", " "]: scored as is, the model must continue after
a lone space token, which it rarely saw in training (words carry their leading space:
" sat"), so the suggestions are poor. Instead the trailing whitespace character is backed
up ("The cat") and the next token is restricted to tokens whose text starts with it
(" sat", " is", ...), renormalised over them. Stripping that character from the start of
a branch gives exactly the text to append.

Only the last whitespace character is backed up, not the whole run: byte-level BPE
pre-tokenizers split "x:\n    return" as ["\n   ", " return"], attaching the run's last
space to the next word, so backing up one character keeps the prompt's tokenization the
one the model saw in training. When no token starts with that character (an exotic
Unicode space), nothing is healed.
"""

from __future__ import annotations

import functools

import torch
from transformers import PreTrainedTokenizerBase


@functools.cache
def token_texts(tokenizer: PreTrainedTokenizerBase) -> tuple[str, ...]:
    """Each token id's text on its own (partial UTF-8 shows as U+FFFD)."""
    return tuple(tokenizer.batch_decode([[i] for i in range(len(tokenizer))], clean_up_tokenization_spaces=False))


@functools.cache
def _ids_starting_with(tokenizer: PreTrainedTokenizerBase, prefix: str) -> tuple[int, ...]:
    return tuple(i for i, t in enumerate(token_texts(tokenizer)) if t.startswith(prefix))


def split_for_healing(text: str, tokenizer: PreTrainedTokenizerBase) -> tuple[str, str]:
    """(text to tokenize, whitespace the next token must start with); (text, "") when nothing is healed."""
    if len(text) < 2 or not text[-1].isspace() or not _ids_starting_with(tokenizer, text[-1]):
        return text, ""
    return text[:-1], text[-1]


def allowed_first_tokens(
    tokenizer: PreTrainedTokenizerBase, ws: str, vocab_size: int, device: torch.device
) -> torch.Tensor:
    """Bool mask (vocab_size,) of the tokens whose text starts with `ws`."""
    mask = torch.zeros(vocab_size, dtype=torch.bool, device=device)
    mask[[i for i in _ids_starting_with(tokenizer, ws) if i < vocab_size]] = True
    return mask
