"""Hybrid fusion: upstream ``QueryFusionRetriever``'s API, with its failures fixed.

``HybridFusionRetriever`` keeps the parent's constructor arguments and modes
(``reciprocal_rerank``, ``relative_score``, ``dist_based_score``, ``simple``)
and changes what goes wrong upstream:

* no LLM is resolved unless ``num_queries > 1`` (offline BM25 + vector works);
* weighted reciprocal rank fusion with the paper's 1-based ranks,
  ``sum_i w_i / (rrf_k + rank_i)``; ``retriever_weights`` count in every mode;
* a rank is the child's own order; children may return distances;
* results merge by ``node_id``; the children's objects are never modified;
* zero- or ``None``-score hits of similarity children (BM25 non-matches) get
  no credit;
* per-call filters (:class:`~llama_index_ext_recursive.filters.FilteredQueryBundle`)
  are passed to every child and enforced on the fused list;
* sync retrieval runs children one after another in the calling thread (no
  nested event loop, errors surface as themselves); async runs them
  concurrently;
* bad input fails early and by name: children that are not retrievers, counts
  that are not integers >= 1, NaN/inf/negative weights are refused at
  construction; a blank query is a ``ValueError``; a child returning ``None``
  is a ``TypeError`` naming the child; ``from_nodes``/``from_index`` refuse
  duplicate node ids and check filters against the nodes' metadata
  (``unknown_filter_key``).

Each result is a :class:`FusedNodeWithScore` whose ``provenance`` says which
child found it, at which rank and with which score.

A child that cannot read a script drags fusion below its better child: the
bundled English MiniLM finds 0.23 nDCG@10 on XQuAD-zh where Chinese BM25
finds 0.90, and equal-weight RRF of the two lands at 0.65. Weights can
therefore differ by query script (``script_weights``), and
:meth:`HybridFusionRetriever.calibrate` fits them on the corpus itself
(:mod:`llama_index_ext_recursive.retrievers.calibrate`): the children answer
pseudo-queries cut from sampled nodes once, and the weight grid point with
the best fused MRR (leaning to equal weights within a tolerance, never below
the best child alone) is kept per script. ``from_nodes``/``from_index``
calibrate unless weights or a saved ``calibration`` are given; a
:class:`~llama_index_ext_recursive.retrievers.calibrate.Calibration` saved with
``to_dict()`` is applied again with ``calibration=``, without recalibrating.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections import Counter
from dataclasses import dataclass
from enum import Enum
from functools import partial
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from llama_index.core import StorageContext, VectorStoreIndex
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.callbacks import CallbackManager
from llama_index.core.llms import LLM
from llama_index.core.llms.utils import LLMType, resolve_llm
from llama_index.core.retrievers.fusion_retriever import (
    FUSION_MODES,
    QUERY_GEN_PROMPT,
    QueryFusionRetriever,
)
from llama_index.core.schema import BaseNode, IndexNode, NodeWithScore, QueryBundle
from llama_index.core.settings import Settings
from llama_index.core.vector_stores.types import MetadataFilters
from pydantic import Field

from llama_index_ext_recursive.results import ExplainedNodeWithScore, FusionHit, explained
from llama_index_ext_recursive.retrievers.vector import BackfillVectorRetriever
from llama_index_ext_recursive.retrievers.calibrate import (
    DEFAULT_CALIBRATION_SAMPLES,
    Calibration,
    FuseFunction,
    QueryScript,
    calibrate_children,
    dist_based_scores,
    distribution_based_fusion,
    min_max_scores,
    query_script,
    reciprocal_rank_fusion,
    relative_score_fusion,
    simple_fusion,
)
from llama_index_ext_recursive.models import embed_model_name, resolve_embed_model
from llama_index_ext_recursive.filters import (
    FilterPolicy,
    FiltersLike,
    FilterVocabulary,
    UnknownFilterPolicy,
    apply_policy,
    filterable_metadata,
    metadata_matcher,
    to_filters,
)
from llama_index_ext_recursive.query import FilteredQueryBundle, filters_of, with_options
from llama_index_ext_recursive.stores.numpy_store import NumpyVectorStore
from llama_index_ext_recursive.validation import (
    check_count,
    check_kwargs,
    check_query,
    check_real,
    check_vectors,
    check_weights,
)

logger = logging.getLogger(__name__)

DEFAULT_TOP_K = 10
DEFAULT_RRF_K = 60.0
# from_nodes/from_index know their children's scores (cosine, BM25), so they fuse
# min-max-normalised scores: on SciFact 0.723 nDCG@10 vs 0.716 for RRF, XQuAD-en
# 0.936 vs 0.925 (benchmarks/fusion_sweep.py). RRF stays the constructor default:
# it needs nothing from scores, which suits children it knows nothing about.
HYBRID_MODE = FUSION_MODES.RELATIVE_SCORE


class ScoreDirection(str, Enum):
    """What a child's scores mean: ``similarity`` (higher is better) or ``distance``."""

    SIMILARITY = "similarity"
    DISTANCE = "distance"


# (query index, retriever index) -> the child's list
_Results = Dict[Tuple[int, int], List[NodeWithScore]]


class HybridFusionRetriever(QueryFusionRetriever):
    """Fuse several retrievers' results (e.g. BM25 + vector), offline by default.

    Constructor-compatible with ``QueryFusionRetriever``; differences in
    defaults: ``similarity_top_k=10`` (not 2), ``num_queries=1`` (no query
    generation, hence no LLM) and ``mode="reciprocal_rerank"``.

    Args:
        retrievers: the children.
        llm: used only when ``num_queries > 1`` (else never resolved); then
            falls back to ``Settings.llm`` if configured, else ``ValueError``.
        query_gen_prompt: prompt for generating extra queries.
        mode: one of ``FUSION_MODES``.
        similarity_top_k: number of fused results returned.
        num_queries: total queries including the original.
        use_async: accepted for compatibility; sync retrieval always runs
            children sequentially, ``aretrieve`` always runs them concurrently.
        retriever_weights: one non-negative weight per child (need not sum to
            1; 0 removes the child). RRF adds ``w_i / (rrf_k + rank)``;
            ``relative_score``/``dist_based_score`` scale by ``w_i / sum(w)``;
            ``simple`` by ``w_i / max(w)``.
        rrf_k: the RRF constant (60 in the paper).
        score_directions: per child ``"similarity"`` (default) or ``"distance"``.
        retriever_names: per child name used in provenance (default: class names).
        filters: construction-time metadata filters.
        filter_policy: ``merge`` (AND with per-call filters) or ``replace``.
        script_weights: weights per query script (``{"cjk": [...], "latin": [...]}``,
            see :class:`~llama_index_ext_recursive.retrievers.calibrate.QueryScript`),
            used instead of ``retriever_weights`` for queries in that script;
            usually set by :meth:`calibrate`.
        unknown_filter_key: what a filter that cannot match (a key no indexed
            node holds, or a value of a type the key never holds) does:
            ``raise`` (default) a
            :class:`~llama_index_ext_recursive.filters.FilterError` naming the
            closest key, or ``warn`` and search anyway. Checked by hybrids
            built with :meth:`from_nodes`/:meth:`from_index`, which know their
            nodes; over children given here, the children check their own.
        calibration: a saved
            :class:`~llama_index_ext_recursive.retrievers.calibrate.Calibration` (e.g.
            ``Calibration.from_dict(json.load(f))``) whose per-script weights
            apply, without calibrating again (not with ``script_weights``).

    Raises:
        TypeError, ValueError: at construction, naming the argument: a child
            that is not a ``BaseRetriever``; ``similarity_top_k``/``num_queries``
            that are not integers >= 1 (``True``, ``2.5``, ``"5"``); weights
            that are NaN, inf, negative, all zero or not one per child; a
            ``calibration`` fitted for other children (count, names) or mode.
    """

    def __init__(
        self,
        retrievers: List[BaseRetriever],
        llm: Optional[LLMType] = None,
        query_gen_prompt: Optional[str] = None,
        mode: Union[FUSION_MODES, str] = FUSION_MODES.RECIPROCAL_RANK,
        similarity_top_k: int = DEFAULT_TOP_K,
        num_queries: int = 1,
        use_async: bool = True,
        verbose: bool = False,
        callback_manager: Optional[CallbackManager] = None,
        objects: Optional[List[IndexNode]] = None,
        object_map: Optional[dict] = None,
        retriever_weights: Optional[List[float]] = None,
        *,
        rrf_k: float = DEFAULT_RRF_K,
        score_directions: Optional[Sequence[Union[ScoreDirection, str]]] = None,
        retriever_names: Optional[Sequence[str]] = None,
        filters: FiltersLike = None,
        filter_policy: Union[FilterPolicy, str] = FilterPolicy.MERGE,
        script_weights: Optional[Dict[str, Sequence[float]]] = None,
        unknown_filter_key: Union[UnknownFilterPolicy, str] = UnknownFilterPolicy.RAISE,
        calibration: Optional[Calibration] = None,
    ) -> None:
        retrievers = list(retrievers)
        if not retrievers:
            raise ValueError("retrievers must not be empty")
        for i, child in enumerate(retrievers):
            if not isinstance(child, BaseRetriever):
                raise TypeError(
                    f"retrievers[{i}] is a {type(child).__name__}, not a BaseRetriever: pass "
                    "retrievers (e.g. index.as_retriever(), MultilingualBM25Retriever)"
                )
        count = len(retrievers)
        check_count("num_queries", num_queries)
        check_count("similarity_top_k", similarity_top_k)
        check_real("rrf_k", rrf_k, low=0.0)
        weights = check_weights(
            "retriever_weights", [1.0] * count if retriever_weights is None else retriever_weights, count
        )
        per_script = {
            _script(script): check_weights(f"script_weights[{script!r}]", values, count)
            for script, values in (script_weights or {}).items()
        }
        directions = [ScoreDirection(d) for d in (score_directions or ["similarity"] * count)]
        if len(directions) != count:
            raise ValueError(f"score_directions has {len(directions)} entries for {count} retrievers")
        names = list(retriever_names) if retriever_names is not None else [
            type(r).__name__ for r in retrievers
        ]
        if len(names) != count:
            raise ValueError(f"retriever_names has {len(names)} entries for {count} retrievers")
        if calibration is not None and script_weights is not None:
            raise ValueError(
                "pass calibration= (saved fitted weights) or script_weights= (your own), not both"
            )

        # Attributes the parent sets, without its eager ``Settings.llm``.
        self.num_queries = num_queries
        self.query_gen_prompt = query_gen_prompt or QUERY_GEN_PROMPT
        self.similarity_top_k = similarity_top_k
        self.mode = FUSION_MODES(mode)
        self.use_async = use_async
        self._retrievers = retrievers
        self._retriever_weights = weights
        self.script_weights: Dict[QueryScript, List[float]] = per_script
        self.calibration: Optional[Calibration] = None
        self._llm = self._resolve_llm(llm, num_queries, callback_manager)

        self.rrf_k = float(rrf_k)
        self.score_directions = directions
        self.retriever_names = names
        self.filters = to_filters(filters)
        self.filter_policy = FilterPolicy(filter_policy)
        self.unknown_filter_key = UnknownFilterPolicy(unknown_filter_key)
        # the metadata of the indexed nodes, when known (from_nodes/from_index)
        self.filter_vocabulary: Optional[FilterVocabulary] = None
        if calibration is not None:
            self.apply_calibration(calibration)
        BaseRetriever.__init__(
            self,
            callback_manager=callback_manager,
            object_map=object_map,
            objects=objects,
            verbose=verbose,
        )

    @staticmethod
    def _resolve_llm(
        llm: Optional[LLMType], num_queries: int, callback_manager: Optional[CallbackManager]
    ) -> Optional[LLM]:
        if num_queries <= 1:
            return llm if isinstance(llm, LLM) else None  # never resolved
        if llm is not None:
            return resolve_llm(llm, callback_manager=callback_manager)
        configured = getattr(Settings, "_llm", None)
        if configured is None:
            raise ValueError(
                f"num_queries={num_queries} generates extra queries with an LLM, but none "
                "is configured: pass llm=... or set Settings.llm (or use num_queries=1)"
            )
        return configured

    # ------------------------------------------------------------------ queries

    def _distinct(self, original: str, generated: Sequence[QueryBundle]) -> List[str]:
        seen = {original.strip()}
        out = []
        for bundle in generated:
            text = bundle.query_str.strip()
            if text and text not in seen:
                seen.add(text)
                out.append(text)
        return out

    def _bundles(
        self, query_bundle: QueryBundle, extra: Sequence[str]
    ) -> Tuple[List[QueryBundle], Optional[MetadataFilters]]:
        """The bundles to pass down (original first) and the filters in force."""
        effective = apply_policy(self.filters, filters_of(query_bundle), self.filter_policy)
        if self.filter_vocabulary is not None:
            self.filter_vocabulary.check(effective, self.unknown_filter_key)
        if effective is None:
            first: QueryBundle = query_bundle
        else:
            first = with_options(query_bundle, filters=effective)
        bundles = [first]
        for text in extra:
            bundles.append(QueryBundle(text) if effective is None else FilteredQueryBundle(text, filters=effective))
        return bundles, effective

    def weights_for(self, query_str: str) -> List[float]:
        """The child weights used for ``query_str`` (its script's, else the defaults)."""
        return self.script_weights.get(query_script(query_str), self._retriever_weights)

    # ------------------------------------------------------------ calibration

    def calibrate(
        self,
        nodes: Sequence[BaseNode],
        samples_per_script: int = DEFAULT_CALIBRATION_SAMPLES,
        seed: int = 0,
        show_progress: Optional[bool] = None,
        **removed: Any,
    ) -> Calibration:
        """Fit ``script_weights`` on pseudo-queries cut from ``nodes``.

        For each script with at least 8 pseudo-queries
        (:func:`~llama_index_ext_recursive.retrievers.calibrate.pseudo_queries`; the
        children must index ``nodes``), every child answers them once, and
        every point of a weight grid is scored by the fused mean reciprocal
        rank of the source node, with the fusion of ``self.mode``; the weights
        kept are the ones closest to equal weights among those within
        ``DEFAULT_TOLERANCE`` of the best and at least as good as the best
        child alone (:func:`~llama_index_ext_recursive.retrievers.calibrate.fit_weights`).
        Calibration emits no callback or instrumentation events and embeds the
        queries in batches. The result is returned and kept as
        ``self.calibration``; save it with ``to_dict()`` and pass it back as
        ``calibration=`` to skip calibrating again.

        Args:
            nodes: the indexed nodes the pseudo-queries are cut from.
            samples_per_script: the most pseudo-queries per script.
            seed: the sampling seed (the same seed gives the same weights).
            show_progress: a progress bar (``None``: from 500 pseudo-queries on).

        Raises:
            TypeError: ``min_relative_quality`` (removed: the weights are now
                measured, not switched off below a threshold).
        """
        if "min_relative_quality" in removed:
            raise TypeError(
                "calibrate() no longer takes min_relative_quality: weights are fitted on a "
                "grid by pseudo-query MRR instead of dropping a child below a threshold; "
                "pass retriever_weights=/script_weights= to fix weights yourself"
            )
        if removed:
            raise TypeError(f"calibrate() got unexpected keyword argument(s) {sorted(removed)}")
        check_count("samples_per_script", samples_per_script)
        calibration = calibrate_children(
            self._retrievers,
            nodes,
            fuse=self._fuse_function(),
            show_progress=show_progress,
            names=self.retriever_names,
            score_directions=[d.value for d in self.score_directions],
            samples_per_script=samples_per_script,
            seed=seed,
            fusion=self.mode.value,
        )
        self.apply_calibration(calibration)
        return calibration

    def apply_calibration(self, calibration: Calibration) -> None:
        """Use a saved :class:`~llama_index_ext_recursive.retrievers.calibrate.Calibration`'s
        weights per script (scripts it has no weights for use the defaults).

        Raises:
            TypeError: ``calibration`` is not a ``Calibration``.
            ValueError: it was fitted for other children (count or names) or
                another fusion mode.
        """
        if not isinstance(calibration, Calibration):
            raise TypeError(
                f"calibration is a {type(calibration).__name__}, not a Calibration: pass "
                "Calibration.from_dict(saved) or hybrid.calibration"
            )
        if list(calibration.names) != list(self.retriever_names):
            raise ValueError(
                f"calibration was fitted for retrievers {calibration.names}, this hybrid has "
                f"{self.retriever_names}: recalibrate with calibrate(nodes), or build the hybrid "
                "with the same children and retriever_names"
            )
        if calibration.fusion is not None and calibration.fusion != self.mode.value:
            raise ValueError(
                f"calibration was fitted for mode {calibration.fusion!r}, this hybrid fuses with "
                f"{self.mode.value!r}: pass mode={calibration.fusion!r} or recalibrate"
            )
        weights: Dict[QueryScript, List[float]] = {}
        for script, entry in calibration.scripts.items():
            if entry.weights is not None:
                weights[_script(script)] = check_weights(
                    f"calibration.scripts[{script!r}].weights", entry.weights, len(self._retrievers)
                )
        self.script_weights = weights
        self.calibration = calibration

    def _fuse_function(self) -> FuseFunction:
        """The pure fusion function that ranks as ``self.mode`` does."""
        if self.mode == FUSION_MODES.RECIPROCAL_RANK:
            return partial(reciprocal_rank_fusion, k=self.rrf_k)
        if self.mode == FUSION_MODES.DIST_BASED_SCORE:
            return distribution_based_fusion
        if self.mode == FUSION_MODES.SIMPLE:
            return simple_fusion
        return relative_score_fusion

    # ---------------------------------------------------------------- retrieval

    def _retrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        check_query(query_bundle)
        extra: List[str] = []
        if self.num_queries > 1:
            extra = self._distinct(query_bundle.query_str, self._get_queries(query_bundle.query_str))
        bundles, effective = self._bundles(query_bundle, extra)
        weights = self.weights_for(query_bundle.query_str)
        results: _Results = {}
        for q, bundle in enumerate(bundles):
            for i in _active(weights):
                results[(q, i)] = retrieve_from_child(
                    self._retrievers[i], bundle, self.retriever_names[i]
                )
        return list(self._fuse(results, bundles, weights, effective))

    async def _aretrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        check_query(query_bundle)
        extra: List[str] = []
        if self.num_queries > 1:
            extra = self._distinct(
                query_bundle.query_str, await self._aget_queries(query_bundle.query_str)
            )
        bundles, effective = self._bundles(query_bundle, extra)
        weights = self.weights_for(query_bundle.query_str)
        keys = [(q, i) for q in range(len(bundles)) for i in _active(weights)]
        outputs = await asyncio.gather(
            *(
                aretrieve_from_child(self._retrievers[i], bundles[q], self.retriever_names[i])
                for q, i in keys
            )
        )
        return list(self._fuse(dict(zip(keys, outputs)), bundles, weights, effective))

    # ------------------------------------------------------------------- fusion

    def _hits(self, results: _Results) -> Dict[Tuple[int, int], List[Tuple[int, NodeWithScore]]]:
        """Per list: (1-based rank in the child's own order, hit), usable hits only."""
        usable: Dict[Tuple[int, int], List[Tuple[int, NodeWithScore]]] = {}
        for key, nodes in results.items():
            direction = self.score_directions[key[1]]
            seen: set = set()
            kept = []
            for rank, hit in enumerate(nodes, start=1):
                node_id = hit.node.node_id
                if node_id in seen:
                    continue  # a child listing a node twice: its best rank counts
                seen.add(node_id)
                if hit.score is None:
                    continue
                if direction == ScoreDirection.SIMILARITY and hit.score == 0.0:
                    continue  # e.g. a BM25 non-match
                kept.append((rank, hit))
            usable[key] = kept
        return usable

    def _contributions(
        self,
        usable: Dict[Tuple[int, int], List[Tuple[int, NodeWithScore]]],
        num_run: int,
        weights: Sequence[float],
    ) -> Dict[Tuple[int, int], List[float]]:
        total, top = sum(weights), max(weights)
        out: Dict[Tuple[int, int], List[float]] = {}
        for (q, i), hits in usable.items():
            w = weights[i]
            distance = self.score_directions[i] == ScoreDirection.DISTANCE
            if self.mode == FUSION_MODES.RECIPROCAL_RANK:
                out[(q, i)] = [w / (self.rrf_k + rank) for rank, _ in hits]
            elif self.mode == FUSION_MODES.SIMPLE:
                out[(q, i)] = [
                    (w / top) * (1.0 / (1.0 + max(h.score, 0.0)) if distance else h.score)
                    for _, h in hits
                ]
            else:
                scores = [h.score for _, h in hits]
                if not scores:
                    out[(q, i)] = []
                    continue
                scale = dist_based_scores if self.mode == FUSION_MODES.DIST_BASED_SCORE else min_max_scores
                normalized = [value * (w / total) / num_run for value in scale(scores, distance)]
                out[(q, i)] = normalized
        return out

    def _fuse(
        self,
        results: _Results,
        bundles: Sequence[QueryBundle],
        weights: Sequence[float],
        effective: Optional[MetadataFilters],
    ) -> List[ExplainedNodeWithScore]:
        """Fused top-k; result objects and provenance are built for the top-k only."""
        usable = self._hits(results)
        contributions = self._contributions(usable, len(bundles), weights)
        nodes: Dict[str, BaseNode] = {}
        parts: Dict[str, List[Tuple[Tuple[int, int], int, NodeWithScore, float]]] = {}
        for key in sorted(usable):  # query order, then retriever order: deterministic
            for (rank, hit), value in zip(usable[key], contributions[key]):
                node_id = hit.node.node_id
                nodes.setdefault(node_id, hit.node)
                parts.setdefault(node_id, []).append((key, rank, hit, value))
        # fsum is exactly rounded: the fused score does not depend on child order
        combine = max if self.mode == FUSION_MODES.SIMPLE else math.fsum
        scores = {node_id: float(combine(p[3] for p in hits)) for node_id, hits in parts.items()}
        order = sorted(scores, key=lambda node_id: (-scores[node_id], node_id))
        if effective is not None:
            matches = metadata_matcher(effective)
            order = [n for n in order if matches(filterable_metadata(nodes[n]))]
        # model_construct: every field is built here from validated parts, and
        # validating again would cost more than the fusion itself
        return [
            explained(
                parts[node_id][0][2],
                score=scores[node_id],
                fusion=[
                    FusionHit(
                        retriever_index=i,
                        retriever_name=self.retriever_names[i],
                        query_str=bundles[q].query_str,
                        rank=rank,
                        score=hit.score,
                        contribution=value,
                    )
                    for (q, i), rank, hit, value in parts[node_id]
                ],
            )
            for node_id in order[: self.similarity_top_k]
        ]

    # ------------------------------------------------------------ constructors

    @classmethod
    def from_nodes(
        cls,
        nodes: Sequence[BaseNode],
        embed_model: Optional[BaseEmbedding] = None,
        similarity_top_k: int = DEFAULT_TOP_K,
        *,
        child_top_k: Optional[int] = None,
        show_progress: bool = False,
        calibrate: bool = True,
        **kwargs: Any,
    ) -> "HybridFusionRetriever":
        """A vector (``NumpyVectorStore``) + BM25 hybrid over ``nodes``.

        Nodes that carry embeddings are not embedded again. Each child returns
        ``child_top_k`` hits (default ``similarity_top_k``). ``mode`` defaults
        to ``relative_score`` here (``HYBRID_MODE``: both children's scores
        are known to be well-behaved similarities). With ``calibrate``
        and no ``retriever_weights``/``script_weights`` given, :meth:`calibrate`
        runs over ``nodes`` (up to 200 pseudo-queries per script); a saved
        ``calibration=`` is applied instead. Other keyword arguments
        go to the constructor (``mode``, ``retriever_weights``,
        ``unknown_filter_key``, ...); filters are checked against the metadata
        of ``nodes``.

        Arguments and node ids are checked before anything is embedded: an
        unknown keyword, a bad count or weight, or two nodes with one id (the
        vector child would keep one of them and BM25 both) raise. So do node
        embeddings (given or computed) with NaN/inf or of two dimensions,
        naming the node and the model.
        """
        nodes = list(nodes)
        if not nodes:
            raise ValueError("from_nodes needs at least one node")
        cls._check_hybrid_arguments("from_nodes", similarity_top_k, child_top_k, kwargs)
        _refuse_duplicate_ids(nodes)
        model = resolve_embed_model(embed_model)
        storage = StorageContext.from_defaults(vector_store=NumpyVectorStore())
        index = VectorStoreIndex(
            nodes, storage_context=storage, embed_model=model, show_progress=show_progress
        )
        _check_node_embeddings(index, embed_model_name(model))
        return cls._hybrid(index, nodes, similarity_top_k, child_top_k, calibrate, kwargs)

    @classmethod
    def from_index(
        cls,
        index: VectorStoreIndex,
        similarity_top_k: int = DEFAULT_TOP_K,
        *,
        child_top_k: Optional[int] = None,
        calibrate: bool = True,
        **kwargs: Any,
    ) -> "HybridFusionRetriever":
        """A vector + BM25 hybrid over an existing index (BM25 over its docstore
        nodes); arguments checked, calibrated and filters checked as in
        :meth:`from_nodes`."""
        cls._check_hybrid_arguments("from_index", similarity_top_k, child_top_k, kwargs)
        nodes = list(index.docstore.docs.values())
        if not nodes:
            raise ValueError(
                "the index's docstore holds no nodes (a vector store that stores text?); "
                "use from_nodes with the nodes instead"
            )
        return cls._hybrid(index, nodes, similarity_top_k, child_top_k, calibrate, kwargs)

    @classmethod
    def _check_hybrid_arguments(
        cls, where: str, similarity_top_k: Any, child_top_k: Any, kwargs: Dict[str, Any]
    ) -> None:
        """The constructor's checks for a two-child hybrid, before any embedding."""
        check_kwargs(cls.__init__, kwargs, f"HybridFusionRetriever.{where}")
        if "retrievers" in kwargs:
            raise TypeError(
                f"HybridFusionRetriever.{where} builds its own retrievers; pass yours to "
                "HybridFusionRetriever(retrievers=...) instead"
            )
        check_count("similarity_top_k", similarity_top_k)
        check_count("child_top_k", child_top_k, allow_none=True)
        check_count("num_queries", kwargs.get("num_queries", 1))
        check_real("rrf_k", kwargs.get("rrf_k", DEFAULT_RRF_K), low=0.0)
        if kwargs.get("retriever_weights") is not None:
            check_weights("retriever_weights", kwargs["retriever_weights"], 2)
        for script, values in (kwargs.get("script_weights") or {}).items():
            _script(script)
            check_weights(f"script_weights[{script!r}]", values, 2)
        UnknownFilterPolicy(kwargs.get("unknown_filter_key", UnknownFilterPolicy.RAISE))
        FUSION_MODES(kwargs.get("mode", HYBRID_MODE))

    @classmethod
    def _hybrid(
        cls,
        index: VectorStoreIndex,
        nodes: List[BaseNode],
        similarity_top_k: int,
        child_top_k: Optional[int],
        calibrate: bool,
        kwargs: Dict[str, Any],
    ) -> "HybridFusionRetriever":
        k = child_top_k or similarity_top_k
        try:
            from llama_index_ext_recursive.retrievers.bm25 import MultilingualBM25Retriever

            bm25: BaseRetriever = MultilingualBM25Retriever.from_defaults(
                nodes=nodes, similarity_top_k=k, unknown_filter_key=None
            )
        except ImportError:
            from llama_index.retrievers.bm25 import BM25Retriever

            bm25 = BM25Retriever.from_defaults(nodes=nodes, similarity_top_k=min(k, len(nodes)))
        kwargs.setdefault("retriever_names", ["vector", "bm25"])
        kwargs.setdefault("mode", HYBRID_MODE)
        explicit = any(kwargs.get(key) is not None for key in ("retriever_weights", "script_weights", "calibration"))
        # the hybrid checks filters against its nodes, once for both children
        vector = BackfillVectorRetriever(index, k, unknown_filter_key=None)
        hybrid = cls([vector, bm25], similarity_top_k=similarity_top_k, **kwargs)
        hybrid.filter_vocabulary = FilterVocabulary.from_nodes(nodes)
        if calibrate and not explicit:
            hybrid.calibrate(nodes)
        return hybrid


def _script(name: Any) -> QueryScript:
    try:
        return QueryScript(name)
    except ValueError:
        raise ValueError(
            f"script_weights has an unknown script {name!r}: use one of "
            f"{[s.value for s in QueryScript]}"
        ) from None


def _refuse_duplicate_ids(nodes: Sequence[BaseNode]) -> None:
    """Two nodes with one id would be one node in the vector store and two in BM25."""
    counts = Counter(node.node_id for node in nodes)
    duplicated = [node_id for node_id, n in counts.items() if n > 1]
    if not duplicated:
        return
    first = duplicated[0]
    sources = [
        node.ref_doc_id or node.metadata.get("doc_id") or "no document"
        for node in nodes
        if node.node_id == first
    ]
    raise ValueError(
        f"node id {first!r} occurs {counts[first]} times (documents: {sources}); "
        f"give every node its own id_ ({len(duplicated)} duplicated id(s): {duplicated[:10]})"
    )


def _check_node_embeddings(index: VectorStoreIndex, model_name: str) -> None:
    """Refuse NaN/inf node vectors or vectors of two dimensions, naming the node:
    a NaN vector scores NaN against every query."""
    items = list(index.vector_store.data.embedding_dict.items())
    dim: Optional[int] = None
    for start in range(0, len(items), _CHECK_BATCH):
        batch = items[start : start + _CHECK_BATCH]
        try:  # one array per batch: a loop over 50k vectors costs seconds
            dim = check_vectors([v for _, v in batch], model_name, "the nodes", dim)
        except ValueError:  # find the node (ragged batches fail to stack at all)
            for node_id, vector in batch:
                dim = check_vectors(vector, model_name, f"node {node_id!r}", dim)
            raise


_CHECK_BATCH = 4096


def retrieve_from_child(retriever: BaseRetriever, bundle: QueryBundle, name: str) -> List[NodeWithScore]:
    """``retriever.retrieve(bundle)``, which must give a list of ``NodeWithScore``.

    A child whose ``_retrieve`` returns ``None`` fails inside upstream's
    ``BaseRetriever.retrieve`` with ``'NoneType' object is not iterable``,
    which names nobody; this names the child.
    """
    try:
        results = retriever.retrieve(bundle)
    except (TypeError, AttributeError) as exc:
        _raise_if_bad_result(retriever, name, exc)
        raise
    return _checked_results(retriever, name, results)


async def aretrieve_from_child(
    retriever: BaseRetriever, bundle: QueryBundle, name: str
) -> List[NodeWithScore]:
    """The async :func:`retrieve_from_child`."""
    try:
        results = await retriever.aretrieve(bundle)
    except (TypeError, AttributeError) as exc:
        _raise_if_bad_result(retriever, name, exc)
        raise
    return _checked_results(retriever, name, results)


# where upstream's BaseRetriever iterates what _retrieve/_aretrieve returned
_RESULT_HANDLERS = frozenset({"_handle_recursive_retrieval", "_ahandle_recursive_retrieval"})


def _raise_if_bad_result(retriever: BaseRetriever, name: str, exc: BaseException) -> None:
    """Name the child when ``exc`` comes from upstream iterating its result."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is not None and tb.tb_frame.f_code.co_name in _RESULT_HANDLERS:
        raise TypeError(
            f"retriever {name!r} ({type(retriever).__name__}) did not return a list of "
            f"NodeWithScore ({exc}); its _retrieve/_aretrieve must return one ([] for no hits)"
        ) from exc


def _checked_results(retriever: BaseRetriever, name: str, results: Any) -> List[NodeWithScore]:
    if isinstance(results, list) and all(isinstance(hit, NodeWithScore) for hit in results):
        return results
    got = (
        f"a list of {sorted({type(hit).__name__ for hit in results})}"
        if isinstance(results, list)
        else type(results).__name__
    )
    raise TypeError(
        f"retriever {name!r} ({type(retriever).__name__}) returned {got}, not a list of "
        "NodeWithScore ([] for no hits)"
    )


def _active(weights: Sequence[float]) -> List[int]:
    return [i for i, w in enumerate(weights) if w > 0]
