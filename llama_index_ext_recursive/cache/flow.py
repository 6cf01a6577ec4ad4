"""How a retriever uses a :class:`~.retrieval_cache.RetrievalCache`, written once as steps.

Every retriever of the package answers through these generators
(:mod:`~llama_index_ext_recursive.steps`), driven by ``steps.run`` in
``_retrieve`` and by ``steps.arun`` in ``_aretrieve``: so the cached and the
uncached paths, sync and async, take the same steps, and a cache in another
process (Redis) is read and written off the event loop.

- :func:`query_vector`: the query's vector from the cache (keyed by the
  model's identity and the exact texts), else from the model, then kept.
- :func:`cached`: a result from the cache, else computed and kept under the
  key the computation returns (taken while the index cannot change, so a
  result is never kept under a newer generation than the one it was computed
  on).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import QueryBundle

from llama_index_ext_recursive.cache.retrieval_cache import RetrievalCache
from llama_index_ext_recursive.model_identity import model_identity
from llama_index_ext_recursive.steps import Steps

__all__ = ["Embed", "Keep", "Lookup", "cached", "query_vector", "vector_key"]

T = TypeVar("T")


@dataclass(frozen=True)
class Lookup:
    """The cached value at ``key`` of ``level`` (``None``: a miss)."""

    cache: RetrievalCache
    level: str
    key: str

    def run(self) -> Any:
        return self.cache.get(self.level, self.key)

    async def arun(self) -> Any:
        return await self.cache.aget(self.level, self.key)


@dataclass(frozen=True)
class Keep:
    """Keep ``value`` at ``key`` of ``level``."""

    cache: RetrievalCache
    level: str
    key: str
    value: Any

    def run(self) -> None:
        self.cache.put(self.level, self.key, self.value)

    async def arun(self) -> None:
        await self.cache.aput(self.level, self.key, self.value)


@dataclass(frozen=True)
class Embed:
    """The model's vector for the query texts (several are averaged, as upstream does)."""

    model: BaseEmbedding
    texts: Sequence[str]

    def run(self) -> list[float]:
        return self.model.get_agg_embedding_from_queries(list(self.texts))

    async def arun(self) -> list[float]:
        return await self.model.aget_agg_embedding_from_queries(list(self.texts))


def vector_key(cache: RetrievalCache, model: BaseEmbedding, texts: Sequence[str]) -> str:
    """The key of the vector ``model`` gives ``texts``: the model's identity (not its name:
    two models of one name never share a vector) and the exact texts."""
    return cache.key("embeddings", {"model": model_identity(model).cache_key(), "texts": list(texts)})


def query_vector(cache: RetrievalCache | None, model: BaseEmbedding, bundle: QueryBundle) -> Steps[list[float] | None]:
    """The bundle's own vector, else the cached one, else the model's (then kept);
    ``None`` when the bundle has no text to embed."""
    if bundle.embedding is not None or not bundle.embedding_strs:
        return bundle.embedding
    texts = list(bundle.embedding_strs)
    key = vector_key(cache, model, texts) if cache is not None and cache.embeddings else None
    if cache is not None and key is not None:
        (found,) = yield (Lookup(cache, "embeddings", key),)
        if found is not None:
            return found
    (vector,) = yield (Embed(model, texts),)
    if cache is not None and key is not None and vector is not None:
        yield (Keep(cache, "embeddings", key, list(vector)),)
    return vector


def cached(
    cache: RetrievalCache | None,
    level: str,
    key: str | None,
    compute: Callable[[], Steps[tuple[str | None, T]]],
) -> Steps[T]:
    """The value cached at ``key``, else ``compute``'s, kept under the key it returns.

    Args:
        cache: the retriever's cache (``None``: compute).
        level: ``"documents"`` or ``"results"``.
        key: where to look (``None``: results of this call are not cached).
        compute: steps to the value and the key to keep it under, taken with the
            value (the index may have changed since ``key`` was taken; ``None``:
            not kept).
    """
    if cache is not None and key is not None:
        (found,) = yield (Lookup(cache, level, key),)
        if found is not None:
            return found
    kept_key, value = yield from compute()
    if cache is not None and kept_key is not None:
        yield (Keep(cache, level, kept_key, value),)
    return value
