"""Progress bars (llama_index_ext_recursive/progress.py); in a Jupyter kernel: tests/test_notebooks.py."""

from __future__ import annotations

from llama_index_ext_recursive.progress import progress_bar


def test_outside_a_notebook_the_bar_is_the_text_bar(capsys):
    bar = progress_bar(range(3), desc="counting")
    assert not type(bar).__module__.startswith("tqdm.notebook") and list(bar) == [0, 1, 2]
    assert "counting" in capsys.readouterr().err
