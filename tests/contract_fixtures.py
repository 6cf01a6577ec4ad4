"""The corpus and the retriever factories of the contract tests (tests/test_contract.py).

Six documents of three chunks each, with document metadata (``category``,
``year``) and the ``ref_doc_id`` LlamaIndex readers give chunks. Each factory
builds one kind of retriever over these chunks with the real bundled model,
wrapped in the package's ``CachedEmbedding`` (same model name, same vectors)
so that the few hundred retrievals embed each distinct text once; chunk
embeddings are computed once and carried by the nodes, so a factory embeds
only what is its own (summaries, pseudo-queries). Every factory takes
the construction-time filters and ``filter_policy`` the contract needs, and
returns a retriever whose own k is :data:`OWN_K`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import faiss
from llama_index.core import StorageContext, VectorStoreIndex
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.indices.utils import embed_nodes
from llama_index.core.schema import IndexNode, NodeRelationship, RelatedNodeInfo, TextNode
from llama_index.core.vector_stores.types import MetadataInfo, VectorStoreInfo
from llama_index.vector_stores.faiss import FaissMapVectorStore

from llama_index_ext_recursive import (
    BackfillVectorRetriever,
    HybridFusionRetriever,
    MultilingualBM25Retriever,
    NumpyVectorStore,
    RecursiveSummaryRetriever,
    ValidatedAutoRetriever,
)
from llama_index_ext_recursive.embedding_cache import CachedEmbedding
from llama_index_ext_recursive.retrievers.store_bm25 import StoreBM25Retriever
from llama_index_ext_recursive.stores.columnar_store import ColumnarVectorStore
from llama_index_ext_recursive.tokenizer import MultilingualTokenizer

OWN_K = 4  # every retriever's own k; per-call top_k of 2 and 6 are below and above it

# doc id -> (title, category, year, chunks)
CORPUS: dict[str, tuple] = {
    "bees": (
        "Honeybee colonies",
        "biology",
        2019,
        [
            "The queen bee lays eggs in the hive all summer while workers feed the larvae.",
            "Worker bees collect nectar and pollen from flowers and carry water back to the colony.",
            "Drones mate with the queen; a colony of bees raises new queens before it swarms.",
        ],
    ),
    "coral": (
        "Coral reef ecology",
        "biology",
        2020,
        [
            "Coral polyps live in colonies and build reefs from calcium carbonate in warm water.",
            "Algae living inside coral tissue feed the polyps with sugar made from sunlight.",
            "Warm summer water bleaches coral when the polyps expel their algae.",
        ],
    ),
    "solar": (
        "Solar panels at home",
        "energy",
        2023,
        [
            "Solar panels convert sunlight into electricity with photovoltaic cells.",
            "An inverter turns direct current from the panels into alternating current for the home.",
            "Panels facing south produce the most electricity in summer in the north.",
        ],
    ),
    "bread": (
        "Sourdough baking",
        "food",
        2021,
        [
            "A sourdough starter is flour and water fermented by wild yeast.",
            "Bake the sourdough bread in a hot covered pot to trap the steam.",
            "Cold proofing the bread dough overnight deepens the flavour of the loaf.",
        ],
    ),
    "marathon": (
        "Marathon training",
        "sports",
        2022,
        [
            "Beginners build up to a marathon with one slow long run each week.",
            "Runners drink water and eat carbohydrates during a long summer run.",
            "Taper the training for two weeks before the marathon so the legs recover.",
        ],
    ),
    "lighthouse": (
        "Lighthouse history",
        "history",
        2018,
        [
            "Lighthouses guided ships at night with a fire and later with an oil lamp.",
            "The Fresnel lens let a lighthouse lamp shine far out to sea for the ships.",
            "Lighthouse keepers trimmed the wick and wound the clockwork that turned the light.",
        ],
    ),
}

# what every document of the corpus holds, for predicates written independently of the package
DOC_META = {doc: {"category": c, "year": y} for doc, (_, c, y, _) in CORPUS.items()}

VECTOR_STORE_INFO = VectorStoreInfo(
    content_info="Short articles on bees, coral reefs, solar panels, sourdough, marathons and lighthouses",
    metadata_info=[
        MetadataInfo(name="category", type="str", description="Topic area: biology, energy, food, sports or history"),
        MetadataInfo(name="year", type="int", description="Year the article was published"),
    ],
)


def corpus_nodes() -> list[TextNode]:
    """The chunks, each with its document's metadata and a ``ref_doc_id`` (SOURCE relationship).

    ``metadata["doc_id"]`` names the document too, as this package's own
    construction paths have accepted it; :meth:`Corpus.native_index` drops it.
    """
    nodes = []
    for doc, (title, category, year, chunks) in CORPUS.items():
        for i, text in enumerate(chunks):
            nodes.append(
                TextNode(
                    id_=f"{doc}-{i}",
                    text=text,
                    metadata={"doc_id": doc, "title": title, "category": category, "year": year},
                    relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id=doc)},
                )
            )
    return nodes


class Corpus:
    """The chunks embedded once with ``model``; :meth:`nodes` hands each factory its own copies."""

    def __init__(self, model: BaseEmbedding) -> None:
        self.model = CachedEmbedding(model)
        nodes = corpus_nodes()
        embeddings = embed_nodes(nodes, self.model)
        for node in nodes:
            node.embedding = embeddings[node.node_id]
        self._nodes = nodes

    def nodes(self) -> list[TextNode]:
        return [node.model_copy(deep=True) for node in self._nodes]

    def doc_nodes(self, doc: str) -> list[TextNode]:
        return [node for node in self.nodes() if node.ref_doc_id == doc]

    def numpy_index(self) -> VectorStoreIndex:
        storage = StorageContext.from_defaults(vector_store=NumpyVectorStore())
        return VectorStoreIndex(self.nodes(), storage_context=storage, embed_model=self.model)

    def columnar_index(self) -> VectorStoreIndex:
        storage = StorageContext.from_defaults(vector_store=ColumnarVectorStore())
        return VectorStoreIndex(self.nodes(), storage_context=storage, embed_model=self.model)

    def native_index(self) -> VectorStoreIndex:
        """An upstream app's index: default stores, and chunks that name their document
        by ``ref_doc_id`` alone (as ``SimpleDirectoryReader`` + a node parser make them)."""
        nodes = self.nodes()
        for node in nodes:
            del node.metadata["doc_id"]
        return VectorStoreIndex(nodes, embed_model=self.model)

    def faiss_index(self) -> VectorStoreIndex:
        dim = len(self._nodes[0].embedding)
        store = FaissMapVectorStore(faiss_index=faiss.IndexIDMap(faiss.IndexFlatIP(dim)))
        storage = StorageContext.from_defaults(vector_store=store)
        return VectorStoreIndex(self.nodes(), storage_context=storage, embed_model=self.model)


Factory = Callable[[Corpus, Any, str], BaseRetriever]


@dataclass(frozen=True)
class Kind:
    """One retriever under contract.

    Attributes:
        name: the test id.
        build: ``(corpus, filters, filter_policy) -> retriever`` with own k :data:`OWN_K`.
        parts: the explanation parts every hit must carry (``route``, ``fusion``, ``auto``).
        persists: whether the retriever holds state it must be able to persist.
    """

    name: str
    build: Factory
    parts: frozenset
    persists: bool


def _recursive(summary_mode: str, chunk_mode: str, score_mode: str, columnar: bool = False) -> Factory:
    def build(corpus: Corpus, filters: Any, filter_policy: str) -> BaseRetriever:
        stores = (
            {
                "chunk_vector_store": ColumnarVectorStore(tokenizer=MultilingualTokenizer()),
                "summary_vector_store": ColumnarVectorStore(tokenizer=MultilingualTokenizer()),
            }
            if columnar
            else {}
        )
        return RecursiveSummaryRetriever.from_nodes(
            corpus.nodes(),
            embed_model=corpus.model,
            similarity_top_k=OWN_K,
            summary_mode=summary_mode,
            chunk_mode=chunk_mode,
            score_mode=score_mode,
            filters=filters,
            filter_policy=filter_policy,
            **stores,
        )

    return build


def _recursive_from_index(corpus: Corpus, filters: Any, filter_policy: str) -> BaseRetriever:
    return RecursiveSummaryRetriever.from_index(
        corpus.native_index(), similarity_top_k=OWN_K, filters=filters, filter_policy=filter_policy
    )


def _hybrid_from_index(corpus: Corpus, filters: Any, filter_policy: str) -> BaseRetriever:
    return HybridFusionRetriever.from_index(
        corpus.native_index(), similarity_top_k=OWN_K, filters=filters, filter_policy=filter_policy
    )


def _recursive_dict(corpus: Corpus, filters: Any, filter_policy: str) -> BaseRetriever:
    """Upstream's ``RecursiveRetriever`` setup: summary ``IndexNode``s + one retriever per document."""
    summaries, children = [], {}
    for doc, (title, category, year, chunks) in CORPUS.items():
        summaries.append(
            IndexNode(
                id_=f"summary-{doc}",
                text=f"{title}. {' '.join(chunks)}",
                index_id=doc,
                metadata={"category": category, "year": year},
            )
        )
        storage = StorageContext.from_defaults(vector_store=NumpyVectorStore())
        index = VectorStoreIndex(corpus.doc_nodes(doc), storage_context=storage, embed_model=corpus.model)
        children[doc] = BackfillVectorRetriever(index, similarity_top_k=OWN_K)
    return RecursiveSummaryRetriever.from_retriever_dict(
        summaries,
        children,
        embed_model=corpus.model,
        similarity_top_k=OWN_K,
        filters=filters,
        filter_policy=filter_policy,
    )


def _hybrid(corpus: Corpus, filters: Any, filter_policy: str) -> BaseRetriever:
    return HybridFusionRetriever.from_nodes(
        corpus.nodes(),
        embed_model=corpus.model,
        similarity_top_k=OWN_K,
        filters=filters,
        filter_policy=filter_policy,
    )


def _bm25(corpus: Corpus, filters: Any, filter_policy: str) -> BaseRetriever:
    return MultilingualBM25Retriever.from_defaults(
        nodes=corpus.nodes(), similarity_top_k=OWN_K, filters=filters, filter_policy=filter_policy
    )


def _store_bm25(corpus: Corpus, filters: Any, filter_policy: str) -> BaseRetriever:
    """BM25 answered by the keyword column of a ColumnarVectorStore."""
    store = ColumnarVectorStore(tokenizer=MultilingualTokenizer())
    store.add([node for node in corpus.nodes()])
    return StoreBM25Retriever(store, similarity_top_k=OWN_K, filters=filters, filter_policy=filter_policy)


def _backfill(store: str) -> Factory:
    def build(corpus: Corpus, filters: Any, filter_policy: str) -> BaseRetriever:
        index = {
            "numpy": corpus.numpy_index,
            "faiss": corpus.faiss_index,
            "simple": corpus.native_index,
            "columnar": corpus.columnar_index,
        }[store]()
        return BackfillVectorRetriever(index, similarity_top_k=OWN_K, filters=filters, filter_policy=filter_policy)

    return build


def _auto(corpus: Corpus, filters: Any, filter_policy: str) -> BaseRetriever:
    return ValidatedAutoRetriever(
        corpus.numpy_index(),
        VECTOR_STORE_INFO,
        similarity_top_k=OWN_K,
        extra_filters=filters,
        filter_policy=filter_policy,
    )


def _auto_over_recursive(corpus: Corpus, filters: Any, filter_policy: str) -> BaseRetriever:
    """The auto-retriever searching through a recursive retriever over hybrid levels."""
    inner = _recursive("hybrid", "hybrid", "fused")(corpus, None, "merge")
    return ValidatedAutoRetriever(
        None,
        VECTOR_STORE_INFO,
        retriever=inner,
        similarity_top_k=OWN_K,
        extra_filters=filters,
        filter_policy=filter_policy,
    )


ROUTE, FUSION, AUTO = "route", "fusion", "auto"

KINDS: list[Kind] = [
    Kind("recursive-vector-vector-fused", _recursive("vector", "vector", "fused"), frozenset({ROUTE}), True),
    Kind("recursive-bm25-bm25-fused", _recursive("bm25", "bm25", "fused"), frozenset({ROUTE}), True),
    Kind("recursive-hybrid-hybrid-fused", _recursive("hybrid", "hybrid", "fused"), frozenset({ROUTE, FUSION}), True),
    Kind("recursive-vector-bm25-chunk", _recursive("vector", "bm25", "chunk"), frozenset({ROUTE}), True),
    Kind("recursive-bm25-hybrid-chunk", _recursive("bm25", "hybrid", "chunk"), frozenset({ROUTE, FUSION}), True),
    Kind("recursive-hybrid-vector-chunk", _recursive("hybrid", "vector", "chunk"), frozenset({ROUTE}), True),
    Kind(
        "recursive-columnar-hybrid-fused",
        _recursive("hybrid", "hybrid", "fused", columnar=True),
        frozenset({ROUTE, FUSION}),
        True,
    ),
    Kind("recursive-from-index", _recursive_from_index, frozenset({ROUTE, FUSION}), True),
    Kind("recursive-retriever-dict", _recursive_dict, frozenset({ROUTE}), False),
    Kind("hybrid", _hybrid, frozenset({FUSION}), True),
    Kind("hybrid-from-index", _hybrid_from_index, frozenset({FUSION}), True),
    Kind("bm25", _bm25, frozenset(), True),
    Kind("bm25-columnar-store", _store_bm25, frozenset(), False),
    Kind("backfill-numpy", _backfill("numpy"), frozenset(), True),
    Kind("backfill-faiss", _backfill("faiss"), frozenset(), True),
    Kind("backfill-simple", _backfill("simple"), frozenset(), True),
    Kind("backfill-columnar", _backfill("columnar"), frozenset(), False),  # the store persists itself
    Kind("auto", _auto, frozenset({AUTO}), True),
    Kind("auto-over-recursive", _auto_over_recursive, frozenset({AUTO, ROUTE, FUSION}), False),
]
KIND_BY_NAME: Mapping[str, Kind] = {kind.name: kind for kind in KINDS}


class Built:
    """Each (kind, construction filters, policy) built at most once per test module."""

    def __init__(self, corpus: Corpus) -> None:
        self.corpus = corpus
        self._cache: dict[tuple, BaseRetriever] = {}

    def get(self, name: str, filters: Mapping[str, Any] | None, filter_policy: str = "merge") -> BaseRetriever:
        key = (name, repr(filters), filter_policy)
        if key not in self._cache:
            self._cache[key] = KIND_BY_NAME[name].build(self.corpus, filters, filter_policy)
        return self._cache[key]
