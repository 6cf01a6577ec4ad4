"""What the recursive search asks of an embedded store: ids and scores, no nodes.

A recursive query searches the chunk and summary levels several times and
keeps only the final top-k as nodes, so a store that can answer a
:class:`VectorStoreQuery` with node ids and similarities alone (no node
objects, no text read) is asked that way; every other store is searched
through ``BackfillVectorRetriever``, which returns nodes. The embedded stores
(:class:`~llama_index_ext_recursive.stores.numpy_store.NumpyVectorStore`, and
the columnar store of issue 25) answer in process with CPU work, so the async
driver runs them in a thread.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from llama_index.core.vector_stores.types import VectorStoreQuery


@runtime_checkable
class ScoredIdSearch(Protocol):
    """A store that answers ``query`` with ``(node ids, similarities)``, best first."""

    def query_ids(self, query: VectorStoreQuery) -> tuple[list[str], list[float]]: ...
