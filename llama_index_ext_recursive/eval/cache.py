"""An embedding cache keyed by model and text hash, persisted in SQLite.

Wrap a model once and give the wrapper to every retriever of a run: each text
is embedded at most once, across retrievers and across runs.
"""

from __future__ import annotations

import asyncio
import hashlib
import sqlite3
import threading
from pathlib import Path
from typing import Dict, List, Union

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import PrivateAttr

from llama_index_ext_recursive.models import embed_model_name


class CachedEmbedding(BaseEmbedding):
    """A ``BaseEmbedding`` that answers from a cache and embeds only misses.

    Args:
        model: the embedding model to wrap.
        path: SQLite file for the cache (``None``: in memory only).
    """

    computed: int = 0
    _model: BaseEmbedding = PrivateAttr()
    _db: sqlite3.Connection = PrivateAttr()
    _memory: Dict[str, List[float]] = PrivateAttr(default_factory=dict)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    def __init__(self, model: BaseEmbedding, path: Union[str, Path, None] = None) -> None:
        super().__init__(model_name=embed_model_name(model), embed_batch_size=model.embed_batch_size)
        self._model = model
        if path is not None:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(path) if path else ":memory:", check_same_thread=False)
        self._db.execute("CREATE TABLE IF NOT EXISTS embeddings (key TEXT PRIMARY KEY, vector BLOB)")

    @classmethod
    def class_name(cls) -> str:
        return "CachedEmbedding"

    def _key(self, kind: str, text: str) -> str:
        return hashlib.sha256(f"{self.model_name}\x00{kind}\x00{text}".encode()).hexdigest()

    def _lookup(self, keys: List[str]) -> Dict[str, List[float]]:
        found = {k: self._memory[k] for k in keys if k in self._memory}
        missing = [k for k in keys if k not in found]
        for start in range(0, len(missing), 500):
            chunk = missing[start : start + 500]
            rows = self._db.execute(
                f"SELECT key, vector FROM embeddings WHERE key IN ({','.join('?' * len(chunk))})", chunk
            ).fetchall()
            for key, blob in rows:
                found[key] = self._memory[key] = np.frombuffer(blob, dtype=np.float32).tolist()
        return found

    def _store(self, items: Dict[str, List[float]]) -> None:
        self._memory.update(items)
        self._db.executemany(
            "INSERT OR REPLACE INTO embeddings VALUES (?, ?)",
            [(k, np.asarray(v, dtype=np.float32).tobytes()) for k, v in items.items()],
        )
        self._db.commit()

    def _cached(self, kind: str, texts: List[str]) -> List[List[float]]:
        with self._lock:
            keys = [self._key(kind, t) for t in texts]
            found = self._lookup(keys)
            todo = {k: t for k, t in zip(keys, texts) if k not in found}
            if todo:
                texts_todo = list(todo.values())
                if kind == "query":
                    from llama_index_ext_recursive.retrievers.calibrate import embed_queries

                    vectors = embed_queries(self._model, texts_todo)  # batched, query prompt kept
                else:
                    vectors = self._model.get_text_embedding_batch(texts_todo)
                self.computed += len(texts_todo)
                # stored as float32: fresh and cached answers are the same numbers
                new = {k: np.asarray(v, dtype=np.float32).tolist() for k, v in zip(todo, vectors)}
                self._store(new)
                found.update(new)
            return [found[k] for k in keys]

    def _get_query_embedding(self, query: str) -> List[float]:
        return self._cached("query", [query])[0]

    def _get_query_embeddings(self, queries: List[str]) -> List[List[float]]:
        """Many queries at once (what calibration and the harness use)."""
        return self._cached("query", queries)

    def _get_text_embedding(self, text: str) -> List[float]:
        return self._cached("text", [text])[0]

    def _get_text_embeddings(self, texts: List[str]) -> List[List[float]]:
        return self._cached("text", texts)

    async def _aget_query_embedding(self, query: str) -> List[float]:
        return await asyncio.to_thread(self._get_query_embedding, query)

    async def _aget_text_embedding(self, text: str) -> List[float]:
        return await asyncio.to_thread(self._get_text_embedding, text)

    def __bool__(self) -> bool:
        # a model is always "given": without this, `embed_model or default`
        # would count the rows of the cache (a SQL query) on every retrieval
        return True

    def __len__(self) -> int:
        return self._db.execute("SELECT COUNT(*) FROM embeddings").fetchone()[0]

    def close(self) -> None:
        self._db.close()
