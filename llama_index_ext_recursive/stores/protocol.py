"""What the recursive search asks of a store: ids and scores, no nodes; and of a store that
holds a whole level (:class:`LevelStore`).

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

from abc import abstractmethod
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any, ClassVar, Protocol, runtime_checkable

from llama_index.core.schema import BaseNode, MetadataMode
from llama_index.core.vector_stores.types import BasePydanticVectorStore, VectorStoreQuery

from llama_index_ext_recursive.filters import FilterVocabulary
from llama_index_ext_recursive.tokenizer import MultilingualTokenizer
from llama_index_ext_recursive.workers import tokenize_texts


@runtime_checkable
class ScoredIdSearch(Protocol):
    """A store that answers ``query`` with ``(node ids, similarities)``, best first."""

    def query_ids(self, query: VectorStoreQuery) -> tuple[list[str], list[float]]: ...


REF_KEY = "ref_doc_id"  # the key filters read a row's ref_doc_id from (filterable_metadata)


class LevelStore(BasePydanticVectorStore):
    """A store that holds one level of a recursive index whole: nodes, vectors, and optionally
    BM25 terms, so the index around it is a view that holds nothing per node.

    The embedded :class:`~.columnar_store.ColumnarVectorStore` and PostgreSQL's
    :class:`~.pg_level.PostgresLevelStore` are such stores. The recursive index
    reads documents' summaries, filter keys, links and the document of a hit
    from it without reading nodes, its docstore is a view of it
    (:class:`~.columnar_docstore.ColumnarDocumentStore`), its BM25 level is the
    store's (``TEXT_SEARCH`` queries), and a build gives it each node's BM25
    terms (``lexical_tokens``) so a text is tokenised once for both levels.
    """

    stores_text: bool = True
    is_embedding_query: bool = True
    flat_metadata: bool = False
    # whether node_count is known without a round trip to a server (a search asks for it to cap k)
    counts_in_process: ClassVar[bool] = True

    @property
    @abstractmethod
    def tokenizer(self) -> MultilingualTokenizer | None:
        """The tokenizer of the BM25 terms (``None``: the store keeps none)."""

    @property
    def workers(self) -> int:
        """Processes that tokenise a large ``add``."""
        return 2

    def bulk_load(self) -> AbstractContextManager[None]:
        """A block of many adds (a build): the store may defer work it can do once at the end
        for every row (the columnar store's training, PostgreSQL's HNSW graph)."""
        return nullcontext()

    @property
    @abstractmethod
    def node_count(self) -> int:
        """Live nodes."""

    @abstractmethod
    def add(
        self,
        nodes: Sequence[BaseNode],
        lexical_texts: Sequence[str] | None = None,
        lexical_tokens: Sequence[Sequence[str]] | None = None,
        **add_kwargs: Any,
    ) -> list[str]:
        """Add (or replace) embedded nodes, with the text or the tokens BM25 indexes for each."""

    def lexical_terms(
        self,
        nodes: Sequence[BaseNode],
        lexical_texts: Sequence[str] | None,
        lexical_tokens: Sequence[Sequence[str]] | None,
    ) -> list[list[str]] | None:
        """The BM25 terms of each node for :meth:`add` (``None``: the store keeps no BM25 column):
        ``lexical_tokens`` checked, else ``lexical_texts`` (default: each node's text with the
        metadata it is embedded with, as ``BM25Retriever`` indexes it) tokenised by :attr:`tokenizer`
        in :attr:`workers` processes."""
        given = (
            "lexical_texts" if lexical_texts is not None else "lexical_tokens" if lexical_tokens is not None else None
        )
        tokenizer = self.tokenizer
        if tokenizer is None:
            if given is not None:
                raise ValueError(
                    f"{given}= was given, but this store keeps no BM25 column: "
                    "create it with tokenizer=MultilingualTokenizer()"
                )
            return None
        if lexical_tokens is not None:
            if lexical_texts is not None:
                raise ValueError("pass lexical_texts= or lexical_tokens=, not both")
            if len(lexical_tokens) != len(nodes) or any(isinstance(t, str) for t in lexical_tokens):
                raise ValueError(f"lexical_tokens must hold one list of tokens per node ({len(nodes)})")
            return [list(tokens) for tokens in lexical_tokens]
        if lexical_texts is None:
            texts = [n.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes]
        elif isinstance(lexical_texts, str) or len(lexical_texts) != len(nodes):
            raise ValueError(
                f"lexical_texts must hold one text per node ({len(nodes)}), got "
                + ("one string" if isinstance(lexical_texts, str) else f"{len(lexical_texts)}")
            )
        else:
            texts = list(lexical_texts)
        return tokenize_texts(texts, tokenizer, workers=self.workers)

    @abstractmethod
    def query_ids(self, query: VectorStoreQuery) -> tuple[list[str], list[float]]:
        """:class:`ScoredIdSearch`: dense or ``TEXT_SEARCH`` ids and scores, no node read."""

    @abstractmethod
    def nodes_by_id(self, node_ids: Sequence[str]) -> list[BaseNode | None]:
        """The stored node of each id, in the order given (``None``: not stored), without its vector."""

    @abstractmethod
    def ref_doc_ids(self, node_ids: Sequence[str]) -> list[str | None]:
        """The ``ref_doc_id`` of each node id (``None``: not stored, or none)."""

    @abstractmethod
    def link_targets(self) -> dict[str, str]:
        """``node id -> index_id`` of every stored ``IndexNode``."""

    @abstractmethod
    def live_node_ids(self) -> list[str]:
        """The id of every stored node, in the order they were added."""

    @abstractmethod
    def metadata_keys(self) -> set[str]:
        """The metadata keys some stored node holds (``ref_doc_id`` included)."""

    @abstractmethod
    def filter_vocabulary(self) -> FilterVocabulary:
        """The keys filters may name and the kinds of value each holds."""
