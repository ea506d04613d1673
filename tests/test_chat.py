"""Chat mode: the reply being written, after the conversation, in the model's own chat template.

Every result equals transformers on `apply_chat_template(messages + [reply], continue_final_message=True)`,
on tiny random models carrying Llama-3- and Qwen2-style templates and on the embedded (ChatML) model.
"""

import shutil

import pytest
import torch
from transformers import AutoTokenizer

import custom_llm_inference as inference
from reference import assert_matches_reference, reference_lookahead, reference_scores

# Llama 3 trims each message's content: a reply's trailing space would vanish (token healing keeps it).
LLAMA3_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
    " + message['content'] | trim + '<|eot_id|>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)
QWEN2_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
CONVERSATION = [
    {"role": "system", "content": "You answer briefly."},
    {"role": "user", "content": "What is 2+2?"},
]
REPLIES = ["", "2+2 equals 4", "Sure, the answer is "]


@pytest.fixture(scope="module")
def chat_models(tiny_model_dirs, tmp_path_factory) -> dict[str, str]:
    """The embedded model, and tiny Llama and Qwen2 copies carrying those families' templates."""
    names = {"embedded": inference.default_model_name()}
    for arch, template in (("llama", LLAMA3_TEMPLATE), ("qwen2", QWEN2_TEMPLATE)):
        path = tmp_path_factory.mktemp(f"chat-{arch}")
        shutil.copytree(tiny_model_dirs[arch], path, dirs_exist_ok=True)
        tokenizer = AutoTokenizer.from_pretrained(tiny_model_dirs[arch])  # a copy: the cached one stays as it is
        tokenizer.chat_template = template
        tokenizer.save_pretrained(path)
        names[arch] = str(path)
    return names


def transformers_ids(tokenizer, messages: list[dict], reply: str) -> list[int]:
    if not reply:
        return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
    return tokenizer.apply_chat_template(
        [*messages, {"role": "assistant", "content": reply}], continue_final_message=True, tokenize=True,
        return_dict=False,
    )


@pytest.mark.parametrize("arch", ["embedded", "llama", "qwen2"])
@pytest.mark.parametrize("reply", REPLIES)
def test_branches_and_distribution_equal_transformers_on_the_conversation(chat_models, arch, reply):
    name = chat_models[arch]
    model, tokenizer = inference.load_model(name)
    result = inference.lookahead(reply, 4, 3, session=f"chat {arch} {reply}", model_name=name, messages=CONVERSATION)
    reference = reference_lookahead(model, tokenizer, reply, 4, 3, dropped=result["truncated_tokens"],
                                    ids_for=lambda prefix: transformers_ids(tokenizer, CONVERSATION, prefix))
    assert result["context_tokens"] == len(reference["ids"])  # the tiny models' context is 64 tokens
    assert_matches_reference(result, reference, 4)
    if not result["truncated_tokens"]:  # (near the limit, depth 1 may keep a different window than depth 3)
        distribution = inference.next_token_distribution(reply, 5, session=f"d {arch}", model_name=name,
                                                   messages=CONVERSATION)
        assert [d["token_id"] for d in distribution] == [d["token_id"] for d in result["distribution"][:5]]


def test_a_trimming_template_still_heals_the_reply(chat_models):
    """Llama 3's template trims content: "answer is " renders as "answer is"; the next token must start with a space."""
    name = chat_models["llama"]
    _, tokenizer = inference.load_model(name)
    reply = "Sure, the answer is "
    rendered = tokenizer.apply_chat_template([*CONVERSATION, {"role": "assistant", "content": reply}],
                                             continue_final_message=True, tokenize=False)
    assert rendered.endswith("answer is"), "the template dropped the space"
    result = inference.lookahead(reply, 3, 2, session="heal", model_name=name, messages=CONVERSATION)
    assert result["healed_whitespace"] == " "
    texts = tokenizer.batch_decode([[d["token_id"]] for d in result["distribution"]])
    assert all(t.startswith(" ") for t in texts), "the next token brings the space back"


@pytest.mark.parametrize("arch", ["embedded", "llama", "qwen2"])
def test_token_probabilities_list_the_reply_scored_after_the_conversation(chat_models, arch):
    name = chat_models[arch]
    model, tokenizer = inference.load_model(name)
    reply = "2+2 equals 4, of course."
    result = inference.token_probabilities(reply, 3, session=f"heat {arch}", model_name=name, messages=CONVERSATION)
    ids = transformers_ids(tokenizer, CONVERSATION, reply)
    reference = reference_scores(model, tokenizer, "", 3, ids[result["truncated_tokens"] :])  # tiny: 64 tokens
    reply_ids = [t["token_id"] for t in result["tokens"]]
    assert ids[-len(reply_ids):] == reply_ids and result["context_tokens"] + result["truncated_tokens"] == len(ids)
    assert "".join(reply[t["start"] : t["end"]] for t in result["tokens"]) == reply
    for token, ref in zip(result["tokens"], reference[-len(reply_ids):]):
        assert token["logprob"] == pytest.approx(ref["logprob"], abs=1e-4) and token["rank"] in ref["ranks"]


def test_generate_continues_the_reply_and_stops_at_the_end_of_the_turn(embedded):
    model, tokenizer = embedded
    result = inference.generate("", 40, messages=CONVERSATION)
    ids = transformers_ids(tokenizer, CONVERSATION, "")
    expected = model.generate(torch.tensor([ids]), max_new_tokens=40, do_sample=False)[0, len(ids):].tolist()
    assert result["token_ids"] == expected
    assert result["token_ids"][-1] == model.generation_config.eos_token_id, "the reply ends its turn"


def test_a_branch_stops_after_the_end_of_sequence_token_and_says_so(embedded):
    model, _ = embedded
    result = inference.lookahead(
        "2+2 equals 4", 5, 4, session="eos", messages=[{"role": "user", "content": "What is 2+2?"}]
    )
    eos = model.generation_config.eos_token_id
    ending = [b for b in result["branches"] if b["ends"]]
    assert ending, "after '4' the model would end its reply: one branch is '.' and the end of the turn"
    for branch in result["branches"]:
        assert (eos in branch["token_ids"]) == branch["ends"]
        if branch["ends"]:
            assert branch["token_ids"][-1] == eos and "<|im_end|>" not in branch["text"]
        else:
            assert len(branch["token_ids"]) == 4


def test_the_cache_carries_over_from_one_turn_to_the_next(embedded):
    reply = "2+2 equals 4."
    inference.lookahead(reply, 3, 3, session="turns", messages=CONVERSATION)
    next_turn = [*CONVERSATION, {"role": "assistant", "content": reply}, {"role": "user", "content": "And 3+3?"}]
    result = inference.lookahead("", 3, 3, session="turns", messages=next_turn)
    _, tokenizer = embedded
    first_turn = transformers_ids(tokenizer, CONVERSATION, reply)
    assert result["reused_tokens"] >= len(first_turn) - 2, "only the new turn's tokens ran"


def test_a_model_without_a_chat_template_gets_a_clear_error(tiny_model_dirs, tmp_path):
    shutil.copytree(tiny_model_dirs["gpt2"], tmp_path, dirs_exist_ok=True)
    (tmp_path / "chat_template.jinja").unlink(missing_ok=True)
    tokenizer = AutoTokenizer.from_pretrained(tmp_path)
    tokenizer.chat_template = None
    tokenizer.save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="has no chat template"):
        inference.lookahead("Hi", model_name=str(tmp_path), messages=CONVERSATION)


@pytest.mark.parametrize(
    "messages, message",
    [("hello", "messages must be a list"),
     ([{"role": "robot", "content": "x"}], r"messages\[0\]\['role'\] must be one of"),
     ([{"role": "user"}], r"messages\[0\] must be a dict with exactly"),
     ([{"role": "user", "content": 3}], r"messages\[0\]\['content'\] must be a string"),
     ([{"role": "user", "content": "\ud800"}], "lone surrogate")],
)
def test_bad_messages_raise_clear_value_errors(messages, message):
    with pytest.raises(ValueError, match=message):
        inference.lookahead("Hi", messages=messages)
    with pytest.raises(ValueError, match="text is empty"):
        inference.lookahead("")
