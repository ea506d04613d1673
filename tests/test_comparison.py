"""Two models on one text, against an independent computation: full forwards without a cache, the divergence in
float64 numpy from its definition."""

import math

import numpy as np
import pytest
import torch

import custom_llm_inference as inference
from lookahead import comparison, scoring
from lookahead.prefix_cache import PrefixCacheStore
from reference import possible_ranks, possible_tops

TEXTS = ["The old lighthouse keeper climbed the stairs and looked out over the sea.",
         'def add(a, b):\n    return a + b\n\nprint(add(2, 3))', "Ünïcödé — and 🐈 emoji, then plain words."]


def reference(model, ids: torch.Tensor, vocab: int) -> np.ndarray:
    """Each position's next-token log-probabilities (N, vocab), float64, from one full forward."""
    with torch.no_grad():
        logits = model(ids).logits[0].double()
    return torch.log_softmax(logits, -1)[:, :vocab].numpy()


def js_reference(logp: np.ndarray, logq: np.ndarray) -> float:
    p, q = np.exp(logp), np.exp(logq)
    m = (p + q) / 2
    kl = lambda a: float(np.sum(np.where(a > 0, a * (np.log(np.where(a > 0, a, 1)) - np.log(m)), 0.0)))  # noqa: E731
    return (kl(p) + kl(q)) / 2 / math.log(2)


@pytest.mark.parametrize("chunk", [7, 256])
@pytest.mark.parametrize("text", TEXTS)
def test_both_models_rows_and_divergence_equal_full_forwards(embedded, tiny_model_dirs, text, chunk, monkeypatch):
    monkeypatch.setattr(scoring, "SCORE_CHUNK", chunk)  # 7: several chunks, a boundary inside the text
    models = (embedded[0], inference.load_model(tiny_model_dirs["llama"])[0])
    tokenizer = embedded[1]
    vocab = len(tokenizer)
    ids = torch.tensor([tokenizer(text)["input_ids"]])
    result = comparison.compare_models(models, ids, vocab)
    rows = [reference(model, ids, vocab) for model in models]
    tokens = ids[0].numpy()
    assert math.isnan(result.js[0]) and torch.isnan(result.logprob[:, 0]).all()
    for i in range(1, len(tokens)):
        for m in range(2):
            row = rows[m][i - 1]
            assert result.logprob[m, i] == pytest.approx(row[tokens[i]], abs=1e-4)
            assert result.rank[m, i] in possible_ranks(row, tokens[i])
        assert result.js[i] == pytest.approx(js_reference(rows[0][i - 1], rows[1][i - 1]), abs=1e-4)
    assert result.next_js == pytest.approx(js_reference(rows[0][-1], rows[1][-1]), abs=1e-4)
    assert np.allclose(result.next_logprobs.numpy(), np.stack([rows[0][-1], rows[1][-1]]), atol=1e-4)


@pytest.mark.parametrize("edit", ["append", "edit", "undo", "same"])
def test_a_kept_comparison_reads_only_what_changed_and_equals_a_fresh_one(embedded, tiny_model_dirs, edit,
                                                                        monkeypatch):
    monkeypatch.setattr(scoring, "SCORE_CHUNK", 5)
    models = (embedded[0], inference.load_model(tiny_model_dirs["llama"])[0])
    tokenizer = embedded[1]
    first = tokenizer(TEXTS[0])["input_ids"]
    second = {"append": first + tokenizer(" then rested")["input_ids"], "edit": first[:4] + first[6:],
              "undo": first[:5], "same": first}[edit]
    kept = comparison.compare_models(models, torch.tensor([first]), len(tokenizer))
    store, keys = PrefixCacheStore(), [("a", "session"), ("b", "session")]  # each model's cache, as a session's
    for key, cache, rows in zip(keys, kept.caches, kept.rows):
        store.put(key, first, cache, (), rows)
    calls = []
    for model in models:
        monkeypatch.setattr(model.base_model, "forward", _counting(model.base_model.forward, calls))
    again = comparison.compare_models(models, torch.tensor([second]), len(tokenizer), kept,
                                      [store.take(key, second, scored=True) for key in keys])
    run = sum(calls) // 2  # each model runs the same tokens
    # the same text runs its last token again, as any call over the session's cache does: its logits are not kept
    assert run == {"append": len(second) - len(first), "edit": len(second) - 3, "undo": 1, "same": 1}[edit]
    monkeypatch.undo()
    fresh = comparison.compare_models(models, torch.tensor([second]), len(tokenizer))
    for name in ("logprob", "js", "next_logprobs"):
        assert np.allclose(getattr(again, name).numpy(), getattr(fresh, name).numpy(), atol=1e-4, equal_nan=True)
    # Ranks and first choices where the logprobs do not tie: the kept comparison runs fewer rows a pass than the
    # fresh one, and rounds otherwise where its products take another path.
    rows = [reference(model, torch.tensor([second]), len(tokenizer)) for model in models]
    for m in range(2):
        for i in range(1, len(second)):
            assert again.rank[m, i] in possible_ranks(rows[m][i - 1], second[i])
            assert fresh.rank[m, i] in possible_ranks(rows[m][i - 1], second[i])
            assert {int(again.top[m, i]), int(fresh.top[m, i])} <= possible_tops(rows[m][i - 1])


def _counting(forward, calls: list):
    def counted(input_ids=None, **kwargs):
        calls.append(input_ids.shape[1])
        return forward(input_ids=input_ids, **kwargs)
    return counted


def test_the_divergence_is_zero_for_one_model_and_one_bit_for_disjoint_distributions(embedded):
    model, tokenizer = embedded
    ids = torch.tensor([tokenizer(TEXTS[0])["input_ids"]])
    same = comparison.compare_models((model, model), ids, len(tokenizer))
    assert float(same.js[1:].abs().max()) < 1e-6 and same.next_js < 1e-6
    apart = torch.log(torch.tensor([[0.5, 0.5, 0.0, 0.0], [0.0, 0.0, 0.25, 0.75]]))
    assert comparison.js_bits(apart[0], apart[1]) == pytest.approx(1.0, abs=1e-6)


TEXT = "The old lighthouse keeper climbed the stairs and looked out over the sea."


@pytest.fixture(scope="module")
def other_tokenizer_model(tmp_path_factory) -> str:
    """A tiny random Llama with a tokenizer of its own (a byte-level BPE trained here, offline): another cut of
    the same text into tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import AutoModelForCausalLM, LlamaConfig, PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE(unk_token="<unk>"))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator([TEXT * 3, *TEXTS], trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<unk>", "<s>", "</s>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    path = tmp_path_factory.mktemp("other-tokenizer")
    tokenizer.save_pretrained(path)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=256,
                         initializer_range=0.2, bos_token_id=1, eos_token_id=2, pad_token_id=2)
    AutoModelForCausalLM.from_config(config).save_pretrained(path)
    return str(path)


def test_compare_answers_as_each_model_alone_and_as_full_forwards(embedded, tiny_model_dirs):
    names = [inference.default_model_name(), tiny_model_dirs["llama"]]
    result = inference.compare(TEXT, names, k=5, n_branches=3, depth=2, session="compare")
    assert result["models"] == names and result["per"] == "token" and result["words"] is None
    tokenizer = embedded[1]
    ids = torch.tensor([tokenizer(TEXT)["input_ids"]])
    rows = [reference(inference.load_model(name)[0], ids, len(tokenizer)) for name in names]
    tokens = result["tokens"]
    assert [t["token_id"] for t in tokens] == ids[0].tolist()
    assert "".join(TEXT[t["start"]:t["end"]] for t in tokens) == TEXT
    assert tokens[0]["js"] is None and tokens[0]["logprob"] == [None, None]
    for i, token in enumerate(tokens[1:], 1):
        for m in range(2):
            assert token["logprob"][m] == pytest.approx(rows[m][i - 1][token["token_id"]], abs=1e-4)
        assert token["js"] == pytest.approx(js_reference(rows[0][i - 1], rows[1][i - 1]), abs=1e-4)
        assert all(token["top"][m] in {tokenizer.decode([t]) for t in possible_tops(rows[m][i - 1])} for m in range(2))
    assert tokens[0]["top"] is None
    assert result["next"]["js"] == pytest.approx(js_reference(rows[0][-1], rows[1][-1]), abs=1e-4)
    for m, name in enumerate(names):
        assert [e["token_id"] for e in result["next"]["distributions"][m]] == [
            e["token_id"] for e in inference.next_token_distribution(TEXT, 5, model_name=name, session="alone")]
        for entry in result["next"]["distributions"][m]:
            assert entry["prob"] == pytest.approx(math.exp(rows[m][-1][entry["token_id"]]), abs=1e-4)
        alone = inference.lookahead(TEXT, 3, 2, model_name=name, session="alone")["branches"]
        assert [b["token_ids"] for b in result["branches"][m]] == [b["token_ids"] for b in alone]


@pytest.mark.parametrize("caret", [TEXT.index(" climbed"), TEXT.index(" climbed") - 2], ids=["between", "in a word"])
def test_compare_at_a_caret_suggests_there_and_still_compares_the_whole_text(embedded, tiny_model_dirs, caret):
    names = [inference.default_model_name(), tiny_model_dirs["llama"]]
    inference.compare(TEXT, names, n_branches=2, depth=2, session="compare caret")  # the whole text read, and kept
    result = inference.compare(TEXT, names, n_branches=2, depth=2, caret=caret, session="compare caret")
    assert result["tokens"][-1]["end"] == len(TEXT)
    tokenizer = embedded[1]
    before = torch.tensor([tokenizer(TEXT[:caret])["input_ids"]])
    rows = [reference(inference.load_model(name)[0], before, len(tokenizer)) for name in names]
    assert result["next"]["js"] == pytest.approx(js_reference(rows[0][-1], rows[1][-1]), abs=1e-4)
    for m, name in enumerate(names):
        alone = inference.lookahead(TEXT, 2, 2, model_name=name, caret=caret, session="alone caret")["branches"]
        assert [b["text"] for b in result["branches"][m]] == [b["text"] for b in alone]


def test_each_models_listing_comes_from_the_joint_pass_and_a_click_runs_only_its_new_tokens(embedded, tiny_model_dirs,
                                                                                          monkeypatch):
    names = [inference.default_model_name(), tiny_model_dirs["llama"]]
    models = [inference.load_model(name)[0] for name in names]
    calls = []
    for model in models:
        monkeypatch.setattr(model.base_model, "forward", _counting(model.base_model.forward, calls))
    tokenizer = embedded[1]
    first = inference.compare(TEXT, names, k=1, n_branches=0, session="joint")
    n = len(tokenizer(TEXT)["input_ids"])
    assert sum(calls) == 2 * n, "each token once per model"
    calls.clear()
    taken = TEXT + " Then it rained."
    again = inference.compare(taken, names, k=1, n_branches=0, session="joint")
    assert sum(calls) == 2 * (len(tokenizer(taken)["input_ids"]) - n), "the new tokens, each once per model"
    assert len(calls) == 2, "one pass per model: each distribution from the logits its pass kept"
    monkeypatch.undo()
    for result, text in ((first, TEXT), (again, taken)):
        for m, name in enumerate(names):
            alone = inference.token_probabilities(text, 1, model_name=name, session=f"alone {m}")["tokens"]
            assert [t["logprob"][m] for t in result["tokens"]] == pytest.approx(
                [t["logprob"] for t in alone], abs=1e-4, nan_ok=True)


def test_a_text_longer_than_a_models_context_is_compared_over_the_window_both_read(embedded, tiny_model_dirs):
    """The divergences and first choices over the window both contexts hold; each model's log-probabilities and
    ranks its own listing's (the embedded model reads the whole text)."""
    names = [inference.default_model_name(), tiny_model_dirs["llama"]]  # the tiny Llama reads 64 tokens at most
    text = " ".join(TEXTS[::2] * 3)
    tokens = inference.compare(text, names, k=1, n_branches=0, session="window")["tokens"]
    alone = [inference.token_probabilities(text, 1, model_name=name, session="window alone")["tokens"]
             for name in names]
    for m in range(2):
        assert [(t["token_id"], t["token"], t["start"], t["end"]) for t in tokens] == [
            (t["token_id"], t["token"], t["start"], t["end"]) for t in alone[m]]
        assert [t["logprob"][m] for t in tokens] == pytest.approx([t["logprob"] for t in alone[m]], abs=1e-4)
        assert [t["rank"][m] for t in tokens] == [t["rank"] for t in alone[m]]
    dropped = next(i for i, t in enumerate(alone[1]) if t["logprob"] is not None) - 1
    assert dropped > 0 and alone[0][1]["logprob"] is not None, "the text overflows the tiny model's context alone"
    assert all(t["js"] is None and t["top"] is None for t in tokens[: dropped + 1])  # nothing before in the window
    tokenizer = embedded[1]
    window = torch.tensor([[t["token_id"] for t in tokens[dropped:]]])
    rows = [reference(inference.load_model(name)[0], window, len(tokenizer)) for name in names]
    for i, token in enumerate(tokens[dropped + 1 :], 1):
        assert token["js"] == pytest.approx(js_reference(rows[0][i - 1], rows[1][i - 1]), abs=1e-4)
        assert all(token["top"][m] in {tokenizer.decode([t]) for t in possible_tops(rows[m][i - 1])} for m in range(2))


def test_no_branches_compares_the_text_alone(embedded, tiny_model_dirs):
    names = [inference.default_model_name(), tiny_model_dirs["llama"]]
    alone = inference.compare(TEXT, names, n_branches=0, session="text alone")
    full = inference.compare(TEXT, names, session="with branches")
    assert alone["branches"] == [[], []] and full["branches"][0]
    assert alone["tokens"] == full["tokens"] and alone["next"] == full["next"]


def test_models_with_other_tokenizers_are_compared_per_word(embedded, other_tokenizer_model):
    names = [inference.default_model_name(), other_tokenizer_model]
    result = inference.compare(TEXT, names, n_branches=2, depth=2, session="compare words")
    assert result["per"] == "word" and result["tokens"] is None and result["next"]["js"] is None
    words = result["words"]
    assert "".join(w["text"] for w in words) == TEXT and words[0]["start"] == 0 and words[-1]["end"] == len(TEXT)
    assert len(words) > 5, "most words end where both tokenizers end a token"
    for m, name in enumerate(names):
        model, tokenizer = inference.load_model(name)
        encoding = tokenizer(TEXT, return_offsets_mapping=True)
        ids = torch.tensor([encoding["input_ids"]])
        logprobs = reference(model, ids, len(tokenizer))
        scored = [(end, logprobs[i - 1][token]) for i, ((_, end), token) in
                  enumerate(zip(encoding["offset_mapping"], encoding["input_ids"])) if i > 0 and end > 0]
        for word in words[1:]:  # the first holds the first token, which nothing predicts
            inside = [lp for end, lp in scored if word["start"] < end <= word["end"]]
            assert word["logprob"][m] == pytest.approx(math.fsum(inside), abs=1e-3), (name, word["text"])


def test_compare_refuses_anything_but_two_models(embedded):
    for models in (None, [], [inference.default_model_name()], ["a", "b", "c"], [inference.default_model_name(), ""]):
        with pytest.raises(ValueError, match="models"):
            inference.compare(TEXT, models)
