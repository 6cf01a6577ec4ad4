"""Query embeddings in batches, with the model's query prompt and no events.

``BaseEmbedding`` has no batch API for queries (``get_text_embedding_batch``
would skip a model's query instruction, e.g. BGE's or E5's), and one call per
query is slow for the thousands of pseudo-queries fusion calibration embeds.
:func:`embed_queries` uses the fastest way a model offers. Calibration
(:mod:`~llama_index_ext_recursive.retrievers.calibrate`) and the embedding
cache (:mod:`~llama_index_ext_recursive.embedding_cache`, for the queries it
does not hold) both embed queries this way, so it stands below both, beside
the models.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

from llama_index.core.base.embeddings.base import BaseEmbedding

from llama_index_ext_recursive.model_identity import model_identity
from llama_index_ext_recursive.models import embed_model_name
from llama_index_ext_recursive.validation import check_vectors

QUERY_BATCH = 256  # queries per embedding call (and per progress-bar step)


def embed_queries(model: BaseEmbedding, queries: Sequence[str], progress: Any | None = None) -> list[list[float]]:
    """Query embeddings, ``QUERY_BATCH`` queries per model call, without events.

    ``BaseEmbedding`` has no batch API for queries (``get_text_embedding_batch``
    would skip a model's query instruction, e.g. BGE's or E5's), so: a model
    with ``corpus_query_embeddings(queries)`` (a
    :class:`~llama_index_ext_recursive.embedding_cache.CachedEmbedding`) answers
    from its cache, since these are pseudo-queries cut from the corpus; a model
    with a ``_get_query_embeddings(queries)`` method is called with each batch;
    ``HuggingFaceEmbedding`` encodes each batch with its ``"query"`` prompt,
    as its own ``_get_query_embedding`` does one query; a model that embeds a
    query exactly as a text (its :func:`~llama_index_ext_recursive.model_identity.model_identity`
    probes say so: most API models, OpenAI's included) is called with each
    batch through its text API, so an API gets one request per batch, not one
    per query; any other model (one with a query prompt it keeps to itself) is
    called once per query through ``_get_query_embedding``.

    Args:
        model: the embedding model.
        queries: the query texts.
        progress: a tqdm bar to advance by one per query.
    """
    batch_call = _query_batch_function(model)
    out: list[list[float]] = []
    for start in range(0, len(queries), QUERY_BATCH):
        batch = list(queries[start : start + QUERY_BATCH])
        if batch_call is not None:
            vectors = list(batch_call(batch))
        else:
            vectors = [model._get_query_embedding(text) for text in batch]
        if len(vectors) != len(batch):
            raise ValueError(
                f"embedding model {type(model).__name__} returned {len(vectors)} vectors for "
                f"{len(batch)} queries; it must return one per query"
            )
        if vectors:
            check_vectors(vectors, embed_model_name(model), "the pseudo-queries calibrating fusion")
        out.extend(vectors)
        if progress is not None:
            progress.update(len(batch))
    return out


def _query_batch_function(model: BaseEmbedding) -> Callable[[list[str]], Any] | None:
    corpus = getattr(model, "corpus_query_embeddings", None)  # a build cache keeps corpus text
    if callable(corpus):
        return corpus
    batch = getattr(model, "_get_query_embeddings", None)
    if callable(batch):
        return batch
    # a HuggingFaceEmbedding's class has imported its module; importing it here for any
    # other model would load torch and sentence-transformers (9 s) for an isinstance check
    huggingface = sys.modules.get("llama_index.embeddings.huggingface")
    if huggingface is not None and isinstance(model, huggingface.HuggingFaceEmbedding):
        return lambda texts: model._embed(texts, prompt_name="query")
    if model_identity(model).embeds_queries_as_texts:
        return model._get_text_embeddings
    return None
