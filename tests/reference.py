"""An independent computation of what the engine must return: full forwards, no KV cache."""

import torch


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
