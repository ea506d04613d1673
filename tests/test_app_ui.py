"""The UI's own logic, without a browser."""

import gradio as gr
import pytest

from app import distribution_plot, take_branch, undo, visible


def test_whitespace_is_made_visible():
    assert visible(" a\n\tb") == "␣a↵⇥b"


def test_plot_shows_top_tokens_and_the_rest_as_other():
    dist = [{"token": " the", "prob": 0.5}, {"token": "\n", "prob": 0.2}]
    plot = distribution_plot(dist)
    assert "␣the" in plot and "↵" in plot and "50.0%" in plot
    assert "other" in plot and "30.0%" in plot


def test_plot_escapes_html_in_tokens():
    assert "<script>" not in distribution_plot([{"token": "<script>", "prob": 0.1}])


def test_a_branch_is_appended_only_to_the_text_it_was_computed_for():
    result = {"branches": [{"text": " sat"}, {"text": " ran"}]}
    assert take_branch(1, "The cat", ("The cat", result)) == "The cat ran"
    with pytest.raises(gr.Error):
        take_branch(0, "The cat was", ("The cat", result))
    with pytest.raises(gr.Error):
        take_branch(5, "The cat", ("The cat", result))
    with pytest.raises(gr.Error):
        take_branch(0, "The cat", None)


def test_undo_walks_back_through_several_levels():
    text, history = undo(["a", "ab", "abc"])
    assert (text, history) == ("ab", ["a", "ab"])
    assert undo(history)[0] == "a"
    with pytest.raises(gr.Error):
        undo(["a"])
