"""Embedding models for benchmarks: synthetic ones that cost nothing, and the bundled real ones.

A benchmark of an index's build or query time should not time an embedding
model: the bundled all-MiniLM-L6-v2 embeds a few chunks per second on two
shared cores, which would drown everything else at scale. The synthetic models
here are deterministic and cheap:

- :class:`HashedWords`: a hashed bag of words. Texts that share words get
  close vectors, so lexical and dense searches agree about what is relevant.
- :class:`TopicEmbedding`: for a :class:`~harness.corpus.TopicCorpus`, maps a
  document's summary (which starts with its id) to the document's topic vector,
  so summaries embedded from text route like real ones.

Benchmarks of quality use the real bundled models, through :func:`real_model`,
behind the shared SQLite embedding cache so no text is embedded twice across
scripts and runs.
"""

from __future__ import annotations

import hashlib
import re
import zlib
from pathlib import Path
from typing import Any

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import PrivateAttr

from harness import REPO
from harness.corpus import unit

DEFAULT_CACHE = REPO / ".cache" / "embeddings.sqlite"
# "default" is the older spelling of "minilm" (recursive_sweep.py's --embed-model)
REAL_MODELS = ("minilm", "default", "multilingual")


class HashedWords(BaseEmbedding):
    """Hashed bag of words: each ``\\w+`` token adds 1 to bucket ``crc32(token) % dim``, unit length.

    A text without a word gets the uniform unit vector (every vector must be
    usable by cosine similarity).
    """

    dim: int = 384

    @classmethod
    def class_name(cls) -> str:
        return "HashedWords"

    def _vector(self, text: str) -> list[float]:
        vector = np.zeros(self.dim)
        for word in re.findall(r"\w+", text.lower()):
            vector[zlib.crc32(word.encode()) % self.dim] += 1.0
        norm = np.linalg.norm(vector)
        return (vector / norm if norm else vector + 1 / np.sqrt(self.dim)).tolist()

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._vector(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._vector(text)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._vector(query)


def hashed_words(dim: int = 384) -> HashedWords:
    """A :class:`HashedWords` of ``dim`` dimensions, named after them, in batches of 256."""
    return HashedWords(model_name=f"hashed-words-{dim}", dim=dim, embed_batch_size=256)


def _stable_seed(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "little")


class TopicEmbedding(BaseEmbedding):
    """Deterministic model for a topic corpus: a document's text maps to its topic.

    A text that starts with a registered document id followed by ``". "`` (the
    extractive summarizer puts the title first, and a topic corpus's title is
    its document id) is embedded as that document's topic vector; a registered
    text maps to its vector; anything else to a unit vector seeded by a stable
    hash of the text. ``calls`` counts the texts embedded.
    """

    model_name: str = "fake-topic-embedding"
    dim: int = 384
    calls: int = 0
    _by_text: dict[str, list[float]] = PrivateAttr(default_factory=dict)
    _by_prefix: dict[str, list[float]] = PrivateAttr(default_factory=dict)

    @classmethod
    def class_name(cls) -> str:
        return "TopicFakeEmbedding"

    def register_topic(self, doc_id: str, vector: np.ndarray) -> None:
        self._by_prefix[doc_id] = [float(x) for x in vector]

    def register_text(self, text: str, vector: np.ndarray) -> None:
        self._by_text[text] = [float(x) for x in vector]

    def _embed(self, text: str) -> list[float]:
        self.calls += 1
        hit = self._by_text.get(text)
        if hit is not None:
            return hit
        head, sep, _ = text.partition(". ")
        if sep and head in self._by_prefix:
            return self._by_prefix[head]
        return [float(x) for x in unit(np.random.default_rng(_stable_seed(text)).standard_normal(self.dim))]

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._embed(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._embed(text)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._embed(query)


def topic_embedding(corpus, lazy: bool = False) -> TopicEmbedding:
    """A :class:`TopicEmbedding` that knows every topic of ``corpus`` (a ``TopicCorpus``).

    ``lazy``: draw a document's topic when a text of it is embedded instead of
    registering every topic up front (100k topics as Python floats are a
    gigabyte, which a scale run would count as the index's memory).
    """
    if lazy:
        model = LazyTopicEmbedding(dim=corpus.dim)
        model._corpus = corpus
        return model
    model = TopicEmbedding(dim=corpus.dim)
    for d in range(corpus.docs):
        model.register_topic(corpus.doc_id(d), corpus.topic(d))
    return model


class LazyTopicEmbedding(TopicEmbedding):
    """:class:`TopicEmbedding` whose topics come from the corpus when asked for
    (same vectors, same identity: the class name and the probes' vectors are the same)."""

    _corpus: Any = PrivateAttr(default=None)

    def _embed(self, text: str) -> list[float]:
        head, sep, _ = text.partition(". ")
        corpus = self._corpus
        if sep and corpus is not None and head.startswith("doc") and head[3:].isdigit() and int(head[3:]) < corpus.docs:
            self.calls += 1
            return [float(x) for x in corpus.topic(int(head[3:]))]
        return super()._embed(text)


def real_model(name: str = "minilm", cache: str | Path | None = DEFAULT_CACHE) -> BaseEmbedding:
    """A bundled model (``minilm``: all-MiniLM-L6-v2; ``multilingual``: multilingual-e5-small).

    With ``cache`` (a SQLite file, by default the repository's
    ``.cache/embeddings.sqlite``, gitignored) the model is wrapped in the
    package's ``CachedEmbedding``; ``cache=None`` gives the bare model (for
    timing the model itself).
    """
    if name not in REAL_MODELS:
        raise ValueError(f"model {name!r} is not one of {REAL_MODELS}")
    from llama_index_ext_recursive.models import bundled_embed_model, bundled_multilingual_model

    model = bundled_multilingual_model() if name == "multilingual" else bundled_embed_model()
    if cache is None:
        return model
    from llama_index_ext_recursive.embedding_cache import CachedEmbedding

    return CachedEmbedding(model, cache)


def equal_calibration(retriever_class: type) -> dict[str, object]:
    """Keyword arguments fixing equal vector and BM25 weights, for a recursive retriever over a topic corpus.

    Calibration fits the fusion weights on pseudo-queries cut from the corpus;
    :class:`TopicEmbedding` cannot embed those meaningfully, so the fit would drop
    every dense search. Equal weights make every search run, as on real text.
    Empty for a version of the package without calibration (before/after runs).
    """
    import inspect

    if "calibration" not in inspect.signature(retriever_class.__init__).parameters:
        return {}
    try:
        from llama_index_ext_recursive.retrievers.calibration import Calibration, ScriptCalibration
    except ImportError:  # older layout
        from llama_index_ext_recursive.retrievers.calibrate import Calibration, ScriptCalibration

    equal = Calibration({"latin": ScriptCalibration(0, [], [0.5, 0.5], [])}, ["vector", "bm25"])
    return {"calibration": {"documents": equal, "chunks": equal}}
