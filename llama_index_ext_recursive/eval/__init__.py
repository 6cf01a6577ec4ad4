"""Evaluation: BEIR-layout datasets, an embedding cache, named retrievers, trec-exact metrics."""

from llama_index_ext_recursive.embedding_cache import CachedEmbedding
from llama_index_ext_recursive.eval.data import BeirDataset, DatasetError, from_pairs
from llama_index_ext_recursive.eval.harness import Comparison, RetrieverReport, compare, markdown_table, plot
from llama_index_ext_recursive.eval.registry import (
    REGISTRY,
    BuildContext,
    OracleRoutingRetriever,
    build_retriever,
    register,
)
from llama_index_ext_recursive.eval.runner import (
    EvalResult,
    RetrievalRun,
    evaluate_pairs,
    evaluate_retriever,
    run_queries,
    score,
)

__all__ = [
    "BeirDataset",
    "BuildContext",
    "CachedEmbedding",
    "Comparison",
    "DatasetError",
    "EvalResult",
    "OracleRoutingRetriever",
    "REGISTRY",
    "RetrievalRun",
    "RetrieverReport",
    "build_retriever",
    "compare",
    "evaluate_pairs",
    "evaluate_retriever",
    "from_pairs",
    "markdown_table",
    "plot",
    "register",
    "run_queries",
    "score",
]
