"""The map of futures equals an independent computation: every path of at most `depth` tokens whose mass reaches the
cutoff, each number from a full forward over the text and the path (no cache), warm or cold, at the end or a caret."""

import math
import threading

import pytest
import torch

import custom_llm_inference as inference
from lookahead.checks import MAX_MAP_NODES
from reference import next_logits

TOLERANCE = 1e-4
TEXTS = ["The cat sat on the", "Once upon a time, in a", "def add(a, b):\n    return"]


def reference_map(model, tokenizer, text: str, depth: int, cutoff: float, temperature: float = 1.0,
                  writer: list[int] = ()) -> dict[tuple[int, ...], dict]:
    """Every path with its prob, p_base, mass and entropy, from a full forward per node, by path."""
    healed = text[-1] if len(text) > 1 and text[-1].isspace() else ""
    ids = tokenizer(text[: len(text) - len(healed)])["input_ids"]
    eos = model.generation_config.eos_token_id
    eos = {eos} if isinstance(eos, int) else set(eos or ())
    found = {(): {"prob": 1.0, "p_base": 1.0, "mass": 1.0}}
    frontier = [()]
    while frontier:
        path = frontier.pop()
        logits = next_logits(model, ids + list(path)).float()
        if not path and healed:
            texts = tokenizer.batch_decode([[i] for i in range(logits.shape[0])])
            logits = logits.masked_fill(~torch.tensor([t.startswith(healed) for t in texts]), float("-inf"))
        final = torch.log_softmax(logits / temperature, -1)
        base = torch.log_softmax(logits, -1)
        found[path]["entropy"] = float(torch.special.entr(final.exp()).sum()) / math.log(2)
        if len(path) == depth:
            continue
        mass = found[path]["mass"]
        children = set((final.exp() * mass >= cutoff).nonzero()[:, 0].tolist())
        if path == tuple(writer[: len(path)]) and len(path) < len(writer):
            children.add(writer[len(path)])
        for token in children:
            child = path + (token,)
            p = float(final[token].exp())
            found[child] = {"prob": p, "p_base": float(base[token].exp()), "mass": mass * p}
            if token not in eos:
                frontier.append(child)
    return found


def paths_of(answer: dict) -> dict[tuple[int, ...], dict]:
    nodes = answer["nodes"]
    paths = {0: ()}
    for node in nodes[1:]:
        paths[node["id"]] = paths[node["parent"]] + (node["token_id"],)
    return {paths[node["id"]]: node for node in nodes}


def assert_matches(answer: dict, reference: dict, cutoff: float, writer: tuple[int, ...] = ()) -> None:
    ours = paths_of(answer)
    on_writer = {writer[:n] for n in range(len(writer) + 1)}
    for path, expected in reference.items():  # a path at the cutoff may fall either side by rounding
        if expected["mass"] >= cutoff * (1 + TOLERANCE) or path in on_writer:
            assert path in ours, f"missing {path} (mass {expected['mass']})"
    for path, node in ours.items():
        expected = reference.get(path)
        assert expected is not None or node["mass"] < cutoff * (1 + TOLERANCE), f"extra {path}"
        if expected is None:
            continue
        for key in ("prob", "p_base", "mass"):
            assert node[key] == pytest.approx(expected[key], abs=TOLERANCE), (path, key)
        if not node["ends"]:
            assert node["entropy"] == pytest.approx(expected["entropy"], abs=1e-3), path
        assert node["on_text"] == (path in on_writer)  # the root, the text itself, always


def assert_well_formed(answer: dict) -> None:
    """Ids are places; the root first, then depth first with each node's children by mass; `rest` is the mass of
    the children not listed."""
    nodes = answer["nodes"]
    assert [n["id"] for n in nodes] == list(range(len(nodes)))
    assert nodes[0]["parent"] is None and nodes[0]["mass"] == 1.0 and nodes[0]["token_id"] is None
    children: dict[int, list[dict]] = {}
    for node in nodes[1:]:
        assert node["parent"] < node["id"]
        assert node["depth"] == nodes[node["parent"]]["depth"] + 1
        children.setdefault(node["parent"], []).append(node)
    for parent, kids in children.items():
        assert [k["mass"] for k in kids] == sorted((k["mass"] for k in kids), reverse=True)
        assert nodes[parent]["rest"] == pytest.approx(nodes[parent]["mass"] - sum(k["mass"] for k in kids), abs=1e-6)
    stack = [0]
    order = []
    while stack:  # pre-order: each node's subtree follows it, children in the listed order
        i = stack.pop()
        order.append(i)
        stack.extend(reversed([k["id"] for k in children.get(i, [])]))
    assert order == list(range(len(nodes)))


@pytest.mark.parametrize("text", TEXTS)
@pytest.mark.parametrize("depth, cutoff", [(1, 0.01), (2, 0.02), (3, 0.05)])
def test_the_map_is_every_future_above_the_cutoff(embedded, text, depth, cutoff):
    model, tokenizer = embedded
    answer = inference.multiverse(text, depth, cutoff, session=f"map {text}")
    assert_matches(answer, reference_map(model, tokenizer, text, depth, cutoff), cutoff)
    assert_well_formed(answer)
    assert answer["depth"] == depth and answer["cutoff"] == cutoff and answer["top_n"] is None


def test_under_a_temperature_each_prob_is_p_final(embedded):
    model, tokenizer = embedded
    text, depth, cutoff = "Once upon a time, in a", 2, 0.02
    answer = inference.multiverse(text, depth, cutoff, temperature=0.7, session="hot")
    assert_matches(answer, reference_map(model, tokenizer, text, depth, cutoff, temperature=0.7), cutoff)
    assert any(abs(n["prob"] - n["p_base"]) > 0.01 for n in answer["nodes"])


def test_a_trailing_space_is_healed(embedded):
    model, tokenizer = embedded
    text = "The cat sat on the "
    answer = inference.multiverse(text, 2, 0.02, session="healed")
    assert answer["healed_whitespace"] == " "
    assert_matches(answer, reference_map(model, tokenizer, text, 2, 0.02), 0.02)
    first = [n for n in answer["nodes"] if n["depth"] == 1]
    assert all(n["token"].startswith(" ") and not n["text"].startswith(" ") for n in first)


def test_at_a_caret_the_writers_own_path_is_listed_with_its_true_mass(embedded):
    model, tokenizer = embedded
    whole = "The cat sat on the windowsill and purred."
    caret = len("The cat sat on the")
    writer = tuple(tokenizer(whole[caret:], add_special_tokens=False)["input_ids"][:3])
    inference.lookahead(whole, session="caret")  # the session holds the whole text: the caret reads none of it
    answer = inference.multiverse(whole, 3, 0.05, caret=caret, session="caret")
    assert answer["reused_tokens"] > 0
    assert_matches(answer, reference_map(model, tokenizer, whole[:caret], 3, 0.05, writer=list(writer)), 0.05,
                   writer)
    assert_well_formed(answer)
    on_text = [n for n in answer["nodes"] if n["on_text"]]
    assert [n["token_id"] for n in on_text[1:]] == list(writer)
    assert on_text[-1]["mass"] < 0.05  # listed whatever its mass
    after = inference.multiverse(whole, 3, 0.05, caret=caret, session="caret")
    assert after["nodes"] == answer["nodes"]  # the whole text's cache came back as it was


def test_warm_costs_a_pass_a_level_and_equals_cold():
    text = "The old lighthouse keeper climbed the stairs and"
    inference.lookahead(text, session="warm map")
    warm = inference.multiverse(text, 3, 0.02, session="warm map")
    cold = inference.multiverse(text, 3, 0.02, session="cold map")
    assert warm["reused_tokens"] == warm["context_tokens"] - 1
    assert warm["passes"] == 3
    assert_matches(warm, {path: dict(node) for path, node in paths_of(cold).items()}, 0.02)


def test_inserting_a_path_reads_none_of_it_again():
    """The session keeps the likeliest paths' KV: the next answer after inserting one runs only its last token."""
    text = "The old lighthouse keeper climbed the stairs and"
    answer = inference.multiverse(text, 3, 0.02, session="insert")
    deepest = max((n for n in answer["nodes"] if n["depth"] == 3 and not n["ends"]), key=lambda n: n["mass"])
    after = inference.lookahead(text + deepest["text"], session="insert")
    assert after["reused_tokens"] == after["context_tokens"] - 1


HELD_AT = 300  # module calls into the map (each pass over the model makes ~200): held in its second pass


@pytest.mark.parametrize("same_text", [False, True], ids=["a click", "the same text asked again"])
def test_a_click_while_the_pages_map_grows_is_answered_from_its_precomputed_answer(same_text):
    """The page asks a map after every answer, yielding: it grows over a copy of the session's cache, so a click's ready
    answer is claimed while it runs, and suggestions for another text stop it (the same text leaves it be)."""
    speculator = inference.backend().speculator
    text = "The old lighthouse keeper climbed the stairs and"
    shown = inference.lookahead(text, session="reader", precompute=True)
    speculator.wait()
    asked = text if same_text else text + shown["branches"][0]["text"]
    outcome, calls, holding, release = [], [0], threading.Event(), threading.Event()

    def mapping() -> None:
        try:
            outcome.append(inference.multiverse(text, 3, 0.02, session="reader", yielding=True))
        except inference.Cancelled:
            outcome.append("cancelled")

    mapper = threading.Thread(target=mapping)

    def hold(module: torch.nn.Module, args: tuple) -> None:
        if threading.current_thread() is mapper:
            calls[0] += 1
            if calls[0] == HELD_AT:
                holding.set()
                release.wait(60)

    handle = torch.nn.modules.module.register_module_forward_pre_hook(hold)
    try:
        mapper.start()
        assert holding.wait(60), "the map reached its second pass"
        served = speculator.served
        clicked = inference.lookahead(asked, session="reader")
        assert speculator.served == served + (not same_text), "the click's answer was ready, the map running"
    finally:
        release.set()
        handle.remove()
    mapper.join(60)
    inference.lookahead(text, session="fresh reader")
    assert clicked == inference.lookahead(asked, session="fresh reader"), "exact, as without the map"
    if not same_text:
        assert outcome == ["cancelled"]
        return
    assert outcome == [inference.multiverse(text, 3, 0.02, session="fresh reader")]
    deepest = max((n for n in outcome[0]["nodes"] if n["depth"] == 3 and not n["ends"]), key=lambda n: n["mass"])
    after = inference.lookahead(text + deepest["text"], session="reader")
    assert after["reused_tokens"] == after["context_tokens"] - 1, "the map's paths were kept beside the cache"


def test_an_end_token_ends_its_path(embedded):
    _, tokenizer = embedded
    answer = inference.multiverse("", 2, 0.01, messages=[{"role": "user", "content": "Say only yes."}],
                                  session="chat map")
    ended = [n for n in answer["nodes"] if n["ends"]]
    for node in ended:
        assert node["rest"] == 0 and not any(n["parent"] == node["id"] for n in answer["nodes"])
        assert tokenizer.eos_token not in node["text"]


def test_under_a_constraint_every_path_is_allowed():
    choices = ["yes", "no", "maybe later"]
    answer = inference.multiverse("Answer: ", 3, 0.002, constraint={"type": "choice", "value": choices, "start": 8},
                                  session="constrained map")
    texts = [n["text"] for n in answer["nodes"][1:] if not n["ends"]]
    assert texts and all(any(c.startswith(t) for c in choices) for t in texts)
    first = [n for n in answer["nodes"] if n["depth"] == 1]
    assert sum(n["prob"] for n in first) > 0.99  # the allowed tokens' mass (rare spellings fall below the cutoff)
    assert_well_formed(answer)


@pytest.mark.parametrize("arguments, message", [
    ({"depth": 0}, "depth must be between 1 and 8"),
    ({"depth": 9}, "depth must be between 1 and 8"),
    ({"cutoff": 0}, "cutoff must be a number between 0 and 1"),
    ({"cutoff": 1}, "cutoff must be a number between 0 and 1"),
    ({"cutoff": "high"}, "cutoff must be a number"),
    ({"depth": 8, "cutoff": 0.001}, f"up to 8,000 nodes .* the limit is {MAX_MAP_NODES:,}"),
    ({"caret": 99}, "caret must be between 0 and"),
])
def test_bad_arguments_are_refused_with_a_reason(arguments, message):
    with pytest.raises(ValueError, match=message):
        inference.multiverse("The cat", **arguments)


def test_the_node_count_is_bounded_by_depth_over_cutoff():
    answer = inference.multiverse("The", 2, 0.01, session="bounded")
    for depth in (1, 2):
        level = [n for n in answer["nodes"] if n["depth"] == depth]
        assert len(level) <= 1 / 0.01 and sum(n["mass"] for n in level) <= 1 + 1e-6


def likeliest_by_search(model, tokenizer, text: str, k: int, depth: int, temperature: float = 1.0) -> list[tuple]:
    """The k likeliest paths of `depth` tokens by mass, from full forwards: a depth-first search over every path,
    skipping only those already less likely than the k-th found (a path is never likelier than its prefix)."""
    ids = tokenizer(text)["input_ids"]
    eos = model.generation_config.eos_token_id
    eos = {eos} if isinstance(eos, int) else set(eos or ())
    best: list[tuple[float, tuple]] = []

    def bound() -> float:
        return best[k - 1][0] if len(best) >= k else 0.0

    def visit(path: tuple, mass: float) -> None:
        probs = torch.softmax(next_logits(model, ids + list(path)).float() / temperature, -1)
        for token in probs.argsort(descending=True).tolist():
            child = mass * float(probs[token])
            if child < bound():
                break  # every later token is less likely still
            if len(path) + 1 == depth or token in eos:
                best.append((child, path + (token,)))
                best.sort(reverse=True)
                del best[k:]
            else:
                visit(path + (token,), child)

    visit((), 1.0)
    return [path for _, path in best]


@pytest.mark.parametrize("text, k, depth, temperature", [
    ("The old lighthouse keeper climbed the stairs and", 5, 3, 1.0),
    ("The cat sat on the", 3, 2, 1.0),
    ("Once upon a time, in a", 4, 3, 0.7),
])
def test_branches_by_mass_are_the_likeliest_paths(embedded, text, k, depth, temperature):
    model, tokenizer = embedded
    expected = likeliest_by_search(model, tokenizer, text, k, depth, temperature)
    answer = inference.lookahead(text, k, depth, temperature=temperature, branch_mode="mass", session=f"mass {text}")
    assert [tuple(b["token_ids"]) for b in answer["branches"]] == expected  # likeliest first
    greedy = inference.lookahead(text, k, depth, temperature=temperature, session=f"greedy {text}")
    assert answer["distribution"] == greedy["distribution"]

