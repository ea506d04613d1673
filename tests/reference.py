"""An independent computation of what the engine must return: full forwards, no KV cache."""

import math

import pytest
import torch

from lookahead.results import LEAD_PROB, MAX_CANDIDATES_PER_BRANCH, MAX_LEAD_TOKENS

TIE = 1e-5  # logprobs closer than this may rank either way between two exact computations
DEEP_RANK = 100  # past this rank, neighbours within TIE of each other are common in a real model's row


def possible_ranks(row, token: int) -> range:
    """The ranks (1 = likeliest) `token` may take in `row` (log-probabilities) as far as float rounding can tell:
    tokens within TIE of it may fall either side. Two exact computations of one row round differently where their
    matrix products take other paths (a pass's width picks the faster one, measured at each load of a model:
    lookahead/cpu_linear.py)."""
    row = torch.as_tensor(row)
    chosen = row[token]
    return range(int((row > chosen + TIE).sum()) + 1, int((row > chosen - TIE).sum()) + 2)


def ranks_agree(a: int, b: int) -> bool:
    """Whether two exact computations' ranks of one token agree, without the row: the ranks the heatmap tells apart
    (top 1, 10, 100) are the same, and deep in the list a near-tied neighbour may swap (possible_ranks says why)."""
    return a == b or min(a, b) > DEEP_RANK


def possible_tops(row) -> set[int]:
    """The tokens that may come out first of `row` as far as float rounding can tell (within TIE of its maximum)."""
    row = torch.as_tensor(row)
    return set(torch.nonzero(row >= row.max() - TIE).flatten().tolist())


@torch.inference_mode()
def next_logits(model, ids: list[int]) -> torch.Tensor:
    return model(torch.tensor([ids]), use_cache=False).logits[0, -1]


def reference_lookahead(model, tokenizer, text: str, k: int, depth: int, dropped: int = 0, ids_for=None) -> dict:
    """The k branches a writer is shown after `text` (healing a trailing whitespace character): where the likeliest
    next token is all but certain (LEAD_PROB), it leads them all ("lead"), up to MAX_LEAD_TOKENS; then the likeliest
    next tokens, each continued greedily and cut after the end-of-sequence token if it reaches one, and after its
    last whole character; a branch writing the text of a likelier one is no other choice, and the next candidate
    is taken instead (up to MAX_CANDIDATES_PER_BRANCH * k of them). `ids_for(prefix)`: the token ids of the healed
    text (default: the tokenizer's; chat mode passes the conversation's).

    `dropped`: how many leading tokens the window leaves out (the engine chooses; the test checks the choice).
    """
    healed = text[-1] if len(text) > 1 and text[-1].isspace() else ""
    ids = (ids_for or (lambda prefix: tokenizer(prefix)["input_ids"]))(text[: len(text) - len(healed)])[dropped:]
    eos = model.generation_config.eos_token_id
    eos = {eos} if isinstance(eos, int) else set(eos or ())
    logits, lead, lead_prob = next_logits(model, ids), [], 1.0
    if healed:
        texts = tokenizer.batch_decode([[i] for i in range(logits.shape[0])])
        ok = torch.tensor([t.startswith(healed) for t in texts])
        logits = logits.masked_fill(~ok, float("-inf"))
    logprobs = torch.log_softmax(logits, -1)
    while len(lead) < MAX_LEAD_TOKENS and logprobs.max().exp() >= LEAD_PROB and int(logprobs.argmax()) not in eos:
        lead.append(int(logprobs.argmax()))
        lead_prob *= float(logprobs.max().exp())
        ids = ids + lead[-1:]
        logits = next_logits(model, ids)
        logprobs = torch.log_softmax(logits, -1)
    branches, texts = [], []
    for token in logprobs.topk(MAX_CANDIDATES_PER_BRANCH * k).indices.tolist():
        if len(branches) == k or not torch.isfinite(logprobs[token]):
            break
        seq = ids + [token]
        for _ in range(depth - 1):
            seq.append(int(next_logits(model, seq).argmax()))
        branch = lead + seq[len(ids):]
        branch = next((branch[: i + 1] for i, t in enumerate(branch) if t in eos), branch)
        ends = branch[-1] in eos
        shown = lambda tokens: tokenizer.decode(tokens, clean_up_tokenization_spaces=False)[len(healed):]  # noqa: E731
        while not ends and shown(branch).endswith("\ufffd") and len(branch) > len(lead) + 1:
            branch = branch[:-1]
        written = shown(branch[:-1] if ends else branch)
        if written not in texts:
            branches.append(branch)
            texts.append(written)
    return {"ids": ids, "healed": healed, "logits": logits, "logprobs": logprobs, "branches": branches,
            "lead": lead, "lead_prob": lead_prob, "firsts": logprobs.topk(k).indices.tolist()}


@torch.inference_mode()
def reference_scores(model, tokenizer, text: str, k: int, ids: list[int] | None = None) -> list[dict | None]:
    """One full forward over the text's tokens (or `ids`), no cache: per token after the first, its row."""
    ids = ids or tokenizer(text)["input_ids"]
    logprobs = torch.log_softmax(model(torch.tensor([ids]), use_cache=False).logits[0].float(), dim=-1)
    rows = [None]
    for i in range(1, len(ids)):
        row, lp = logprobs[i - 1], logprobs[i - 1, ids[i]]
        rows.append({
            "logprob": float(lp), "ranks": possible_ranks(row, ids[i]),
            "entropy": float(-(row.exp() * row).nan_to_num().sum() / math.log(2)),
            "top": row.topk(k).indices.tolist(), "top_logprobs": row.topk(k).values.tolist(),
        })
    return rows


def assert_matches_reference(result, ref, k):
    assert [b["token_ids"] for b in result["branches"]] == ref["branches"]
    for entry in result["distribution"]:
        assert entry["logprob"] == pytest.approx(float(ref["logprobs"][entry["token_id"]]), abs=1e-4)
        assert entry["prob"] == pytest.approx(float(ref["logprobs"][entry["token_id"]].exp()), abs=1e-4)
    assert [d["token_id"] for d in result["distribution"][:k]] == ref["firsts"]
    assert (result["lead"] or {}).get("token_ids", []) == ref["lead"]
