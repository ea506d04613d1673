"""Each token's share in the model's probability of the next token (lookahead/attribution.py), pass by pass, as a
long job: interactive work goes first, and a newer question of the session cancels it."""

from __future__ import annotations

from collections.abc import Generator, Iterator

import torch
from transformers import PreTrainedModel

from lookahead.attribution import attribute_stepwise, passes
from lookahead.chat import as_dicts, encode
from lookahead.models import context_limit, load_model
from lookahead.outputs import Attribution, AttributionProgress, Target
from lookahead.requests import AttributionRequest
from lookahead.results import attribution_entries, text_token_places
from lookahead.scheduler import scheduler


def run_attribution(request: AttributionRequest) -> Iterator[AttributionProgress | Attribution]:
    """Each token's share in the model's probability of the next token (lookahead/attribution.py), over the
    last `window` tokens of the context (in chat mode the conversation's, the reply's tokens listed); with
    `at_token`, of that token's place in the text instead, from the tokens before it. Yields the progress
    after each pass over the window, then the result."""
    model, tokenizer = load_model(request.model_name)
    text, method, steps = request.text, request.method, request.steps
    encoding, text_start = encode(
        tokenizer, text, as_dicts(request.messages), return_offsets_mapping=True, return_special_tokens_mask=True
    )
    places = text_token_places(encoding, text_start, len(text))
    cut, chars = (len(encoding["input_ids"]), len(text)) if request.at_token is None else places[request.at_token]
    all_ids, offsets, special = (encoding[k][:cut] for k in ("input_ids", "offset_mapping", "special_tokens_mask"))
    dropped = max(0, len(all_ids) - min(request.window, context_limit(model)))
    ids = all_ids[dropped:]
    # interactive work first; a newer question of the session cancels this one
    job = scheduler.start(request.session, "attribution", request)
    work = scheduler.steps(job, _explained(model, ids, request.target_token_id, method, steps))
    of = passes(method, steps, len(ids))
    while True:
        try:
            yield AttributionProgress(next(work), of)
        except StopIteration as finished:
            target_token_id, (scores, prob) = finished.value
            break
    yield Attribution(
        target=Target(target_token_id, tokenizer.decode([target_token_id]), prob),
        method=method,
        steps=steps if method == "integrated_gradients" else 1,
        window_tokens=len(ids),
        truncated_tokens=dropped,
        tokens=attribution_entries(all_ids, [None] * dropped + scores.tolist(), tokenizer, offsets, special,
                                   text_start, chars),
    )


def _explained(
    model: PreTrainedModel, ids: list[int], target: int | None, method: str, steps: int
) -> Generator[int, None, tuple[int, tuple[torch.Tensor, float]]]:
    """attribute_stepwise's passes for `target`, or for the model's first choice after `ids` (one forward more)."""
    if target is None:
        with torch.inference_mode():
            logits = model(torch.tensor([ids], device=model.device), use_cache=False, logits_to_keep=1).logits
        target = int(logits[0, -1].argmax())
    return target, (yield from attribute_stepwise(model, ids, target, method, steps))
