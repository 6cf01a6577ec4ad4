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
* per-call filters and ``top_k``
  (:class:`~llama_index_ext_recursive.query.FilteredQueryBundle`) are resolved
  once (:func:`~llama_index_ext_recursive.query.resolve_call`), passed to
  every child and enforced on the fused list;
* sync retrieval runs children one after another in the calling thread (no
  nested event loop, errors surface as themselves); async runs them
  concurrently;
* bad input fails early and by name: children that are not retrievers, counts
  that are not integers >= 1, NaN/inf/negative weights are refused at
  construction; a blank query is a ``ValueError``; a child returning ``None``
  is a ``TypeError`` naming the child; ``from_nodes``/``from_index`` refuse
  duplicate node ids and check filters against the nodes' metadata
  (``unknown_filter_key``).

Each result is an :class:`~llama_index_ext_recursive.results.ExplainedNodeWithScore`
whose ``fusion`` part says which child found it, at which rank and with
which score (a child's own parts, e.g. a recursive child's ``route``, are kept).

A child that cannot read a script drags fusion below its better child: the
bundled English MiniLM finds 0.23 nDCG@10 on XQuAD-zh where Chinese BM25
finds 0.90, and equal-weight RRF of the two lands at 0.65. Weights can
therefore differ by query script (``script_weights``), and
:meth:`HybridFusionRetriever.calibrate` fits them on the corpus itself
(:mod:`llama_index_ext_recursive.retrievers.calibrate`). A saved
:class:`~llama_index_ext_recursive.retrievers.calibration.Calibration` is
applied again with ``calibration=``; ``persist``/``from_persist_dir`` keep
the calibration with the rest of the settings
(:mod:`llama_index_ext_recursive.retrievers.fusion_persist`).

Layout: the fusion arithmetic is in :mod:`.fusion_scores`, the vector + BM25
assembly in :mod:`.hybrid`, calibration in :mod:`.calibrate` and
:mod:`.calibration`, the saved folder's children in :mod:`.fusion_persist`,
child calls in :mod:`.children`; all of them stand below this module. It keeps
one class, about 740 lines, because it mirrors upstream's documented
constructor and classmethods argument by argument (and ``to_dict`` saves the
settings one by one); every method left here is the retriever's own state.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from enum import Enum
from functools import partial
from pathlib import Path
from typing import Any

from llama_index.core import VectorStoreIndex
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.callbacks import CallbackManager
from llama_index.core.llms import LLM
from llama_index.core.llms.mock import MockLLM
from llama_index.core.llms.utils import LLMType
from llama_index.core.retrievers.fusion_retriever import FUSION_MODES, QueryFusionRetriever
from llama_index.core.schema import BaseNode, IndexNode, NodeWithScore, QueryBundle

from llama_index_ext_recursive.cache.retrieval_cache import RetrievalCache, check_cache
from llama_index_ext_recursive.config import component_to_dict, init_parameters, read_config, write_config
from llama_index_ext_recursive.embedding_cache import CachedEmbedding
from llama_index_ext_recursive.filters import (
    FilterPolicy,
    FiltersLike,
    FilterVocabulary,
    UnknownFilterPolicy,
    keep_matching,
    to_filters,
)
from llama_index_ext_recursive.models import resolve_llm
from llama_index_ext_recursive.persist import PersistError, read_index, write_index
from llama_index_ext_recursive.query import (
    DEFAULT_TOP_K,
    Call,
    FilteredQueryBundle,
    QueryCheckingRetriever,
    resolve_call,
)
from llama_index_ext_recursive.results import ExplainedNodeWithScore, FusionHit, explained
from llama_index_ext_recursive.retrievers.bm25 import MultilingualBM25Retriever
from llama_index_ext_recursive.retrievers.calibrate import DEFAULT_CALIBRATION_SAMPLES, calibrate_children
from llama_index_ext_recursive.retrievers.calibration import Calibration, script_key
from llama_index_ext_recursive.retrievers.children import aretrieve_from_child, retrieve_from_child
from llama_index_ext_recursive.retrievers.fusion_persist import (
    CHILD_FOLDER,
    PERSIST_KIND,
    check_children,
    child_kinds,
    read_children,
    settings_from_config,
    vocabulary_child,
    write_children,
)
from llama_index_ext_recursive.retrievers.fusion_scores import (
    DEFAULT_RRF_K,
    FuseFunction,
    contributions,
    distribution_based_fusion,
    reciprocal_rank_fusion,
    relative_score_fusion,
    simple_fusion,
    usable_hits,
)
from llama_index_ext_recursive.retrievers.hybrid import (
    CALIBRATION_ROWS,
    HYBRID_MODE,
    check_hybrid_arguments,
    hybrid_from_nodes,
    hybrid_over_level,
    hybrid_retriever,
)
from llama_index_ext_recursive.retrievers.vector import BackfillVectorRetriever
from llama_index_ext_recursive.text import QueryScript, query_script
from llama_index_ext_recursive.validation import check_count, check_real, check_weights


class ScoreDirection(str, Enum):
    """What a child's scores mean: ``similarity`` (higher is better) or ``distance``."""

    SIMILARITY = "similarity"
    DISTANCE = "distance"


# (query index, retriever index) -> the child's list
_Results = dict[tuple[int, int], list[NodeWithScore]]


class HybridFusionRetriever(QueryCheckingRetriever, QueryFusionRetriever):
    """Fuse several retrievers' results (e.g. BM25 + vector), offline by default.

    Constructor-compatible with ``QueryFusionRetriever``; differences in
    defaults: ``similarity_top_k=10`` (not 2), ``num_queries=1`` (no query
    generation, hence no LLM) and ``mode="reciprocal_rerank"``.

    Args:
        retrievers: the children.
        llm: used only when ``num_queries > 1`` (else never resolved); then
            falls back to ``Settings.llm`` if set, else ``ValueError``
            (:func:`~llama_index_ext_recursive.models.resolve_llm`).
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
            see :class:`~llama_index_ext_recursive.text.QueryScript`),
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
            :class:`~llama_index_ext_recursive.retrievers.calibration.Calibration` (e.g.
            ``Calibration.from_dict(json.load(f))``) whose per-script weights
            apply, without calibrating again (not with ``script_weights``).
        child_top_k: the k each child is asked for per call (``None``: the
            child's own). A call asking for more than ``similarity_top_k``
            (``FilteredQueryBundle(top_k=...)``) asks every child for at
            least that many, so the fused list can be that long; a smaller
            per-call k only cuts the fused list, whose order is then the
            default call's.
        cache: a :class:`~llama_index_ext_recursive.cache.RetrievalCache` for
            the children: each ``BackfillVectorRetriever`` and
            ``MultilingualBM25Retriever`` child without a cache of its own uses
            it (the builders' children included), so a repeated query is not
            embedded again and its BM25 results are not scored again. Fused
            results are not cached: a vector child's index can change through
            the app's own calls without telling this retriever, so no key could
            name its content.

    Raises:
        TypeError, ValueError: at construction, naming the argument: a child
            that is not a ``BaseRetriever``; ``similarity_top_k``/``num_queries``
            that are not integers >= 1 (``True``, ``2.5``, ``"5"``); weights
            that are NaN, inf, negative, all zero or not one per child; a
            ``calibration`` fitted for other children (count, names) or mode.
    """

    def __init__(
        self,
        retrievers: list[BaseRetriever],
        llm: LLMType | None = None,
        query_gen_prompt: str | None = None,
        mode: FUSION_MODES | str = FUSION_MODES.RECIPROCAL_RANK,
        similarity_top_k: int = DEFAULT_TOP_K,
        num_queries: int = 1,
        use_async: bool = True,
        verbose: bool = False,
        callback_manager: CallbackManager | None = None,
        objects: list[IndexNode] | None = None,
        object_map: dict | None = None,
        retriever_weights: list[float] | None = None,
        *,
        rrf_k: float = DEFAULT_RRF_K,
        score_directions: Sequence[ScoreDirection | str] | None = None,
        retriever_names: Sequence[str] | None = None,
        filters: FiltersLike = None,
        filter_policy: FilterPolicy | str = FilterPolicy.MERGE,
        script_weights: dict[str, Sequence[float]] | None = None,
        unknown_filter_key: UnknownFilterPolicy | str = UnknownFilterPolicy.RAISE,
        calibration: Calibration | None = None,
        child_top_k: int | None = None,
        cache: RetrievalCache | None = None,
    ) -> None:
        retrievers = list(retrievers)
        check_cache(cache)
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
        check_count("child_top_k", child_top_k, allow_none=True)
        check_real("rrf_k", rrf_k, low=0.0)
        weights = check_weights(
            "retriever_weights", [1.0] * count if retriever_weights is None else retriever_weights, count
        )
        per_script = {
            script_key(script): check_weights(f"script_weights[{script!r}]", values, count)
            for script, values in (script_weights or {}).items()
        }
        directions = [ScoreDirection(d) for d in (score_directions or ["similarity"] * count)]
        if len(directions) != count:
            raise ValueError(f"score_directions has {len(directions)} entries for {count} retrievers")
        names = list(retriever_names) if retriever_names is not None else [type(r).__name__ for r in retrievers]
        if len(names) != count:
            raise ValueError(f"retriever_names has {len(names)} entries for {count} retrievers")
        if calibration is not None and script_weights is not None:
            raise ValueError("pass calibration= (saved fitted weights) or script_weights= (your own), not both")
        resolved = self._resolve_llm(llm, num_queries, callback_manager)
        # The parent resolves Settings.llm (OpenAI by default) whenever it is
        # given no llm, even with num_queries=1; a MockLLM stands in for it
        # when no LLM is needed, and is dropped right after.
        super().__init__(
            retrievers,
            llm=resolved or MockLLM(),
            query_gen_prompt=query_gen_prompt,
            mode=FUSION_MODES(mode),
            similarity_top_k=similarity_top_k,
            num_queries=num_queries,
            use_async=use_async,
            verbose=verbose,
            callback_manager=callback_manager,
            objects=objects,
            object_map=object_map,
            retriever_weights=weights,
        )
        # None with num_queries=1, where upstream never reads it (it only generates queries)
        self._llm = resolved  # type: ignore[assignment]
        # the parent normalises the weights to sum 1; RRF adds them unnormalised
        self._retriever_weights = weights
        self.script_weights: dict[QueryScript, list[float]] = per_script
        self.calibration: Calibration | None = None
        self.rrf_k = float(rrf_k)
        self.score_directions = directions
        self.retriever_names = names
        self.filters = to_filters(filters)
        self.filter_policy = FilterPolicy(filter_policy)
        self.unknown_filter_key = UnknownFilterPolicy(unknown_filter_key)
        self.child_top_k = child_top_k
        # the metadata of the indexed nodes, when known (from_nodes/from_index)
        self.filter_vocabulary: FilterVocabulary | None = None
        self.cache = cache
        for child in retrievers:
            if isinstance(child, (BackfillVectorRetriever, MultilingualBM25Retriever)) and child.cache is None:
                child.cache = cache
        if calibration is not None:
            self.apply_calibration(calibration)

    @staticmethod
    def _resolve_llm(llm: LLMType | None, num_queries: int, callback_manager: CallbackManager | None) -> LLM | None:
        if num_queries <= 1:
            return llm if isinstance(llm, LLM) else None  # never resolved
        return resolve_llm(
            llm,
            needed_for=f"HybridFusionRetriever(num_queries={num_queries}) generating extra queries",
            offline_alternative="use num_queries=1",
            callback_manager=callback_manager,
        )

    @property
    def retrievers(self) -> list[BaseRetriever]:
        """The children, in order."""
        return list(self._retrievers)

    # ------------------------------------------------------------------ queries

    def _distinct(self, original: str, generated: Sequence[QueryBundle]) -> list[str]:
        seen = {original.strip()}
        out = []
        for bundle in generated:
            text = bundle.query_str.strip()
            if text and text not in seen:
                seen.add(text)
                out.append(text)
        return out

    def _resolve(self, query_bundle: QueryBundle) -> Call:
        return resolve_call(
            query_bundle,
            filters=self.filters,
            filter_policy=self.filter_policy,
            top_k=self.similarity_top_k,
            vocabulary=self.filter_vocabulary,
            unknown_filter_key=self.unknown_filter_key,
        )

    def _child_k(self, call: Call) -> int | None:
        """The k a child is asked for (``None``: its own; see ``child_top_k``)."""
        if call.top_k <= self.similarity_top_k:
            return self.child_top_k
        return max(call.top_k, self.child_top_k or 0)

    def _bundles(self, call: Call, extra: Sequence[str]) -> list[QueryBundle]:
        """The bundles to pass down: the caller's (first) and each generated query,
        with the call's filters and the children's k (a call with neither passes
        the caller's bundle on unchanged, so upstream children see what they know)."""
        k = self._child_k(call)
        if call.filters is None and k is None:
            return [call.bundle, *(QueryBundle(text) for text in extra)]
        first = call.child_bundle(top_k=k)
        return [first, *(FilteredQueryBundle(text, filters=call.filters, top_k=k) for text in extra)]

    def weights_for(self, query_str: str) -> list[float]:
        """The child weights used for ``query_str`` (its script's, else the defaults)."""
        return self.script_weights.get(query_script(query_str), self._retriever_weights)

    # ------------------------------------------------------------ calibration

    def calibrate(
        self,
        nodes: Sequence[BaseNode],
        samples_per_script: int = DEFAULT_CALIBRATION_SAMPLES,
        seed: int = 0,
        show_progress: bool | None = None,
        absent_script_weights: Sequence[float] | None = None,
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
            absent_script_weights: the weights for a query script the nodes
                have no text in (see
                :func:`~llama_index_ext_recursive.retrievers.calibrate.calibrate_children`);
                the vector + BM25 assembly passes ``CROSS_SCRIPT_WEIGHTS``.

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
            absent_script_weights=absent_script_weights,
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
        weights: dict[QueryScript, list[float]] = {}
        for script, entry in calibration.scripts.items():
            if entry.weights is not None:
                weights[script_key(script)] = check_weights(
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

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        call = self._resolve(query_bundle)
        extra: list[str] = []
        if self.num_queries > 1:
            extra = self._distinct(call.bundle.query_str, self._get_queries(call.bundle.query_str))
        bundles = self._bundles(call, extra)
        weights = self.weights_for(call.bundle.query_str)
        results: _Results = {}
        for q, bundle in enumerate(bundles):
            for i in _active(weights):
                results[(q, i)] = retrieve_from_child(self._retrievers[i], bundle, self.retriever_names[i])
        return list(self._fuse(results, bundles, weights, call))

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        call = self._resolve(query_bundle)
        extra: list[str] = []
        if self.num_queries > 1:
            extra = self._distinct(call.bundle.query_str, await self._aget_queries(call.bundle.query_str))
        bundles = self._bundles(call, extra)
        weights = self.weights_for(call.bundle.query_str)
        keys = [(q, i) for q in range(len(bundles)) for i in _active(weights)]
        outputs = await asyncio.gather(
            *(aretrieve_from_child(self._retrievers[i], bundles[q], self.retriever_names[i]) for q, i in keys)
        )
        return list(self._fuse(dict(zip(keys, outputs)), bundles, weights, call))

    # ------------------------------------------------------------------- fusion

    def _fuse(
        self,
        results: _Results,
        bundles: Sequence[QueryBundle],
        weights: Sequence[float],
        call: Call,
    ) -> list[ExplainedNodeWithScore]:
        """The fused top-k (the call's k), post-checked against the call's filters.

        Result objects and their ``fusion`` part are built for the top-k
        only; each keeps the parts its first contributing child attached.
        """
        distance = [d == ScoreDirection.DISTANCE for d in self.score_directions]
        usable = {key: usable_hits(hits, distance[key[1]]) for key, hits in results.items()}
        added = {
            key: contributions(
                hits,
                self.mode,
                weights,
                key[1],
                distance=distance[key[1]],
                rrf_k=self.rrf_k,
                num_lists=len(bundles),
            )
            for key, hits in usable.items()
        }
        parts: dict[str, list[tuple[tuple[int, int], int, NodeWithScore, float]]] = {}
        for key in sorted(usable):  # query order, then retriever order: deterministic
            for (rank, hit), value in zip(usable[key], added[key]):
                parts.setdefault(hit.node.node_id, []).append((key, rank, hit, value))
        # fsum is exactly rounded: the fused score does not depend on child order
        combine = max if self.mode == FUSION_MODES.SIMPLE else math.fsum
        scores = {node_id: float(combine(p[3] for p in hits)) for node_id, hits in parts.items()}
        order = sorted(scores, key=lambda node_id: (-scores[node_id], node_id))
        first_hits = keep_matching([parts[node_id][0][2] for node_id in order], call.filters)
        return [
            explained(
                hit,
                score=scores[hit.node.node_id],
                fusion=[
                    FusionHit(
                        retriever_index=i,
                        retriever_name=self.retriever_names[i],
                        query_str=bundles[q].query_str,
                        rank=rank,
                        score=child_hit.score,
                        contribution=value,
                    )
                    for (q, i), rank, child_hit, value in parts[hit.node.node_id]
                ],
            )
            for hit in first_hits[: call.top_k]
        ]

    # ------------------------------------------------------------ constructors

    @classmethod
    def from_defaults(
        cls,
        index: VectorStoreIndex | None = None,
        nodes: Sequence[BaseNode] | None = None,
        **kwargs: Any,
    ) -> HybridFusionRetriever:
        """A vector + BM25 hybrid from exactly one of ``index`` (:meth:`from_index`)
        or ``nodes`` (:meth:`from_nodes`), as ``BM25Retriever.from_defaults``
        takes its corpus; ``QueryFusionRetriever`` itself has no ``from_defaults``.

        Args:
            index: an existing ``VectorStoreIndex`` (its stored embeddings are reused).
            nodes: nodes to index (nodes carrying embeddings are not embedded again).
            **kwargs: as :meth:`from_index` / :meth:`from_nodes`.
        """
        if (index is None) == (nodes is None):
            raise ValueError("pass exactly one of index or nodes")
        if index is not None:
            return cls.from_index(index, **kwargs)
        return cls.from_nodes(nodes, **kwargs)  # type: ignore[arg-type]

    @classmethod
    def from_nodes(
        cls,
        nodes: Sequence[BaseNode],
        embed_model: BaseEmbedding | None = None,
        similarity_top_k: int = DEFAULT_TOP_K,
        *,
        child_top_k: int | None = None,
        show_progress: bool = False,
        calibrate: bool = True,
        embedding_cache: str | Path | CachedEmbedding | None = None,
        **kwargs: Any,
    ) -> HybridFusionRetriever:
        """A vector (``NumpyVectorStore``) + BM25 hybrid over ``nodes``.

        Nodes that carry embeddings are not embedded again, nor are texts
        ``embedding_cache`` (a SQLite path or a :class:`CachedEmbedding`)
        holds for the model. Each child returns
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
        check_hybrid_arguments(
            "from_nodes",
            {**kwargs, "similarity_top_k": similarity_top_k, "child_top_k": child_top_k},
            cls.__init__,
        )
        return hybrid_from_nodes(
            cls,
            nodes,
            embed_model,
            show_progress=show_progress,
            embedding_cache=embedding_cache,
            similarity_top_k=similarity_top_k,
            child_top_k=child_top_k,
            calibrate=calibrate,
            **kwargs,
        )

    @classmethod
    def from_index(
        cls,
        index: VectorStoreIndex,
        similarity_top_k: int = DEFAULT_TOP_K,
        *,
        child_top_k: int | None = None,
        calibrate: bool = True,
        embed_model: BaseEmbedding | None = None,
        **kwargs: Any,
    ) -> HybridFusionRetriever:
        """A vector + BM25 hybrid over an existing index: the vector child
        searches the index's stored embeddings (nothing is embedded again), BM25
        indexes its docstore nodes; arguments checked, calibrated and filters
        checked as in :meth:`from_nodes`. ``embed_model`` embeds queries
        (default: the index's)."""
        check_hybrid_arguments(
            "from_index",
            {**kwargs, "similarity_top_k": similarity_top_k, "child_top_k": child_top_k},
            cls.__init__,
        )
        return hybrid_retriever(
            cls,
            index,
            similarity_top_k=similarity_top_k,
            child_top_k=child_top_k,
            embed_model=embed_model,
            calibrate=calibrate,
            **kwargs,
        )

    @classmethod
    def from_postgres(
        cls,
        store: Any,
        embed_model: BaseEmbedding | None = None,
        similarity_top_k: int = DEFAULT_TOP_K,
        *,
        child_top_k: int | None = None,
        calibrate: bool = True,
        calibration_rows: int = CALIBRATION_ROWS,
        **kwargs: Any,
    ) -> HybridFusionRetriever:
        """A vector + BM25 hybrid over rows in PostgreSQL: a ``PostgresLevelStore``, or a
        ``PostgresIndexStore``'s chunks. Both children search the database (pgvector, BM25
        in SQL), so the client holds nothing per row and any number of processes share it.

        With ``calibrate`` and no weights or saved ``calibration`` given, the weights are
        fitted as in :meth:`calibrate`, on pseudo-queries cut from ``calibration_rows`` rows
        sampled from the level (hundreds of searches of the database: save ``to_dict()`` and
        pass its ``calibration`` to the other processes). Other keyword arguments as
        :meth:`from_nodes`; a filter key no row holds is refused at each call, by the
        level's own key counts.

        Args:
            store: a ``PostgresLevelStore`` created with ``tokenizer=`` (its BM25 terms), or
                a ``PostgresIndexStore`` (its chunk level).
            embed_model: embeds the queries (default: the package's); it must be the model
                the rows were embedded with.
            calibration_rows: the rows sampled for calibration.
        """
        check_hybrid_arguments(
            "from_postgres",
            {**kwargs, "similarity_top_k": similarity_top_k, "child_top_k": child_top_k},
            cls.__init__,
        )
        check_count("calibration_rows", calibration_rows)
        level = getattr(store, "chunks", store)
        if not hasattr(level, "sample_nodes"):
            raise TypeError(
                f"from_postgres takes a PostgresLevelStore or a PostgresIndexStore, not {type(store).__name__}; "
                "for nodes in memory use HybridFusionRetriever.from_nodes"
            )
        return hybrid_over_level(
            cls,
            level,
            embed_model,
            similarity_top_k=similarity_top_k,
            child_top_k=child_top_k,
            calibrate=calibrate,
            calibration_rows=calibration_rows,
            **kwargs,
        )

    # ------------------------------------------------- configuration and persistence

    def to_dict(self) -> dict[str, Any]:
        """The settings as a configuration dict (:mod:`llama_index_ext_recursive.config`):
        mode, k, weights, calibration, filters and their policies. The children
        and the LLM are not settings: :meth:`from_dict` takes them again."""
        calibration = self.calibration
        return component_to_dict(
            self,
            mode=self.mode.value,
            similarity_top_k=self.similarity_top_k,
            child_top_k=self.child_top_k,
            num_queries=self.num_queries,
            query_gen_prompt=self.query_gen_prompt,
            retriever_weights=list(self._retriever_weights),
            rrf_k=self.rrf_k,
            score_directions=[d.value for d in self.score_directions],
            retriever_names=list(self.retriever_names),
            filters=self.filters.model_dump(mode="json") if self.filters is not None else None,
            filter_policy=self.filter_policy.value,
            unknown_filter_key=self.unknown_filter_key.value,
            # fitted weights travel as their calibration (with what was measured)
            calibration=calibration.to_dict() if calibration is not None else None,
            script_weights=(
                None
                if calibration is not None or not self.script_weights
                else {script.value: list(w) for script, w in self.script_weights.items()}
            ),
        )

    @classmethod
    def from_dict(
        cls, data: dict[str, Any], retrievers: Sequence[BaseRetriever], **overrides: Any
    ) -> HybridFusionRetriever:
        """A hybrid of ``retrievers`` with the settings of :meth:`to_dict`
        (``overrides`` win, e.g. ``llm=`` when ``num_queries > 1``)."""
        return cls(list(retrievers), **{**settings_from_config(init_parameters(cls, data)), **overrides})

    def persist(self, persist_dir: str | Path) -> None:
        """Write the settings and every child to the index folder ``persist_dir``.

        Each child must be able to persist into a folder of the hybrid's
        (``BackfillVectorRetriever``, ``MultilingualBM25Retriever``, a
        nested ``HybridFusionRetriever``), so hybrids built with
        :meth:`from_nodes`/:meth:`from_index` persist; other children are
        named in the ``TypeError`` before anything is written.
        """
        check_children(self.retriever_names, self.retrievers, child_kinds(HybridFusionRetriever))
        with write_index(persist_dir, PERSIST_KIND) as staging:
            self.write_files(staging)
        self._published_at(persist_dir)

    def write_files(self, folder: Path) -> None:
        """Write the children and the settings into ``folder`` (for a hybrid persisting
        this one as its child), with which child's nodes filters are checked against."""
        write_children(folder, self.retrievers)
        source = vocabulary_child(self.retrievers) if self.filter_vocabulary is not None else None
        write_config(folder, {**self.to_dict(), "vocabulary_child": source})

    @classmethod
    def from_persist_dir(
        cls,
        persist_dir: str | Path,
        embed_model: BaseEmbedding | None = None,
        **overrides: Any,
    ) -> HybridFusionRetriever:
        """Load a hybrid written by :meth:`persist`: same children, weights,
        calibration and settings, so it returns the same results.

        Args:
            persist_dir: the index folder.
            embed_model: the vector children's query model (argument >
                ``Settings.embed_model`` > bundled; a model of another name
                than the one persisted is logged).
            **overrides: constructor arguments that win over the saved ones
                (``llm=``, ``callback_manager=``, ...).
        """
        hybrid = read_index(persist_dir, PERSIST_KIND, lambda folder: cls.read_files(folder, embed_model, **overrides))
        hybrid._published_at(persist_dir)
        return hybrid

    def _published_at(self, persist_dir: str | Path, part: str = "") -> None:
        """The BM25 children hold the generation published at ``persist_dir`` (each in
        its own folder of it), so processes that open it share their cached results."""
        for i, child in enumerate(self.retrievers):
            folder = f"{part}/{CHILD_FOLDER.format(i)}"
            if isinstance(child, (MultilingualBM25Retriever, HybridFusionRetriever)):
                child._published_at(persist_dir, folder)

    @classmethod
    def read_files(
        cls, folder: Path, embed_model: BaseEmbedding | None = None, **overrides: Any
    ) -> HybridFusionRetriever:
        """Load what :meth:`write_files` wrote into ``folder``."""
        data = read_config(folder)
        children = read_children(folder, data, child_kinds(HybridFusionRetriever), embed_model)
        try:
            hybrid = cls.from_dict(data, children, **overrides)
        except (TypeError, ValueError) as exc:
            raise PersistError(f"{folder / 'config.json'} holds invalid settings ({exc})") from exc
        source = data.get("vocabulary_child")
        if isinstance(source, int) and 0 <= source < len(children):
            hybrid.filter_vocabulary = FilterVocabulary.from_nodes(children[source].nodes)  # type: ignore[attr-defined]
        return hybrid


def _active(weights: Sequence[float]) -> list[int]:
    return [i for i, w in enumerate(weights) if w > 0]


__all__ = [
    "HYBRID_MODE",
    "HybridFusionRetriever",
    "ScoreDirection",
    "aretrieve_from_child",
    "retrieve_from_child",
    "script_key",
]
