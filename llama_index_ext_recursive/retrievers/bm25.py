"""Multilingual BM25: CJK-aware tokenization, per-call filters and top-k, faithful persistence.

Upstream ``BM25Retriever`` (llama-index-retrievers-bm25 0.8) tokenizes with
``(?u)\\b\\w\\w+\\b``, so an unspaced Chinese sentence is one token and any
sub-phrase query scores 0; it returns zero-score documents as filler, applies
filters only at construction, forgets its tokenizer on reload and scores on
the event loop in async code. :class:`MultilingualBM25Retriever` keeps the
upstream contract (``retrieve``/``aretrieve`` return ``NodeWithScore`` lists)
and fixes those points; its tokenizer is
:class:`~llama_index_ext_recursive.tokenizer.MultilingualTokenizer`.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import bm25s
import numpy as np
from llama_index.core.callbacks import CallbackManager
from llama_index.core.indices.vector_store.base import VectorStoreIndex
from llama_index.core.schema import BaseNode, IndexNode, MetadataMode, NodeWithScore, QueryBundle
from llama_index.core.storage.docstore.types import BaseDocumentStore
from llama_index.core.vector_stores.types import MetadataFilters
from llama_index.retrievers.bm25 import BM25Retriever

from llama_index_ext_recursive import steps
from llama_index_ext_recursive.cache.flow import cached
from llama_index_ext_recursive.cache.retrieval_cache import RetrievalCache, check_cache
from llama_index_ext_recursive.columnar.terms import Terms, index_tokens
from llama_index_ext_recursive.config import component_to_dict, init_parameters, type_name
from llama_index_ext_recursive.filters import (
    FilterPolicy,
    FiltersLike,
    FilterVocabulary,
    UnknownFilterPolicy,
    answered_by_equality,
    equality_constraints,
    filterable_metadata,
    metadata_matcher,
    to_filters,
)
from llama_index_ext_recursive.persist import published_directory, read_index, write_index
from llama_index_ext_recursive.query import DEFAULT_TOP_K, Call, QueryCheckingRetriever, resolve_call
from llama_index_ext_recursive.results import unexplained
from llama_index_ext_recursive.retrievers.bm25_persist import (
    read_bm25_files,
    settings_from_config,
    write_bm25_files,
)
from llama_index_ext_recursive.retrievers.nodes import refuse_duplicate_ids
from llama_index_ext_recursive.tokenizer import (
    CHINESE_STOPWORDS,
    ENGLISH_STOPWORDS,
    LATIN_TOKEN,
    MultilingualTokenizer,
)
from llama_index_ext_recursive.validation import check_count, json_nodes

logger = logging.getLogger(__name__)


def _quiet_bm25s() -> None:
    """Keep bm25s's per-index DEBUG/INFO lines out of the app's logs, unless asked for.

    ``import bm25s`` sets the ``bm25s`` logger to DEBUG itself, so every
    record it emits ("Building index from tokens" per index, "The query is
    empty" per query) passes the logger and reaches any root handler of an app
    logging at DEBUG or INFO (``logging.basicConfig(level=logging.INFO)``, the
    CLI's ``--verbose``). Only that level, bm25s's own, is replaced by
    WARNING; a level the app set on ``bm25s`` is kept, and setting one later
    (``logging.getLogger("bm25s").setLevel(logging.DEBUG)``) brings them back.
    """
    bm25s_logger = logging.getLogger("bm25s")
    if bm25s_logger.level == logging.DEBUG:
        bm25s_logger.setLevel(logging.WARNING)


_quiet_bm25s()

PERSIST_KIND = "MultilingualBM25Retriever"  # names the index kind in its folder's manifest

_NO_ROWS = np.zeros(0, dtype=np.int64)
# added and removed rows (with_changes) are kept as segments until they pass this
# share of the main segment's rows; then the segments are merged into one bm25s index
COMPACT_SHARE = 0.1
_NO_TOKEN = "\x00"  # stands in for the words of a corpus that has none


class MultilingualBM25Retriever(QueryCheckingRetriever, BM25Retriever):
    """BM25 over :class:`MultilingualTokenizer` tokens, with per-call filters and top-k.

    Differences from upstream ``BM25Retriever``: CJK text is tokenized; nodes
    scoring 0 are never returned; filters from a ``FilteredQueryBundle`` are
    combined with the construction-time ``filters`` under ``filter_policy``
    and applied before top-k (all documents are scored, non-matching ones
    masked, so the filtered top-k is exact and nothing filtered out leaks); a
    bundle's ``top_k`` replaces ``similarity_top_k`` for that call;
    ``similarity_top_k`` is never changed (fewer results come back when fewer
    match); ``persist`` / ``from_persist_dir`` keep the tokenizer settings;
    ``aretrieve`` scores in a worker thread.

    Args:
        nodes: Nodes to index (at least one).
        similarity_top_k: Maximum number of results per query.
        tokenizer: Tokenizer; defaults to ``MultilingualTokenizer(language)``.
        language: Language for the default tokenizer (ignored with ``tokenizer``).
        filters: Construction-time filters (``MetadataFilters`` or ``{key: value}``).
        filter_policy: ``merge`` (per-call filters ANDed with ``filters``,
            the default) or ``replace`` (per-call filters, when given, replace them).
        unknown_filter_key: what a filter on a key no node holds, or with a
            value of the wrong type, does (:class:`UnknownFilterPolicy`):
            ``raise`` (default) a ``FilterError`` naming the closest key,
            ``warn`` and search anyway, or ``None`` (not checked: for a
            wrapping retriever that checked already).
        metadata_mode: Which metadata is indexed with the text (as upstream: EMBED).
        callback_manager: LlamaIndex callback manager.
        cache: a :class:`~llama_index_ext_recursive.cache.RetrievalCache` for
            results: a repeated query (same text, filters in force, k and
            settings) is answered from it. A retriever never changes (an update
            makes a new one, :meth:`with_changes`), so its results are keyed by
            :attr:`content_name`, which names what it holds.
        verbose: Log per-query details.
        existing_bm25: A prebuilt ``bm25s.BM25`` over ``nodes`` (used when loading).
        existing_terms: The term statistics of ``existing_bm25``
            (:class:`~llama_index_ext_recursive.columnar.terms.Terms`),
            which let it be updated without tokenising every node again.
        objects, object_map: as upstream (``IndexNode`` objects for recursive retrieval).
    """

    def __init__(
        self,
        nodes: Sequence[BaseNode],
        similarity_top_k: int = DEFAULT_TOP_K,
        tokenizer: MultilingualTokenizer | None = None,
        language: str = "auto",
        filters: FiltersLike = None,
        metadata_mode: MetadataMode = MetadataMode.EMBED,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
        existing_bm25: bm25s.BM25 | None = None,
        existing_terms: Terms | None = None,
        unknown_filter_key: UnknownFilterPolicy | str | None = UnknownFilterPolicy.RAISE,
        filter_policy: FilterPolicy | str = FilterPolicy.MERGE,
        objects: list[IndexNode] | None = None,
        object_map: dict | None = None,
        cache: RetrievalCache | None = None,
    ) -> None:
        check_count("similarity_top_k", similarity_top_k)
        check_cache(cache)
        nodes = json_nodes(nodes or [])  # filters see plain numbers; bad metadata named before tokenizing
        if not nodes:
            raise ValueError("MultilingualBM25Retriever needs at least one node to index")
        refuse_duplicate_ids(nodes)
        unknown = None if unknown_filter_key is None else UnknownFilterPolicy(unknown_filter_key)
        policy = FilterPolicy(filter_policy)
        tokenizer = tokenizer or MultilingualTokenizer(language=language)
        metadata_mode = MetadataMode(metadata_mode)
        bm25, terms = self._index_nodes(nodes, tokenizer, metadata_mode, existing_bm25, existing_terms)
        # The parent is given the index built here, so it tokenizes nothing;
        # it would lower similarity_top_k (with a warning) to the node count,
        # which this class never does, hence the min() and the reset below.
        super().__init__(
            existing_bm25=bm25,
            stemmer=tokenizer.stemmer,
            skip_stemming=not tokenizer.stem,
            token_pattern=LATIN_TOKEN.pattern,
            similarity_top_k=min(similarity_top_k, len(nodes)),
            callback_manager=callback_manager,
            objects=objects,
            object_map=object_map,
            verbose=verbose,
        )
        self.similarity_top_k = similarity_top_k
        self.tokenizer = tokenizer
        self.metadata_mode = metadata_mode
        self.filters = to_filters(filters)
        self.filter_policy = policy
        self.unknown_filter_key = unknown
        self.nodes: list[BaseNode] = nodes
        self.cache = cache
        self.content_name = _new_content_name()
        self._vocabulary: FilterVocabulary | None = None
        self._postings_cache: dict[str, dict[Any, np.ndarray] | None] = {}
        self._last_scores: tuple[tuple[str, ...], np.ndarray] | None = None
        # what the bm25s index was computed from, and the segments added and
        # removed since (with_changes); None: not known (a previous release's folder)
        self._terms: Terms | None = terms
        self._row_of: dict[str, int] | None = None
        self._base_mask = self._mask(self.filters)
        if self._base_mask is not None and not self._base_mask.any():
            logger.warning("construction-time filters match none of the %d nodes", len(nodes))

    @staticmethod
    def _index_nodes(
        nodes: list[BaseNode],
        tokenizer: MultilingualTokenizer,
        metadata_mode: MetadataMode,
        existing_bm25: bm25s.BM25 | None,
        existing_terms: Terms | None,
    ) -> tuple[bm25s.BM25, Terms | None]:
        """The bm25s index of ``nodes`` and its term statistics (``existing_bm25``
        and ``existing_terms`` when given, checked)."""
        if existing_bm25 is not None:
            num_docs = int(existing_bm25.scores.get("num_docs", -1))
            if num_docs != len(nodes):
                raise ValueError(f"existing_bm25 indexes {num_docs} documents but {len(nodes)} nodes were given")
            if existing_terms is not None and (
                existing_terms.changed
                or len(existing_terms.lengths) != num_docs
                or existing_terms.vocab != existing_bm25.vocab_dict
            ):
                raise ValueError("existing_terms are not the term statistics of existing_bm25")
            return existing_bm25, existing_terms
        corpus_tokens = [tokenizer(node.get_content(metadata_mode=metadata_mode)) for node in nodes]
        if not any(corpus_tokens):
            # bm25s cannot index a corpus without a single token (only
            # stopwords or punctuation); no query tokenizes to this one
            logger.warning("none of the %d nodes has an indexable word; BM25 finds nothing", len(nodes))
            corpus_tokens = [[_NO_TOKEN] for _ in corpus_tokens]
        return index_tokens(corpus_tokens)

    # -- updates: segments (a delta and tombstones), merged past a share --
    def with_changes(self, add: Sequence[BaseNode], remove: Iterable[str]) -> MultilingualBM25Retriever:
        """A retriever over these nodes without ``remove`` (node ids) and with ``add``.

        This one is not changed (a query may be reading it). The new one shares
        its bm25s index as the main segment: removed rows become tombstones and
        the added nodes a delta segment (:class:`~llama_index_ext_recursive.columnar.terms.Terms`),
        scored with the statistics of the live rows, so its scores are those of
        a fresh build on its nodes, exactly. Cost: tokenising the added nodes;
        once the segments pass :data:`COMPACT_SHARE` of the main segment they
        are merged into one bm25s index from the kept term frequencies
        (no node is tokenised again). A retriever loaded from a previous
        release's folder, which holds no term frequencies, is indexed again
        from its nodes at its first change.

        Raises:
            ValueError: an id to remove is not indexed here, or an added id is.
        """
        add = list(add)
        remove = set(remove)
        row_of = self._rows()
        unknown = [node_id for node_id in remove if node_id not in row_of]
        if unknown:
            raise ValueError(f"cannot remove {sorted(unknown)[:5]}: not indexed by this BM25 retriever")
        clash = [n.node_id for n in add if n.node_id in row_of and n.node_id not in remove]
        if clash:
            raise ValueError(f"node ids {clash[:5]} are indexed already; remove them in the same change")
        terms = self._terms
        if terms is None or _NO_TOKEN in terms.vocab:
            # no statistics to update (an old folder), or a corpus that had no word at all
            logger.info("BM25: indexing %d nodes again from their text", len(row_of) - len(remove) + len(add))
            # (such a retriever has no segments: every change of it is a rebuild)
            return self._rebuilt([n for n in self.nodes if n.node_id not in remove] + add)
        terms = terms.with_rows(
            [self.tokenizer(n.get_content(metadata_mode=self.metadata_mode)) for n in add],
            [row_of[node_id] for node_id in remove],
        )
        nodes = self.nodes + add
        if terms.changes() > COMPACT_SHARE * terms.main_rows:
            return self._with_index(_live(nodes, terms), *terms.compacted())
        new = self._with_index(nodes, self.bm25, terms)
        new._postings_cache = self._postings_with(add)
        if self._vocabulary is not None:  # kept up to date by its counts instead of read from every node
            vocabulary = new._vocabulary = copy.deepcopy(self._vocabulary)
            vocabulary.remove_nodes([self.nodes[row_of[node_id]] for node_id in remove])
            vocabulary.add_nodes(add)
        new._row_of = {**row_of, **{n.node_id: len(self.nodes) + i for i, n in enumerate(add)}}
        for node_id in remove:
            del new._row_of[node_id]
        return new

    def _postings_with(self, add: list[BaseNode]) -> dict[str, dict[Any, np.ndarray] | None]:
        """The posting lists built so far with ``add`` appended as the next rows
        (a removed row may stay listed: it scores 0, so it is never returned)."""
        cache: dict[str, dict[Any, np.ndarray] | None] = {}
        for key, postings in self._postings_cache.items():
            if postings is None:
                cache[key] = None
                continue
            try:
                added = _value_rows(add, key, len(self.nodes))
            except TypeError:
                cache[key] = None
                continue
            merged = dict(postings)
            for value, rows in added.items():
                merged[value] = np.concatenate([merged.get(value, _NO_ROWS), np.asarray(rows, dtype=np.int64)])
            cache[key] = merged
        return cache

    @property
    def terms(self) -> Terms | None:
        """The term statistics under the bm25s index, with the segments of the
        updates since (``None``: not known, for an index loaded from a folder
        written before terms format 2)."""
        return self._terms

    def _rows(self) -> dict[str, int]:
        """Row of each live node id (built once, carried over by :meth:`with_changes`)."""
        if self._row_of is None:
            dead = None if self._terms is None else self._terms.dead
            self._row_of = {n.node_id: row for row, n in enumerate(self.nodes) if dead is None or not dead[row]}
        return self._row_of

    def _with_index(self, nodes: list[BaseNode], bm25: bm25s.BM25, terms: Terms) -> MultilingualBM25Retriever:
        """A copy of this retriever over ``nodes`` (rows of ``terms``), with the caches derived from nodes reset."""
        new = copy.copy(self)
        new.content_name = _new_content_name()
        new.nodes = nodes
        new.bm25 = bm25
        new._terms = terms
        new._row_of = None
        new._vocabulary = None
        new._postings_cache = {}
        new._last_scores = None
        new._base_mask = new._mask(new.filters)
        return new

    def _rebuilt(self, nodes: list[BaseNode]) -> MultilingualBM25Retriever:
        """A fresh index over ``nodes`` with these settings, tokenising them."""
        return type(self)(
            nodes=nodes,
            similarity_top_k=self.similarity_top_k,
            tokenizer=self.tokenizer,
            filters=self.filters,
            metadata_mode=self.metadata_mode,
            callback_manager=self.callback_manager,
            unknown_filter_key=self.unknown_filter_key,
            filter_policy=self.filter_policy,
            cache=self.cache,
        )

    def compacted(self) -> MultilingualBM25Retriever:
        """This retriever with its segments merged into one bm25s index (itself when
        it has none): the same scores, from the kept term frequencies."""
        terms = self._terms
        if terms is None or not terms.changed:
            return self
        return self._with_index(_live(self.nodes, terms), *terms.compacted())

    @classmethod
    def from_defaults(  # type: ignore[override]
        cls,
        index: VectorStoreIndex | None = None,
        nodes: Sequence[BaseNode] | None = None,
        docstore: BaseDocumentStore | None = None,
        similarity_top_k: int = DEFAULT_TOP_K,
        tokenizer: MultilingualTokenizer | None = None,
        language: str = "auto",
        filters: FiltersLike = None,
        verbose: bool = False,
        **kwargs: Any,
    ) -> MultilingualBM25Retriever:
        """Build from exactly one of ``index``, ``nodes`` or ``docstore``.

        Args:
            index: A vector index whose docstore holds the nodes.
            nodes: Nodes to index.
            docstore: A docstore whose documents are indexed.
            similarity_top_k: Maximum number of results per query (default 10).
            tokenizer: Tokenizer; defaults to ``MultilingualTokenizer(language)``.
            language: Language for the default tokenizer.
            filters: Construction-time filters, combined with per-call ones under ``filter_policy``.
            verbose: Log per-query details.
            **kwargs: Passed to the constructor (``filter_policy``, ``metadata_mode``,
                ``callback_manager``, ...).
        """
        if sum(value is not None for value in (index, nodes, docstore)) != 1:
            raise ValueError("Pass exactly one of index, nodes or docstore.")
        if index is not None:
            docstore = index.docstore
        if docstore is not None:
            nodes = cast(list[BaseNode], list(docstore.docs.values()))
        return cls(
            nodes=cast(Sequence[BaseNode], nodes),
            similarity_top_k=similarity_top_k,
            tokenizer=tokenizer,
            language=language,
            filters=filters,
            verbose=verbose,
            **kwargs,
        )

    # -- scoring -------------------------------------------------------
    def _mask(self, filters: MetadataFilters | None) -> np.ndarray | None:
        """Boolean mask of nodes passing ``filters`` (``None``: no filtering).

        Equality and ``IN`` conditions ANDed at the top (a routed document's
        ``ref_doc_id``, a category) first narrow the candidates through an
        inverted index; only those are checked exactly, so a per-document
        filter costs the document's nodes, not the corpus.
        """
        if filters is None or not filters.filters:
            return None
        mask = np.zeros(len(self.nodes), dtype=bool)
        candidates, complete = self._candidates(filters)
        if candidates is not None and complete and answered_by_equality(filters):
            mask[candidates] = True  # the postings are the exact answer
            return mask
        matches = metadata_matcher(filters)
        rows = range(len(self.nodes)) if candidates is None else candidates.tolist()
        for row in rows:
            mask[row] = bool(matches(filterable_metadata(self.nodes[row])))
        return mask

    def _candidates(self, filters: MetadataFilters) -> tuple[np.ndarray | None, bool]:
        """Rows that can satisfy the top-level equality conditions (``None``:
        all), and whether every condition was looked up in a posting list."""
        rows: np.ndarray | None = None
        complete = True
        for key, values in equality_constraints(filters):
            postings = self._postings(key)
            if postings is None or any(value is None for value in values):
                complete = False
                continue
            try:
                hits = [postings.get(value, _NO_ROWS) for value in values]
            except TypeError:  # an unhashable filter value: check every row
                complete = False
                continue
            found = np.unique(np.concatenate(hits)) if hits else _NO_ROWS
            rows = found if rows is None else np.intersect1d(rows, found, assume_unique=True)
        return rows, complete

    def _postings(self, key: str) -> dict[Any, np.ndarray] | None:
        """``value -> rows`` for ``key``, built once (``None`` if a value is unhashable)."""
        cache = self._postings_cache
        if key not in cache:
            try:
                cache[key] = {v: np.asarray(r, dtype=np.int64) for v, r in _value_rows(self.nodes, key, 0).items()}
            except TypeError:  # a list or dict value: equality cannot use an index
                cache[key] = None
        return cache[key]

    def _score_all(self, query_tokens: list[str]) -> np.ndarray:
        """BM25 score of every indexed node for ``query_tokens`` (CPU-bound).

        The last query's scores are kept: a recursive retrieval asks the same
        query flat and then inside its routed documents, and scores it once.
        """
        key = tuple(query_tokens)
        last = self._last_scores  # one tuple, read and replaced atomically
        if last is not None and last[0] == key:
            return last[1]
        terms = self._terms
        if terms is not None and terms.changed:
            scores = terms.scores(self.bm25, query_tokens)  # segments: live statistics, removed rows 0
        else:
            ids = self.bm25.get_tokens_ids(query_tokens)
            if not ids:
                scores = np.zeros(len(self.nodes), dtype=np.float32)
            else:
                scores = np.asarray(self.bm25.get_scores_from_ids(ids), dtype=np.float32)
        scores.setflags(write=False)  # shared by callers: nobody may modify it
        self._last_scores = (key, scores)
        return scores

    @property
    def filter_vocabulary(self) -> FilterVocabulary:
        """Metadata keys (and value kinds) of the indexed nodes (removed ones
        excluded), which filters are checked against; shared, not to be changed."""
        if self._vocabulary is None:
            self._vocabulary = FilterVocabulary.from_nodes(
                _live(self.nodes, self._terms) if self._terms else self.nodes
            )
        return self._vocabulary

    def _resolve(self, query_bundle: QueryBundle) -> Call:
        """The call's filters (under ``filter_policy``, checked) and k."""
        return resolve_call(
            query_bundle,
            filters=self.filters,
            filter_policy=self.filter_policy,
            top_k=self.similarity_top_k,
            vocabulary=None if self.unknown_filter_key is None else self.filter_vocabulary,
            unknown_filter_key=self.unknown_filter_key or UnknownFilterPolicy.RAISE,
        )

    def _ranked_rows(self, call: Call, top_k: int) -> tuple[np.ndarray, np.ndarray]:
        """Rows of the best ``top_k`` nodes matching the call's filters, and all nodes' scores."""
        tokens = self.tokenizer(call.bundle.query_str)
        # the construction-time filters' mask is computed once, in __init__
        mask = self._base_mask if call.filters is self.filters else self._mask(call.filters)
        if not tokens or (mask is not None and not mask.any()):
            return _NO_ROWS, np.zeros(0, dtype=np.float32)
        scores = self._score_all(tokens)
        eligible = scores > 0
        if mask is not None:
            eligible &= mask
        candidates = np.flatnonzero(eligible)
        # descending score, ties by corpus order (stable, deterministic)
        order = candidates[np.argsort(-scores[candidates], kind="stable")][:top_k]
        if self._verbose:
            logger.info("bm25 query tokens=%s matches=%d returned=%d", tokens, len(candidates), len(order))
        return order, scores

    def scores_by_id(self, query_bundle: QueryBundle, top_k: int | None = None) -> dict[str, float]:
        """``node_id -> score`` of the best matches, best first, without building
        result objects: for callers that fuse scores and keep only a few nodes.

        Filters and k as in :meth:`retrieve`; ``top_k`` overrides the bundle's.
        """
        call = self._resolve(query_bundle)
        rows, scores = self._ranked_rows(call, top_k or call.top_k)
        return {self.nodes[i].node_id: float(scores[i]) for i in rows}

    def _results(self, call: Call) -> list[NodeWithScore]:
        rows, scores = self._ranked_rows(call, call.top_k)
        return [unexplained(self.nodes[i], float(scores[i])) for i in rows]

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return steps.run(self._answer(query_bundle))

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return await steps.arun(self._answer(query_bundle))

    def _answer(self, query_bundle: QueryBundle) -> steps.Steps[list[NodeWithScore]]:
        """The call's results: cached, else scored (and kept). Resolving may build the
        filter vocabulary (a pass over every node) and scoring reads every row: both run
        off the event loop in async code."""
        (call,) = yield (_Blocking(self._resolve, query_bundle),)
        key = self._results_key(call)

        def scored() -> steps.Steps[tuple[str | None, list[NodeWithScore]]]:
            (hits,) = yield (_Blocking(self._results, call),)
            return key, hits

        return (yield from cached(self.cache, "results", key, scored))

    def _results_key(self, call: Call) -> str | None:
        """The key of the call's results: this retriever's content and settings, the exact
        query, the filters in force and k (``None``: no results cache)."""
        if self.cache is None or not self.cache.results:
            return None
        return self.cache.key(
            "results",
            {
                "retriever": type_name(type(self)),
                "content": self.content_name,
                "settings": self.to_dict()["init_parameters"],
                "query": call.bundle.query_str,
                "filters": None if call.filters is None else call.filters.model_dump(mode="json"),
                "top_k": call.top_k,
            },
        )

    # -- configuration and persistence ---------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The settings as a configuration dict (:mod:`llama_index_ext_recursive.config`).

        The nodes are data, not settings: :meth:`from_dict` takes them again.
        """
        return component_to_dict(
            self,
            similarity_top_k=self.similarity_top_k,
            metadata_mode=self.metadata_mode.value,
            tokenizer=self.tokenizer.to_dict(),
            filters=self.filters.model_dump(mode="json") if self.filters is not None else None,
            filter_policy=self.filter_policy.value,
            unknown_filter_key=(self.unknown_filter_key.value if self.unknown_filter_key is not None else None),
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any], nodes: Sequence[BaseNode], **overrides: Any) -> MultilingualBM25Retriever:
        """A retriever over ``nodes`` with the settings of :meth:`to_dict` (``overrides`` win).

        Raises:
            ValueError: ``data`` is not a configuration of this class, or holds invalid settings.
        """
        return cls(nodes=nodes, **{**settings_from_config(init_parameters(cls, data)), **overrides})

    def get_persist_args(self) -> dict[str, Any]:
        """The settings :meth:`persist` writes (upstream's name for them)."""
        return self.to_dict()["init_parameters"]

    def persist(self, path: str | Path, **kwargs: Any) -> None:  # type: ignore[override]
        """Write index, nodes and settings (``config.json``) to the index folder ``path``.

        ``path`` must be missing, empty, or hold a BM25 index persisted earlier
        (which is replaced atomically: a crash leaves the old or the new one);
        anything else is refused (see :func:`~llama_index_ext_recursive.persist.write_index`).

        Args:
            path: The index folder.
            **kwargs: Passed to ``bm25s.BM25.save``.

        Raises:
            PersistError: ``path`` holds something else (it is left untouched).
        """
        with write_index(path, PERSIST_KIND) as staging:
            self.write_files(staging, **kwargs)
        self._published_at(path)

    def write_files(self, folder: Path, **kwargs: Any) -> None:
        """Write this retriever's files into ``folder`` (for a component that
        persists it inside its own index folder, as the hybrid does); a
        retriever with updates (:meth:`with_changes`) writes its segments merged."""
        merged = self.compacted()
        write_bm25_files(folder, merged.bm25, merged.terms, merged.nodes, merged.to_dict(), **kwargs)

    @classmethod
    def from_persist_dir(  # type: ignore[override]
        cls, path: str | Path, **kwargs: Any
    ) -> MultilingualBM25Retriever:
        """Load a retriever written by :meth:`persist` (or by the previous releases).

        Every file is checked against the folder's manifest (size and sha256)
        and for its shape, and the files against each other.

        Args:
            path: The index folder.
            **kwargs: Constructor overrides (e.g. ``similarity_top_k``, ``callback_manager``).

        Raises:
            PersistError: the folder holds no BM25 index, or a file is missing,
                truncated, modified or malformed (the message names it).
        """
        retriever = read_index(path, PERSIST_KIND, lambda folder: cls.read_files(folder, **kwargs))
        retriever._published_at(path)
        return retriever

    def _published_at(self, path: str | Path, part: str = "") -> None:
        """This retriever holds the generation published at ``path`` (``part``: the folder
        inside it, for a retriever persisted within another's index): every process that
        opens that generation holds the same content, so they share cached results."""
        published = published_directory(path)
        if published is not None:
            self.content_name = f"{PERSIST_KIND}:{published}{part}"

    @classmethod
    def read_files(cls, folder: Path, **overrides: Any) -> MultilingualBM25Retriever:
        """Load what :meth:`write_files` wrote into ``folder`` (or a previous
        release's ``retriever.json`` layout)."""
        data, settings = read_bm25_files(cls, folder)
        return cls(**data, **{**settings, **overrides})


def _new_content_name() -> str:
    """A name no other content has: this process's retriever until it is persisted and opened."""
    return uuid.uuid4().hex


@dataclass(frozen=True)
class _Blocking:
    """``function(argument)``: in the calling thread, or async in a worker thread."""

    function: Callable[[Any], Any]
    argument: Any

    def run(self) -> Any:
        return self.function(self.argument)

    async def arun(self) -> Any:
        return await asyncio.to_thread(self.function, self.argument)


def _value_rows(nodes: Sequence[BaseNode], key: str, first: int) -> dict[Any, list[int]]:
    """``value -> rows`` of ``key`` over ``nodes`` numbered from ``first``.

    Raises:
        TypeError: a value is unhashable (a list or dict: no posting list can hold it).
    """
    lists: dict[Any, list[int]] = {}
    for row, node in enumerate(nodes, start=first):
        value = filterable_metadata(node).get(key)
        if value is not None:
            lists.setdefault(value, []).append(row)
    return lists


def _live(nodes: list[BaseNode], terms: Terms) -> list[BaseNode]:
    """``nodes`` without the rows ``terms`` marks removed (the rows of a compacted index)."""
    dead = terms.dead
    return list(nodes) if dead is None else [n for row, n in enumerate(nodes) if not dead[row]]


__all__ = [
    "CHINESE_STOPWORDS",
    "ENGLISH_STOPWORDS",
    "MultilingualBM25Retriever",
    "MultilingualTokenizer",
]
