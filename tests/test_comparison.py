"""Two models on one text, against an independent computation: full forwards without a cache, the divergence in
float64 numpy from its definition."""

import math

import numpy as np
import pytest
import torch

import custom_llm_inference as cli
from lookahead import comparison

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
    monkeypatch.setattr(comparison, "SCORE_CHUNK", chunk)  # 7: several chunks, a boundary inside the text
    models = (embedded[0], cli.load_model(tiny_model_dirs["llama"])[0])
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
            # a token tied with others within float32's rounding may rank anywhere among them
            chosen = row[tokens[i]]
            assert 1 + np.sum(row > chosen + 1e-5) <= result.rank[m, i] <= 1 + np.sum(row > chosen - 1e-5)
        assert result.js[i] == pytest.approx(js_reference(rows[0][i - 1], rows[1][i - 1]), abs=1e-4)
    assert result.next_js == pytest.approx(js_reference(rows[0][-1], rows[1][-1]), abs=1e-4)
    assert np.allclose(result.next_logprobs.numpy(), np.stack([rows[0][-1], rows[1][-1]]), atol=1e-4)


def test_the_divergence_is_zero_for_one_model_and_one_bit_for_disjoint_distributions(embedded):
    model, tokenizer = embedded
    ids = torch.tensor([tokenizer(TEXTS[0])["input_ids"]])
    same = comparison.compare_models((model, model), ids, len(tokenizer))
    assert float(same.js[1:].abs().max()) < 1e-6 and same.next_js < 1e-6
    apart = torch.log(torch.tensor([[0.5, 0.5, 0.0, 0.0], [0.0, 0.0, 0.25, 0.75]]))
    assert comparison.js_bits(apart[0], apart[1]) == pytest.approx(1.0, abs=1e-6)
