"""Retrieval for LlamaIndex: summary-routed recursive retrieval, offline by default."""

from llama_index_ext_recursive.auto.retriever import ValidatedAutoRetriever
from llama_index_ext_recursive.bm25 import MultilingualBM25Retriever, MultilingualTokenizer
from llama_index_ext_recursive.builder import DocumentRecord
from llama_index_ext_recursive.embeddings import bundled_embed_model, resolve_embed_model
from llama_index_ext_recursive.filters import (
    FilteredQueryBundle,
    FilterError,
    FilterPolicy,
    UnknownFilterPolicy,
)
from llama_index_ext_recursive.backfill import BackfillVectorRetriever, StaleIdError, StalePolicy
from llama_index_ext_recursive.fusion import FusedNodeWithScore, FusionHit, HybridFusionRetriever
from llama_index_ext_recursive.persist import PersistError
from llama_index_ext_recursive.recursive import (
    ExplainedNodeWithScore,
    LinkError,
    LevelMode,
    RecursiveSummaryRetriever,
    RetrievalExplanation,
    ScoreMode,
)
from llama_index_ext_recursive.sample import (
    load_sample_documents,
    load_sample_questions,
    write_sample_dataset,
)
from llama_index_ext_recursive.store import NumpyVectorStore
from llama_index_ext_recursive.tools import as_retrieval_tool
from llama_index_ext_recursive.summarize import (
    ExtractiveSummarizer,
    LLMSummarizer,
    Summarizer,
    SummaryCache,
)

__version__ = "0.1.0"

__all__ = [
    "BackfillVectorRetriever",
    "StaleIdError",
    "StalePolicy",
    "UnknownFilterPolicy",
    "DocumentRecord",
    "ExplainedNodeWithScore",
    "ExtractiveSummarizer",
    "FilterError",
    "FilterPolicy",
    "FilteredQueryBundle",
    "FusedNodeWithScore",
    "FusionHit",
    "HybridFusionRetriever",
    "LLMSummarizer",
    "LinkError",
    "MultilingualBM25Retriever",
    "MultilingualTokenizer",
    "NumpyVectorStore",
    "PersistError",
    "LevelMode",
    "RecursiveSummaryRetriever",
    "RetrievalExplanation",
    "ScoreMode",
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
