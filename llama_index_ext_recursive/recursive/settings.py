"""The query settings of a recursive retriever: their choices, defaults and checks.

Kept apart from the retriever so construction paths can check every setting
(and refuse an unknown keyword, naming the closest valid one) before any
chunking, summarizing or embedding, and split a construction's keywords
between the index build and the retriever (:func:`split_arguments`).
:class:`Owner` is what the levels, searches and ranking of a call read of the
retriever that runs them, so those modules stand below the retriever's.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from enum import Enum
from typing import Any, Protocol, TypedDict

from llama_index.core.callbacks import CallbackManager
from llama_index.core.schema import TransformComponent

from llama_index_ext_recursive.cache import RetrievalCache
from llama_index_ext_recursive.filters import FilterPolicy, FiltersLike, UnknownFilterPolicy, to_filters
from llama_index_ext_recursive.recursive.build import SummaryEmbedding, resolve_transformations
from llama_index_ext_recursive.recursive.index import FromNodesOptions, RecursiveIndex
from llama_index_ext_recursive.retrievers.calibration import Calibration
from llama_index_ext_recursive.validation import check_count, check_keywords, check_real

DEFAULT_NUM_ROUTED_DOCS = 8  # measured: benchmarks/results/tune_xquad_*_fine.md
DEFAULT_SCORE_ALPHA = 0.2
# candidates per routed document and search, in units of the top-k:
# 2.5 beat 1 on legalbench_contractnli and xquad_zh_fine (benchmarks/recursive_sweep.py)
ROUTED_POOL_FACTOR = 2.5


class ScoreMode(str, Enum):
    """How a chunk's final score combines its document's and its own score.

    ``fused`` (default): chunks come from a flat search over all chunks and
    from the routed documents; their dense and lexical scores are fused, and
    ``document_weight`` times their document's routing score is added
    (:func:`~llama_index_ext_recursive.recursive.evidence.rank_chunks`), so a chunk
    is found through its document without losing what flat search finds.
    ``chunk``: the chunk score alone (routing only selects documents).
    ``weighted``: ``alpha * summary + (1 - alpha) * chunk``.
    ``product``: ``summary * chunk``.
    """

    FUSED = "fused"
    CHUNK = "chunk"
    WEIGHTED = "weighted"
    PRODUCT = "product"


class LevelMode(str, Enum):
    """How one level (summaries or chunks) is searched.

    ``vector``: embeddings (summaries by centroid or text, see
    :class:`SummaryEmbedding`); ``bm25``: :class:`MultilingualBM25Retriever`
    (at the summary level over each document's summary plus its chunks);
    ``hybrid``: both, fused by calibrated weights.
    """

    VECTOR = "vector"
    BM25 = "bm25"
    HYBRID = "hybrid"


class Owner(Protocol):
    """The retriever a call's levels, searches and ranking work for
    (:class:`~llama_index_ext_recursive.recursive.retriever.RecursiveSummaryRetriever`):
    the index it searches and its settings, read when they are used, so a
    setting changed on the retriever applies from its next call."""

    index: RecursiveIndex
    similarity_top_k: int
    num_routed_docs: int
    score_mode: ScoreMode
    score_alpha: float
    max_link_depth: int
    summary_mode: LevelMode
    chunk_mode: LevelMode
    callback_manager: CallbackManager
    _calibration: dict[str, Calibration]  # per hybrid level; building the levels fills it
    _show_progress: bool  # a bar while calibrating

    def document_depth(self, top_k: int) -> int: ...


class RetrieverOptions(TypedDict, total=False):
    """The query settings of :class:`~llama_index_ext_recursive.RecursiveSummaryRetriever`
    (its constructor's keywords besides ``index``), typed for IDEs and type checkers where a
    builder passes them on as ``**options``; ``tests/test_recursive_index.py`` keeps this
    list equal to the constructor's."""

    similarity_top_k: int
    num_routed_docs: int
    score_mode: ScoreMode | str | None
    score_alpha: float
    document_weight: float
    filters: FiltersLike
    filter_policy: FilterPolicy | str
    max_link_depth: int
    callback_manager: CallbackManager | None
    verbose: bool
    summary_mode: LevelMode | str
    chunk_mode: LevelMode | str | None
    unknown_filter_key: UnknownFilterPolicy | str
    calibration: Mapping[str, Any] | None
    show_progress: bool
    cache: RetrievalCache | None


class BuildOptions(FromNodesOptions, RetrieverOptions, total=False):
    """A builder's keywords (``RecursiveSummaryRetriever.from_documents``, ``from_nodes``,
    ``from_index``): how documents are chunked and indexed, then the query settings;
    :func:`split_arguments` hands each to its side."""

    node_parser: Any
    transformations: Sequence[TransformComponent] | None
    doc_id_key: str | None


_COUNT_SETTINGS = {"similarity_top_k": 1, "num_routed_docs": 1, "max_link_depth": 0}
_CHOICE_SETTINGS: dict[str, type[Enum]] = {
    "score_mode": ScoreMode,
    "filter_policy": FilterPolicy,
    "summary_mode": LevelMode,
    "chunk_mode": LevelMode,
    "summary_embedding": SummaryEmbedding,
    "unknown_filter_key": UnknownFilterPolicy,
}


def check_settings(**settings: Any) -> None:
    """Validate whichever retriever settings are given, before any work is done."""
    for name, minimum in _COUNT_SETTINGS.items():
        if name in settings:
            check_count(name, settings[name], minimum)
    if "score_alpha" in settings:
        check_real("score_alpha", settings["score_alpha"], 0.0, 1.0)
    if "document_weight" in settings:
        check_real("document_weight", settings["document_weight"], 0.0)
    for name, choices in _CHOICE_SETTINGS.items():
        value = settings.get(name)
        if value is not None and value not in {c.value for c in choices} | set(choices):
            raise ValueError(f"{name} must be one of {[c.value for c in choices]}, got {value!r}")
    if "filters" in settings:
        to_filters(settings["filters"])  # a TypeError now rather than after embedding


def check_arguments(targets: Sequence[Callable[..., Any]], kwargs: Mapping[str, Any], where: str) -> None:
    """Refuse a keyword none of ``targets`` accepts (naming the closest valid one
    across all of them), then check the settings, before any work is done."""
    check_keywords(targets, kwargs, where)
    check_settings(**kwargs)


def calibration_from_config(data: Mapping[str, Any] | None) -> dict[str, Calibration]:
    """``calibration=`` (as :attr:`RecursiveSummaryRetriever.calibration` gives
    it) -> one :class:`Calibration` per level; a bad entry names itself."""
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise TypeError(
            f"calibration must be the mapping RecursiveSummaryRetriever.calibration returns, got {type(data).__name__}"
        )
    levels: dict[str, Calibration] = {}
    for level, value in data.items():
        if level not in ("documents", "chunks"):
            raise ValueError(f"calibration has an unknown level {level!r}; known: 'documents', 'chunks'")
        levels[level] = value if isinstance(value, Calibration) else Calibration.from_dict(value)
    return levels


def split_arguments(
    kwargs: Mapping[str, Any], where: str, constructor: Callable[..., Any], documents: bool = False
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Keywords of the index build and of the constructor, every one checked
    (an unknown one names the closest valid keyword; ``transformations=`` is
    checked too) before any chunking, summarizing or embedding."""
    builds = (RecursiveIndex.from_documents, RecursiveIndex.from_nodes)
    check_arguments([*builds, constructor], kwargs, where)
    index_keys = {"node_parser"}
    for build in builds:
        index_keys |= set(inspect.signature(build).parameters) - {"kwargs"}
    own = {k: v for k, v in kwargs.items() if k in index_keys}
    settings = {k: v for k, v in kwargs.items() if k not in index_keys}
    if kwargs.get("show_progress") is not None:  # the build's bar, and calibration's
        settings["show_progress"] = kwargs["show_progress"]
    steps = resolve_transformations(own.pop("node_parser", None), own.pop("transformations", None))
    if documents:
        own["transformations"] = steps
    elif "node_parser" in kwargs or "transformations" in kwargs:
        own["transformations"] = steps  # pre-chunked: how documents added later are chunked
    return own, settings
