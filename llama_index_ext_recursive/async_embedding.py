"""Embedding models whose async methods run the sync ones in a worker thread.

Upstream's ``BaseEmbedding`` async methods default to calling the sync ones on
the event loop, which blocks it for as long as a text takes to embed. The
package's models compute in-process (the bundled C engine, a SQLite cache in
front of any model), so each async call is handed to a worker thread instead
(``asyncio.to_thread``), and ``aretrieve`` never blocks the loop.
"""

from __future__ import annotations

import asyncio

from llama_index.core.base.embeddings.base import BaseEmbedding


class ThreadedAsyncEmbedding(BaseEmbedding):
    """A ``BaseEmbedding`` whose ``_aget_*`` methods run its ``_get_*`` methods in a worker thread."""

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return await asyncio.to_thread(self._get_query_embedding, query)

    async def _aget_text_embedding(self, text: str) -> list[float]:
        return await asyncio.to_thread(self._get_text_embedding, text)

    async def _aget_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return await asyncio.to_thread(self._get_text_embeddings, texts)
