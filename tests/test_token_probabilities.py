"""The text through the model's eyes: every token's probability, rank, entropy and alternatives,
equal to one independent transformers pass over the whole text, and scored only once per session."""

import json
import math
import threading
import time

import pytest

import custom_llm_inference as inference
from lookahead import scoring
from lookahead.scheduler import Cancelled, Job, scheduler
from reference import assert_matches_reference, ranks_agree, reference_lookahead, reference_scores
from threads import JOIN_SECONDS, SECONDS, run_threads, until

TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Emoji 😀 split over tokens,  double  spaces\n\nand a trailing space ",
]


def assert_matches(result: dict, reference: list[dict | None], text: str, tokenizer) -> None:
    tokens = result["tokens"]
    assert [t["token_id"] for t in tokens] == tokenizer(text, add_special_tokens=False)["input_ids"]
    assert "".join(text[t["start"] : t["end"]] for t in tokens) == text, "the spans rebuild the text"
    assert [t["start"] for t in tokens[1:]] == [t["end"] for t in tokens[:-1]]
    assert len(tokens) == len(reference)
    for token, ref in zip(tokens, reference):
        if ref is None:
            assert token["prob"] is token["rank"] is token["alternatives"] is None
            continue
        assert token["logprob"] == pytest.approx(ref["logprob"], abs=1e-4)
        assert token["prob"] == pytest.approx(math.exp(ref["logprob"]), abs=1e-4)
        assert token["rank"] in ref["ranks"]
        assert token["entropy"] == pytest.approx(ref["entropy"], abs=1e-3)
        got = [a["token_id"] for a in token["alternatives"]]
        for i, (g, r) in enumerate(zip(got, ref["top"])):  # equal, or an exact tie the two passes broke apart
            assert g == r or abs(token["alternatives"][i]["prob"] - math.exp(ref["top_logprobs"][i])) < 1e-6


@pytest.mark.parametrize("text", TEXTS)
def test_every_token_equals_one_transformers_pass(model_name, text):
    model, tokenizer = inference.load_model(model_name)
    result = inference.token_probabilities(text, 5, session="fresh " + text, model_name=model_name)
    assert result["reused_tokens"] == 0 and result["truncated_tokens"] == 0
    assert result["context_tokens"] == len(tokenizer(text)["input_ids"])
    assert_matches(result, reference_scores(model, tokenizer, text, 5), text, tokenizer)
    assert json.loads(json.dumps(result)) == result, "plain JSON"


def test_only_new_tokens_are_scored_after_an_edit_a_click_or_a_keystroke(model_name):
    model, tokenizer = inference.load_model(model_name)
    session, text = "writer", TEXTS[0]
    inference.token_probabilities(text, 3, session=session, model_name=model_name)
    steps = [
        text + " It ran",  # typing on
        text.replace("lazy", "sleepy") + " It ran",  # an edit in the middle
    ]
    for step in steps:
        result = inference.token_probabilities(step, 3, session=session, model_name=model_name)
        shared = 0
        ids, before = tokenizer(step)["input_ids"], tokenizer(text)["input_ids"]
        while shared < min(len(ids), len(before)) and ids[shared] == before[shared]:
            shared += 1
        assert result["reused_tokens"] >= shared - 1, "everything before the change is reused"
        assert_matches(result, reference_scores(model, tokenizer, step, 3), step, tokenizer)
        text = step
    # a click: the suggestions score the branch's tokens as they run, so the heatmap then runs nothing
    shown = inference.lookahead(text, 3, 3, session=session, model_name=model_name)
    assert_matches_reference(shown, reference_lookahead(model, tokenizer, text, 3, 3), 3)
    taken = text + shown["branches"][0]["text"]
    after = inference.lookahead(taken, 3, 3, session=session, model_name=model_name)
    assert_matches_reference(after, reference_lookahead(model, tokenizer, taken, 3, 3), 3)
    result = inference.token_probabilities(taken, 3, session=session, model_name=model_name)
    assert result["reused_tokens"] == result["context_tokens"]
    assert_matches(result, reference_scores(model, tokenizer, taken, 3), taken, tokenizer)


def test_the_distribution_after_a_scored_text_comes_from_its_kept_logits(embedded, monkeypatch):
    """Once the session's rows reach the text's end, its next tokens need no pass: the logits after the last token
    are kept with the rows. They equal a fresh call's; healing or a constraint still runs the model."""
    model, _ = embedded
    text = TEXTS[0]
    inference.token_probabilities(text, session="scored then next")
    calls = []
    forward = model.base_model.forward
    monkeypatch.setattr(model.base_model, "forward", lambda *a, **kw: calls.append(1) or forward(*a, **kw))
    kept = inference.next_token_distribution(text, 10, temperature=0.7, session="scored then next")
    assert calls == []
    monkeypatch.undo()
    fresh = inference.next_token_distribution(text, 10, temperature=0.7, session="fresh next")
    assert [e["token_id"] for e in kept] == [e["token_id"] for e in fresh]
    for a, b in zip(kept, fresh):
        assert (a["prob"], a["p_final"]) == pytest.approx((b["prob"], b["p_final"]), abs=1e-5)
    monkeypatch.setattr(model.base_model, "forward", lambda *a, **kw: calls.append(1) or forward(*a, **kw))
    inference.next_token_distribution(text, 10, session="scored then next",
                                      constraint={"type": "choice", "value": [" Then", " And"], "start": len(text)})
    assert calls, "a constraint's mask comes from a pass over the text"


def test_a_listing_reuses_the_last_ones_entries_only_where_its_context_is_the_same(embedded):
    """The session's last listing lends its entries to the next (a click's few new tokens): never across a
    changed conversation, another k, or a changed token."""
    listings = inference.backend().listings

    def fresh(text, k, messages=None):
        listings.clear()
        return inference.token_probabilities(text, k, session="fresh", messages=messages)

    first = [{"role": "user", "content": "Name a colour."}]
    other = [{"role": "user", "content": "Name a fruit."}]
    calls = [("It is red", 3, None), ("It is red and blue", 3, None), ("It is green and blue", 3, None),
             ("It is green and blue", 5, None), ("It is red", 3, first), ("It is red", 3, other)]
    for text, k, messages in calls:
        assert inference.token_probabilities(text, k, session="reuse", messages=messages) == fresh(text, k, messages)


def test_a_cold_text_is_scored_in_chunks_with_the_same_result(embedded, monkeypatch):
    model, tokenizer = embedded
    text = TEXTS[1] * 3
    whole = inference.token_probabilities(text, 5, session="whole")
    monkeypatch.setattr(scoring, "SCORE_CHUNK", 7)
    chunked = inference.token_probabilities(text, 5, session="chunked")
    for a, b in zip(whole["tokens"], chunked["tokens"]):
        # Passes of 7 tokens and one of the whole text use other kernels, whose rounding can swap near-tied tokens.
        assert a["token_id"] == b["token_id"] and ranks_agree(a["rank"], b["rank"])
        assert a["logprob"] == pytest.approx(b["logprob"], abs=1e-4)


def test_past_the_context_the_window_is_scored_and_the_rest_says_none(tiny_model_dirs):
    name = tiny_model_dirs["llama"]
    model, tokenizer = inference.load_model(name)
    text = " ".join(f"word{i}" for i in range(60))
    ids = tokenizer(text)["input_ids"]
    result = inference.token_probabilities(text, 3, session="long", model_name=name)
    dropped = result["truncated_tokens"]
    assert dropped > 0 and result["context_tokens"] == len(ids) - dropped <= model.config.max_position_embeddings
    tokens = result["tokens"]
    assert all(t["prob"] is None for t in tokens[: dropped + 1])
    assert "".join(text[t["start"] : t["end"]] for t in tokens) == text
    reference = reference_scores(model, tokenizer, "", 3, ids[dropped:])
    for token, ref in zip(tokens[dropped + 1 :], reference[1:]):
        assert token["logprob"] == pytest.approx(ref["logprob"], abs=1e-4) and token["rank"] in ref["ranks"]


def scoring_job(session: str, thread: threading.Thread) -> Job:
    """The session's scoring, once it has run some of its slices."""
    while not (jobs := [job for job in scheduler.running(session) if job.kind == "read" and job.slices]):
        assert thread.is_alive(), "the text was scored before it could be stopped: make it longer"
        time.sleep(0.01)
    return jobs[0]


def assert_stored_whole(session: str, model_name: str) -> None:
    """The session's cache and scores, if any, cover the same tokens: nothing of a cut pass kept."""
    entry = inference.backend().prefix_caches._entries.get((model_name, session))
    if entry is not None:
        assert [layer.get_seq_length() for layer in entry.cache.layers] == [len(entry.ids)] * len(entry.cache.layers)
        assert entry.scores is None or len(entry.scores) <= len(entry.ids)


@pytest.mark.parametrize("stop", ["cancel", "newer request"])
def test_scoring_many_new_tokens_stops_within_a_slice_when_cancelled_or_asked_something_newer(embedded, stop):
    """The tokens an insertion leaves to score are scored as a long job: Stop (cancel) or the session's newer
    request stops it at its next slice, and the session keeps its cache as it was before."""
    model, tokenizer = embedded
    prefix_caches = inference.backend().prefix_caches
    name, start = inference.default_model_name(), TEXTS[0]
    inference.token_probabilities(start, 3, session="A")
    held = prefix_caches._entries.get((name, "A")).ids
    long = start + " " + " ".join(TEXTS[1] for _ in range(100))
    failures: list[BaseException] = []

    def score() -> None:
        try:
            inference.token_probabilities(long, 3, session="A")
        except BaseException as error:  # noqa: BLE001 - looked at in the test's thread
            failures.append(error)

    thread = threading.Thread(target=score, daemon=True)
    thread.start()
    job = scoring_job("A", thread)
    if stop == "cancel":
        with scheduler.interactive():  # it waits at its next slice, then stops there
            while not job.waits:
                time.sleep(0.01)
            assert inference.cancel("A") >= 1
    else:
        newer = inference.token_probabilities(TEXTS[1], 3, session="A")
        assert_matches(newer, reference_scores(model, tokenizer, TEXTS[1], 3), TEXTS[1], tokenizer)
    thread.join(JOIN_SECONDS)
    assert [type(error) for error in failures] == [Cancelled] and job.cancelled
    slices = job.slices
    assert job not in scheduler.running() and job.slices == slices, "its slice count stopped growing"
    assert_stored_whole("A", name)
    if stop == "cancel":
        kept = prefix_caches._entries.get((name, "A"))
        assert kept is not None and kept.ids == held[: len(kept.ids)], "what it took, back as it was"
    again = inference.token_probabilities(long, 3, session="A")
    assert_matches(again, reference_scores(model, tokenizer, long, 3), long, tokenizer)


def test_stress_scorings_cancelled_at_random_keep_every_session_whole_and_answer_as_a_fresh_pass(embedded):
    """Sessions score texts while Stop cancels them at random: each call answers as transformers computes or is
    cancelled, every session's cache stays whole, and asked again each answers as transformers computes."""
    model, tokenizer = embedded
    name = inference.default_model_name()
    texts = [" ".join(TEXTS[i % 2] for i in range(n)) for n in (6, 12, 18)]
    references = {text: reference_scores(model, tokenizer, text, 3) for text in texts}
    sessions = [f"S{i}" for i in range(3)]

    def visitor(session: str):
        def work(rng) -> None:
            going = until(SECONDS)
            while going():
                text = rng.choice(texts)
                try:
                    answer = inference.token_probabilities(text, 3, session=session)
                except Cancelled:
                    continue
                assert_matches(answer, references[text], text, tokenizer)
                assert_stored_whole(session, name)
        return work

    def canceller(rng) -> None:
        going = until(SECONDS)
        while going():
            inference.cancel(rng.choice(sessions))
            time.sleep(rng.random() / 20)

    run_threads([*(visitor(session) for session in sessions), canceller])
    assert scheduler.running() == []
    for session in sessions:
        assert_stored_whole(session, name)
        for text in texts:
            assert_matches(inference.token_probabilities(text, 3, session=session), references[text], text, tokenizer)


@pytest.mark.parametrize(
    "kwargs, message",
    [({"text": ""}, "text is empty"), ({"text": 5}, "text must be a string"),
     ({"text": "a", "k": 0}, "k must be between 1 and 20"), ({"text": "a", "k": 21}, "k must be between 1 and 20"),
     ({"text": "a", "k": 2.5}, "k must be an integer")],
)
def test_bad_arguments_raise_clear_value_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        inference.token_probabilities(**kwargs)
