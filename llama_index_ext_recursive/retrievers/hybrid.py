"""The vector + BM25 hybrid, assembled in one place.

:func:`hybrid_retriever` puts a :class:`~llama_index_ext_recursive.retrievers.vector.BackfillVectorRetriever`
over an index and a :class:`~llama_index_ext_recursive.retrievers.bm25.MultilingualBM25Retriever`
over the same nodes under one
:class:`~llama_index_ext_recursive.retrievers.fusion.HybridFusionRetriever`:
``HybridFusionRetriever.from_nodes``/``from_index``/``from_defaults``, the
recursive retriever's hybrid levels and the evaluation harness all build it
here, so the children's names, the fusion mode, the children's k and who
checks filters are decided once.

The hybrid's class is an argument (``fusion_class``: its constructors pass
themselves), not an import, so this module stands below
:mod:`~llama_index_ext_recursive.retrievers.fusion`, whose constructors call it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

from llama_index.core import VectorStoreIndex
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.retrievers.fusion_retriever import FUSION_MODES
from llama_index.core.schema import BaseNode
from llama_index.core.vector_stores import SimpleVectorStore

from llama_index_ext_recursive.embedding_cache import CachedEmbedding
from llama_index_ext_recursive.filters import FilterVocabulary, UnknownFilterPolicy
from llama_index_ext_recursive.models import embed_model_name
from llama_index_ext_recursive.query import DEFAULT_TOP_K
from llama_index_ext_recursive.retrievers.calibration import Calibration, script_key
from llama_index_ext_recursive.retrievers.fusion_scores import DEFAULT_RRF_K
from llama_index_ext_recursive.retrievers.nodes import refuse_duplicate_ids
from llama_index_ext_recursive.retrievers.vector import BackfillVectorRetriever
from llama_index_ext_recursive.stores.numpy_store import vector_index
from llama_index_ext_recursive.validation import (
    check_count,
    check_kwargs,
    check_real,
    check_vectors,
    check_weights,
    json_nodes,
)

# The hybrid knows its children's scores (cosine, BM25), so it fuses
# min-max-normalised scores: on SciFact 0.723 nDCG@10 vs 0.716 for RRF, XQuAD-en
# 0.936 vs 0.925 (benchmarks/fusion_sweep.py). RRF stays the constructor default:
# it needs nothing from scores, which suits children it knows nothing about.
HYBRID_MODE = FUSION_MODES.RELATIVE_SCORE
HYBRID_NAMES = ("vector", "bm25")
# Weights (vector, bm25) for queries in a script the corpus has no text in (English questions
# over Chinese passages): no pseudo-query can measure them, and BM25 then matches only shared
# names and digits. English->Chinese XQuAD, nDCG@10 by vector weight: 0.5 0.805, 0.7 0.849,
# 0.8 0.850, 1.0 0.846 (docs/BENCHMARKS.md, "Cross-lingual").
CROSS_SCRIPT_WEIGHTS = (0.8, 0.2)
_CHECK_BATCH = 4096
# rows a hybrid over a level store is calibrated on: enough for DEFAULT_CALIBRATION_SAMPLES
# (200) pseudo-queries in each of two scripts when one is a fifth of the rows
CALIBRATION_ROWS = 2000


class _Hybrid(Protocol):
    """What the assembly does to the hybrid it builds, besides constructing it."""

    filter_vocabulary: FilterVocabulary | None

    def calibrate(
        self, nodes: Sequence[BaseNode], *, absent_script_weights: Sequence[float] | None = None
    ) -> Calibration: ...


H = TypeVar("H", bound=_Hybrid)


def hybrid_retriever(
    fusion_class: Callable[..., H],
    index: VectorStoreIndex | None = None,
    nodes: Sequence[BaseNode] | None = None,
    *,
    similarity_top_k: int = DEFAULT_TOP_K,
    child_top_k: int | None = None,
    embed_model: BaseEmbedding | None = None,
    vector: BaseRetriever | None = None,
    bm25: BaseRetriever | None = None,
    calibrate: bool = True,
    check_filters: bool = True,
    **kwargs: Any,
) -> H:
    """A vector (over ``index``) + BM25 (over ``nodes``) :class:`HybridFusionRetriever`.

    Args:
        fusion_class: the class of the hybrid (``HybridFusionRetriever``).
        index: the vector index; its stored embeddings are searched as they
            are (not needed with ``vector`` and ``bm25``).
        nodes: the nodes BM25 indexes (default: the index's docstore nodes;
            ignored with ``bm25``).
        similarity_top_k: fused results per call.
        child_top_k: what each child returns (default ``similarity_top_k``).
        embed_model: the query model of the vector child (default: the index's).
        vector, bm25: already built children (shared with other searches, as
            the recursive retriever's levels do) instead of a new
            ``BackfillVectorRetriever`` over ``index`` / ``MultilingualBM25Retriever``
            over ``nodes``.
        calibrate: fit per-script weights on the nodes
            (:meth:`HybridFusionRetriever.calibrate`) unless weights or a saved
            ``calibration`` are given.
        check_filters: the hybrid checks filters against the BM25 child's
            nodes (``unknown_filter_key``); ``False`` for a caller that
            checked them already against other nodes.
        **kwargs: passed to the ``HybridFusionRetriever`` constructor
            (``mode`` defaults to :data:`HYBRID_MODE`, ``retriever_names`` to
            ``["vector", "bm25"]``).

    Children built here do not check filters (``unknown_filter_key=None``):
    the hybrid checks them once.
    """
    k = child_top_k or similarity_top_k
    if index is None and (vector is None or bm25 is None):
        raise ValueError("pass index=, or both vector= and bm25=")
    if bm25 is None:
        assert index is not None  # checked above
        nodes = list(index.docstore.docs.values()) if nodes is None else list(nodes)
        if not nodes:
            raise ValueError(
                "the index's docstore holds no nodes (a vector store that stores text?); "
                "pass the nodes (HybridFusionRetriever.from_nodes) instead"
            )
        bm25 = _bm25(nodes, k)
    bm25_nodes: list[BaseNode] = list(getattr(bm25, "nodes", None) or nodes or [])
    kwargs.setdefault("retriever_names", list(HYBRID_NAMES))
    kwargs.setdefault("mode", HYBRID_MODE)
    explicit = any(kwargs.get(key) is not None for key in ("retriever_weights", "script_weights", "calibration"))
    if vector is None:
        assert index is not None  # checked above
        vector = BackfillVectorRetriever(index, k, embed_model=embed_model, unknown_filter_key=None)
    hybrid = fusion_class([vector, bm25], similarity_top_k=similarity_top_k, child_top_k=child_top_k, **kwargs)
    if bm25_nodes and check_filters:
        # the package's BM25 keeps its nodes' vocabulary (up to date across its updates)
        kept = getattr(bm25, "filter_vocabulary", None)
        hybrid.filter_vocabulary = (
            kept if isinstance(kept, FilterVocabulary) else FilterVocabulary.from_nodes(bm25_nodes)
        )
    if calibrate and not explicit and bm25_nodes:
        hybrid.calibrate(bm25_nodes, absent_script_weights=CROSS_SCRIPT_WEIGHTS)
    return hybrid


def hybrid_from_nodes(
    fusion_class: Callable[..., H],
    nodes: Sequence[BaseNode],
    embed_model: BaseEmbedding | None = None,
    *,
    show_progress: bool = False,
    embedding_cache: str | Path | CachedEmbedding | None = None,
    **options: Any,
) -> H:
    """:func:`hybrid_retriever` over a new :func:`~llama_index_ext_recursive.stores.numpy_store.vector_index`
    of ``nodes`` (nodes carrying embeddings are not embedded again); node
    vectors with NaN/inf or of two dimensions are refused, naming the node."""
    nodes = json_nodes(nodes)  # once, before embedding: both children then index the same values
    if not nodes:
        raise ValueError("from_nodes needs at least one node")
    refuse_duplicate_ids(nodes)
    index = vector_index(nodes, embed_model, show_progress=show_progress, embedding_cache=embedding_cache)
    check_node_embeddings(index, embed_model_name(index._embed_model))
    return hybrid_retriever(fusion_class, index, nodes, **options)


def hybrid_over_level(
    fusion_class: Callable[..., H],
    level: Any,
    embed_model: BaseEmbedding | None = None,
    *,
    similarity_top_k: int = DEFAULT_TOP_K,
    child_top_k: int | None = None,
    calibrate: bool = True,
    calibration_rows: int = CALIBRATION_ROWS,
    seed: int = 0,
    **kwargs: Any,
) -> H:
    """:func:`hybrid_retriever` over one level store that keeps vectors and BM25 terms (a
    ``PostgresLevelStore``): both children search the level, so the client holds nothing per
    row and every process sharing the level sees the same rows.

    Calibration (unless weights or a saved ``calibration`` are given) cuts its pseudo-queries
    from ``calibration_rows`` rows sampled from the level (``sample_nodes``, the same rows for
    the same ``seed`` and contents), not from every row. Filter keys are checked by the BM25
    child against the level's key counts at each call, so keys another process added count.
    """
    from llama_index_ext_recursive.retrievers.store_bm25 import StoreBM25Retriever

    k = child_top_k or similarity_top_k
    policy = kwargs.get("unknown_filter_key", UnknownFilterPolicy.RAISE)
    vector = BackfillVectorRetriever.from_vector_store(
        level, embed_model=embed_model, similarity_top_k=k, unknown_filter_key=None
    )
    bm25 = StoreBM25Retriever(level, similarity_top_k=k, unknown_filter_key=policy)
    explicit = any(kwargs.get(key) is not None for key in ("retriever_weights", "script_weights", "calibration"))
    rows = level.sample_nodes(calibration_rows, seed=seed) if calibrate and not explicit else []
    return hybrid_retriever(
        fusion_class,
        nodes=rows,
        vector=vector,
        bm25=bm25,
        similarity_top_k=similarity_top_k,
        child_top_k=child_top_k,
        calibrate=calibrate,
        check_filters=False,
        **kwargs,
    )


def check_hybrid_arguments(where: str, kwargs: dict[str, Any], constructor: Callable[..., Any]) -> None:
    """The checks of ``constructor`` (``HybridFusionRetriever.__init__``) for a
    two-child hybrid, before anything is embedded."""
    check_kwargs(constructor, kwargs, f"HybridFusionRetriever.{where}")
    if "retrievers" in kwargs:
        raise TypeError(
            f"HybridFusionRetriever.{where} builds its own retrievers; pass yours to "
            "HybridFusionRetriever(retrievers=...) instead"
        )
    check_count("similarity_top_k", kwargs.get("similarity_top_k", DEFAULT_TOP_K))
    check_count("child_top_k", kwargs.get("child_top_k"), allow_none=True)
    check_count("num_queries", kwargs.get("num_queries", 1))
    check_real("rrf_k", kwargs.get("rrf_k", DEFAULT_RRF_K), low=0.0)
    if kwargs.get("retriever_weights") is not None:
        check_weights("retriever_weights", kwargs["retriever_weights"], 2)
    for script, values in (kwargs.get("script_weights") or {}).items():
        script_key(script)
        check_weights(f"script_weights[{script!r}]", values, 2)
    UnknownFilterPolicy(kwargs.get("unknown_filter_key", UnknownFilterPolicy.RAISE))
    FUSION_MODES(kwargs.get("mode", HYBRID_MODE))


def _bm25(nodes: list[BaseNode], k: int) -> BaseRetriever:
    """The lexical child: ours, or upstream's ``BM25Retriever`` where ours cannot be imported."""
    try:
        from llama_index_ext_recursive.retrievers.bm25 import MultilingualBM25Retriever
    except ImportError:
        from llama_index.retrievers.bm25 import BM25Retriever

        return BM25Retriever.from_defaults(nodes=nodes, similarity_top_k=min(k, len(nodes)))
    return MultilingualBM25Retriever(nodes, similarity_top_k=k, unknown_filter_key=None)


def check_node_embeddings(index: VectorStoreIndex, model_name: str) -> None:
    """Refuse NaN/inf node vectors or vectors of two dimensions, naming the node:
    a NaN vector scores NaN against every query."""
    store = index.vector_store
    if not isinstance(store, SimpleVectorStore):  # NumpyVectorStore is one
        raise TypeError(f"check_node_embeddings reads the vectors of a SimpleVectorStore, not a {type(store).__name__}")
    items = list(store.data.embedding_dict.items())
    dim: int | None = None
    for start in range(0, len(items), _CHECK_BATCH):
        batch = items[start : start + _CHECK_BATCH]
        try:  # one array per batch: a loop over 50k vectors costs seconds
            dim = check_vectors([v for _, v in batch], model_name, "the nodes", dim)
        except ValueError:  # find the node (ragged batches fail to stack at all)
            for node_id, vector in batch:
                dim = check_vectors(vector, model_name, f"node {node_id!r}", dim)
            raise
