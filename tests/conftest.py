"""Shared fixtures: the embedded model and tiny random models of three architectures.

The tiny models are built from configs (no download) and saved with the embedded model's
tokenizer, so the text-level API loads them through the same `load_model` path as any
local folder.
"""

import atexit
import os
import shutil
import tempfile

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.pop("LOOKAHEAD_MODEL", None)
os.environ.pop("SPACE_ID", None)
# A long text answers first from its last tokens (lookahead/reading.py) past a length this machine's speed sets:
# tests read every text whole unless they turn it on (tests/test_reading.py), so no answer depends on the CPU.
os.environ["LOOKAHEAD_FIRST_ANSWER_SECONDS"] = "0"
# The app offers the tiny Llama too (its picker's choices are read when app.py is imported, which a
# test module may do at collection): the model is written to this folder by `tiny_model_dirs`.
TINY_LLAMA_DIR = tempfile.mkdtemp(prefix="tiny-llama-")
os.environ["LOOKAHEAD_MODELS"] = TINY_LLAMA_DIR
atexit.register(shutil.rmtree, TINY_LLAMA_DIR, ignore_errors=True)  # 28 MB a run, outside pytest's own tmp_path

import pytest  # noqa: E402
import torch  # noqa: E402
from transformers import AutoModelForCausalLM, GPT2Config, LlamaConfig, Qwen2Config  # noqa: E402

import custom_llm_inference as inference  # noqa: E402
from lookahead.backends.in_process import InProcess  # noqa: E402

TINY_CONTEXT = 64  # small, so tests can overflow the context cheaply


def tiny_configs(vocab_size: int) -> dict:
    common = dict(vocab_size=vocab_size, initializer_range=0.2, bos_token_id=1, eos_token_id=2, pad_token_id=2)
    return {
        "llama": LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                             num_key_value_heads=4, max_position_embeddings=TINY_CONTEXT, **common),
        "gpt2": GPT2Config(n_embd=64, n_layer=2, n_head=4, n_positions=TINY_CONTEXT, **common),
        "qwen2": Qwen2Config(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                             num_key_value_heads=2, max_position_embeddings=TINY_CONTEXT, **common),
    }


@pytest.fixture(scope="session")
def embedded():
    return inference.load_model()


@pytest.fixture(scope="session")
def tiny_model_dirs(tmp_path_factory, embedded) -> dict[str, str]:
    _, tokenizer = embedded
    dirs = {}
    for arch, config in tiny_configs(len(tokenizer)).items():
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config)
        path = TINY_LLAMA_DIR if arch == "llama" else tmp_path_factory.mktemp(f"tiny-{arch}")
        model.save_pretrained(path)
        tokenizer.save_pretrained(path)
        dirs[arch] = str(path)
    return dirs


@pytest.fixture(params=["embedded", "llama", "gpt2", "qwen2"])
def model_name(request, tiny_model_dirs) -> str:
    """Every model the correctness tests run on, by the name `load_model` takes."""
    return inference.default_model_name() if request.param == "embedded" else tiny_model_dirs[request.param]


@pytest.fixture(scope="session")
def app_url(embedded, tiny_model_dirs) -> str:
    """The app, served on loopback for the API and browser tests; it offers a tiny Llama besides the embedded model."""
    from app import demo, launch

    _, url, _ = launch(server_name="127.0.0.1", prevent_thread_lock=True, quiet=True)
    yield url
    demo.close()


def clear_in_process_caches(stop_reads: bool = False) -> None:
    """Empty the caches of the in-process backend answering the public functions (none while another answers)."""
    backend = inference.backend()
    if not isinstance(backend, InProcess):
        return
    if stop_reads:
        backend.reader.stop()  # a long text still being read would store it after the clear
    backend.speculator.clear()
    backend.prefix_caches.clear()
    backend.matchers.clear()
    backend.listings.clear()


@pytest.fixture(autouse=True)
def fresh_prefix_caches():
    clear_in_process_caches()
    yield
    clear_in_process_caches(stop_reads=True)
