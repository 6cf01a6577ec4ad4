"""The nodes a retriever searches, read from where each kind of retriever keeps them.

The agent tool infers a metadata schema from them, the CLI types ``--filter``
values by them, and the auto-retriever reads the values a filter may name from
them: one lookup for all three, below every one of them (it imports no module
that uses it).
"""

from __future__ import annotations

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.indices.vector_store.retrievers import VectorIndexAutoRetriever, VectorIndexRetriever
from llama_index.core.retrievers import QueryFusionRetriever
from llama_index.core.schema import BaseNode
from llama_index.core.vector_stores.utils import metadata_dict_to_node
from llama_index.retrievers.bm25 import BM25Retriever

from llama_index_ext_recursive.recursive.retriever import RecursiveSummaryRetriever
from llama_index_ext_recursive.retrievers.bm25 import MultilingualBM25Retriever


def corpus_nodes(retriever: BaseRetriever) -> list[BaseNode]:
    """The nodes ``retriever`` searches, from where each kind of retriever keeps them.

    The tool reads them once, to infer the metadata schema and the values a
    filter may name. One lookup, by kind of retriever (``[]`` for anything else,
    whose schema must then be passed as ``vector_store_info=``):

    * ``MultilingualBM25Retriever``: its public ``nodes``;
    * upstream ``BM25Retriever``: its public ``corpus`` (metadata dicts, decoded);
    * ``RecursiveSummaryRetriever``: the chunks in its ``index.docstore``
      (none for a ``retriever_dict`` setup);
    * upstream ``VectorIndexRetriever`` and ``VectorIndexAutoRetriever`` (and
      this package's subclasses): their index's docstore (upstream keeps the
      index in ``_index`` and offers no public accessor);
    * ``QueryFusionRetriever`` (``HybridFusionRetriever`` included): the first
      child that has nodes (upstream keeps them in ``_retrievers``).
    """
    if isinstance(retriever, MultilingualBM25Retriever):
        return list(retriever.nodes)
    if isinstance(retriever, BM25Retriever):
        return [metadata_dict_to_node(entry) for entry in retriever.corpus or []]
    if isinstance(retriever, RecursiveSummaryRetriever):
        docstore = retriever.index.docstore  # None for a retriever_dict setup
        return list(docstore.docs.values()) if docstore is not None else []
    if isinstance(retriever, (VectorIndexRetriever, VectorIndexAutoRetriever)):
        return list(retriever._index.docstore.docs.values())
    if isinstance(retriever, QueryFusionRetriever):
        for child in retriever._retrievers:
            found = corpus_nodes(child)
            if found:
                return found
    return []
