"""An independent computation of what the engine must return: full forwards, no KV cache."""

import math

import pytest
import torch

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
    """Top-k next tokens of `text` (healing a trailing whitespace character) and their greedy continuations,
    each cut after the end-of-sequence token if it reaches one. `ids_for(prefix)`: the token ids of the
    healed text (default: the tokenizer's; chat mode passes the conversation's).

    `dropped`: how many leading tokens the window leaves out (the engine chooses; the test checks the choice).
    """
    healed = text[-1] if len(text) > 1 and text[-1].isspace() else ""
    ids = (ids_for or (lambda prefix: tokenizer(prefix)["input_ids"]))(text[: len(text) - len(healed)])[dropped:]
    logits = next_logits(model, ids)
    if healed:
        texts = tokenizer.batch_decode([[i] for i in range(logits.shape[0])])
        ok = torch.tensor([t.startswith(healed) for t in texts])
        logits = logits.masked_fill(~ok, float("-inf"))
    logprobs = torch.log_softmax(logits, -1)
    first = logprobs.topk(k).indices.tolist()
    branches, step_logits = [], []
    for token in first:
        seq, steps = ids + [token], []
        for _ in range(depth - 1):
            steps.append(next_logits(model, seq))
            seq.append(int(steps[-1].argmax()))
        branch, eos = seq[len(ids) :], model.generation_config.eos_token_id
        eos = {eos} if isinstance(eos, int) else set(eos or ())
        branches.append(next((branch[: i + 1] for i, t in enumerate(branch) if t in eos), branch))
        step_logits.append(steps)
    return {"ids": ids, "healed": healed, "logits": logits, "logprobs": logprobs, "branches": branches,
            "step_logits": step_logits}


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
    assert [d["token_id"] for d in result["distribution"][:k]] == [b[0] for b in ref["branches"]]
