"""``ColumnarVectorStore``: a LlamaIndex vector store over the columnar components.

The embedded store for indexes too large to hold as Python objects (issue 25).
Each node is one row, numbered in the order it was added, in three
components of :mod:`llama_index_ext_recursive.columnar` that share the row ids:

* :class:`~llama_index_ext_recursive.columnar.vectors.VectorColumn`: the unit
  float32 embedding per row, searched exactly (approximately with exact
  rescoring above its size threshold), restricted to the rows a filter allows;
* :class:`~llama_index_ext_recursive.columnar.metadata.MetadataColumns`: the
  metadata as dictionary-encoded columns, so a filter is a mask computed on
  codes. As in every store, filters also see each row's ``ref_doc_id`` under
  that key (:func:`~llama_index_ext_recursive.filters.filterable_metadata`),
  so a search routed to some documents is a filter like any other, and
  ``delete(ref_doc_id)`` and ``doc_ids=`` queries use the same masks;
* :class:`~llama_index_ext_recursive.columnar.rows.RowStore`: each node's JSON
  (text, metadata, relationships) in SQLite, read only for the rows a query
  returns;
* optionally (``tokenizer=``) :class:`~llama_index_ext_recursive.columnar.postings.Postings`:
  each row's BM25 terms, so the same rows answer keyword queries
  (:meth:`lexical_ids`, or ``VectorStoreQueryMode.TEXT_SEARCH``) under the
  same filters, and an update appends a segment instead of re-indexing.

So a query costs a filter mask, one search and the hydration of ``top_k``
nodes, and the store holds no Python object per row. ``stores_text`` is
``True``: ``VectorStoreIndex`` keeps no docstore copy of the chunks, and
:meth:`query_ids` (:class:`~llama_index_ext_recursive.stores.protocol.ScoredIdSearch`)
answers the recursive search's many intermediate searches without reading
any node.

Updates take the write side of one reader-writer lock; queries the read
side, so a query sees the store before or after an update, never a mix.
Adding a node whose id is already stored replaces it (as upstream's
``SimpleVectorStore`` does): the old row becomes a tombstone.

Persistence: a store given a folder opens the index published there and
:meth:`persist` publishes its changes as one new generation
(:func:`~llama_index_ext_recursive.persist.write_index`, only new segment
files written) with the rows committed to ``rows.sqlite3`` in the same
step (see ``docs/design/columnar.md``). Nodes added since the last persist
are held as JSON until it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import numpy as np
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.schema import BaseNode, IndexNode
from llama_index.core.storage.docstore.utils import json_to_doc
from llama_index.core.vector_stores.types import (
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryMode,
    VectorStoreQueryResult,
)

from llama_index_ext_recursive.columnar.metadata import MetadataColumns
from llama_index_ext_recursive.columnar.postings import Postings
from llama_index_ext_recursive.columnar.rows import RowStore, node_json
from llama_index_ext_recursive.columnar.rowsets import RowSet
from llama_index_ext_recursive.columnar.segments import read_state, write_state
from llama_index_ext_recursive.columnar.vectors import VectorColumn
from llama_index_ext_recursive.filters import FilterVocabulary, filterable_metadata
from llama_index_ext_recursive.persist import (
    ROWS_DATABASE,
    PathLike,
    PersistError,
    published_generation,
    read_index,
    write_index,
)
from llama_index_ext_recursive.rwlock import ReadWriteLock
from llama_index_ext_recursive.stores.protocol import REF_KEY, LevelStore
from llama_index_ext_recursive.tokenizer import MultilingualTokenizer
from llama_index_ext_recursive.validation import check_count

logger = logging.getLogger(__name__)

KIND = "ColumnarVectorStore"  # the index kind in a folder's manifest
FORMAT_VERSION = 2  # 2: ref_doc_id among the filterable metadata; an optional BM25 column
STATE = "store"  # store.state.json in each generation


# a finished build's BM25 segments hold up to this many rows each (merge_segments)
FINAL_POSTINGS_ROWS = 524_288


class ColumnarVectorStore(LevelStore):
    """Vector store whose rows live in columnar arrays and SQLite, not in Python objects.

    Args:
        path: the index folder: its published index is opened, and
            :meth:`persist` publishes there (``None``: in memory until
            :meth:`persist` is given a folder).
        approximate_threshold: live rows from which unrestricted searches use
            the approximate candidate step of
            :class:`~llama_index_ext_recursive.columnar.vectors.VectorColumn`.
        tokenizer: keep a BM25 column too, of the texts this tokenizer makes
            (``None``: none; a folder that has one keeps its own tokenizer, and
            a different one given here is refused).
        workers: processes that tokenise a large ``add`` (:func:`tokenize_texts`).
    """

    stores_text: bool = True
    is_embedding_query: bool = True
    flat_metadata: bool = False

    _folder: Path | None = PrivateAttr(default=None)
    _threshold: int = PrivateAttr(default=50_000)
    _vectors: VectorColumn | None = PrivateAttr(default=None)
    _metadata: MetadataColumns = PrivateAttr(default_factory=MetadataColumns)
    _rows: RowStore | None = PrivateAttr(default=None)
    _generation: int = PrivateAttr(default=0)
    _pending: dict[int, tuple[str, str | None, str]] = PrivateAttr(default_factory=dict)
    _pending_ids: dict[str, int] = PrivateAttr(default_factory=dict)
    _pending_deletes: set[int] = PrivateAttr(default_factory=set)
    # (generation, rows added, rows deleted) that write_part wrote and mark_published has not confirmed
    _written: tuple[int, frozenset[int], frozenset[int]] | None = PrivateAttr(default=None)
    # node id -> ref_doc_id of the rows searches returned lately, for ref_doc_ids (cleared by changes)
    _hit_refs: dict[str, str | None] = PrivateAttr(default_factory=dict)
    _tokenizer: MultilingualTokenizer | None = PrivateAttr(default=None)
    _postings: Postings | None = PrivateAttr(default=None)
    _workers: int = PrivateAttr(default=2)
    _links: dict[int, tuple[str, str]] = PrivateAttr(default_factory=dict)  # row -> IndexNode id, index_id
    _part: bool = PrivateAttr(default=False)  # a level of a larger index, persisted by it (open_part)
    _lock: ReadWriteLock = PrivateAttr(default_factory=ReadWriteLock)
    _train_on_append: bool = PrivateAttr(default=True)  # training_deferred

    def __init__(
        self,
        path: str | Path | None = None,
        approximate_threshold: int = 50_000,
        tokenizer: MultilingualTokenizer | None = None,
        workers: int = 2,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        check_count("approximate_threshold", approximate_threshold, minimum=1)
        check_count("workers", workers, minimum=1)
        if tokenizer is not None and not isinstance(tokenizer, MultilingualTokenizer):
            raise TypeError(
                f"tokenizer must be a MultilingualTokenizer (e.g. MultilingualTokenizer(language='auto')), "
                f"got {type(tokenizer).__name__}"
            )
        self._threshold = approximate_threshold
        self._workers = workers
        self._tokenizer = tokenizer
        self._postings = Postings() if tokenizer is not None else None
        if path is not None:
            self._folder = Path(path)
            if (self._folder / "MANIFEST.json").exists():
                self._open(tokenizer)

    @classmethod
    def class_name(cls) -> str:
        return "ColumnarVectorStore"

    @property
    def client(self) -> None:
        """No client: the store is embedded."""
        return None

    @property
    def tokenizer(self) -> MultilingualTokenizer | None:
        """The tokenizer of the BM25 column (``None``: the store has none)."""
        return self._tokenizer

    @property
    def workers(self) -> int:
        """The processes that tokenise a large ``add``."""
        return self._workers

    @property
    def dimension(self) -> int | None:
        """The width of the stored vectors (``None`` until the first add)."""
        return None if self._vectors is None else self._vectors.dim

    @property
    def node_count(self) -> int:
        """Live nodes (not ``__len__``: ``StorageContext.from_defaults(vector_store=...)`` tests
        the store for truth, and an empty store must not be replaced by a SimpleVectorStore)."""
        return 0 if self._vectors is None else int(self._vectors.live_count)

    # --------------------------------------------------------- persistence
    def _open(self, tokenizer: MultilingualTokenizer | None) -> None:
        """Open the index published in this store's own folder."""
        folder = self._folder
        assert folder is not None
        read_index(folder, KIND, lambda generation: self._load(generation, folder / ROWS_DATABASE, tokenizer))

    def _load(self, folder: Path, rows_path: Path, tokenizer: MultilingualTokenizer | None) -> None:
        """Read the components written into ``folder`` (a verified generation), rows in ``rows_path``."""
        state = read_state(folder, STATE, FORMAT_VERSION)
        vectors = None if state["dim"] is None else VectorColumn.open(folder, approximate_threshold=self._threshold)
        postings = Postings.open(folder) if state.get("tokenizer") is not None else None
        metadata = MetadataColumns.open(folder)
        counts = {len(metadata), 0 if vectors is None else vectors.row_count, int(state["rows"])}
        if postings is not None:
            counts.add(postings.row_count)
        if len(counts) != 1:
            raise PersistError(f"{folder}: its columns hold different row counts {sorted(counts)}; restore the folder")
        stored = None if state.get("tokenizer") is None else MultilingualTokenizer.from_dict(state["tokenizer"])
        if tokenizer is not None and stored != tokenizer:
            raise PersistError(
                f"{folder} holds "
                + ("no BM25 column" if stored is None else f"a BM25 column tokenised by {stored.to_dict()}")
                + f", not one by {tokenizer.to_dict()}: open it without tokenizer= (its own is used), "
                "or build a new index with this tokenizer"
            )
        self._vectors, self._metadata = vectors, metadata
        self._tokenizer, self._postings = stored, postings
        self._links = {int(row): (str(node_id), str(target)) for row, node_id, target in state.get("links", [])}
        self._generation = int(state["generation"])
        self._rows = RowStore(rows_path)

    @classmethod
    def open_part(
        cls, folder: PathLike, rows_path: PathLike, approximate_threshold: int = 50_000, workers: int = 2
    ) -> ColumnarVectorStore:
        """The store :meth:`write_part` wrote as one part of a larger index.

        The owning index (a summary index's chunk or summary level) verified
        the generation ``folder`` belongs to and persists the store again
        (:meth:`write_part`); :meth:`persist` refuses, so the store never
        publishes a folder of its own inside the owner's.

        Args:
            folder: the part's folder inside the owner's current generation.
            rows_path: the part's SQLite rows (beside the owner's generations).
            approximate_threshold: as the constructor's.
            workers: as the constructor's.
        """
        store = cls(approximate_threshold=approximate_threshold, workers=workers)
        store._load(Path(folder), Path(rows_path), None)
        store._part = True
        return store

    def write_part(self, staging: PathLike, rows_path: PathLike, published: int) -> None:
        """Write every change since the last persist as one part of generation ``published + 1``
        of a larger index, inside that index's :func:`~llama_index_ext_recursive.persist.write_index` block.

        Components go into ``staging`` (only new segment files; the rest were
        carried over), the new and deleted rows are committed to ``rows_path``
        under the new generation. Call :meth:`mark_published` once the owner's
        manifest is published; until then the changes stay pending, so a failed
        publish is written again by the next one (the rows database discards
        what an unpublished generation committed, :meth:`RowStore.settle`).

        Raises:
            PersistError: the folder was published (generation ``published``)
                since this store read it, or holds another index.
        """
        if published != self._generation:
            raise PersistError(
                f"the index folder holds generation {published}, but this store read generation "
                f"{self._generation}: another writer persisted there (or another index lives there); nothing "
                "was written: open the folder again and repeat the changes, or persist into an empty folder"
            )
        staging = Path(staging)
        staging.mkdir(parents=True, exist_ok=True)
        rows = self._rows if self._rows is not None and self._rows.path == Path(rows_path) else RowStore(rows_path)
        rows.settle(published)
        generation = published + 1
        if self._vectors is not None:
            self._vectors.write(staging)
        self._metadata.write(staging)
        if self._postings is not None:
            self._postings.write(staging)
        write_state(
            staging,
            STATE,
            FORMAT_VERSION,
            {
                "generation": generation,
                "dim": None if self._vectors is None else self._vectors.dim,
                "rows": len(self._metadata),
                "tokenizer": None if self._tokenizer is None else self._tokenizer.to_dict(),
                "links": [[row, node_id, target] for row, (node_id, target) in sorted(self._links.items())],
            },
        )
        new_rows = np.fromiter(sorted(self._pending), dtype=np.int64, count=len(self._pending))
        deleted_rows = np.fromiter(sorted(self._pending_deletes), dtype=np.int64, count=len(self._pending_deletes))
        rows.commit(generation, new_rows, [self._pending[int(row)] for row in new_rows], deleted_rows)
        self._rows = rows
        self._written = (generation, frozenset(new_rows.tolist()), frozenset(deleted_rows.tolist()))

    def mark_published(self, generation: int) -> None:
        """The owner published ``generation``, which :meth:`write_part` wrote: the changes it wrote
        are durable. Changes made since :meth:`write_part` (by another thread, before the owner
        got here) stay pending for the next persist."""
        self._generation = generation
        written, self._written = self._written, None
        if written is None or written[0] != generation:
            return
        _, added, deleted = written
        for row in added:
            record = self._pending.pop(row, None)
            if record is not None and self._pending_ids.get(record[0]) == row:
                del self._pending_ids[record[0]]
        self._pending_deletes -= deleted

    def persist(self, persist_path: str | None = None, fs: Any = None) -> None:
        """Publish every change since the last persist as one generation of the index folder.

        Args:
            persist_path: the folder, for a store created without one; a store
                with a folder always publishes there (``StorageContext.persist``
                passes its own path, which is then not used).

        Raises:
            PersistError: no folder is known, the folder holds something else,
                or another process published there since this store opened it;
                or the store is a part of a larger index, which persists it.
        """
        if self._part:
            raise PersistError(
                "this ColumnarVectorStore is one level of a larger index (a summary index) and is "
                "persisted with it: persist that index (or its retriever) instead"
            )
        if self._folder is None:
            if persist_path is None:
                raise PersistError("this ColumnarVectorStore has no folder: pass persist(persist_path=<folder>)")
            self._folder = Path(persist_path)
        elif persist_path is not None and Path(persist_path) != self._folder:
            logger.info("ColumnarVectorStore keeps its index in %s; %s is not used", self._folder, persist_path)
        folder = self._folder
        with self._lock.writing():
            with write_index(folder, KIND, carry_over=True) as staging:
                published = published_generation(folder)
                self.write_part(staging, folder / ROWS_DATABASE, published)
            self.mark_published(published + 1)

    # ------------------------------------------------------------ updates
    def _matrix(self, nodes: Sequence[BaseNode]) -> np.ndarray:
        """The nodes' embeddings as one float32 matrix; a node without one is named."""
        missing = [n.node_id for n in nodes if n.embedding is None]
        if missing:
            raise ValueError(
                f"{len(missing)} node(s) have no embedding (first: {missing[0]!r}); embed them first, "
                "or add them through a VectorStoreIndex, which embeds them with its embed_model"
            )
        return np.asarray([n.embedding for n in nodes], dtype=np.float32).reshape(len(nodes), -1)

    def add(
        self,
        nodes: Sequence[BaseNode],
        lexical_texts: Sequence[str] | None = None,
        lexical_tokens: Sequence[Sequence[str]] | None = None,
        **add_kwargs: Any,
    ) -> list[str]:
        """Append ``nodes`` as rows; an id already stored is replaced (its old row tombstoned).

        Args:
            nodes: embedded nodes.
            lexical_texts: what the BM25 column indexes for each node (default:
                its text with the metadata it is embedded with, as
                ``BM25Retriever`` indexes it); only for a store with a ``tokenizer``.
            lexical_tokens: instead of ``lexical_texts``, those texts already
                split by this store's :attr:`tokenizer` (a caller indexing the
                same text in two stores tokenises it once).
        """
        if not nodes:
            return []
        ids = [n.node_id for n in nodes]
        if len(set(ids)) != len(ids):
            seen: set[str] = set()
            twice = next(i for i in ids if i in seen or seen.add(i))  # type: ignore[func-returns-value]
            raise ValueError(f"node id {twice!r} appears twice in one add; node ids must be unique")
        matrix = self._matrix(nodes)
        tokens = self.lexical_terms(nodes, lexical_texts, lexical_tokens)  # CPU work, before the lock
        records = [(n.node_id, n.ref_doc_id, node_json(n)) for n in nodes]
        with self._lock.writing():
            self._hit_refs = {}
            vectors = self._vectors
            if vectors is None:
                vectors = VectorColumn(matrix.shape[1], approximate_threshold=self._threshold)
                vectors.train_on_append = self._train_on_append
            old = self._row_of(ids)
            # refuses a wrong width and zero/non-finite rows before any change; a document's nodes
            # (a run of one ref_doc_id) are one list of the approximate step
            new = vectors.append(matrix, lists=_runs([record[1] for record in records]))
            self._vectors = vectors
            try:
                self._metadata.append(
                    [dict(filterable_metadata(n)) for n in nodes]
                )  # refuses non-JSON values before any change
                if self._postings is not None and tokens is not None:
                    self._postings.append(tokens)  # refuses a token UTF-8 cannot hold before any change
            except Exception:
                self._pad_to(vectors.row_count)  # keep the row numbering shared, as tombstones
                self._delete_rows(new)
                raise
            for row, record, node in zip(new.tolist(), records, nodes, strict=True):
                self._pending[row] = record
                self._pending_ids[record[0]] = row
                if isinstance(node, IndexNode):
                    self._links[row] = (node.node_id, node.index_id)
            self._delete_rows(old[old >= 0])
        return ids

    def _pad_to(self, rows: int) -> None:
        """Give every column empty rows up to ``rows`` (after a refused append), so
        they keep sharing row ids; the caller tombstones the padded rows."""
        if len(self._metadata) < rows:
            self._metadata.append([{}] * (rows - len(self._metadata)))
        if self._postings is not None and self._postings.row_count < rows:
            self._postings.append([[]] * (rows - self._postings.row_count))

    def bulk_load(self) -> AbstractContextManager[None]:
        """:meth:`training_deferred`: the build trains once at its end."""
        return self.training_deferred()

    @contextmanager
    def training_deferred(self) -> Iterator[None]:
        """Within this block, adds do not train the vectors' approximate step when it is due
        (:attr:`VectorColumn.train_on_append`): a build that calls :meth:`retrain_vectors`
        at its end trains it once, on every row, instead of on the way as well."""
        self._train_on_append = False
        if self._vectors is not None:
            self._vectors.train_on_append = False
        try:
            yield
        finally:
            self._train_on_append = True
            if self._vectors is not None:
                self._vectors.train_on_append = True

    def retrain_vectors(self) -> bool:
        """Train the vectors' approximate step again on every row if they grew by a quarter since
        it was trained (:meth:`VectorColumn.retrain`): a streaming build trains it on the rows
        seen so far. Returns whether it trained."""
        with self._lock.writing():
            return self._vectors is not None and self._vectors.retrain()

    def merge_segments(self, final: bool = False) -> bool:
        """Merge each column's runs of small segments (one per add) when no row was ever deleted.

        Every ``add`` appends a segment to each column, and a query visits every
        segment: a streaming build (a few thousand nodes per batch) leaves
        hundreds. Without deleted rows a merge keeps every row id, so the rows
        in SQLite and those pending stay where they are; with deleted rows it
        would renumber them, which is the store compaction (not done here).

        Args:
            final: the end of a build: the BM25 column's segments of earlier merges are
                merged too, into segments of up to ``FINAL_POSTINGS_ROWS`` rows (20
                segments of 100k rows to 4 at 2M rows in 5 s, peak RSS 2.1 GB).

        Returns:
            Whether the segments were merged.
        """
        with self._lock.writing():
            vectors = self._vectors
            if vectors is None or vectors.live_count != vectors.row_count:
                return False
            same = np.arange(vectors.row_count, dtype=np.int64)
            for mapping in (vectors.compact(), self._metadata.compact()):
                assert np.array_equal(mapping, same), "a merge without deleted rows keeps every row id"
            if self._postings is not None:
                if final:
                    self._postings.merge_small(keep_rows=FINAL_POSTINGS_ROWS, largest=FINAL_POSTINGS_ROWS)
                else:
                    self._postings.merge_small()  # large segments (earlier checkpoints') are not read again
            return True

    def _delete_rows(self, rows: np.ndarray) -> None:
        """Tombstone ``rows`` in every component (call under the write lock)."""
        if not rows.size or self._vectors is None:
            return
        self._hit_refs = {}
        self._vectors.delete(rows)
        self._metadata.delete(rows)
        if self._postings is not None:
            self._postings.delete(rows)
        for row in rows.tolist():
            self._links.pop(row, None)
        written = set() if self._written is None else self._written[1]
        for row in rows.tolist():
            record = self._pending.pop(row, None)
            if record is None or row in written:  # published, or about to be: its deletion must be written
                self._pending_deletes.add(row)
            if record is not None and self._pending_ids.get(record[0]) == row:
                del self._pending_ids[record[0]]

    def delete(self, ref_doc_id: str, **delete_kwargs: Any) -> None:
        """Delete every node whose ``ref_doc_id`` is ``ref_doc_id``."""
        with self._lock.writing():
            self._delete_rows(self._metadata.rows(_refs_filter([ref_doc_id])).rows)

    def delete_nodes(
        self, node_ids: list[str] | None = None, filters: MetadataFilters | None = None, **delete_kwargs: Any
    ) -> None:
        """Delete the nodes of ``node_ids`` (all when ``None``) that ``filters`` match (all when ``None``)."""
        with self._lock.writing():
            self._delete_rows(self._selected(node_ids, filters).rows)

    def clear(self) -> None:
        """Delete every node."""
        self.delete_nodes()

    # ------------------------------------------------------------- rows
    def _row_of(self, node_ids: Sequence[str]) -> np.ndarray:
        """The live row of each node id (``-1``: not stored)."""
        found = np.full(len(node_ids), -1, dtype=np.int64)
        if self._rows is not None:
            found = self._rows.visible_rows_of(node_ids, self._generation)
            for position, row in enumerate(found.tolist()):
                if row in self._pending_deletes:
                    found[position] = -1
        for position, node_id in enumerate(node_ids):
            row = self._pending_ids.get(node_id)
            if row is not None:
                found[position] = row
        return found

    def _nodes(self, rows: np.ndarray) -> list[BaseNode]:
        """The nodes of ``rows`` in order: pending ones from memory, the rest from SQLite."""
        pending, wanted = self._pending, rows.tolist()  # locals: a pydantic attribute read is slow
        stored = [row for row in wanted if row not in pending]
        by_row = dict(zip(stored, self._rows.nodes(stored), strict=True)) if stored and self._rows is not None else {}
        return [by_row[row] if row in by_row else json_to_doc(json.loads(pending[row][2])) for row in wanted]

    def _node_ids(self, rows: np.ndarray) -> list[str]:
        pending, wanted = self._pending, rows.tolist()
        stored = [row for row in wanted if row not in pending]
        by_row = (
            dict(zip(stored, self._rows.node_ids(stored), strict=True)) if stored and self._rows is not None else {}
        )
        return [by_row[row] if row in by_row else pending[row][0] for row in wanted]

    # ------------------------------------------------------------- queries
    def _selected(
        self, node_ids: Sequence[str] | None, filters: MetadataFilters | None, doc_ids: Sequence[str] | None = None
    ) -> RowSet:
        """Live rows allowed by every restriction given."""
        if doc_ids is not None:
            refs = _refs_filter(doc_ids)
            filters = refs if filters is None else MetadataFilters(filters=[refs, filters])
        selected = self._metadata.rows(filters)
        if node_ids is not None:
            named = self._row_of(list(node_ids))
            selected = selected.among(named[named >= 0])
        return selected

    def _allowed(self, query: VectorStoreQuery) -> RowSet | None:
        """The rows ``query``'s restrictions allow (``None``: no restriction)."""
        # an empty node_ids/doc_ids list restricts nothing, as database stores read it:
        # VectorStoreIndex.as_retriever passes node_ids=[] for a store that keeps the text
        node_ids, doc_ids = query.node_ids or None, query.doc_ids or None
        if query.filters is None and node_ids is None and doc_ids is None:
            return None
        return self._selected(node_ids, query.filters, doc_ids)

    def _search(self, query: VectorStoreQuery) -> tuple[np.ndarray, np.ndarray]:
        """Rows and scores of ``query`` (call under the read lock)."""
        if query.similarity_top_k is not None:
            check_count("similarity_top_k", query.similarity_top_k, minimum=0)
        if query.mode == VectorStoreQueryMode.TEXT_SEARCH:
            return self._lexical(query)
        if query.mode != VectorStoreQueryMode.DEFAULT:
            raise NotImplementedError(
                f"ColumnarVectorStore answers the default (dense) and text_search (BM25) query modes, "
                f"not {VectorStoreQueryMode(query.mode).value!r}; fuse the two (e.g. HybridFusionRetriever) for hybrid search"
            )
        if query.query_embedding is None:
            raise ValueError("the query has no embedding: embed it first (VectorStoreIndex retrievers do)")
        if self._vectors is None:
            return _NOTHING
        allowed = self._allowed(query)
        k = query.similarity_top_k or int(self._vectors.live_count)  # 0 or None: every row, as upstream
        return self._vectors.search(np.asarray(query.query_embedding, dtype=np.float32), k, rows=allowed)

    def _lexical(self, query: VectorStoreQuery) -> tuple[np.ndarray, np.ndarray]:
        """Rows and BM25 scores of a ``TEXT_SEARCH`` query (call under the read lock).

        As :class:`~llama_index_ext_recursive.retrievers.bm25.MultilingualBM25Retriever`
        ranks: rows matching no query term are never returned, ties go to the
        earlier row, and a restriction selects rows without changing any score.
        """
        postings, tokenizer = self._postings, self._tokenizer
        if postings is None or tokenizer is None:
            raise ValueError(
                "this ColumnarVectorStore keeps no BM25 column, so it cannot answer text_search queries: "
                "create it with tokenizer=MultilingualTokenizer()"
            )
        if query.query_str is None:
            raise ValueError("a text_search query needs query_str: the words to look for")
        tokens = tokenizer(query.query_str)
        allowed = self._allowed(query)
        if not tokens or not postings.live_rows or (allowed is not None and not len(allowed)):
            return _NOTHING
        k = query.similarity_top_k or postings.live_rows
        return postings.search(tokens, k, rows=allowed)

    def query(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        """The ``similarity_top_k`` nearest live nodes allowed by the query's restrictions, as nodes."""
        with self._lock.reading():
            rows, scores = self._search(query)
            nodes = self._nodes(rows)
        return VectorStoreQueryResult(
            nodes=nodes, similarities=[float(s) for s in scores], ids=[n.node_id for n in nodes]
        )

    def query_ids(self, query: VectorStoreQuery) -> tuple[list[str], list[float]]:
        """:class:`~llama_index_ext_recursive.stores.protocol.ScoredIdSearch`: ids and scores, no node read."""
        with self._lock.reading():
            rows, scores = self._search(query)
            ids = self._hit_ids(rows)
        return ids, [float(s) for s in scores]

    def _hit_ids(self, rows: np.ndarray) -> list[str]:
        """The node ids of a search's ``rows``, their ``ref_doc_id`` read in the same query and
        kept (:meth:`ref_doc_ids` is asked for the hits' documents next)."""
        pending, wanted = self._pending, rows.tolist()
        stored = [row for row in wanted if row not in pending]
        by_row = (
            dict(zip(stored, self._rows.ids_and_refs(stored), strict=True)) if stored and self._rows is not None else {}
        )
        found = [by_row[row] if row in by_row else pending[row][:2] for row in wanted]
        refs = self._hit_refs
        if len(refs) > _HIT_REFS_KEPT:
            refs.clear()
        refs.update(found)
        return [node_id for node_id, _ in found]

    def get_nodes(
        self, node_ids: list[str] | None = None, filters: MetadataFilters | None = None, **kwargs: Any
    ) -> list[BaseNode]:
        """The stored nodes of ``node_ids`` (in row order) that ``filters`` match, each with
        the vector the store holds for it (unit length), so a node read back can be added again."""
        with self._lock.reading():
            rows = self._selected(node_ids, filters).rows
            nodes = self._nodes(rows)
            vectors = self._vectors.vectors(rows) if self._vectors is not None else None
        if vectors is not None:
            for node, vector in zip(nodes, vectors, strict=True):
                node.embedding = vector.tolist()
        return nodes

    def nodes_by_id(self, node_ids: Sequence[str]) -> list[BaseNode | None]:
        """The stored node of each id, in the order given (``None``: not stored), without its
        vector: what a docstore returns (:class:`~.columnar_docstore.ColumnarDocumentStore`)."""
        with self._lock.reading():
            rows = self._row_of(list(node_ids))
            found = iter(self._nodes(rows[rows >= 0]))
        return [next(found) if row >= 0 else None for row in rows.tolist()]

    def ref_doc_ids(self, node_ids: Sequence[str]) -> list[str | None]:
        """The ``ref_doc_id`` of each node id (``None``: not stored, or stored without one),
        without reading a node: a summary index asks it which documents its hits belong to."""
        with self._lock.reading():
            kept = [self._hit_refs.get(node_id, _UNKNOWN) for node_id in node_ids]  # another query may clear it
            if _UNKNOWN not in kept:
                return kept
            rows = self._row_of(list(node_ids)).tolist()
            pending = self._pending
            stored = [row for row in rows if row >= 0 and row not in pending]
            by_row = (
                dict(zip(stored, self._rows.ref_doc_ids(stored), strict=True))
                if stored and self._rows is not None
                else {}
            )
            return [None if row < 0 else pending[row][1] if row in pending else by_row[row] for row in rows]

    def link_targets(self) -> dict[str, str]:
        """``node id -> index_id`` of every stored ``IndexNode`` (a link), kept as rows are added
        and deleted, so links are checked without reading a node."""
        with self._lock.reading():
            return dict(self._links.values())

    def live_node_ids(self) -> list[str]:
        """The id of every stored node, in the order they were added (a replaced node at its new place)."""
        with self._lock.reading():
            if self._vectors is None:
                return []
            return list(self._node_ids(np.flatnonzero(self._metadata.live)))

    def metadata_keys(self) -> set[str]:
        """The metadata keys some stored node holds (``ref_doc_id`` included), from the columns."""
        with self._lock.reading():
            return self._metadata.live_keys()

    def filter_vocabulary(self) -> FilterVocabulary:
        """The metadata keys filters may name and the kinds of value each holds (``ref_doc_id``
        included), from the metadata columns' dictionaries: no node is read."""
        vocabulary = FilterVocabulary()
        with self._lock.reading():
            for key in self._metadata.keys():
                for value in self._metadata.values(key):
                    vocabulary.add_metadata({key: value})
        return vocabulary


_NOTHING = (np.empty(0, np.int64), np.empty(0, np.float32))
_HIT_REFS_KEPT = 65_536  # hits whose ref_doc_id a store keeps (a few MB)
# not kept for the hits (None is kept: a node without one); a real id equal to it is read again
_UNKNOWN = "\x00unknown"


def _runs(ref_doc_ids: Sequence[str | None]) -> np.ndarray:
    """Where each run of nodes of one document starts (a node without a document is a run of its own)."""
    starts = [i for i, ref in enumerate(ref_doc_ids) if i == 0 or ref is None or ref != ref_doc_ids[i - 1]]
    return np.asarray(starts, dtype=np.int64)


def _refs_filter(doc_ids: Sequence[str]) -> MetadataFilters:
    return MetadataFilters(filters=[MetadataFilter(key=REF_KEY, value=list(doc_ids), operator=FilterOperator.IN)])
