"""A long text answers at once from its last tokens, then exactly once it is read in the background, chunk by
chunk (lookahead/reading.py): both answers equal transformers', the read yields to other sessions' clicks, never
starts over when asked again, keeps what it read when interrupted, and reads the same bits however it went."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import gradio as gr
import pytest
import torch

import custom_llm_inference as inference
from lookahead import reading
from lookahead.scheduler import scheduler
from reference import assert_matches_reference, reference_lookahead, reference_scores
from threads import JOIN_SECONDS, SECONDS, run_threads, until

WINDOW = 96  # tokens a partial answer reads, set here instead of measured
CHUNK = 128  # small chunks, so a text of a few hundred tokens is read in several
POLL_SECONDS = 0.05  # between a partial heatmap and the next ask: the read, not the asking, gets the cores
TEXT = ("The lighthouse keeper counted the ships that passed the rocks at night, and wrote each name in a "
        "book with a green cover. ") * 24  # ~600 tokens


@pytest.fixture
def partial_answers(monkeypatch, embedded):
    """Partial answers on, with a fixed window and small chunks; every session's cache and read dropped after."""
    prefix_caches = inference.backend().prefix_caches
    reader = inference.backend().reader
    monkeypatch.setattr(reading, "FIRST_ANSWER_SECONDS", 1.0)
    monkeypatch.setattr(reading, "READ_CHUNK_TOKENS", CHUNK)
    monkeypatch.setitem(reader._windows, inference.default_model_name(), WINDOW)
    # Clicks strictly first: the tests hold interactive work to keep a read where it is (a share would give it turns).
    monkeypatch.setattr(scheduler, "share", 0.0)
    yield
    reader.stop()
    prefix_caches.clear()


def key(session: str) -> tuple[str, str]:
    return inference.default_model_name(), session


def ids_of(text: str, tokenizer) -> list[int]:
    return tokenizer(text)["input_ids"]


def until_read(read, tokens: int) -> None:
    """Until `read` has read `tokens` tokens (or ended)."""
    while read.read_tokens < tokens and not read.finished.is_set():
        time.sleep(0.01)


def read_all(text: str, session: str, **kwargs) -> tuple[dict, dict]:
    """The first (partial) answer, then the exact one once the read has ended."""
    reader = inference.backend().reader
    first = inference.lookahead(text, session=session, **kwargs)
    reader.wait(session)
    return first, inference.lookahead(text, session=session, **kwargs)


def test_a_long_text_answers_from_its_last_tokens_then_exactly_both_as_transformers_computes(
    partial_answers, embedded
):
    model, tokenizer = embedded
    n = len(ids_of(TEXT[:-1], tokenizer))  # its trailing space is healed
    first, exact = read_all(TEXT, "A", n_branches=3, depth=3)
    assert first["partial"] == {"window_tokens": WINDOW, "context_tokens": n, "read_tokens": first["partial"]
                                ["read_tokens"], "seconds": first["partial"]["seconds"]}
    assert first["partial"]["seconds"] > 0, "the first answer's own model time, kept for the calls after it"
    assert first["context_tokens"] == WINDOW and "Partial" in first["notice"]
    assert_matches_reference(first, reference_lookahead(model, tokenizer, TEXT, 3, 3, dropped=n - WINDOW), 3)
    assert exact["partial"] is None and exact["notice"] == ""
    assert exact["context_tokens"] == n
    assert exact["reused_tokens"] == n - 1, "the read stored all but the last token, which the call ran"
    assert_matches_reference(exact, reference_lookahead(model, tokenizer, TEXT, 3, 3), 3)


def test_asked_again_while_it_is_read_the_answer_says_how_far_it_got_and_the_read_never_starts_over(
    partial_answers, embedded
):
    reader = inference.backend().reader
    first = inference.lookahead(TEXT, session="A")
    read = reader._reads[key("A")]
    seen = [first["partial"]["read_tokens"]]
    while not read.finished.is_set():
        again = inference.lookahead(TEXT, session="A")
        if again["partial"] is None:
            break
        assert {k: v for k, v in again.items() if k not in ("partial", "notice")} == \
            {k: v for k, v in first.items() if k not in ("partial", "notice")}
        seen.append(again["partial"]["read_tokens"])
        assert len(reader._reads) <= 1 and next(iter(reader._reads.values()), read) is read, "one read, never restarted"
    assert seen == sorted(seen), "progress only grows"
    reader.wait("A")
    assert inference.lookahead(TEXT, session="A")["partial"] is None


def test_a_read_yields_to_another_sessions_click_and_an_edit_before_its_end_cancels_it_keeping_its_chunks(
    partial_answers, embedded
):
    reader = inference.backend().reader
    _, tokenizer = embedded
    text = TEXT * 3  # ~2k tokens: long enough to be under way while another session clicks
    inference.lookahead(text, session="A")
    read = reader._reads[key("A")]
    assert read.job.kind == "read" and read.job.session == "A"
    other = inference.lookahead("Once upon a time", 3, 3, session="B")
    assert other["partial"] is None
    assert not read.finished.is_set(), "the other session's click was answered while the text was being read"

    with scheduler.interactive():  # while interactive work runs (here another click), the read waits at its next slice
        slices = read.job.slices
        inference.lookahead("Once upon a time, far away", 3, 3, session="C")
        assert read.job.slices <= slices + 1

    until_read(read, CHUNK)
    middle = len(text) // 2
    edited = text[:middle] + "X" + text[middle + 1:]  # an edit before the end of what the read reads
    inference.lookahead(edited, session="A")
    assert read.finished.is_set() and read.job.cancelled
    newer = reader._reads[key("A")]
    assert newer is not read and newer.job.question != read.job.question
    while newer.job.slices == 0 and not newer.finished.is_set():
        time.sleep(0.01)
    assert newer.read_tokens >= CHUNK, "the newer read went on from the chunks the cancelled one read"
    reader.wait("A")
    assert inference.lookahead(edited, session="A")["partial"] is None



def test_a_long_texts_first_answer_waits_for_another_sessions_click_and_its_read_begins_once_it_is_given(
    partial_answers, embedded
):
    """Reading the text's last tokens for the first answer is a second's model work: it is part of the read's long job,
    so another visitor's click has the cores, and the rest of the read waits for the answer."""
    reader = inference.backend().reader
    answers = []
    first = threading.Thread(target=lambda: answers.append(inference.lookahead(TEXT, session="A")))
    with scheduler.interactive():  # another session's click, under way
        first.start()
        deadline = time.monotonic() + JOIN_SECONDS
        while not any(job.waits for job in scheduler.running("A")):
            assert time.monotonic() < deadline, "A's first answer never reached a slice"
            time.sleep(0.01)
        read = reader._reads[key("A")]
        assert read.waiting and read.read_tokens == 0 and not answers, "nothing of A's ran beside the click"
    first.join(JOIN_SECONDS)
    assert answers[0]["partial"]["read_tokens"] == 0, "the read began after the answer"
    reader.wait("A")
    assert read.read_tokens == len(read.ids) and not read.job.cancelled


def test_a_read_stopped_before_it_began_ends(partial_answers, embedded):
    reader = inference.backend().reader
    _, tokenizer = embedded
    read = reader.plan(key("A"), ids_of(TEXT, tokenizer), inference.default_model_name(), embedded[0], begin=False)
    assert read.waiting and not read.finished.is_set()
    reader.stop("A")
    assert read.finished.is_set() and scheduler.running("A") == []
    reader.begin(read)
    assert not reader._queue, "an ended read is not queued"


def test_one_sessions_reads_on_two_models_both_run_to_their_end(partial_answers, embedded, monkeypatch):
    """Compared side by side, two models read the session's text each (in their own tokens): the second read waits
    for the first instead of cancelling it, and both are read whole."""
    reader = inference.backend().reader
    model, tokenizer = embedded
    texts = {"model A": TEXT * 2, "model B": TEXT.upper() * 2}  # as two tokenizers would split one text
    reads = {}
    for name, text in texts.items():
        monkeypatch.setitem(reader._windows, name, WINDOW)
        reads[name] = reader.plan((name, "A"), ids_of(text, tokenizer), name, model)
    reader.wait("A")
    for name, read in reads.items():
        assert not read.job.cancelled, f"{name}'s read was cancelled by the other model's"
        assert read.read_tokens == len(read.ids)

def test_a_text_read_with_interruptions_gives_the_same_bits_as_read_without(partial_answers, embedded):
    reader = inference.backend().reader
    _, whole = read_all(TEXT, "A")
    inference.lookahead(TEXT, session="B")
    read = reader._reads[key("B")]
    until_read(read, CHUNK)
    scheduler.cancel("B", "read")
    read.finished.wait()
    assert read.read_tokens < (len(read.ids)), "cancelled before its end"
    _, resumed = read_all(TEXT, "B")
    assert resumed["distribution"] == whole["distribution"]
    assert resumed["branches"] == whole["branches"]


def heatmap_until_read(text: str, session: str) -> list[dict]:
    """token_probabilities asked again and again while `text` is read: every answer, the whole one last."""
    answers = [inference.token_probabilities(text, 3, session=session)]
    while "partial" in answers[-1]:
        time.sleep(POLL_SECONDS)
        answers.append(inference.token_probabilities(text, 3, session=session))
    return answers


def test_a_long_texts_heatmap_answers_at_once_with_the_tokens_read_so_far_then_fills_in_to_transformers_scores(
    partial_answers, embedded
):
    model, tokenizer = embedded
    text = TEXT * 2
    n = len(ids_of(text, tokenizer))
    answers = heatmap_until_read(text, "A")
    first, whole = answers[0], answers[-1]
    assert first["partial"] == {"read_tokens": len(first["tokens"]), "context_tokens": n}, "before the read ended"
    assert first["notice"].startswith("Partial")
    progress = [answer["partial"]["read_tokens"] for answer in answers[:-1]]
    assert progress == sorted(progress), "each answer lists at least the tokens the one before it did"
    for answer in answers[:-1]:
        assert len(answer["tokens"]) == answer["partial"]["read_tokens"], "the tokens not scored yet are left out"
        assert answer["tokens"] == whole["tokens"][: len(answer["tokens"])], "the whole answer's first tokens"
        assert answer["context_tokens"] == n
    assert "partial" not in whole and "notice" not in whole and len(whole["tokens"]) == n
    assert whole["reused_tokens"] == n - 1, "the read stored all but the last token, which the call ran"
    assert scheduler.running("A") == []
    for token, row in zip(whole["tokens"][1:], reference_scores(model, tokenizer, text, 3)[1:]):
        assert token["logprob"] == pytest.approx(row["logprob"], abs=1e-4)
        assert token["rank"] in row["ranks"]


def test_the_tokens_listed_while_a_text_is_read_are_a_whole_reads_bits(partial_answers, embedded):
    prefix_caches = inference.backend().prefix_caches
    reader = inference.backend().reader
    _, tokenizer = embedded
    text = TEXT * 2
    ids = ids_of(text, tokenizer)
    inference.token_probabilities(text, 3, session="A")
    read = reader._reads[key("A")]
    until_read(read, 2 * CHUNK)
    with scheduler.interactive():  # the read waits at its next slice: what it scored stays as it is, meanwhile
        partial = inference.token_probabilities(text, 3, session="A")
        rows = read.rows
    assert partial["partial"]["read_tokens"] == len(rows) >= 2 * CHUNK and not read.finished.is_set()
    whole = inference.token_probabilities(text, 3, session="B", partial=False)  # another session, its own read
    assert partial["tokens"] == whole["tokens"][: len(rows)]
    read_whole = prefix_caches.scores(key("B"), ids[: len(rows)])
    for mine, theirs in zip(rows._rows(), read_whole._rows()):
        torch.testing.assert_close(mine, theirs, rtol=0, atol=0, equal_nan=True)
    reader.wait("A")
    assert inference.token_probabilities(text, 3, session="A") == whole


def test_asked_while_a_text_without_scores_is_read_the_heatmap_reads_it_again_scoring_each_token(
    partial_answers, embedded
):
    reader = inference.backend().reader
    model, tokenizer = embedded
    inference.lookahead(TEXT, session="A")
    unscored = reader._reads[key("A")]
    assert not unscored.scored
    answers = heatmap_until_read(TEXT, "A")
    assert unscored.finished.is_set() and "partial" in answers[0]
    assert answers[-1] == inference.token_probabilities(TEXT, 3, session="B", partial=False)
    assert inference.lookahead(TEXT, session="A")["partial"] is None, "the scored read serves the suggestions too"


def test_the_page_shows_a_long_texts_first_tokens_and_the_progress_then_fills_in_by_itself(
    partial_answers, embedded
):
    from types import SimpleNamespace

    from ui.controls import Context, HeatmapView
    from ui.heatmap import Listing
    from ui.heatmap_update import HEATMAP_ALTERNATIVES
    from ui.on_screen import OnScreen
    from ui.panels.heatmap import fill_in, follow_suggestions, read_timer

    request = SimpleNamespace(session_hash="A")
    context = Context("plain text", None, None, inference.default_model_name())
    view = HeatmapView(on=True, colour_by="probability", threshold=10, shown=None)
    suggested = inference.lookahead.typed(TEXT, 3, 3, session="A")
    assert suggested.partial is not None
    update = follow_suggestions(TEXT, OnScreen(TEXT, suggested, None), view, context, request)
    shown = update["heatmap_state"]
    assert shown.result.partial is not None and read_timer(shown).active
    assert f"of {shown.result.partial.context_tokens:,} tokens" in json.loads(update["heatmap"])["frame"]
    view = replace(view, shown=shown)
    assert follow_suggestions(TEXT, OnScreen(TEXT, suggested, None), view, context, request) == gr.skip(), \
        "it fills in by itself from then on"
    messages = []
    while view.shown.result.partial is not None:
        time.sleep(POLL_SECONDS)
        update = fill_in(TEXT, view, context, request)
        messages.append(json.loads(update["heatmap"]))
        view = replace(view, shown=update["heatmap_state"])
    assert all("frame" not in message for message in messages), "each update sends the tokens scored since"
    assert "heatmap-progress" not in messages[-1]["disagreements"] and not read_timer(view.shown).active
    assert view.shown.result == Listing.of(inference.token_probabilities.typed(TEXT, HEATMAP_ALTERNATIVES, session="B",
                                                                         partial=False))
    assert fill_in(TEXT, view, context, request) == gr.skip(), "whole: the timer asks nothing more"


def test_forgetting_a_session_stops_its_read_and_keeps_nothing(partial_answers, embedded):
    prefix_caches = inference.backend().prefix_caches
    reader = inference.backend().reader
    inference.lookahead(TEXT * 3, session="A")
    read = reader._reads[key("A")]
    inference.end_session("A")
    assert read.finished.is_set() and read.job.cancelled
    slices = read.job.slices
    assert scheduler.running("A") == [] and read.job.slices == slices
    assert len(prefix_caches) == 0 and not reader._reads


def test_stress_reads_clicks_edits_and_departures_of_several_sessions_answer_as_a_fresh_call(
    partial_answers, monkeypatch, embedded
):
    """Sessions paste, click, edit and leave at once: no exception, no deadlock, and every exact answer equals
    what a session that reads the text whole gives."""
    reader = inference.backend().reader
    texts = [TEXT[: 500 * (i + 1)] for i in range(5)]
    answers: list[tuple[str, dict]] = []

    def visitor(session: str):
        def work(rng) -> None:
            going = until(SECONDS)
            while going():
                text = rng.choice(texts)
                if rng.random() < 0.15:
                    inference.end_session(session)
                    continue
                result = inference.lookahead(text, 2, 2, session=session)
                if result["partial"] is not None:
                    assert result["partial"]["window_tokens"] == WINDOW
                answers.append((text, result))
        return work

    run_threads([visitor(f"S{i}") for i in range(3)])
    reader.wait()
    assert not reader._reads and not [job for job in scheduler.running() if job.kind == "read"]
    monkeypatch.setattr(reading, "FIRST_ANSWER_SECONDS", 0)
    expected = {text: inference.lookahead(text, 2, 2, session=f"fresh-{i}") for i, text in enumerate(texts)}
    exact = [(text, result) for text, result in answers if result["partial"] is None]
    assert exact, "some answers were exact"
    for text, result in exact:
        want = {entry["token_id"]: entry["logprob"] for entry in expected[text]["distribution"]}
        for entry in result["distribution"]:
            if entry["token_id"] in want:
                assert entry["logprob"] == pytest.approx(want[entry["token_id"]], abs=1e-4)


def test_stress_heatmaps_of_several_sessions_read_edited_and_left_at_once_list_what_a_whole_read_gives(
    partial_answers, monkeypatch, embedded
):
    """Sessions ask for the heatmaps of long texts, their suggestions, Stop and leave at once, while the texts
    are read: no exception, no deadlock, and every answer, partial or whole, lists the tokens a fresh session
    that scores the text whole lists, in the same order."""
    reader = inference.backend().reader
    texts = [TEXT[: 700 * (i + 1)] for i in range(3)]
    answers: list[tuple[str, dict]] = []

    def visitor(session: str):
        def work(rng) -> None:
            going = until(SECONDS)
            while going():
                text, dice = rng.choice(texts), rng.random()
                if dice < 0.1:
                    inference.end_session(session)
                elif dice < 0.2:
                    inference.cancel(session)
                elif dice < 0.35:
                    inference.lookahead(text, 2, 2, session=session)
                else:
                    answers.append((text, inference.token_probabilities(text, 3, session=session)))
        return work

    run_threads([visitor(f"S{i}") for i in range(3)])
    reader.wait()
    assert not reader._reads and scheduler.running() == []
    assert any("partial" in answer for _, answer in answers) and any("partial" not in a for _, a in answers)
    monkeypatch.setattr(reading, "FIRST_ANSWER_SECONDS", 0)
    expected = {text: inference.token_probabilities(text, 3, session=f"fresh-{i}") for i, text in enumerate(texts)}
    for text, answer in answers:
        tokens, want = answer["tokens"], expected[text]["tokens"]
        assert len(tokens) == (answer["partial"]["read_tokens"] if "partial" in answer else len(want))
        assert [t["token_id"] for t in tokens] == [t["token_id"] for t in want[: len(tokens)]]
        for token, wanted in zip(tokens[1:], want[1:]):
            assert token["logprob"] == pytest.approx(wanted["logprob"], abs=1e-4)


def test_reads_take_turns_so_a_short_text_pasted_after_a_long_one_is_read_first(partial_answers, embedded):
    reader = inference.backend().reader
    inference.lookahead(TEXT * 4, session="A")
    long = reader._reads[key("A")]
    inference.lookahead(TEXT, session="B")
    short = reader._reads[key("B")]
    short.finished.wait()
    assert not long.finished.is_set(), "the short text's read ended while the long one's went on"
    reader.wait()
    assert inference.lookahead(TEXT, session="B")["partial"] is None
    assert inference.lookahead(TEXT * 4, session="A")["partial"] is None


# A program that asks for a long text's probabilities and ends at once: the answer is partial, and the rest of the
# text is still being read in the background as the interpreter shuts down.
EXITING_PROGRAM = """
import custom_llm_inference as inference
text = " ".join(["The harbour town woke slowly, and the keeper climbed the stairs of the old lighthouse."] * 180)
print("partial" if inference.token_probabilities(text, k=3).get("partial") else "whole")
"""


def test_a_program_that_ends_while_a_text_is_read_in_the_background_exits_cleanly(embedded):
    root = Path(__file__).resolve().parents[1]
    env = {name: value for name, value in os.environ.items() if name != "LOOKAHEAD_FIRST_ANSWER_SECONDS"}  # partial
    ended = subprocess.run([sys.executable, "-c", EXITING_PROGRAM], cwd=root, capture_output=True, text=True,
                           env={**env, "PYTHONPATH": str(root)}, timeout=600)
    assert ended.stdout.strip() == "partial", f"the program ends with the read under way: {ended.stderr[-2000:]}"
    assert ended.returncode == 0 and "terminate called" not in ended.stderr, ended.stderr[-2000:]
