"""Moved: :mod:`llama_index_ext_recursive.embedding_cache` (builds use it too)."""

from llama_index_ext_recursive.embedding_cache import CachedEmbedding  # noqa: F401
