"""A retrieval cache that is never stale: query embeddings and results, keyed by the index's content."""

from llama_index_ext_recursive.cache.backends import MemoryBackend, RedisBackend
from llama_index_ext_recursive.cache.retrieval_cache import CacheStats, RetrievalCache

__all__ = ["CacheStats", "MemoryBackend", "RedisBackend", "RetrievalCache"]
