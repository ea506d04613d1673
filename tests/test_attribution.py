"""Attribution against an independent computation: torch.func gradients point by point, and a second,
eager-attention copy of each model for the attention weights."""

import pytest
import torch
from transformers import AutoModelForCausalLM

import custom_llm_inference as inference
from lookahead import attribution
from lookahead.models import model_source
from lookahead.requests import AttributionRequest
from lookahead.scheduler import before_every_module_call

TEXT = "The old lighthouse keeper climbed the stairs and"
TOLERANCE = 1e-3


def reference_scores(model, ids: list[int], target: int, method: str, steps: int) -> torch.Tensor:
    """f = log p(target) at the last position as a function of the input embeddings, differentiated by torch.func."""
    embeds = model.get_input_embeddings()(torch.tensor(ids)).detach()

    def f(e):
        return torch.log_softmax(model(inputs_embeds=e[None], use_cache=False).logits[0, -1].float(), -1)[target]

    if method == "integrated_gradients":
        grad = sum(torch.func.grad(f)(k / steps * embeds) for k in range(1, steps + 1)) / steps
    else:
        grad = torch.func.grad(f)(embeds)
    scores = (grad if method == "saliency" else embeds * grad).norm(dim=-1)
    return scores / scores.sum()


def reference_attention(model_name: str, ids: list[int]) -> torch.Tensor:
    eager = AutoModelForCausalLM.from_pretrained(model_source(model_name), attn_implementation="eager").eval()
    with torch.no_grad():
        attentions = eager(torch.tensor([ids]), output_attentions=True).attentions
    scores = torch.stack([a[0, :, -1, :] for a in attentions]).mean(dim=(0, 1))
    return scores / scores.sum()


@pytest.mark.parametrize("method", ["saliency", "input_x_gradient", "integrated_gradients", "attention"])
def test_scores_equal_an_independent_computation(model_name, method):
    model, tokenizer = inference.load_model(model_name)
    ids = tokenizer(TEXT)["input_ids"]
    result = inference.attribution(TEXT, None, method, 4, model_name=model_name)
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0, -1].float()
    target = int(logits.argmax())
    assert result["target"]["token_id"] == target
    assert result["target"]["prob"] == pytest.approx(float(torch.softmax(logits, -1)[target]), abs=1e-5)
    expected = (reference_attention(model_name, ids) if method == "attention"
                else reference_scores(model, ids, target, method, 4))
    scores = torch.tensor([t["score"] for t in result["tokens"]])
    assert torch.allclose(scores, expected, atol=TOLERANCE), (scores, expected)
    assert sum(t["score"] for t in result["tokens"]) == pytest.approx(1.0, abs=1e-5)
    assert model.config._attn_implementation != "eager" or method != "attention", (
        "the model's attention path is restored")


def test_a_long_window_attends_in_blocks_of_rows_each_a_slice_of_its_own(model_name, monkeypatch):
    """A sliced job yields between module calls; one attention over a long window would be one call, forward and
    backward. In blocks of query rows the scores are those of the whole attention, and each block is a slice."""
    model, tokenizer = inference.load_model(model_name)
    ids = tokenizer(TEXT)["input_ids"]
    with torch.no_grad():
        target = int(model(torch.tensor([ids])).logits[0, -1].argmax())

    def sliced(pairs: int) -> tuple[torch.Tensor, int]:
        monkeypatch.setattr(attribution, "ATTENTION_PAIRS", pairs)
        checks = []
        with before_every_module_call(lambda: checks.append(1)):
            scores, _ = attribution.attribute(model, ids, target, "integrated_gradients", 2)
        return scores, len(checks)

    whole, whole_checks = sliced(len(ids) ** 2)
    blocked, blocked_checks = sliced(3 * len(ids))  # blocks of 3 rows
    assert torch.allclose(blocked, reference_scores(model, ids, target, "integrated_gradients", 2), atol=TOLERANCE)
    assert torch.allclose(blocked, whole, atol=TOLERANCE)
    blocks, layers = -(-len(ids) // 3), model.config.get_text_config().num_hidden_layers
    assert blocked_checks >= whole_checks + 2 * layers * (blocks - 1), "each block checks in, forward and backward"


def test_tokens_and_spans_are_token_probabilities_and_a_window_leaves_the_start_unscored(embedded):
    text = "Once upon a time, in a kingdom by the sea, there lived a"
    result = inference.attribution(text, 264, "saliency", window=5)  # token 264: " king"? any id will do
    scored = inference.token_probabilities(text)
    assert [(t["token_id"], t["start"], t["end"]) for t in result["tokens"]] == [
        (t["token_id"], t["start"], t["end"]) for t in scored["tokens"]]
    assert "".join(text[t["start"] : t["end"]] for t in result["tokens"]) == text
    assert result["window_tokens"] == 5 and result["truncated_tokens"] == len(result["tokens"]) - 5
    assert all(t["score"] is None for t in result["tokens"][:-5])
    assert sum(t["score"] for t in result["tokens"][-5:]) == pytest.approx(1.0, abs=1e-5)
    assert result["target"]["token_id"] == 264 and result["steps"] == 1


def test_chat_mode_lists_the_replys_tokens_attributed_after_the_conversation(embedded):
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    result = inference.attribution("The capital is", messages=messages, method="input_x_gradient")
    assert "".join(t["token"] for t in result["tokens"]) == "The capital is"
    assert result["window_tokens"] > len(result["tokens"]), "the conversation is in the window"
    assert 0 < sum(t["score"] for t in result["tokens"]) < 1


def test_at_token_explains_that_place_from_the_texts_own_tokens_before_it(embedded):
    """The heatmap's "why?": the context is the text's tokens before the token, exactly. Here a re-tokenised
    prefix would differ: "\n\n" before "The" is two tokens in the text, one on its own."""
    text = "The keeper slept.\n\nThe storm"
    model, tokenizer = inference.load_model()
    ids = tokenizer(text)["input_ids"]
    at = 6  # "The", after "." "\n" "\n"
    assert tokenizer(text[: text.index("The storm")])["input_ids"] != ids[:at], "the prefix alone splits otherwise"
    listed = inference.token_probabilities(text)["tokens"]
    result = inference.attribution(text, None, "input_x_gradient", at_token=at)
    expected_target = listed[at]["alternatives"][0]
    assert result["target"]["token_id"] == expected_target["token_id"]
    assert result["target"]["prob"] == pytest.approx(expected_target["prob"], abs=1e-5)
    assert [(t["token_id"], t["start"], t["end"]) for t in result["tokens"]] == [
        (t["token_id"], t["start"], t["end"]) for t in listed[:at]]
    expected = reference_scores(model, ids[:at], expected_target["token_id"], "input_x_gradient", 1)
    assert torch.allclose(torch.tensor([t["score"] for t in result["tokens"]]), expected, atol=TOLERANCE)


def test_the_stream_reports_each_pass_then_the_result(embedded):
    items = list(inference.attribution_stream(TEXT, None, "integrated_gradients", 10))
    assert items[:-1] == [{"done": k, "of": 3} for k in (1, 2, 3)], "10 points, 4 per pass"
    assert items[-1] == inference.attribution(TEXT, None, "integrated_gradients", 10)
    assert [i.get("done") for i in inference.attribution_stream(TEXT, None, "saliency")][:-1] == [1]


@pytest.mark.parametrize("kwargs,message", [
    ({"at_token": 0}, "nothing comes before it"),
    ({"at_token": 99}, "at_token must be between 0 and"),
    ({"method": "shap"}, "method must be one of"),
    ({"target_token_id": 10**7}, "target_token_id must be between"),
    ({"steps": 0}, "steps must be between 1 and 64"),
    ({"steps": 65}, "steps must be between 1 and 64"),
    ({"window": 0}, "window must be between 1 and 2048"),
])
def test_bad_input_gets_a_clear_error(embedded, kwargs, message):
    with pytest.raises(ValueError, match=message):
        inference.attribution("abc", **kwargs)


def test_the_vllm_backend_says_attribution_runs_in_process(embedded):
    inference.use_backend("vllm", "http://127.0.0.1:9/v1")
    try:
        with pytest.raises(ValueError, match="in this process"):
            inference.attribution("abc")
    finally:
        inference.use_backend()


def test_the_gpu_time_asked_grows_with_the_window_and_the_steps():
    def asked(steps: int, window: int) -> int:
        return inference.gpu_seconds(
            AttributionRequest(text="x", method="integrated_gradients", steps=steps, window=window)
        )

    small, large = asked(4, 128), asked(64, 2048)
    assert small < asked(16, 512) < large
    assert 1.5 * large < 120, "the largest fits an anonymous visitor's quota"
