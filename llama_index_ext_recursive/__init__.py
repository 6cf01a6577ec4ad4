"""Retrieval for LlamaIndex: summary-routed recursive retrieval, offline by default."""

# first: tqdm.auto imported without its "IProgress not found" warning, before bm25s imports it
from llama_index_ext_recursive import progress  # noqa: F401

# isort: split
from llama_index_ext_recursive.auto.retriever import ValidatedAutoRetriever
from llama_index_ext_recursive.cache import CacheStats, RetrievalCache
from llama_index_ext_recursive.display import RetrievalView
from llama_index_ext_recursive.embedding_cache import CachedEmbedding
from llama_index_ext_recursive.errors import LlamaIndexExtRecursiveError
from llama_index_ext_recursive.filters import (
    FilterError,
    FilterPolicy,
    UnknownFilterPolicy,
)
from llama_index_ext_recursive.models import bundled_embed_model, resolve_embed_model
from llama_index_ext_recursive.multilingual import MultilingualE5Embedding
from llama_index_ext_recursive.persist import PersistError
from llama_index_ext_recursive.query import FilteredQueryBundle
from llama_index_ext_recursive.recursive.build import DocumentRecord
from llama_index_ext_recursive.recursive.index import RecursiveIndex
from llama_index_ext_recursive.recursive.links import LinkError
from llama_index_ext_recursive.recursive.retriever import (
    LevelMode,
    RecursiveSummaryRetriever,
    ScoreMode,
)
from llama_index_ext_recursive.recursive.summarize import (
    ExtractiveSummarizer,
    LLMSummarizer,
    Summarizer,
    SummaryCache,
)
from llama_index_ext_recursive.results import (
    DocumentEvidence,
    DocumentWithScore,
    ExplainedNodeWithScore,
    Explanation,
    FusedNodeWithScore,
    FusionHit,
    RetrievalExplanation,
)
from llama_index_ext_recursive.retrievers.bm25 import MultilingualBM25Retriever, MultilingualTokenizer
from llama_index_ext_recursive.retrievers.fusion import HybridFusionRetriever
from llama_index_ext_recursive.retrievers.store_bm25 import StoreBM25Retriever
from llama_index_ext_recursive.retrievers.vector import BackfillVectorRetriever, StaleIdError, StalePolicy
from llama_index_ext_recursive.sample import (
    load_sample_documents,
    load_sample_questions,
    write_sample_dataset,
)
from llama_index_ext_recursive.stores.columnar_store import ColumnarVectorStore
from llama_index_ext_recursive.stores.numpy_store import NumpyVectorStore
from llama_index_ext_recursive.tools import as_retrieval_tool

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    """``SummaryIndex``, the earlier name of this package's index class, with a warning:
    the name shadowed ``llama_index.core.SummaryIndex``, an unrelated upstream class."""
    if name == "SummaryIndex":
        import warnings

        warnings.warn(
            "llama_index_ext_recursive.SummaryIndex is now RecursiveIndex (the old name shadowed "
            "llama_index.core.SummaryIndex); import RecursiveIndex instead",
            DeprecationWarning,
            stacklevel=2,
        )
        return RecursiveIndex
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "BackfillVectorRetriever",
    "CacheStats",
    "CachedEmbedding",
    "ColumnarVectorStore",
    "StaleIdError",
    "StalePolicy",
    "UnknownFilterPolicy",
    "DocumentEvidence",
    "DocumentRecord",
    "DocumentWithScore",
    "ExplainedNodeWithScore",
    "Explanation",
    "ExtractiveSummarizer",
    "FilterError",
    "FilterPolicy",
    "FilteredQueryBundle",
    "FusedNodeWithScore",
    "FusionHit",
    "HybridFusionRetriever",
    "LLMSummarizer",
    "LinkError",
    "LlamaIndexExtRecursiveError",
    "MultilingualBM25Retriever",
    "MultilingualE5Embedding",
    "MultilingualTokenizer",
    "NumpyVectorStore",
    "PersistError",
    "LevelMode",
    "RecursiveSummaryRetriever",
    "RetrievalCache",
    "RetrievalExplanation",
    "RetrievalView",
    "ScoreMode",
    "StoreBM25Retriever",
    "RecursiveIndex",
    "Summarizer",
    "SummaryCache",
    "ValidatedAutoRetriever",
    "as_retrieval_tool",
    "bundled_embed_model",
    "load_sample_documents",
    "load_sample_questions",
    "resolve_embed_model",
    "write_sample_dataset",
]
