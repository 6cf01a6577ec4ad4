"""Named retrievers for the harness, all built from the same nodes and embeddings.

Upstream baselines are built exactly as a LlamaIndex user builds them today;
ours register here as each capability lands (``register``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, List, Sequence

from llama_index.core import VectorStoreIndex
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.llms import MockLLM
from llama_index.core.retrievers import QueryFusionRetriever, RecursiveRetriever
from llama_index.core.schema import BaseNode, IndexNode

from llama_index_ext_recursive.builder import build_documents, group_nodes
from llama_index_ext_recursive.recursive import RecursiveSummaryRetriever


@dataclass
class BuildContext:
    """What every retriever factory gets: nodes that carry embeddings, the model, k."""

    nodes: List[BaseNode]
    embed_model: BaseEmbedding
    top_k: int = 10
    doc_id_key: str = "doc_id"


Factory = Callable[[BuildContext], BaseRetriever]
REGISTRY: Dict[str, Factory] = {}


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


def parse_names(names: str) -> List[str]:
    """``"a,b"`` -> ``["a", "b"]``, every name checked against the registry."""
    chosen = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in chosen if n not in REGISTRY]
    if unknown or not chosen:
        raise KeyError(
            f"unknown retriever(s) {unknown or names!r}; known: {', '.join(sorted(REGISTRY))}"
        )
    return chosen


@register("upstream-vector")
def upstream_vector(ctx: BuildContext) -> BaseRetriever:
    """``VectorStoreIndex(nodes).as_retriever(similarity_top_k=k)`` (SimpleVectorStore)."""
    return VectorStoreIndex(ctx.nodes, embed_model=ctx.embed_model).as_retriever(
        similarity_top_k=ctx.top_k
    )


@register("vector")
def vector(ctx: BuildContext) -> BaseRetriever:
    """Ours: ``BackfillVectorRetriever`` over the embedded default store, ``NumpyVectorStore``."""
    from llama_index.core import StorageContext

    from llama_index_ext_recursive.backfill import BackfillVectorRetriever
    from llama_index_ext_recursive.store import NumpyVectorStore

    index = VectorStoreIndex(
        ctx.nodes,
        storage_context=StorageContext.from_defaults(vector_store=NumpyVectorStore()),
        embed_model=ctx.embed_model,
    )
    return BackfillVectorRetriever(index, similarity_top_k=ctx.top_k)


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
        mode="reciprocal_rerank",
        similarity_top_k=ctx.top_k,
    )


def _summary_texts(ctx: BuildContext) -> Dict[str, str]:
    built = build_documents(group_nodes(ctx.nodes, ctx.doc_id_key), ctx.doc_id_key)
    return {s.index_id: s.text for s in built.summary_nodes}


@register("upstream-recursive")
def upstream_recursive(ctx: BuildContext) -> BaseRetriever:
    """The tutorial recipe: one index per document (top-3), summary IndexNodes
    (our summaries, embedded from their text), top index with top-1, RecursiveRetriever."""
    by_doc: Dict[str, List[BaseNode]] = {}
    for node in ctx.nodes:
        by_doc.setdefault(str(node.metadata[ctx.doc_id_key]), []).append(node)
    retrievers: Dict[str, BaseRetriever] = {
        doc_id: VectorStoreIndex(nodes, embed_model=ctx.embed_model).as_retriever(similarity_top_k=3)
        for doc_id, nodes in by_doc.items()
    }
    summaries: Sequence[IndexNode] = [
        IndexNode(text=text, index_id=doc_id) for doc_id, text in _summary_texts(ctx).items()
    ]
    top = VectorStoreIndex(list(summaries), embed_model=ctx.embed_model).as_retriever(
        similarity_top_k=1
    )
    return RecursiveRetriever("vector", retriever_dict={"vector": top, **retrievers})


@register("recursive")
def recursive(ctx: BuildContext) -> BaseRetriever:
    """Ours, with its defaults: ``RecursiveSummaryRetriever.from_nodes``."""
    return RecursiveSummaryRetriever.from_nodes(
        ctx.nodes, doc_id_key=ctx.doc_id_key, embed_model=ctx.embed_model,
        similarity_top_k=ctx.top_k, show_progress=False,
    )


@register("recursive-hybrid")
def recursive_hybrid(ctx: BuildContext) -> BaseRetriever:
    """Ours: ``RecursiveSummaryRetriever`` with hybrid routing and hybrid chunk ranking."""
    return RecursiveSummaryRetriever.from_nodes(
        ctx.nodes, doc_id_key=ctx.doc_id_key, embed_model=ctx.embed_model,
        similarity_top_k=ctx.top_k, show_progress=False,
        summary_mode="hybrid", chunk_mode="hybrid",
    )


@register("bm25")
def bm25(ctx: BuildContext) -> BaseRetriever:
    """Ours: ``MultilingualBM25Retriever`` (jieba for Chinese, no zero-score filler)."""
    from llama_index_ext_recursive.bm25 import MultilingualBM25Retriever

    return MultilingualBM25Retriever.from_defaults(nodes=ctx.nodes, similarity_top_k=ctx.top_k)


@register("hybrid")
def hybrid(ctx: BuildContext) -> BaseRetriever:
    """Ours: ``HybridFusionRetriever.from_nodes`` (vector + multilingual BM25, weighted RRF)."""
    from llama_index_ext_recursive.fusion import HybridFusionRetriever

    return HybridFusionRetriever.from_nodes(
        ctx.nodes, embed_model=ctx.embed_model, similarity_top_k=ctx.top_k
    )
