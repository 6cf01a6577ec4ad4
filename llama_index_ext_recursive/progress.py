"""Progress bars: a widget where a notebook can draw one, text everywhere else, no warning.

``tqdm.auto`` picks the notebook bar inside Jupyter; without ``ipywidgets`` it
warns ``TqdmWarning: IProgress not found`` when first imported and falls back
to the text bar. The package and bm25s import it as soon as
``llama_index_ext_recursive`` is imported, so a notebook user saw the warning on
their first cell for bars that work. It is imported here first, with exactly
that warning silenced (the fallback is what the user gets either way), and
:data:`progress_bar` is the one bar every module of the package uses.
"""

from __future__ import annotations

import warnings

from tqdm import TqdmWarning

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="IProgress not found", category=TqdmWarning)
    from tqdm.auto import tqdm as progress_bar

__all__ = ["progress_bar"]
