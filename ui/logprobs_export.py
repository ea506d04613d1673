"""The writer's text for analysis: each token with its id, its logprob and the model's top alternatives, in the
shape of OpenAI's `logprobs.content` (as vLLM, llama.cpp and Ollama emit it), and who wrote it: the writer, or the
model through the node that accepted it (history/authorship.py)."""

from __future__ import annotations

import json
import math

from history import History
from history.authorship import WRITER, authorship
from lookahead.outputs import ScoredToken, TokenScores
from ui.ledger import token_authors

FORMAT = "interactive-lookahead-logprobs"
VERSION = 1
FILE_NAME = "lookahead-logprobs-by-author.json"


def logprob_entry(token: str, logprob: float | None) -> dict:
    """One token as OpenAI's logprobs list it: its text, logprob (None where nothing before it was scored) and
    UTF-8 bytes."""
    return {"token": token, "logprob": logprob, "bytes": list(token.encode("utf-8"))}


def token_entry(token: ScoredToken, author: int | None) -> dict:
    """A token of the text: OpenAI's fields, its id, its top alternatives, and its author."""
    top = [logprob_entry(a.token, math.log(a.prob) if a.prob > 0 else None) for a in token.alternatives or ()]
    return {**logprob_entry(token.token, token.logprob), "top_logprobs": top, "token_id": token.token_id,
            "author": "writer" if author is WRITER else "model", "node": author}


def logprobs_export(history: History, scores: TokenScores) -> dict:
    """The export of the history's current text, `scores` being the engine's scores of it."""
    tokens = scores.tokens
    authors = token_authors(authorship(history), tokens)
    return {"format": FORMAT, "version": VERSION, "model": scores.model, "text": history.text,
            "logprobs": {"content": [token_entry(t, a) for t, a in zip(tokens, authors)]}}


def logprobs_json(history: History, scores: TokenScores) -> str:
    return json.dumps(logprobs_export(history, scores), ensure_ascii=False, indent=1)
