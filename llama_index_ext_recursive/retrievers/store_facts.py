"""What a vector retriever reads from the stores it searches, cheaply and once.

The metadata vocabulary of a docstore (which keys and value kinds filters
are checked against), kept per docstore, and the dimension of the vectors a
store holds (which query vectors are checked against).
"""

from __future__ import annotations

import logging
import threading
import weakref
from typing import TYPE_CHECKING, Any, TypeGuard

from llama_index.core.schema import NodeRelationship
from llama_index.core.storage.docstore.types import BaseDocumentStore
from llama_index.core.storage.kvstore.simple_kvstore import SimpleKVStore
from llama_index.core.vector_stores import SimpleVectorStore
from llama_index.core.vector_stores.types import BasePydanticVectorStore

from llama_index_ext_recursive.filters import FilterVocabulary
from llama_index_ext_recursive.stores.protocol import LevelStore

if TYPE_CHECKING:  # the chroma extra: imported only when a store is one
    from llama_index.vector_stores.chroma import ChromaVectorStore

logger = logging.getLogger(__name__)


# -- filter vocabularies, one per docstore ------------------------------------------

# Retrievers are often built per call (the auto retriever, the recursive
# retriever's routes), and reading every node of a docstore costs O(n): the
# vocabulary is kept per docstore, for as long as the docstore lives.
_VOCABULARIES: weakref.WeakKeyDictionary[Any, FilterVocabulary] = weakref.WeakKeyDictionary()
_VOCABULARIES_LOCK = threading.Lock()


def store_vocabulary(vector_store: BasePydanticVectorStore) -> FilterVocabulary | None:
    """The filter vocabulary a store keeps itself (a :class:`ColumnarVectorStore`, from its
    metadata columns, always current), or ``None``: read it from the docstore."""
    if isinstance(vector_store, LevelStore):
        return vector_store.filter_vocabulary()
    return None


def docstore_vocabulary(docstore: BaseDocumentStore, refresh: bool) -> FilterVocabulary:
    if not refresh:
        with _VOCABULARIES_LOCK:
            try:
                cached = _VOCABULARIES.get(docstore)
            except TypeError:  # a docstore that cannot be weakly referenced: not cached
                cached = None
        if cached is not None:
            return cached
    vocabulary = _read_vocabulary(docstore)
    if vocabulary:  # an empty one is not kept: nodes may arrive later
        with _VOCABULARIES_LOCK:
            try:
                _VOCABULARIES[docstore] = vocabulary
            except TypeError:
                pass
    return vocabulary


def _read_vocabulary(docstore: BaseDocumentStore) -> FilterVocabulary:
    raw = _raw_nodes(docstore)
    if raw is not None:
        vocabulary = FilterVocabulary()
        try:
            for stored in raw.values():
                vocabulary.add_metadata(_stored_metadata(stored["__data__"]))
            return vocabulary
        except (KeyError, TypeError, AttributeError):  # another layout: read the nodes
            logger.debug("docstore entries are not in the expected layout; reading nodes")
    return FilterVocabulary.from_nodes(docstore.docs.values())


def _raw_nodes(docstore: BaseDocumentStore) -> dict[str, Any] | None:
    """The stored JSON of every node of an in-memory docstore (``SimpleDocumentStore``).

    Reading metadata from it is about 12x faster than building every node
    (``docstore.docs``: 130 ms instead of 1.6 s for 20k nodes,
    benchmarks/results/bad-input.md), which keeps the re-read after an
    unknown key cheap. ``None`` for other docstores.
    """
    kvstore = getattr(docstore, "_kvstore", None)
    collection = getattr(docstore, "_node_collection", None)
    if not isinstance(kvstore, SimpleKVStore) or not isinstance(collection, str):
        return None
    return kvstore.get_all(collection)


def _stored_metadata(data: dict[str, Any]) -> dict[str, Any]:
    """What ``filterable_metadata`` gives for a node, from its stored JSON."""
    metadata = data.get("metadata") or {}
    source = (data.get("relationships") or {}).get(NodeRelationship.SOURCE.value)
    if "ref_doc_id" not in metadata and isinstance(source, dict) and source.get("node_id"):
        return {**metadata, "ref_doc_id": source["node_id"]}
    return metadata


# -- the store's dimension ------------------------------------------------------------


def store_dimension(vector_store: BasePydanticVectorStore) -> int | None:
    """The dimension a store states, or reads from its first embedding, cheaply."""
    for source, name in (
        (vector_store, "dimension"),  # NumpyVectorStore
        (vector_store, "embed_dim"),  # PGVectorStore
        (getattr(vector_store, "_faiss_index", None), "d"),  # FAISS
    ):
        dim = getattr(source, name, None) if source is not None else None
        if isinstance(dim, int) and not isinstance(dim, bool) and dim > 0:
            return dim
    if isinstance(vector_store, SimpleVectorStore):
        first = next(iter(vector_store.data.embedding_dict.values()), None)
        return len(first) if first else None
    return None


def store_size(vector_store: BasePydanticVectorStore) -> int | None:
    """How many vectors a store holds, where it says so cheaply (``None``: unknown).

    A search never needs more rows than that: FAISS allocates ``k`` rows per
    query, so ``top_k=10**9`` would otherwise fail with a ``MemoryError``.
    """
    faiss_index = getattr(vector_store, "_faiss_index", None)
    if faiss_index is not None and isinstance(getattr(faiss_index, "ntotal", None), int):
        return faiss_index.ntotal
    if isinstance(vector_store, SimpleVectorStore):  # NumpyVectorStore included
        return len(vector_store.data.embedding_dict)
    if isinstance(vector_store, LevelStore) and vector_store.counts_in_process:
        return vector_store.node_count  # a database's level takes any k: no round trip to ask
    return None


def is_chroma(vector_store: BasePydanticVectorStore) -> TypeGuard[ChromaVectorStore]:
    try:
        from llama_index.vector_stores.chroma import ChromaVectorStore
    except ImportError:
        return False
    return isinstance(vector_store, ChromaVectorStore)


def chroma_dimension(vector_store: ChromaVectorStore) -> int | None:
    """The length of one stored embedding of a Chroma collection (``None`` when empty)."""
    rows = vector_store._collection.get(limit=1, include=["embeddings"])
    embeddings = rows.get("embeddings")
    if embeddings is None or len(embeddings) == 0:
        return None
    return len(embeddings[0])
