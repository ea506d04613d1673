"""What a caller may ask: each public function's arguments checked once, in the calling process, before a request is
built (a refused call costs no model work, and on ZeroGPU no GPU time). A `ValueError` says what is wrong, in words
the page, the endpoints and MCP pass on as they are; the limits are the API's (docs/api.md, "Limits")."""

from __future__ import annotations

import math
from collections.abc import Iterable

from lookahead.chat import as_dicts, check_template, encode
from lookahead.chat import check_messages as check_conversation
from lookahead.constraints import Constraint, ConstraintMismatch, written_part_error
from lookahead.constraints import check_constraint as compile_constraint
from lookahead.models import available_models, default_model_name, load_tokenizer, stop_tokens
from lookahead.requests import Messages
from lookahead.results import text_token_places

MAX_BRANCHES = 20
MAX_DEPTH = 16
MAX_NEW_TOKENS = 1024
MAX_TEXT_CHARS = 1_000_000  # far past any model's context; keeps tokenizing a pasted book bounded
MAX_STOPS, MAX_STOP_CHARS = 8, 200
MAX_STEPS, MAX_WINDOW = 64, 2048  # attribution: integrated-gradients points, tokens explained
MAX_SEED = 2**63 - 1  # torch.Generator's seeds are 64-bit
MAX_FIT_TOKENS = 256  # tokens after the caret a branch's fit is measured on
MAX_MAP_DEPTH = 8  # the map of futures: tokens deep
MAX_MAP_NODES = 2000  # and nodes listed, at most depth/cutoff (each level's masses sum to at most 1)


def check_int(name: str, value: object, low: int, high: int) -> int:
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
            or int(value) != value):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if not low <= value <= high:
        raise ValueError(f"{name} must be between {low} and {high}, got {value}")
    return int(value)


def check_cutoff(cutoff: object, depth: int) -> float:
    """A map's cutoff: a mass strictly between 0 and 1, large enough that the map stays within MAX_MAP_NODES."""
    if isinstance(cutoff, bool) or not isinstance(cutoff, (int, float)) or not 0 < cutoff < 1:
        raise ValueError(f"cutoff must be a number between 0 and 1 (exclusive), the least mass a future listed has, "
                         f"got {cutoff!r}")
    if depth / cutoff > MAX_MAP_NODES:
        raise ValueError(f"depth {depth} with cutoff {cutoff:g} could list up to {math.floor(depth / cutoff):,} "
                         f"nodes (depth/cutoff); the limit is {MAX_MAP_NODES:,}: raise the cutoff to at least "
                         f"{depth / MAX_MAP_NODES:g} or lower the depth")
    return float(cutoff)


def check_choice(name: str, value: object, choices: Iterable[str]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {sorted(choices)}, got {value!r}")
    return value


def check_text(text: object, messages: Messages | None = None) -> str:
    """The text (in chat mode the reply, which may still be empty), checked."""
    text = check_string("text", text)
    if not text and messages is None:
        raise ValueError("text is empty: type something to see what could come next")
    return text


def check_string(name: str, value: object) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a string, got {type(value).__name__}")
    if len(value) > MAX_TEXT_CHARS:
        raise ValueError(f"{name} is too long: {len(value):,} characters, the limit is {MAX_TEXT_CHARS:,}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ValueError(
            f"{name} has a lone surrogate (U+{ord(value[error.start]):04X}) at character {error.start}: "
            "half of a character that was split; send the whole character"
        ) from None
    return value


def check_messages(messages: object, model_name: str | None) -> Messages | None:
    """Chat mode's earlier turns, checked (and the model's chat template), as hashable pairs."""
    checked = check_conversation(messages, check_string)
    if checked is None:
        return None
    check_template(load_tokenizer(model_name), model_name or default_model_name())
    return tuple((m["role"], m["content"]) for m in checked)


def check_constraint(constraint: object, text: str, model_name: str | None) -> Constraint | None:
    """The constraint, compiled, and the part of `text` after its start checked against it."""
    checked = compile_constraint(constraint, text)
    if checked is None:
        return None
    name = model_name or default_model_name()
    error = written_part_error(checked, text, load_tokenizer(name), stop_tokens(name))
    if error:
        raise ConstraintMismatch(error)
    return checked


def check_stop(stop: object) -> tuple[str, ...]:
    """Stop strings as a tuple (hashable, for precomputation)."""
    if stop is None:
        return ()
    if isinstance(stop, str):
        stop = [stop]
    if (not isinstance(stop, (list, tuple)) or len(stop) > MAX_STOPS
            or not all(isinstance(s, str) and 0 < len(s) <= MAX_STOP_CHARS for s in stop)):
        raise ValueError(f"stop must be a string or a list of at most {MAX_STOPS} non-empty strings of up to "
                         f"{MAX_STOP_CHARS} characters, got {stop!r}"[:300])
    return tuple(stop)


def check_model_name(model_name: object) -> str | None:
    if model_name is not None and (not isinstance(model_name, str) or not model_name):
        raise ValueError(f"model_name must be a model's name or None, got {model_name!r}")
    return model_name


def offered_model_name(model_name: object) -> str | None:
    """`model_name` if this app offers it to visitors (None or "": the default); the web endpoints ask this, so a
    visitor cannot make the server load an arbitrary model. The Python functions load any model they are given."""
    if model_name not in (None, "", *available_models()):
        raise ValueError(f"model_name must be one of {available_models()} (or left out), got {model_name!r}")
    return model_name or None


def common_fields(text: object, session: object, model_name: object, messages: object) -> dict:
    """The fields every request shares, checked: the model's name, the conversation (and the model's chat
    template), then the text (in chat mode the reply, which may still be empty)."""
    model_name = check_model_name(model_name)
    chat = check_messages(messages, model_name)
    return dict(text=check_text(text, chat), session=str(session), model_name=model_name, messages=chat)


def at_caret(text: object, caret: object, session: object, model_name: object, messages: object,
              constraint: object) -> tuple[dict, str | None]:
    """The common fields for the text before the caret, and the text after it (None: the caret is at the end).

    A caret is a character offset into `text` as Python counts characters (code points); what the call
    gives is exactly what it gives for `text[:caret]`. A constraint must start before the caret.
    """
    if caret is None:
        return common_fields(text, session, model_name, messages), None
    whole = check_string("text", text)
    caret = check_int("caret", caret, 0, len(whole))
    start = constraint.get("start") if isinstance(constraint, dict) else None
    if isinstance(start, int) and not isinstance(start, bool) and start > caret:
        raise ValueError(f"constraint start ({start}) lies after the caret ({caret}): a constraint governs what is "
                         "written from its start on, and the suggestions are for the caret; move one or the other")
    if caret == 0 and messages is None:
        raise ValueError("caret is 0: nothing comes before it to continue; put the caret after some text")
    common = common_fields(whole[:caret], session, model_name, messages)
    return common, (whole[caret:] if caret < len(whole) else None)


def check_at_token(at_token: object, text: str, messages: Messages | None, model_name: str | None) -> int | None:
    """A token of `text` with something before it to predict it from."""
    if at_token is None:
        return None
    encoding, text_start = encode(load_tokenizer(model_name), text, as_dicts(messages), return_offsets_mapping=True,
                                  return_special_tokens_mask=True)
    places = text_token_places(encoding, text_start, len(text))
    at_token = check_int("at_token", at_token, 0, len(places) - 1)
    if places[at_token][0] == 0:
        raise ValueError("at_token 0 is the first token: nothing comes before it to explain it by")
    return at_token


def check_models(models: object) -> tuple[str, str]:
    if (not isinstance(models, (list, tuple)) or len(models) != 2
            or not all(isinstance(name, str) and name for name in models)):
        raise ValueError(f"models must be two models' names, [a, b], got {models!r}"[:300])
    return tuple(models)
