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
:meth:`HybridFusionRetriever.calibrate` sets them from the corpus itself:
every child answers pseudo-queries cut from sampled nodes, and a child that
finds less than a quarter of what the best child finds gets weight 0 for that
script (logged). ``from_nodes``/``from_index`` calibrate unless weights are given.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
from collections import Counter
from dataclasses import dataclass, field
from enum import Enum
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
from llama_index.core.schema import BaseNode, IndexNode, MetadataMode, NodeWithScore, QueryBundle
from llama_index.core.settings import Settings
from llama_index.core.vector_stores.types import MetadataFilters
from pydantic import Field

from llama_index_ext_recursive.backfill import BackfillVectorRetriever
from llama_index_ext_recursive.embeddings import embed_model_name, resolve_embed_model
from llama_index_ext_recursive.filters import (
    FilteredQueryBundle,
    FilterPolicy,
    FiltersLike,
    FilterVocabulary,
    UnknownFilterPolicy,
    apply_policy,
    filterable_metadata,
    filters_of,
    metadata_matcher,
    to_filters,
    with_filters,
)
from llama_index_ext_recursive.store import NumpyVectorStore
from llama_index_ext_recursive.summarize import cjk_ratio
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
DEFAULT_MIN_RELATIVE_QUALITY = 0.25
# from_nodes/from_index know their children's scores (cosine, BM25), so they fuse
# min-max-normalised scores: on SciFact 0.723 nDCG@10 vs 0.716 for RRF, XQuAD-en
# 0.936 vs 0.925 (benchmarks/fusion_sweep.py). RRF stays the constructor default:
# it needs nothing from scores, which suits children it knows nothing about.
HYBRID_MODE = FUSION_MODES.RELATIVE_SCORE
DEFAULT_CALIBRATION_SAMPLES = 200  # fewer made the decision noisy across seeds
MIN_CALIBRATION_SAMPLES = 8


class QueryScript(str, Enum):
    """Which writing system a query is in, for per-script fusion weights."""

    LATIN = "latin"  # everything that is not mostly Chinese/Japanese/Korean
    CJK = "cjk"


def query_script(text: str) -> QueryScript:
    """``cjk`` when at least 30% of the letters are CJK characters, else ``latin``."""
    return QueryScript.CJK if cjk_ratio(text) >= 0.3 else QueryScript.LATIN


def pseudo_queries(
    nodes: Sequence[BaseNode], per_script: int = DEFAULT_CALIBRATION_SAMPLES, seed: int = 0
) -> Dict[QueryScript, List[Tuple[str, str]]]:
    """Up to ``per_script`` (node_id, query) pairs per script, cut from sampled nodes.

    A query is a random window of the node's text: 5-9 words for Latin text,
    8-16 characters for CJK text. Deterministic for a given ``seed``.
    """
    rng = random.Random(seed)
    by_script: Dict[QueryScript, List[BaseNode]] = {}
    for node in nodes:
        text = node.get_content(metadata_mode=MetadataMode.NONE)
        by_script.setdefault(query_script(text), []).append(node)
    out: Dict[QueryScript, List[Tuple[str, str]]] = {}
    for script, group in sorted(by_script.items()):
        pairs = []
        for node in rng.sample(group, len(group)):
            text = node.get_content(metadata_mode=MetadataMode.NONE)
            if script == QueryScript.CJK:
                units, joiner, low, high = [c for c in text if not c.isspace()], "", 8, 16
            else:
                units, joiner, low, high = text.split(), " ", 5, 9
            if len(units) < low:
                continue
            length = rng.randint(low, min(high, len(units)))
            start = rng.randint(0, len(units) - length)
            pairs.append((node.node_id, joiner.join(units[start : start + length])))
            if len(pairs) == per_script:
                break
        out[script] = pairs
    return out


@dataclass
class Calibration:
    """What :meth:`HybridFusionRetriever.calibrate` measured and decided, per script.

    ``quality[script][i]`` is child ``i``'s mean reciprocal rank of the source
    node over ``samples[script]`` pseudo-queries; ``weights[script]`` are the
    resulting weights (``None``: too few samples, the default weights apply).
    """

    quality: Dict[str, List[float]] = field(default_factory=dict)
    samples: Dict[str, int] = field(default_factory=dict)
    weights: Dict[str, Optional[List[float]]] = field(default_factory=dict)


class ScoreDirection(str, Enum):
    """What a child's scores mean: ``similarity`` (higher is better) or ``distance``."""

    SIMILARITY = "similarity"
    DISTANCE = "distance"


@dataclass(frozen=True)
class FusionHit:
    """One child's evidence for a fused result (a plain dataclass: one is made
    per hit per query, and a pydantic model cost more than the fusion)."""

    retriever_index: int
    retriever_name: str
    query_str: str
    rank: int  # 1-based position in the child's own returned list
    score: Optional[float]  # the child's raw score
    contribution: float  # what this hit added to the fused score


class FusedNodeWithScore(NodeWithScore):
    """A ``NodeWithScore`` whose ``score`` is the fused score, with provenance.

    ``provenance`` lists every child hit that contributed (retriever index and
    name, query, rank, raw score, contribution). Each call builds new objects,
    so code that only knows ``NodeWithScore`` is unaffected.
    """

    provenance: List[FusionHit] = Field(default_factory=list)

    @classmethod
    def class_name(cls) -> str:
        return "FusedNodeWithScore"


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
            see :class:`QueryScript`), used instead of ``retriever_weights`` for
            queries in that script; usually set by :meth:`calibrate`.
        unknown_filter_key: what a filter that cannot match (a key no indexed
            node holds, or a value of a type the key never holds) does:
            ``raise`` (default) a
            :class:`~llama_index_ext_recursive.filters.FilterError` naming the
            closest key, or ``warn`` and search anyway. Checked by hybrids
            built with :meth:`from_nodes`/:meth:`from_index`, which know their
            nodes; over children given here, the children check their own.

    Raises:
        TypeError, ValueError: at construction, naming the argument: a child
            that is not a ``BaseRetriever``; ``similarity_top_k``/``num_queries``
            that are not integers >= 1 (``True``, ``2.5``, ``"5"``); weights
            that are NaN, inf, negative, all zero or not one per child.
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
            first = with_filters(query_bundle, effective)
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
        min_relative_quality: float = DEFAULT_MIN_RELATIVE_QUALITY,
        seed: int = 0,
    ) -> Calibration:
        """Set ``script_weights`` from how well each child finds pseudo-queries.

        For each script with at least 8 pseudo-queries (:func:`pseudo_queries`
        over ``nodes``, which the children must index), every child with a
        positive weight answers them; a child whose mean reciprocal rank is
        below ``min_relative_quality`` times the best child's gets weight 0
        for queries in that script (logged as a warning), the others keep
        their weights. Returns, and keeps as ``self.calibration``, what was
        measured.
        """
        check_count("samples_per_script", samples_per_script)
        check_real("min_relative_quality", min_relative_quality, 0.0, 1.0)
        report = Calibration()
        for script, pairs in pseudo_queries(nodes, samples_per_script, seed).items():
            report.samples[script.value] = len(pairs)
            if len(pairs) < MIN_CALIBRATION_SAMPLES:
                report.weights[script.value] = None
                self.script_weights.pop(script, None)
                continue
            quality = [
                _mean_reciprocal_rank(child, pairs) if weight > 0 else 0.0
                for child, weight in zip(self._retrievers, self._retriever_weights)
            ]
            best = max(quality)
            weights = [
                w if q > 0 and q >= min_relative_quality * best else 0.0
                for w, q in zip(self._retriever_weights, quality)
            ]
            for i, (before, after) in enumerate(zip(self._retriever_weights, weights)):
                if before > 0 and after == 0:
                    logger.warning(
                        "hybrid: %s finds %.0f%% as much as the best retriever on %s "
                        "pseudo-queries (MRR %.3f vs %.3f); it gets weight 0 for %s queries. "
                        "Pass retriever_weights= to choose weights yourself.",
                        self.retriever_names[i], 100 * quality[i] / best if best else 0.0,
                        script.value, quality[i], best, script.value,
                    )
            report.quality[script.value] = quality
            report.weights[script.value] = weights
            if any(w > 0 for w in weights):
                self.script_weights[script] = weights
            logger.info("hybrid calibration %s: quality=%s weights=%s", script.value, quality, weights)
        self.calibration = report
        return report

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
                if self.mode == FUSION_MODES.DIST_BASED_SCORE:
                    mean = sum(scores) / len(scores)
                    std = (sum((s - mean) ** 2 for s in scores) / len(scores)) ** 0.5
                    low, high = mean - 3 * std, mean + 3 * std
                else:
                    low, high = min(scores), max(scores)
                normalized = []
                for s in scores:
                    if high == low:
                        value = 1.0 if (distance or high > 0) else 0.0
                    elif distance:
                        value = (high - s) / (high - low)
                    else:
                        value = (s - low) / (high - low)
                    normalized.append(value * (w / total) / num_run)
                out[(q, i)] = normalized
        return out

    def _fuse(
        self,
        results: _Results,
        bundles: Sequence[QueryBundle],
        weights: Sequence[float],
        effective: Optional[MetadataFilters],
    ) -> List[FusedNodeWithScore]:
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
            FusedNodeWithScore.model_construct(
                node=nodes[node_id],
                score=scores[node_id],
                provenance=[
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
        runs over ``nodes`` (up to 200 pseudo-queries per script). Other keyword arguments
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
            from llama_index_ext_recursive.bm25 import MultilingualBM25Retriever

            bm25: BaseRetriever = MultilingualBM25Retriever.from_defaults(
                nodes=nodes, similarity_top_k=k, unknown_filter_key=None
            )
        except ImportError:
            from llama_index.retrievers.bm25 import BM25Retriever

            bm25 = BM25Retriever.from_defaults(nodes=nodes, similarity_top_k=min(k, len(nodes)))
        kwargs.setdefault("retriever_names", ["vector", "bm25"])
        kwargs.setdefault("mode", HYBRID_MODE)
        explicit = kwargs.get("retriever_weights") is not None or kwargs.get("script_weights") is not None
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


def _mean_reciprocal_rank(retriever: BaseRetriever, pairs: Sequence[Tuple[str, str]]) -> float:
    total = 0.0
    for node_id, query in pairs:
        ids = [hit.node.node_id for hit in retriever.retrieve(QueryBundle(query))]
        if node_id in ids:
            total += 1.0 / (ids.index(node_id) + 1)
    return total / len(pairs)
