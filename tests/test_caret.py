"""Suggestions at a caret inside the text: exactly those for the text before it, each branch's fit with the text
after it equal to an independent transformers computation, and the session's one cache of the whole text serving
every caret without reading the text before it again."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch

import custom_llm_inference as inference
from lookahead.scheduler import scheduler
from reference import assert_matches_reference, reference_lookahead
from test_chat import CONVERSATION, transformers_ids
from test_lookahead_api import REPEATED
from threads import SECONDS, run_threads, until

DRAFT = ("The old lighthouse keeper climbed the stairs and looked out over the sea. The storm had passed, and "
         "the boats were coming home, one by one, past the café on the pier.")
CARETS = {
    "word end": DRAFT.index(" looked"),
    "mid-word": DRAFT.index("house") + 2,
    "after whitespace": DRAFT.index("looked"),
    "before a multi-byte character": DRAFT.index("é"),
    "after a multi-byte character": DRAFT.index("é") + 1,
    "before the last word": DRAFT.index(" pier"),
}


@torch.inference_mode()
def follow_logprob(model, prefix: list[int], follow: list[int]) -> float:
    """log p(follow | prefix) from one full forward, no cache."""
    logprobs = torch.log_softmax(model(torch.tensor([prefix + follow]), use_cache=False).logits[0].float(), -1)
    return sum(float(logprobs[len(prefix) - 1 + j, token]) for j, token in enumerate(follow))


def reference_fits(model, tokenizer, reference: dict, after: str, n: int) -> list[float]:
    """(log p(S | P + b) - log p(S | P)) / len(S) for each of `reference`'s branches b (reference_lookahead's),
    P the text's token ids (before the tokens that lead every branch), S the first n tokens of `after` tokenized
    on its own."""
    ids = reference["ids"][: len(reference["ids"]) - len(reference["lead"])]
    branches = reference["branches"]
    follow = tokenizer(after, add_special_tokens=False)["input_ids"][:n]
    base = follow_logprob(model, ids, follow)
    return [(follow_logprob(model, ids + branch, follow) - base) / len(follow) for branch in branches]


@pytest.mark.parametrize("where", CARETS)
def test_suggestions_at_a_caret_are_those_for_the_text_before_it_with_fit(embedded, where):
    model, tokenizer = embedded
    caret = CARETS[where]
    inference.lookahead(DRAFT, session="writer")  # the session's cache holds the whole text
    result = inference.lookahead(DRAFT, 5, 3, session="writer", caret=caret)
    alone = inference.lookahead(DRAFT[:caret], 5, 3, session="alone")
    reference = reference_lookahead(model, tokenizer, DRAFT[:caret], 5, 3)
    assert_matches_reference(result, reference, 5)
    assert [b["text"] for b in result["branches"]] == [b["text"] for b in alone["branches"]]
    assert result["healed_whitespace"] == alone["healed_whitespace"]
    fits = reference_fits(model, tokenizer, reference, DRAFT[caret:], 32)
    assert [b["fit"] for b in result["branches"]] == pytest.approx(fits, abs=1e-4)
    assert all(b["fit"] is None for b in alone["branches"]), "nothing after the caret: no fit"
    distribution = inference.next_token_distribution(DRAFT, 10, session="writer", caret=caret)
    assert [d["token_id"] for d in distribution] == [d["token_id"] for d in alone["distribution"][:10]]
    assert [d["prob"] for d in distribution] == pytest.approx([d["prob"] for d in alone["distribution"][:10]],
                                                              abs=1e-5)


def test_fit_is_measured_on_as_many_tokens_as_asked(embedded):
    model, tokenizer = embedded
    caret = CARETS["word end"]
    result = inference.lookahead(DRAFT, 3, 2, caret=caret, fit_tokens=4)
    reference = reference_lookahead(model, tokenizer, DRAFT[:caret], 3, 2)
    fits = reference_fits(model, tokenizer, reference, DRAFT[caret:], 4)
    assert [b["fit"] for b in result["branches"]] == pytest.approx(fits, abs=1e-4)
    assert all(b["fit"] is None for b in inference.lookahead(DRAFT, 3, 2, caret=caret, fit_tokens=0)["branches"])
    assert all(b["fit"] is None for b in inference.lookahead(DRAFT, 3, 2, caret=len(DRAFT))["branches"])


def test_a_branch_that_ends_has_no_fit(embedded):
    text = "Answer yes or no: is the sea wet? Answer:"
    result = inference.lookahead(text + " yes, and the fish know it.", 4, 3, caret=len(text),
                           constraint={"type": "choice", "value": [" yes", " no"], "start": len(text)})
    assert result["branches"] and all(b["ends"] and b["fit"] is None for b in result["branches"])


@pytest.mark.parametrize("reply", ["The answer is 4, of course.", "4"])
def test_a_caret_in_a_chat_reply(embedded, reply):
    model, tokenizer = embedded
    caret = reply.index("4") if reply != "4" else 1
    result = inference.lookahead(reply, 4, 3, messages=CONVERSATION, caret=caret)
    reference = reference_lookahead(model, tokenizer, reply[:caret], 4, 3,
                                    ids_for=lambda prefix: transformers_ids(tokenizer, CONVERSATION, prefix))
    assert_matches_reference(result, reference, 4)
    if caret < len(reply):
        fits = reference_fits(model, tokenizer, reference, reply[caret:], 32)
        assert [b["fit"] for b in result["branches"]] == pytest.approx(fits, abs=1e-4)
    else:
        assert all(b["fit"] is None for b in result["branches"])


def test_a_forced_token_before_the_caret_still_gives_distinct_branches(embedded):
    text = "The letter was dated , and sealed."
    caret = text.index(",")
    date = {"type": "regex", "value": "[0-9]{4}-[0-9]{2}-[0-9]{2}", "start": caret}
    result = inference.lookahead(text, 5, 4, caret=caret, constraint=date)
    alone = inference.lookahead(text[:caret], 5, 4, constraint=date)
    assert result["forced"] == alone["forced"] and result["forced"] is not None
    assert [b["token_ids"] for b in result["branches"]] == [b["token_ids"] for b in alone["branches"]]
    assert len({tuple(b["token_ids"]) for b in result["branches"]}) == 5
    model, tokenizer = embedded
    ids = tokenizer(text[:caret].rstrip())["input_ids"]
    shown = {"ids": ids, "lead": [], "branches": [b["token_ids"] for b in result["branches"]]}
    fits = reference_fits(model, tokenizer, shown, text[caret:], 32)
    assert [b["fit"] for b in result["branches"]] == pytest.approx(fits, abs=1e-4)


def test_at_a_caret_the_tokens_all_but_certain_lead_every_branch_beside_the_text_after_it(embedded):
    """The lead is read beside the text after the caret, which it does not see; fits are measured from before it."""
    model, tokenizer = embedded
    text = REPEATED + " stairs of the old lighthouse every night."
    caret = len(REPEATED)
    inference.lookahead(text, session="repeated caret")  # the session's cache holds the whole text
    result = inference.lookahead(text, 5, 3, session="repeated caret", caret=caret)
    reference = reference_lookahead(model, tokenizer, REPEATED, 5, 3)
    assert reference["lead"]
    assert_matches_reference(result, reference, 5)
    fits = reference_fits(model, tokenizer, reference, text[caret:], 32)
    assert [b["fit"] for b in result["branches"]] == pytest.approx(fits, abs=1e-4)


def held(session: str) -> tuple[int, ...]:
    """The token ids the session's cache holds."""
    entry = inference.backend().prefix_caches.copy((inference.default_model_name(), session))
    return entry.ids if entry else ()


def test_one_cache_of_the_whole_text_serves_every_caret(embedded):
    _, tokenizer = embedded
    whole = tuple(tokenizer(DRAFT)["input_ids"])
    assert inference.lookahead(DRAFT, session="w")["reused_tokens"] == 0
    for caret in [CARETS["word end"], CARETS["mid-word"], CARETS["before the last word"], CARETS["word end"]]:
        before = tokenizer(DRAFT[:caret])["input_ids"]
        result = inference.lookahead(DRAFT, session="w", caret=caret)
        shared = next((i for i, (a, b) in enumerate(zip(before, whole)) if a != b), len(before))
        assert result["reused_tokens"] == min(shared, len(before) - 1), "no token before the caret read again"
        assert held("w") == whole, "the text after the caret stays in the cache"
    assert inference.lookahead(DRAFT, session="w")["reused_tokens"] == len(whole) - 1


def test_after_an_insertion_only_what_follows_it_is_read_again_and_lazily(embedded):
    _, tokenizer = embedded
    caret = CARETS["word end"]
    inference.token_probabilities(DRAFT, session="w")  # the heatmap is shown: the session scores its tokens
    inference.lookahead(DRAFT, session="w")
    branch = inference.lookahead(DRAFT, session="w", caret=caret)["branches"][0]
    inserted = DRAFT[:caret] + branch["text"] + DRAFT[caret:]
    assert inserted[caret + len(branch["text"]):] == DRAFT[caret:], "the text after the caret, byte for byte"
    at_new_caret = inference.lookahead(inserted, session="w", caret=caret + len(branch["text"]))
    before = tokenizer(inserted[: caret + len(branch["text"])])["input_ids"]
    assert at_new_caret["reused_tokens"] >= len(tokenizer(DRAFT[:caret])["input_ids"]) - 1
    assert at_new_caret["context_tokens"] == len(before)
    assert held("w") == tuple(tokenizer(DRAFT)["input_ids"]), "the rest is not read until asked for"
    at_end = inference.lookahead(inserted, session="w")
    new_ids = tokenizer(inserted)["input_ids"]
    shared = next(i for i, (a, b) in enumerate(zip(new_ids, tokenizer(DRAFT)["input_ids"])) if a != b)
    assert at_end["reused_tokens"] in (shared - 1, shared), "read again from the first changed token"
    heatmap = inference.token_probabilities(inserted, session="w")
    assert heatmap["reused_tokens"] == len(new_ids), "the lookahead scored the changed tokens as it read them"
    fresh = inference.token_probabilities(inserted, session="fresh")
    assert [t["token_id"] for t in heatmap["tokens"]] == [t["token_id"] for t in fresh["tokens"]]
    assert [t["prob"] for t in heatmap["tokens"][1:]] == pytest.approx([t["prob"] for t in fresh["tokens"][1:]],
                                                                       abs=1e-4)


@pytest.mark.parametrize("call", [inference.lookahead, inference.next_token_distribution, inference.generate])
@pytest.mark.parametrize("caret, message", [
    (-1, "caret must be between 0 and"), (len(DRAFT) + 1, "caret must be between 0 and"),
    (2.5, "caret must be an integer"), ("3", "caret must be an integer"),
    (0, "nothing comes before it"),
])
def test_a_caret_outside_the_text_is_a_clear_error(call, caret, message):
    with pytest.raises(ValueError, match=message):
        call(DRAFT, caret=caret)


def test_a_constraint_starting_after_the_caret_is_a_clear_error():
    with pytest.raises(ValueError, match=r"constraint start \(20\) lies after the caret \(10\)"):
        inference.lookahead(DRAFT, caret=10, constraint={"type": "regex", "value": "[a-z]+", "start": 20})


def test_generate_at_a_caret_continues_the_text_before_it():
    caret = CARETS["word end"]
    ours, alone = inference.generate(DRAFT, 12, caret=caret), inference.generate(DRAFT[:caret], 12)
    assert ours["token_ids"] == alone["token_ids"] and ours["text"] == alone["text"]


def held_while(session: str, slices: int) -> list:
    """A yielding call at a caret of the session, cancelled once it has run `slices` module calls: its outcome."""
    outcome = []

    def asking() -> None:
        try:
            outcome.append(inference.lookahead(DRAFT, session=session, caret=CARETS["word end"], yielding=True))
        except inference.Cancelled:
            outcome.append("cancelled")

    thread = threading.Thread(target=asking)
    thread.start()
    job = None
    while job is None or job.slices < slices:
        job = next((j for j in scheduler.running(session) if j.kind == "lookahead"), None)
        assert thread.is_alive() or outcome, "the call ended before it was cancelled"
        time.sleep(0.0005)
    with scheduler.interactive():  # it waits at its next slice ...
        inference.cancel(session, "lookahead")  # ... and stops there
    thread.join(60)
    return outcome


@pytest.mark.parametrize("slices", [10, 600, 1300], ids=["prompt pass", "tree", "fit pass"])  # of ~1600
def test_a_yielding_call_cancelled_mid_pass_leaves_the_whole_texts_cache_as_it_was(embedded, slices):
    _, tokenizer = embedded
    whole = tuple(tokenizer(DRAFT)["input_ids"])
    inference.lookahead(DRAFT, session="y")
    assert held_while("y", slices) == ["cancelled"]
    assert held("y") == whole
    at_caret = inference.lookahead(DRAFT, session="y", caret=CARETS["word end"])
    fresh = inference.lookahead(DRAFT, session="fresh", caret=CARETS["word end"])
    assert [b["token_ids"] for b in at_caret["branches"]] == [b["token_ids"] for b in fresh["branches"]]
    assert [b["fit"] for b in at_caret["branches"]] == pytest.approx([b["fit"] for b in fresh["branches"]], abs=1e-4)
    at_end = inference.lookahead(DRAFT, session="y")
    assert at_end["reused_tokens"] == len(whole) - 1
    assert at_end["distribution"][0]["prob"] == pytest.approx(
        inference.lookahead(DRAFT, session="fresh end")["distribution"][0]["prob"], abs=1e-5)


def test_carets_moved_asked_yielding_and_cancelled_from_several_threads_give_exact_answers(embedded):
    """One writer moves the caret and asks (yielding or not), something cancels its yielding calls at random, and
    another writer clicks at the end: every answer that comes equals a fresh session's."""
    carets = [CARETS[w] for w in ("word end", "mid-word", "after whitespace", "before the last word")]
    expected = {c: inference.lookahead(DRAFT, session=f"reference {c}", caret=c) for c in carets}
    expected_end = inference.lookahead(DRAFT, session="reference end")
    inference.lookahead(DRAFT, session="mover")

    def mover(rng):
        while alive():
            caret = rng.choice(carets)
            try:
                result = inference.lookahead(DRAFT, session="mover", caret=caret, yielding=rng.random() < 0.5)
            except inference.Cancelled:
                continue
            assert [b["token_ids"] for b in result["branches"]] == [
                b["token_ids"] for b in expected[caret]["branches"]]
            assert [b["fit"] for b in result["branches"]] == pytest.approx(
                [b["fit"] for b in expected[caret]["branches"]], abs=1e-4)

    def canceller(rng):
        while alive():
            time.sleep(rng.random() * 0.3)
            inference.cancel("mover", "lookahead")

    def clicker(rng):
        while alive():
            result = inference.lookahead(DRAFT, session="clicker")
            assert [b["token_ids"] for b in result["branches"]] == [b["token_ids"] for b in expected_end["branches"]]

    alive = until(SECONDS * 2)
    run_threads([mover, canceller, clicker])
    assert held("mover") == tuple(embedded[1](DRAFT)["input_ids"]), "the whole text's cache survived it all"


def test_the_page_shows_suggestions_at_a_caret_before_the_heatmap_reads_the_text_after_an_insertion(embedded):
    """After an insertion, the suggestions at the caret come from what precedes it alone; the heatmap, which needs
    the text after the caret read again, follows in its own event (with the branches' fit, on a CPU)."""
    from history import History
    from lookahead.sampling import Sampling
    from ui.controls import BranchShape, Constraints, Context, Draft, HeatmapView, Settings
    from ui.heatmap_update import HEATMAP_ALTERNATIVES
    from ui.panels import suggestions as panel

    _, tokenizer = embedded
    request = SimpleNamespace(session_hash="page at a caret")
    context, constraints = Context("plain text", None, None, inference.default_model_name()), Constraints(None, None)
    view = HeatmapView(on=True, colour_by="probability", threshold=10, shown=None)
    history = History.start(DRAFT, context.model_name)

    def settings(view: HeatmapView) -> Settings:
        return Settings(BranchShape(5, 3), Sampling(), context, constraints, view)

    def suggest(text: str, caret: int | None, view: HeatmapView) -> dict:
        return panel.suggest(Draft(text, "" if caret is None else str(caret), ""), history, settings(view), request)

    shown_whole = suggest(DRAFT, None, view)["heatmap_state"]  # the heatmap of the whole text, as shown
    view = replace(view, shown=shown_whole)
    caret = CARETS["word end"]
    branch = suggest(DRAFT, caret, view)["shown_state"].result.branches[0].text
    inserted, after = DRAFT[:caret] + branch + DRAFT[caret:], caret + len(branch)
    update = suggest(inserted, after, view)
    assert "heatmap" not in update, "the heatmap follows"
    assert held("page at a caret") == tuple(tokenizer(DRAFT)["input_ids"]), "nothing after the caret read yet"
    updates = list(panel.complete_at_caret(inserted, update["shown_state"], settings(view), request))
    fitted = updates[0]["shown_state"].result.branches
    expected = inference.lookahead(inserted, session="page reference", caret=after)["branches"]
    assert [b.fit for b in fitted] == pytest.approx([b["fit"] for b in expected], abs=1e-4)
    heatmap = updates[-1]["heatmap_state"]
    assert heatmap.text == inserted
    fresh = inference.token_probabilities(inserted, HEATMAP_ALTERNATIVES, session="page heatmap reference")
    assert [t.token_id for t in heatmap.result.tokens] == [t["token_id"] for t in fresh["tokens"]]
    assert [t.prob for t in heatmap.result.tokens[1:]] == pytest.approx(
        [t["prob"] for t in fresh["tokens"][1:]], abs=1e-4)
    again = list(panel.complete_at_caret(inserted, updates[0]["shown_state"], settings(view), request))
    assert ["shown_state" in update for update in again] == [False], "with their fit: the heatmap alone follows"
    asked_again = suggest(inserted, after, view)  # the same caret asked again (a fit cancelled)
    assert asked_again["follow_up"] == asked_again["shown_state"].serial != update["shown_state"].serial, \
        "a state of its own: what follows an answer follows it"
    assert "follow_up" not in suggest(inserted, None, view), "at the end of the text nothing follows"


def test_a_branch_taken_at_a_caret_is_answered_from_the_precomputed_result_exactly(embedded):
    """While the writer reads the suggestions at a caret, each branch's insertion is computed on a copy of the whole
    text's cache; the click gets exactly what it computes afresh, and the cache still holds the whole text. The
    page's second ask, for the fit, waits for that and leaves the ready answers in place."""
    speculator = inference.backend().speculator
    _, tokenizer = embedded
    caret = CARETS["word end"]
    inference.lookahead(DRAFT, session="ahead")
    shown = inference.lookahead(DRAFT, session="ahead", caret=caret, fit_tokens=0, precompute=True)
    fitted = inference.lookahead(DRAFT, session="ahead", caret=caret, yielding=True)
    assert [b["fit"] for b in fitted["branches"]] == pytest.approx(
        [b["fit"] for b in inference.lookahead(DRAFT, session="fit reference", caret=caret)["branches"]], abs=1e-4)
    speculator.wait()
    branch = shown["branches"][2]["text"]
    inserted, after = DRAFT[:caret] + branch + DRAFT[caret:], caret + len(branch)
    served = speculator.served
    ahead = inference.lookahead(inserted, session="ahead", caret=after, fit_tokens=0, precompute=True)
    assert speculator.served == served + 1, "answered from the precomputed result"
    assert held("ahead") == tuple(tokenizer(DRAFT)["input_ids"]), "the whole text's cache, as it was"
    speculator.wait()  # the next click, on the insertion's own suggestions, is precomputed too
    branch = ahead["branches"][0]["text"]
    further, further_caret = inserted[:after] + branch + inserted[after:], after + len(branch)
    again = inference.lookahead(further, session="ahead", caret=further_caret, fit_tokens=0)
    assert speculator.served == served + 2
    inference.lookahead(DRAFT, session="fresh")
    assert ahead == inference.lookahead(inserted, session="fresh", caret=after, fit_tokens=0), "bit for bit"
    assert again == inference.lookahead(further, session="fresh", caret=further_caret, fit_tokens=0)


def test_a_yielding_call_waiting_for_precomputation_stops_at_once_when_cancelled(monkeypatch):
    speculator = inference.backend().speculator
    monkeypatch.setattr(speculator, "wait", lambda timeout=None, key=None: False)  # precomputation that never ends
    outcome = []

    def asking() -> None:
        try:
            outcome.append(inference.lookahead(DRAFT, session="waiting", caret=CARETS["word end"], yielding=True))
        except inference.Cancelled:
            outcome.append("cancelled")

    thread = threading.Thread(target=asking)
    thread.start()
    while not scheduler.running("waiting") and thread.is_alive():
        time.sleep(0.001)
    inference.cancel("waiting", "lookahead")
    thread.join(60)
    assert outcome == ["cancelled"] and not scheduler.running("waiting")
