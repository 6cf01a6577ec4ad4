"""``NumpyVectorStore``: upstream's ``SimpleVectorStore``, answered with numpy.

Same data, same persistence format, same filter semantics, ids and scores as
``SimpleVectorStore`` (scores to ~1e-15, ids and their order exactly, ties and
zero vectors included). Instead of a Python loop over every node, a query is
one matrix product over float32 unit rows and ``argpartition`` (a screen: any
row whose float32 score is within the rigorous float32 error bound of the
(k+1)-th survives), then float64 scores for the few survivors; at 50k x 384
that is within ~10% of a bare numpy float32 product (benchmarks/store_speed.py).

How exactness is kept:

* The matrix mirrors ``data.embedding_dict`` row for row, in the dict's order.
  ``add`` appends (or overwrites a row in place, as the dict keeps the key's
  position), deletes leave tombstones that are compacted once a quarter of the
  rows are dead, so nothing is rebuilt per query and the order of live rows is
  always the dict's order.
* Upstream ranks ``(score, node_id)`` tuples with a size-k heap and returns the
  heap sorted by score; with distinct scores that is simply the k highest.
  When two scores among the top k+1 are within ``1e-10`` of each other (ties,
  e.g. duplicate chunks), or a score is NaN (a zero vector, as upstream
  computes 0/0), the order depends on the heap's layout, so the query replays
  upstream's heap over the candidates in dict order, with near-equal scores
  recomputed by upstream's own ``similarity`` function. That path is
  exact and still vectorised for the scores; it costs one Python heap pass.
* Metadata filters run column-wise: per key, the values by row, an inverted
  index for ``EQ``/``IN``/``NE``/``NIN``/``IS_EMPTY`` and a float64 column for
  ``GT``/``GTE``/``LT``/``LTE`` over numbers; the other operators (and values
  of other types) are evaluated per row with upstream's operator semantics,
  only on rows the rest of the filter has not excluded. Nested
  ``MetadataFilters`` are supported (upstream rejects them).

Known difference: where upstream raises ``TypeError`` for a row whose value
the operator cannot take (``GT`` between a string and a number, ``CONTAINS``
on a number, ``TEXT_MATCH`` on a number), that row does not match here, as in
every evaluator of the package (:func:`~llama_index_ext_recursive.filters.operator_fn`):
a key holding numbers and a few strings can still be filtered by number.

The row state (matrix, tombstones, columns, filter masks) is in
:mod:`.numpy_rows`, the query arithmetic over it in :mod:`.numpy_search`, the
metadata columns in :mod:`.numpy_columns`; this module keeps the state in step
with ``data`` under one lock. :func:`vector_index` is the package's one way to
build an index over this store.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import fsspec
import numpy as np
from fsspec.implementations.local import LocalFileSystem
from llama_index.core import StorageContext, VectorStoreIndex
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.schema import BaseNode
from llama_index.core.storage.docstore.types import BaseDocumentStore
from llama_index.core.vector_stores.simple import SimpleVectorStore, SimpleVectorStoreData
from llama_index.core.vector_stores.types import (
    DEFAULT_PERSIST_DIR,
    DEFAULT_PERSIST_FNAME,
    BasePydanticVectorStore,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryMode,
    VectorStoreQueryResult,
)

from llama_index_ext_recursive.embedding_cache import CachedEmbedding, as_cached, check_embedding_cache
from llama_index_ext_recursive.models import corpus_sample, resolve_embed_model
from llama_index_ext_recursive.persist import PersistError, write_file_atomically
from llama_index_ext_recursive.stores.numpy_rows import RowState
from llama_index_ext_recursive.stores.numpy_search import answer_query
from llama_index_ext_recursive.validation import check_count, json_nodes


class _PostingsView(Mapping):
    """``store._postings[key][value]`` -> rows (read-only, for benchmarks)."""

    def __init__(self, state: RowState) -> None:
        self._state = state

    def __getitem__(self, key: str) -> dict[Any, np.ndarray]:
        with self._state.lock:
            return self._state.column(key).postings()

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._state.columns))

    def __len__(self) -> int:
        return len(self._state.columns)


class NumpyVectorStore(SimpleVectorStore):
    """In-memory vector store with exact cosine top-k over a numpy matrix.

    Drop-in for ``SimpleVectorStore`` (``stores_text=False``: text comes from
    the docstore; persisted files load in either class). Non-default query
    modes (MMR, SVM, ...) fall back to the parent. Nested ``MetadataFilters``
    are supported.

    Memory: besides upstream's ``embedding_dict`` (Python lists), 12 bytes per
    dimension per node (the unit rows in float64, for exact scores, and in
    float32, which a large query scans first: the float32 screen keeps every
    row that can be in the top k given float32's error bound, and only those
    are scored in float64).
    """

    _state: RowState = PrivateAttr(default_factory=RowState)

    @classmethod
    def class_name(cls) -> str:
        return "NumpyVectorStore"

    @property
    def _ids(self) -> list[str | None]:
        """Node id per matrix row (``None`` for a deleted row not compacted yet)."""
        return self._state.ids

    @property
    def _postings(self) -> Mapping[str, dict[Any, np.ndarray]]:
        return _PostingsView(self._state)

    # ------------------------------------------------------------ updates
    def _synced(self, state: RowState) -> None:
        """Bring ``state`` in line with ``self.data`` (call under the lock)."""
        if not state.synced(self.data):
            state.rebuild(self.data)

    def add(self, nodes: Sequence[BaseNode], **add_kwargs: Any) -> list[str]:
        """Add ``nodes`` (with embeddings); NumPy scalars in metadata are stored as the
        Python numbers they hold (upstream fails on them without naming the key), and a
        value JSON cannot hold is refused naming node, key and fix (:func:`json_nodes`)."""
        nodes = json_nodes(nodes)
        state = self._state
        with state.lock:
            self._synced(state)
            ids = super().add(nodes, **add_kwargs)
            state.added(ids)
        return ids

    def delete(self, ref_doc_id: str, **delete_kwargs: Any) -> None:
        state = self._state
        with state.lock:
            self._synced(state)
            super().delete(ref_doc_id, **delete_kwargs)
            state.removed()

    def delete_nodes(
        self,
        node_ids: list[str] | None = None,
        filters: MetadataFilters | None = None,
        **delete_kwargs: Any,
    ) -> None:
        state = self._state
        with state.lock:
            self._synced(state)
            super().delete_nodes(node_ids, filters, **delete_kwargs)
            state.removed(list(node_ids) if node_ids is not None else None)

    def clear(self) -> None:
        state = self._state
        with state.lock:
            super().clear()
            state.rebuild(self.data)

    # --------------------------------------------------------- persistence
    def persist(
        self,
        persist_path: str = os.path.join(DEFAULT_PERSIST_DIR, DEFAULT_PERSIST_FNAME),
        fs: fsspec.AbstractFileSystem | None = None,
    ) -> None:
        """Write the store to ``persist_path`` in upstream's format, atomically.

        The file is written under a temporary name and renamed over
        ``persist_path``, so a crash leaves the old file or the new one. An
        existing file that is not a vector store file is refused instead of
        replaced. Other filesystems (``fs`` not local) are written as upstream does.

        Raises:
            PersistError: ``persist_path`` is a folder or a file of another kind.
        """
        fs = fs or self._fs
        if not isinstance(fs, LocalFileSystem):
            super().persist(persist_path, fs=fs)
            return
        path = Path(persist_path)
        if path.exists() and not _looks_like_store_file(path):
            raise PersistError(
                f"refusing to replace {path}: it is not a vector store file (left untouched); choose another path"
            )
        path.parent.mkdir(parents=True, exist_ok=True)
        with self._state.lock:  # a consistent copy even while another thread adds
            # the fields as they are: dataclasses_json's to_dict walks every float (slow)
            payload = json.dumps(
                {
                    "embedding_dict": self.data.embedding_dict,
                    "text_id_to_ref_doc_id": self.data.text_id_to_ref_doc_id,
                    "metadata_dict": self.data.metadata_dict,
                }
            )
        write_file_atomically(path, lambda handle: handle.write(payload))

    @classmethod
    def from_persist_path(cls, persist_path: str, fs: fsspec.AbstractFileSystem | None = None) -> NumpyVectorStore:
        """Load a store written by ``persist`` (ours or upstream's).

        Raises:
            PersistError: naming the file when it is missing, not JSON, not a
                vector store (e.g. ``{}``) or internally inconsistent.
        """
        fs = fs or fsspec.filesystem("file")
        if not fs.exists(persist_path):
            raise PersistError(f"{persist_path} is missing: no vector store was persisted there; persist it again")
        try:
            with fs.open(persist_path, "rb") as handle:
                data = json.load(handle)
        except (ValueError, UnicodeDecodeError) as exc:
            raise PersistError(f"{persist_path} is corrupted ({exc}); restore it or persist the store again") from exc
        problem = _store_file_problem(data)
        if problem is not None:
            raise PersistError(
                f"{persist_path} is not a usable vector store file: {problem}; restore it or persist the store again"
            )
        # checked above, so built directly: dataclasses_json's from_dict decodes
        # every float one by one (about 95% of loading a 5k-node index)
        return cls(
            data=SimpleVectorStoreData(
                embedding_dict=data["embedding_dict"],
                text_id_to_ref_doc_id=data.get("text_id_to_ref_doc_id", {}),
                metadata_dict=data.get("metadata_dict", {}),
            )
        )

    # ------------------------------------------------------------- queries
    def query(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        if query.similarity_top_k is not None:
            check_count("similarity_top_k", query.similarity_top_k, minimum=0)  # 0: all, as upstream
        if query.mode != VectorStoreQueryMode.DEFAULT:
            return super().query(query, **kwargs)
        data = self.data
        if query.filters is not None and data.embedding_dict and not data.metadata_dict:
            raise ValueError(
                "Cannot filter stores that were persisted without metadata. "
                "Please rebuild the store with metadata to enable filtering."
            )
        state = self._state
        with state.lock:
            self._synced(state)
            if not state.broken:
                return answer_query(state, query)
        return super().query(query, **kwargs)

    def query_ids(self, query: VectorStoreQuery) -> tuple[list[str], list[float]]:
        """:class:`~llama_index_ext_recursive.stores.protocol.ScoredIdSearch`: ids and scores of :meth:`query`."""
        found = self.query(query)
        return list(found.ids or []), [float(v) for v in found.similarities or []]


_STORE_FILE_START = re.compile(rb'\s*\{\s*"(embedding_dict|text_id_to_ref_doc_id|metadata_dict)"\s*:')


def vector_index(
    nodes: Sequence[BaseNode],
    embed_model: BaseEmbedding | None = None,
    *,
    vector_store: BasePydanticVectorStore | None = None,
    docstore: BaseDocumentStore | None = None,
    show_progress: bool = False,
    store_nodes_override: bool = False,
    embedding_cache: str | Path | CachedEmbedding | None = None,
) -> VectorStoreIndex:
    """A ``VectorStoreIndex`` over ``nodes`` in a new :class:`NumpyVectorStore`.

    The one place the package builds an index from nodes: nodes that carry an
    embedding are not embedded again (``VectorStoreIndex`` embeds only the
    others), so an index's stored vectors are reused.

    Args:
        nodes: the nodes to index.
        embed_model: the model for nodes without an embedding and for queries
            (argument > ``Settings.embed_model`` > the bundled model chosen for
            the nodes' scripts when none carries an embedding, see
            :func:`~llama_index_ext_recursive.models.choose_embed_model`).
        vector_store: another store to fill instead (FAISS, Chroma, PostgreSQL, ...).
        docstore: the docstore to keep the nodes in (default: upstream's).
        show_progress: a progress bar while embedding.
        store_nodes_override: keep every node in the docstore even when the
            store keeps text (as upstream's argument).
        embedding_cache: a SQLite path or a
            :class:`~llama_index_ext_recursive.embedding_cache.CachedEmbedding`:
            texts it holds for the model are not embedded again.
    """
    check_embedding_cache(embedding_cache)
    nodes = json_nodes(nodes)  # before anything is embedded
    storage = StorageContext.from_defaults(
        vector_store=vector_store if vector_store is not None else NumpyVectorStore(),
        docstore=docstore,
    )
    return VectorStoreIndex(
        nodes,
        storage_context=storage,
        embed_model=as_cached(resolve_embed_model(embed_model, texts=corpus_sample(nodes)), embedding_cache),
        show_progress=show_progress,
        store_nodes_override=store_nodes_override,
    )


def _looks_like_store_file(path: Path) -> bool:
    """Whether ``path`` is a file upstream's or our ``persist`` wrote (by its first bytes)."""
    if not path.is_file():
        return False
    with open(path, "rb") as handle:
        return bool(_STORE_FILE_START.match(handle.read(256)))


def _store_file_problem(data: Any) -> str | None:
    """Why a parsed store file cannot be loaded faithfully (``None``: it can)."""
    if not isinstance(data, dict):
        return f"it holds a JSON {type(data).__name__}, not an object"
    if "embedding_dict" not in data:
        return "it has no embedding_dict"
    for key in ("embedding_dict", "text_id_to_ref_doc_id", "metadata_dict"):
        if not isinstance(data.get(key, {}), dict):
            return f"its {key} is a {type(data[key]).__name__}, not an object"
    vectors = data["embedding_dict"]
    bad = next((k for k, v in vectors.items() if not isinstance(v, list)), None)
    if bad is not None:
        return f"the embedding of {bad!r} is not a list of numbers"
    if len({len(v) for v in vectors.values()}) > 1:
        return "its embeddings have different dimensions"
    for key in ("text_id_to_ref_doc_id", "metadata_dict"):
        stray = next((k for k in data.get(key, {}) if k not in vectors), None)
        if stray is not None:
            return f"its {key} names {stray!r}, which has no embedding"
    return None
