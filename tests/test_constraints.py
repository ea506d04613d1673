"""Constraints, penalties and stop strings, against independent references.

The reference for a constraint's valid set is Python's `regex` module: a token is valid when the
constrained text written so far plus the token's text is still a partial match of the pattern (a
choice is the alternation of its options, escaped), and the end token when the text so far is a
full match. Branches and continuations are compared with greedy decoding by transformers under
that mask; JSON with `json.loads`; penalties with OpenAI's formula over the context's counts.
"""

import json

import pytest
import regex
import torch

import custom_llm_inference as inference
from lookahead import constraints
from lookahead.constraints import check_constraint
from lookahead.healing import token_texts
from lookahead.models import stop_tokens
from lookahead.results import MAX_CANDIDATES_PER_BRANCH
from tests.reference import next_logits

CHOICES = ["yes", "no", "maybe", "not sure"]
DATE = r"[0-9]{4}-[0-9]{2}-[0-9]{2}"
PERSON = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "age"], "additionalProperties": False}



def guide_after(text: str, constraint: dict, model_name: str | None, session: str):
    """The constraint's state after `text`, as the engine keeps it for the session."""
    model, tokenizer = inference.load_model(model_name)
    name = model_name or inference.default_model_name()
    _, guide = inference.backend().matchers.context_and_guide(
        (name, session), check_constraint(constraint, text), tokenizer, text, text, None, stop_tokens(name),
        model.config.get_text_config().vocab_size, model.device)
    return guide

def choice_pattern(options: list[str]) -> str:
    return "|".join(regex.escape(o) for o in options)


def reference_valid(tokenizer, pattern: str, written: str, vocab_size: int, eos: int) -> torch.Tensor:
    """Tokens whose text keeps `written` a partial match of `pattern` (whole-string), and the end token
    once it fully matches. Special tokens never continue a constraint; tokens that are part of a
    character (U+FFFD) are left out of the comparison by `comparable`."""
    texts = token_texts(tokenizer)
    special = set(tokenizer.all_special_ids)
    compiled = regex.compile(pattern)
    valid = torch.zeros(vocab_size, dtype=torch.bool)
    for i, t in enumerate(texts[:vocab_size]):
        if i not in special and t and compiled.fullmatch(written + t, partial=True):
            valid[i] = True
    valid[eos] = compiled.fullmatch(written) is not None
    return valid


def reference_choice_valid(tokenizer, options: list[str], written: str, vocab_size: int, eos: int) -> torch.Tensor:
    """A choice's valid tokens after `written`. Where only one option is left, llguidance allows only the
    tokenizer's own first token of what remains (its forced text is tokenized canonically); otherwise
    every token that a remainder starts with, and the end token once an option is complete."""
    rests = {o[len(written) :] for o in options if o.startswith(written)}
    valid = torch.zeros(vocab_size, dtype=torch.bool)
    valid[eos] = "" in rests
    if len(rests) == 1 and "" not in rests:
        valid[tokenizer(rests.pop(), add_special_tokens=False)["input_ids"][0]] = True
        return valid
    special = set(tokenizer.all_special_ids)
    for i, t in enumerate(token_texts(tokenizer)[:vocab_size]):
        if i not in special and t and any(r.startswith(t) for r in rests if r):
            valid[i] = True
    return valid


def comparable(tokenizer, vocab_size: int) -> torch.Tensor:
    texts = token_texts(tokenizer)
    return torch.tensor(["\ufffd" not in t for t in texts[:vocab_size]] + [False] * (vocab_size - len(texts)))


def eos_of(model) -> int:
    eos = model.generation_config.eos_token_id
    return eos if isinstance(eos, int) else eos[0]


@pytest.mark.parametrize("kind,value,pattern,written", [
    ("choice", CHOICES, choice_pattern(CHOICES), ""),
    ("choice", CHOICES, choice_pattern(CHOICES), "no"),
    ("regex", DATE, DATE, ""),
    ("regex", DATE, DATE, "2024-0"),
])
def test_valid_tokens_equal_partial_matching_over_the_vocabulary(model_name, kind, value, pattern, written):
    model, tokenizer = inference.load_model(model_name)
    text = "Answer:" + written
    constraint = {"type": kind, "value": value, "start": len("Answer:")}
    vocab = model.config.get_text_config().vocab_size
    entries = inference.next_token_distribution(text, inference.MAX_TOP_K, constraint=constraint, model_name=model_name)
    expected = reference_valid(tokenizer, pattern, written, vocab, eos_of(model))
    checked = comparable(tokenizer, vocab)
    # the whole vocabulary, through the engine's own state after the text
    model_, _ = inference.load_model(model_name)
    guide = guide_after(text, constraint, model_name, "s")
    valid = guide.valid().cpu()
    assert torch.equal(valid[checked], expected[checked]), torch.nonzero(valid[checked] != expected[checked])[:5]
    # the entries: valid marks, p_final renormalised over the valid tokens (p_base left plain)
    logits = next_logits(model, tokenizer(text)["input_ids"]).float()
    final = torch.softmax(logits.masked_fill(~valid, float("-inf")), -1)
    base = torch.softmax(logits, -1)
    for e in entries:
        assert e["valid"] == bool(valid[e["token_id"]])
        assert e["p_final"] == pytest.approx(float(final[e["token_id"]]), abs=1e-5)
        assert e["prob"] == pytest.approx(float(base[e["token_id"]]), abs=1e-5)
    n_valid = sum(e["valid"] for e in entries)
    assert all(e["valid"] for e in entries[:n_valid]), "valid tokens first"


def reference_constrained_greedy(model, tokenizer, ids: list[int], valid_after, healed: str, first: int,
                                 steps: int, written: str = "") -> tuple[list[int], str]:
    """Greedy under the reference mask after taking `first` (whose text begins with the `healed` whitespace,
    written before the constraint's start; `written`: what the constraint wrote before it): the tokens and the
    constrained text they write."""
    eos = eos_of(model)
    texts = token_texts(tokenizer)
    seq, text = [first], written + texts[first][len(healed) :]
    for _ in range(steps):
        if seq[-1] == eos:
            break
        valid = valid_after(text)
        token = int(next_logits(model, ids + seq).float().masked_fill(~valid, float("-inf")).argmax())
        seq.append(token)
        text += texts[token] if token != eos else ""
    return seq, text


@pytest.mark.parametrize("kind,value,pattern", [("choice", CHOICES, choice_pattern(CHOICES)), ("regex", DATE, DATE)])
def test_branches_start_valid_continue_under_the_constraint_and_end_where_it_completes(
    model_name, kind, value, pattern
):
    model, tokenizer = inference.load_model(model_name)
    text = "Question: is it done? Answer: "
    result = inference.lookahead(
        text, 4, 6, constraint={"type": kind, "value": value, "start": None}, model_name=model_name
    )
    # healing: the trailing space is backed up, and the constraint starts after it
    ids = tokenizer(text[:-1])["input_ids"]
    vocab, eos = model.config.get_text_config().vocab_size, eos_of(model)
    valid_after = ((lambda t: reference_choice_valid(tokenizer, value, t, vocab, eos)) if kind == "choice"
                   else (lambda t: reference_valid(tokenizer, pattern, t, vocab, eos)))
    healed_first = torch.tensor([t.startswith(" ") and regex.fullmatch(pattern, t[1:], partial=True) is not None
                                 and i not in tokenizer.all_special_ids
                                 for i, t in enumerate(token_texts(tokenizer)[:vocab])])
    forced, written, healed, first_mask = [], "", " ", healed_first
    if int(healed_first.sum()) == 1:  # only the bare space may come first: every branch starts with it
        forced = healed_first.nonzero()[0].tolist()
        written, healed = token_texts(tokenizer)[forced[0]][1:], ""
        first_mask = valid_after(written)
    assert result["forced"] == ({"token_ids": forced, "text": written} if forced else None)
    context = ids + forced
    logits = next_logits(model, context).float().masked_fill(~first_mask, float("-inf"))
    # The likeliest valid first tokens, each continued: one writing the text of a likelier one is no other choice.
    expected: list[tuple[int, list[int], str]] = []
    for first in logits.topk(min(MAX_CANDIDATES_PER_BRANCH * 4, int(first_mask.sum()))).indices.tolist():
        seq, constrained = reference_constrained_greedy(model, tokenizer, context, valid_after, healed, first, 5,
                                                        written)
        if constrained not in [shown for _, _, shown in expected]:
            expected.append((first, seq, constrained))
        if len(expected) == 4:
            break
    assert result["lead"] is None
    assert [b["token_ids"][len(forced)] for b in result["branches"]] == [first for first, _, _ in expected], \
        "they fork at the first choice"
    refused = [d for d in result["distribution"] if not d["valid"]]
    assert len(refused) >= 3 and all(d["p_final"] == 0 for d in refused), "the likeliest refused tokens are listed"
    spaced = torch.tensor([t.startswith(" ") for t in token_texts(tokenizer)[:vocab]])  # healing's own mask
    not_refused = first_mask if forced else healed_first | ~spaced
    expected_refused = next_logits(model, context).float().masked_fill(not_refused, float("-inf"))
    assert [d["token_id"] for d in refused] == expected_refused.topk(len(refused)).indices.tolist()
    for branch, (first, seq, constrained) in zip(result["branches"], expected):
        assert branch["token_ids"] == forced + seq
        assert branch["text"] == constrained
        assert regex.fullmatch(pattern, branch["text"], partial=True)
        assert branch["ends"] == (seq[-1] == eos)
        if branch["ends"]:
            assert regex.fullmatch(pattern, branch["text"]), "a branch ends only where the constraint is complete"


def test_a_start_inside_a_word_is_healed_the_constraint_continues_the_letters_written(embedded):
    text = "Is the sky blue? The answer is y"  # " y" is one token that straddles the start
    start = len(text) - 1
    result = inference.lookahead(text, 3, 4, constraint={"type": "choice", "value": CHOICES, "start": start})
    assert {b["text"] for b in result["branches"]} <= {"es"}
    assert all(b["ends"] for b in result["branches"])
    out = inference.generate(text, 5, constraint={"type": "choice", "value": CHOICES, "start": start})
    assert out["text"] == "es"


def test_continue_is_constrained_greedy_and_lookahead_decoding_stays_exact(model_name):
    model, tokenizer = inference.load_model(model_name)
    text = "Today's date, written as year-month-day:"
    constraint = {"type": "regex", "value": " " + DATE, "start": None}
    greedy = inference.generate(text, 12, "greedy", constraint=constraint, model_name=model_name)
    fast = inference.generate(text, 12, "lookahead", constraint=constraint, model_name=model_name)
    assert fast["token_ids"] == greedy["token_ids"]
    ids = tokenizer(text)["input_ids"]
    eos = eos_of(model)
    first_valid = reference_valid(tokenizer, " " + DATE, "", model.config.get_text_config().vocab_size, eos)
    first = int(next_logits(model, ids).float().masked_fill(~first_valid, float("-inf")).argmax())
    vocab = model.config.get_text_config().vocab_size
    valid_after = lambda t: reference_valid(tokenizer, " " + DATE, t, vocab, eos)  # noqa: E731
    seq, written = reference_constrained_greedy(model, tokenizer, ids, valid_after, "", first, 11)
    assert greedy["token_ids"] == seq
    assert regex.fullmatch(" " + DATE, greedy["text"]), greedy["text"]


def test_json_schema_continuations_parse_and_fit_the_schema(embedded):
    for method in ("greedy", "lookahead"):
        out = inference.generate("A person, as JSON: ", 60, method,
                           constraint={"type": "json_schema", "value": json.dumps(PERSON)})
        person = json.loads(out["text"])
        assert set(person) == {"name", "age"} and isinstance(person["name"], str) and isinstance(person["age"], int)


def test_chat_mode_constrains_the_reply(embedded):
    messages = [{"role": "user", "content": "Is the sky blue? Answer yes or no."}]
    result = inference.lookahead("", 2, 4, messages=messages, constraint={"type": "choice", "value": ["yes", "no"]})
    assert {b["text"] for b in result["branches"]} == {"yes", "no"}
    assert all(b["ends"] for b in result["branches"])
    partly = inference.lookahead("n", 2, 3, messages=messages,
                           constraint={"type": "choice", "value": ["yes", "no"], "start": 0})
    assert [b["text"] for b in partly["branches"]] == ["o"]


def test_a_grammar_constraint(embedded):
    grammar = 'start: "The answer is " ANSWER "."\nANSWER: "yes" | "no"'
    out = inference.generate("Q: Is water wet?\nA: ", 12, constraint={"type": "grammar", "value": grammar})
    assert out["text"] in ("The answer is yes.", "The answer is no.")


def test_a_click_advances_the_sessions_matcher_by_the_new_tokens_only(embedded):
    _, tokenizer = embedded
    constraint = {"type": "json_schema", "value": PERSON, "start": 10}
    text = "A person: " + '{"name": "Ada'
    first = inference.lookahead(text, 2, 3, constraint=constraint, session="click")
    taken = text + first["branches"][0]["text"]
    guide = guide_after(taken, constraint, None, "click")
    assert guide.reused >= len(tokenizer(text[10:])["input_ids"]) - 1
    fresh = inference.lookahead(taken, 2, 3, constraint=constraint, session="other")
    kept = inference.lookahead(taken, 2, 3, constraint=constraint, session="click")
    assert [b["token_ids"] for b in kept["branches"]] == [b["token_ids"] for b in fresh["branches"]]


def test_compiled_grammars_are_kept_per_session_and_never_shared(embedded, monkeypatch):
    """A session's first use of a constraint compiles it, even where another session compiled the same constraint
    for the same text (a shared one would let it time the other's); its own repeats do not, until it is forgotten."""
    model, tokenizer = embedded
    compiles = []
    compile_ = constraints._compile
    monkeypatch.setattr(constraints, "_compile", lambda *args: compiles.append(args) or compile_(*args))
    store = constraints.MatcherStore()
    name = inference.default_model_name()
    constraint = check_constraint({"type": "choice", "value": CHOICES, "start": 0}, "")
    eos, vocab = stop_tokens(name), model.config.get_text_config().vocab_size

    def guide(session: str, written: str) -> None:
        ids = tokenizer(written, add_special_tokens=False)["input_ids"]
        store.guide((name, session), constraint, "", ids, tokenizer, eos, vocab, model.device)

    guide("a", "ye")
    assert len(compiles) == 1
    guide("b", "ye")
    assert len(compiles) == 2, "the same constraint and text in another session is compiled anew"
    guide("a", "ye")
    guide("a", "no")  # not a continuation of the matcher kept: it starts from the session's compiled one
    assert len(compiles) == 2, "a session's own repeats compile nothing"
    store.forget("a")
    guide("a", "ye")
    assert len(compiles) == 3, "a forgotten session's compiled grammars are gone"
    for _ in range(2):
        assert constraints.written_part_error(constraint, "maybe", tokenizer, eos) == ""
    assert len(compiles) == 5, "the written part's check keeps nothing compiled"


def test_presence_and_frequency_penalties_follow_openais_formula(model_name):
    model, tokenizer = inference.load_model(model_name)
    text = "the cat and the dog and the cat and the"
    ids = tokenizer(text)["input_ids"]
    counts = torch.bincount(torch.tensor(ids), minlength=model.config.get_text_config().vocab_size).float()
    logits = next_logits(model, ids).float()
    settings = dict(presence_penalty=0.7, frequency_penalty=0.4, temperature=0.8, top_k=20)
    shaped = (logits - 0.7 * (counts > 0).float() - 0.4 * counts) / 0.8
    kept = shaped >= shaped.topk(20).values[-1]
    final = torch.softmax(shaped.masked_fill(~kept, float("-inf")), -1)
    for e in inference.next_token_distribution(text, 30, model_name=model_name, **settings):
        assert e["p_final"] == pytest.approx(float(final[e["token_id"]]), abs=1e-5)
        assert e["kept"] == bool(kept[e["token_id"]])


def test_stop_strings_cut_continuations_and_branches_before_the_first_one_completed(embedded):
    text = "Once upon a time"
    plain = inference.generate(text, 40, "greedy")["text"]
    stop = [",", " was"]
    cut = min(plain.find(s) for s in stop if s in plain)
    assert cut >= 0
    for method in ("greedy", "lookahead"):
        out = inference.generate(text, 40, method, stop=stop)
        assert out["text"] == plain[:cut]
        assert out["stop"] == next(s for s in stop if plain.find(s) == cut)
        assert "".join(out["token_texts"]) == out["text"]
    free = inference.lookahead(text, 4, 8)
    stopped = inference.lookahead(text, 4, 8, stop=[","])
    for a, b in zip(free["branches"], stopped["branches"]):
        if "," in a["text"]:
            assert b["text"] == a["text"][: a["text"].index(",")] and b["stop"] == "," and not b["ends"]
            assert tokenizer_text(b["token_ids"]).startswith(b["text"] + ",")
        else:
            assert (b["token_ids"], b["text"], b["ends"], b["stop"]) == (a["token_ids"], a["text"], a["ends"], None)


def tokenizer_text(ids: list[int]) -> str:
    return inference.load_model()[1].decode(ids)


@pytest.mark.parametrize("constraint,message", [
    ({"type": "lark", "value": "x"}, "type must be one of"),
    ({"type": "choice", "value": []}, "list of 1 to"),
    ({"type": "choice", "value": "yes"}, "list of 1 to"),
    ({"type": "regex", "value": "(("}, "does not compile"),
    ({"type": "grammar", "value": "start: undefined_rule"}, "does not compile"),
    ({"type": "json_schema", "value": "{not json"}, "not valid JSON"),
    ({"type": "regex", "value": "[0-9]+", "start": 99}, "character offset from 0 to"),
    ({"type": "regex", "value": "[0-9]+", "start": 3}, "stops matching at character 3"),
    ({"type": "choice", "value": ["yes"], "start": 0, "extra": 1}, "constraint must be None or a dict"),
    ("yes", "constraint must be None or a dict"),
])
def test_bad_constraints_get_clear_errors(embedded, constraint, message):
    with pytest.raises(ValueError, match=message):
        inference.lookahead("abc def", constraint=constraint)


@pytest.mark.parametrize("stop,message", [(["a"] * 9, "at most 8"), ([""], "non-empty"), ([3], "non-empty"),
                                          ({"s": 1}, "a string or a list")])
def test_bad_stops_get_clear_errors(embedded, stop, message):
    with pytest.raises(ValueError, match=message):
        inference.generate("abc", 4, stop=stop)



def test_a_constraint_that_writes_several_tokens_by_itself_leads_every_branch_with_them(embedded):
    """Both options begin "Paris, ": the tokens before the first real choice lead every branch, do not use up its
    depth, and the distribution is the one at the choice."""
    model, tokenizer = embedded
    text = "Which Paris? The city:"
    result = inference.lookahead(text, 3, 2, constraint={"type": "choice", "value": ["Paris, France", "Paris, Texas"],
                                                    "start": None})
    forced = result["forced"]
    assert forced is not None and "Paris, France".startswith(forced["text"]) and forced["text"].startswith("Paris")
    n = len(forced["token_ids"])
    firsts = [branch["token_ids"][n] for branch in result["branches"]]
    assert len(set(firsts)) == len(firsts) >= 2, "the branches fork where the options part"
    for branch in result["branches"]:
        assert branch["token_ids"][:n] == forced["token_ids"] and branch["text"].startswith(forced["text"])
        assert len(branch["token_ids"]) <= n + 2, "the forced tokens use up none of the depth"
        assert any(option.startswith(branch["text"]) for option in ("Paris, France", "Paris, Texas"))
    logprobs = torch.log_softmax(next_logits(model, tokenizer(text)["input_ids"] + forced["token_ids"]).float(), -1)
    for entry in result["distribution"]:
        assert entry["logprob"] == pytest.approx(float(logprobs[entry["token_id"]]), abs=1e-4)
    very_next = inference.next_token_distribution(text, 5, constraint={"type": "choice",
                                                                 "value": ["Paris, France", "Paris, Texas"]})
    assert [e["token_id"] for e in very_next if e["valid"]] == forced["token_ids"][:1], "not skipped"
