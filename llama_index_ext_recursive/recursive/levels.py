"""The searchers of a recursive retriever's two levels, built once per index state.

:func:`build_levels` makes every child retriever a query may use (the dense
summary and chunk searchers, the BM25 levels, the hybrid searchers of the
``chunk``/``weighted``/``product`` score modes) from the index and the
retriever's settings, and calibrates hybrid levels that have no weights yet.
A retriever builds them on first need; after the index changed
(:attr:`RecursiveIndex.generation`) it updates them with the changed documents
only (:func:`levels_for`), never per query: per-call filters and ``top_k``
travel in the bundle each child receives. A level whose store keeps a BM25
column (a ``ColumnarVectorStore`` with a tokenizer) is searched lexically by
that store (:class:`StoreBM25Retriever`), which an update has changed already,
so nothing is re-indexed for it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.indices.vector_store import VectorStoreIndex
from llama_index.core.schema import BaseNode, IndexNode, MetadataMode

from llama_index_ext_recursive.recursive.build import DocumentRecord
from llama_index_ext_recursive.recursive.index import document_search_text
from llama_index_ext_recursive.recursive.settings import LevelMode, Owner, ScoreMode
from llama_index_ext_recursive.retrievers.bm25 import MultilingualBM25Retriever
from llama_index_ext_recursive.retrievers.calibrate import PairsByScript, calibrate_children, pseudo_queries
from llama_index_ext_recursive.retrievers.calibration import Calibration
from llama_index_ext_recursive.retrievers.fusion import HybridFusionRetriever
from llama_index_ext_recursive.retrievers.hybrid import CROSS_SCRIPT_WEIGHTS, HYBRID_NAMES, hybrid_retriever
from llama_index_ext_recursive.retrievers.store_bm25 import StoreBM25Retriever
from llama_index_ext_recursive.retrievers.vector import BackfillVectorRetriever
from llama_index_ext_recursive.stores.protocol import LevelStore
from llama_index_ext_recursive.text import QueryScript

# a level's BM25: in memory, or the BM25 column of its ColumnarVectorStore
LexicalLevel = MultilingualBM25Retriever | StoreBM25Retriever

# a change to more than this share of the documents rebuilds the levels instead of updating them
UPDATE_SHARE = 0.1


@dataclass
class Levels:
    """What one index state is searched with.

    Attributes:
        generation: the :attr:`RecursiveIndex.generation` these were built for.
        summary_vector: dense search over the summaries (routing vectors).
        chunk_vector: dense search over all chunks (``None``: ``retriever_dict``).
        summary_bm25: BM25 over each document's title, metadata, summary and
            chunks (``None``: that level is vector-only).
        chunk_bm25: BM25 over the chunks (``None``: vector-only).
        summary_search: the hybrid or BM25 searcher of ``chunk``/``weighted``/
            ``product`` modes (``None``: dense only, or ``fused`` mode).
        chunk_search: likewise for chunks.
        chunk_doc: chunk id -> document id (``None``: ``chunk_store`` is asked).
        link_ids: chunks that are IndexNodes (followed, not ranked).
        summary_doc: summary node id -> document id (``None``: ``summary_store`` is asked).
        records: the index's document records these were built from (the
            index makes new ones at every update: these stay as they were).
        chunk_store: a columnar chunk store, which knows each chunk's document
            (a map of 2M chunk ids would cost hundreds of MB and a pass over
            every record).
        summary_store: likewise, a columnar summary store (each summary's
            ``ref_doc_id`` is its document).
    """

    generation: int
    summary_vector: BackfillVectorRetriever
    chunk_vector: BackfillVectorRetriever | None
    summary_bm25: LexicalLevel | None  # fused mode reads its scores_by_id
    chunk_bm25: LexicalLevel | None
    summary_search: BaseRetriever | None
    chunk_search: BaseRetriever | None
    chunk_doc: dict[str, str] | None
    link_ids: frozenset
    summary_doc: dict[str, str] | None
    records: Mapping[str, DocumentRecord]
    chunk_store: LevelStore | None = None
    summary_store: LevelStore | None = None

    def owners_of(self, node_ids: Iterable[str]) -> dict[str, str]:
        """The document of each chunk id (``""``: a chunk the index does not hold)."""
        ids = list(dict.fromkeys(node_ids))
        if self.chunk_doc is not None:
            return {node_id: self.chunk_doc.get(node_id, "") for node_id in ids}
        assert self.chunk_store is not None
        return {node_id: doc_id or "" for node_id, doc_id in zip(ids, self.chunk_store.ref_doc_ids(ids), strict=True)}

    def documents_of_summaries(self, node_ids: Sequence[str]) -> list[str | None]:
        """The document of each summary node id (``None``: not a summary the index holds)."""
        if self.summary_doc is not None:
            return [self.summary_doc.get(node_id) for node_id in node_ids]
        assert self.summary_store is not None
        return [
            doc_id if doc_id is not None and doc_id in self.records else None
            for doc_id in self.summary_store.ref_doc_ids(node_ids)
        ]


def document_nodes(owner: Owner, doc_ids: Iterable[str] | None = None) -> list[IndexNode]:
    """One node per document for summary-level BM25 (:func:`document_text`:
    title, document-level metadata, summary, chunks); ids and ``index_id``
    as the summary's, so hits route. ``doc_ids``: only these (default: all)."""
    index = owner.index
    docstore = index.docstore
    nodes = []
    for doc_id in index.summaries if doc_ids is None else doc_ids:
        summary = index.summaries[doc_id]
        record = index.documents.get(doc_id)
        chunks = []
        if docstore is not None and record is not None:
            for chunk_id in record.chunk_ids:
                chunk = docstore.get_node(chunk_id, raise_error=False)
                if chunk is not None:
                    chunks.append(chunk.get_content(metadata_mode=MetadataMode.NONE))
        nodes.append(
            IndexNode(
                id_=summary.node_id,
                index_id=doc_id,
                text=document_search_text(doc_id, record, summary, chunks),
                metadata=dict(summary.metadata),
                excluded_embed_metadata_keys=list(summary.metadata),
            )
        )
    return nodes


def levels_for(owner: Owner, previous: Levels | None) -> Levels:
    """The levels of the index's current state: ``previous`` brought up to date
    when few documents changed since it was built (:func:`updated_levels`), else
    built anew (:func:`build_levels`)."""
    if previous is not None:
        updated = updated_levels(owner, previous)
        if updated is not None:
            return updated
    return build_levels(owner)


def updated_levels(owner: Owner, previous: Levels) -> Levels | None:
    """``previous`` with the documents changed since it was built re-indexed, and
    nothing else: the BM25 levels take the changed documents' nodes
    (:meth:`~llama_index_ext_recursive.retrievers.bm25.MultilingualBM25Retriever.with_changes`),
    the id maps are edited, the cheap wrappers are made again. ``None`` when a
    full build is due: more than :data:`UPDATE_SHARE` of the documents changed,
    or a level has no BM25 of the package's own."""
    index = owner.index
    if index.database is not None:  # live records, and levels that are the database's: rebuilt (cheap)
        return None
    before, now = previous.records, index.documents
    touched = index.changed_since(previous.generation)
    if touched is None:
        return None
    changed = [d for d in touched if before.get(d) != now.get(d)]
    if not changed:
        return dataclasses.replace(previous, generation=index.generation, records=now)
    if len(changed) > UPDATE_SHARE * max(len(now), 1) or index.docstore is None:
        return None

    for bm25 in (previous.summary_bm25, previous.chunk_bm25):
        if bm25 is not None and not isinstance(bm25, (MultilingualBM25Retriever, StoreBM25Retriever)):
            return None
    gone_chunks = [c for d in changed if d in before for c in before[d].chunk_ids]
    gone_summaries = [before[d].summary_node_id for d in changed if d in before]
    kept = [d for d in changed if d in now]
    new_chunks = [n for n in index.docstore.get_nodes([c for d in kept for c in now[d].chunk_ids])]
    summary_bm25, chunk_bm25 = previous.summary_bm25, previous.chunk_bm25
    # a StoreBM25Retriever searches its store, which the update changed already
    if isinstance(summary_bm25, MultilingualBM25Retriever):
        summary_bm25 = summary_bm25.with_changes(
            document_nodes(owner, [d for d in kept if d in index.summaries]), gone_summaries
        )
    if isinstance(chunk_bm25, MultilingualBM25Retriever):
        chunk_bm25 = chunk_bm25.with_changes(new_chunks, gone_chunks)
    chunk_doc = None
    if previous.chunk_doc is not None:
        chunk_doc = dict(previous.chunk_doc)
        for chunk_id in gone_chunks:
            chunk_doc.pop(chunk_id, None)
        chunk_doc.update({c: d for d in kept for c in now[d].chunk_ids})
    summary_doc = None
    if previous.summary_doc is not None:
        gone = set(gone_summaries)
        summary_doc = {k: v for k, v in previous.summary_doc.items() if k not in gone}
        summary_doc.update({node_id: d for d in kept if (node_id := index.summary_node_id(d)) is not None})
    links = (previous.link_ids - set(gone_chunks)) | {n.node_id for n in new_chunks if isinstance(n, IndexNode)}
    depth = owner.document_depth(owner.similarity_top_k)
    summary_vector = _vector(owner, index.summary_index, depth)
    chunk_vector = _vector(owner, index.chunk_index, owner.similarity_top_k) if index.chunk_index is not None else None
    return _assemble(
        owner, summary_bm25, chunk_bm25, depth, summary_vector, chunk_vector, chunk_doc, frozenset(links), summary_doc
    )


def build_levels(owner: Owner) -> Levels:
    """Every searcher ``owner`` needs for its index's current state (see :class:`Levels`)."""

    index = owner.index
    depth = owner.document_depth(owner.similarity_top_k)
    chunks = _Chunks(index.chunk_index)
    summary_vector = _vector(owner, index.summary_index, depth)
    chunk_vector = _vector(owner, index.chunk_index, owner.similarity_top_k) if index.chunk_index is not None else None
    summary_bm25: LexicalLevel | None = None
    chunk_bm25: LexicalLevel | None = None
    if owner.summary_mode != LevelMode.VECTOR and index.summaries:
        summary_bm25 = _store_bm25(index.summary_index, depth) or MultilingualBM25Retriever.from_defaults(
            nodes=document_nodes(owner),
            similarity_top_k=depth,
            metadata_mode=MetadataMode.NONE,  # document_text holds the metadata
            unknown_filter_key=None,  # checked by the retriever's resolve_call
        )
    if owner.chunk_mode != LevelMode.VECTOR and chunks.count:
        assert index.chunk_index is not None  # chunks come from its store
        chunk_bm25 = _store_bm25(index.chunk_index, owner.similarity_top_k) or MultilingualBM25Retriever.from_defaults(
            nodes=chunks.nodes(), similarity_top_k=owner.similarity_top_k, unknown_filter_key=None
        )
    calibration = owner._calibration
    if "documents" not in calibration and owner.summary_mode == LevelMode.HYBRID and summary_bm25:
        calibration["documents"] = _calibrate_documents(owner, summary_vector, summary_bm25, chunks.sample())
    # chunk_bm25 means chunks, so a chunk index and its chunk_vector
    if "chunks" not in calibration and owner.chunk_mode == LevelMode.HYBRID and chunk_bm25 and chunk_vector is not None:
        calibration["chunks"] = calibrate_children(
            [chunk_vector, chunk_bm25],
            chunks.sample(),
            embed_model=index.embed_model,
            show_progress=owner._show_progress,
            names=list(HYBRID_NAMES),
            absent_script_weights=CROSS_SCRIPT_WEIGHTS,
        )
    return _assemble(
        owner,
        summary_bm25,
        chunk_bm25,
        depth,
        summary_vector,
        chunk_vector,
        chunk_doc=None
        if chunks.store is not None
        else {c: r.doc_id for r in index.documents.values() for c in r.chunk_ids},
        link_ids=chunks.link_ids(),
        summary_doc=None
        if _level_store(index.summary_index) is not None
        else {node_id: doc_id for doc_id in index.summaries if (node_id := index.summary_node_id(doc_id))},
    )


CALIBRATION_POOL = 20_000  # chunks of a columnar store calibration samples its pseudo-queries from


class _Chunks:
    """What the levels read of the chunk level: its size, its links, nodes to calibrate on.

    A docstore in memory is read once, whole. A columnar store is not read
    whole at all: its size and links are known without a node, and
    calibration (which cuts :data:`~llama_index_ext_recursive.retrievers.calibrate.DEFAULT_CALIBRATION_SAMPLES`
    pseudo-queries per script) reads every chunk up to :data:`CALIBRATION_POOL`
    chunks, beyond it that many chunks evenly spaced over the rows.
    """

    def __init__(self, chunk_index: VectorStoreIndex | None) -> None:
        self.store = _level_store(chunk_index)
        self._nodes: list[BaseNode] | None = None
        self._sampled = False
        if self.store is None:
            self._nodes = list(chunk_index.docstore.docs.values()) if chunk_index is not None else []
        self.count = self.store.node_count if self.store is not None else len(self._nodes or [])

    def sample(self) -> list[BaseNode]:
        """The chunks calibration cuts pseudo-queries from (read once, kept for both levels)."""
        if self._nodes is None:
            assert self.store is not None
            ids = self.store.live_node_ids()
            if len(ids) > CALIBRATION_POOL:
                ids = [ids[i] for i in np.linspace(0, len(ids) - 1, CALIBRATION_POOL).astype(int)]
            self._sampled = True
            self._nodes = [node for node in self.store.nodes_by_id(ids) if node is not None]
        return self._nodes

    def nodes(self) -> list[BaseNode]:
        """Every chunk: for a level in memory, or an in-memory BM25 over a columnar store
        created without a tokenizer (which then reads every chunk once)."""
        if self._nodes is None or self._sampled:
            assert self.store is not None
            self._nodes = [n for n in self.store.nodes_by_id(self.store.live_node_ids()) if n is not None]
            self._sampled = False
        return self._nodes

    def link_ids(self) -> frozenset[str]:
        """Ids of the chunks that are ``IndexNode`` links."""
        if self.store is not None:
            return frozenset(self.store.link_targets())
        return frozenset(n.node_id for n in self.nodes() if isinstance(n, IndexNode))


def _level_store(store_index: VectorStoreIndex | None) -> LevelStore | None:
    """The level's store when it holds the level whole (a :class:`LevelStore`)."""
    store = store_index.vector_store if store_index is not None else None
    return store if isinstance(store, LevelStore) else None


def _store_bm25(store_index: VectorStoreIndex, top_k: int) -> StoreBM25Retriever | None:
    """The level's BM25 answered by its store's BM25 column (``None``: the store keeps none)."""
    store = store_index.vector_store
    if isinstance(store, LevelStore) and store.tokenizer is not None:
        return StoreBM25Retriever(store, similarity_top_k=top_k, unknown_filter_key=None)
    return None


def _assemble(
    owner: Owner,
    summary_bm25: LexicalLevel | None,
    chunk_bm25: LexicalLevel | None,
    depth: int,
    summary_vector: BackfillVectorRetriever,
    chunk_vector: BackfillVectorRetriever | None,
    chunk_doc: dict[str, str] | None,
    link_ids: frozenset,
    summary_doc: dict[str, str] | None,
) -> Levels:
    """The levels around given searchers; the hybrid searchers are wrappers, made each time."""
    index = owner.index
    summary_search = chunk_search = None
    if owner.score_mode != ScoreMode.FUSED:
        summary_search = _hybrid_level(owner, "documents", summary_bm25, depth)
        chunk_search = _hybrid_level(owner, "chunks", chunk_bm25, owner.similarity_top_k)
    return Levels(
        generation=index.generation,
        summary_vector=summary_vector,
        chunk_vector=chunk_vector,
        summary_bm25=summary_bm25,
        chunk_bm25=chunk_bm25,
        summary_search=summary_search,
        chunk_search=chunk_search,
        chunk_doc=chunk_doc,
        link_ids=link_ids,
        summary_doc=summary_doc,
        records=index.documents,
        chunk_store=_level_store(index.chunk_index),
        summary_store=_level_store(index.summary_index),
    )


def _vector(owner: Owner, store_index: VectorStoreIndex, top_k: int) -> BackfillVectorRetriever:
    return BackfillVectorRetriever(
        store_index,
        similarity_top_k=top_k,
        embed_model=owner.index.embed_model,
        callback_manager=owner.callback_manager,
        unknown_filter_key=None,  # checked by the retriever's resolve_call
    )


def _calibrate_documents(
    owner: Owner,
    dense: BaseRetriever,
    summary_bm25: BaseRetriever,
    chunk_nodes: list[BaseNode],
) -> Calibration:
    """Weights of the document level, from pseudo-queries cut from each
    document's chunks (from its summary in a ``retriever_dict`` setup)
    whose answer is that document."""
    index = owner.index
    source: list[BaseNode] = list(chunk_nodes)
    summary_of = {
        node.node_id: record.summary_node_id
        for node in source
        if (record := index.documents.get(node.ref_doc_id or "")) is not None
    }
    if not source:  # a retriever_dict setup: queries cut from the summaries, each answered by itself
        source = list(index.summaries.values())
        summary_of = {s.node_id: s.node_id for s in source}
    pairs: PairsByScript = {
        script: [(summary_of[node_id], query) for node_id, query in found if node_id in summary_of]
        for script, found in pseudo_queries(source).items()
    }
    return calibrate_children(
        [dense, summary_bm25],
        pairs,
        embed_model=index.embed_model,
        show_progress=owner._show_progress,
        names=list(HYBRID_NAMES),
        absent_script_weights=CROSS_SCRIPT_WEIGHTS,
    )


def _hybrid_level(
    owner: Owner,
    level: str,
    bm25: BaseRetriever | None,
    top_k: int,
) -> BaseRetriever | None:
    """The level searcher of the ``chunk``/``weighted``/``product`` modes: the
    level's BM25, or the package's one vector + BM25 hybrid with the level's
    calibrated weights."""
    mode = owner.summary_mode if level == "documents" else owner.chunk_mode
    if mode == LevelMode.VECTOR or bm25 is None:
        return None
    if mode == LevelMode.BM25:
        return bm25
    index = owner.index
    weights = owner._calibration.get(level)
    script_weights = {}
    if weights is not None:
        for script in QueryScript:
            found = weights.weights_for(script.value)
            if found is not None and any(w > 0 for w in found):
                script_weights[script] = list(found)
    return hybrid_retriever(
        HybridFusionRetriever,
        index.summary_index if level == "documents" else index.chunk_index,
        similarity_top_k=top_k,
        embed_model=index.embed_model,
        bm25=bm25,
        calibrate=False,  # the level's weights were measured above
        script_weights=script_weights,
    )
