"""The public retrieval datasets under ``../shared/data``, as the benchmarks use them.

The datasets are third-party (see ``../shared/data/README.md``) and stay outside
the repository: a clone without them runs every synthetic benchmark and none of
the dataset ones. Loading goes through the package's own
``llama_index_ext_recursive.eval.BeirDataset``, so a benchmark reads a dataset
exactly as ``llama-recursive eval`` does (same validation, same node metadata,
same ``max_queries`` cut). What was repeated on top of it lives here: where the
data is, the nodes with their vectors attached, the queries embedded in one
batch.

Conventions, as in the evaluation harness: a node's embedded text is its
``MetadataMode.EMBED`` content; for flat sets (no document-level qrels) the
title is prepended to the text, as BEIR does, unless a script says otherwise.
"""

from __future__ import annotations

import json
from itertools import islice
from pathlib import Path
from typing import Any

from llama_index.core.schema import MetadataMode, QueryBundle, TextNode

from harness import REPO

DATA_ROOT = (REPO.parent / "shared" / "data").resolve()
PathLike = str | Path


def folder(data: PathLike, root: PathLike | None = None) -> Path:
    """``data`` as a dataset folder: a path as given, or a bare name under ``root`` (:data:`DATA_ROOT`)."""
    path = Path(data)
    if root is not None or (len(path.parts) == 1 and not path.exists()):
        return Path(root or DATA_ROOT) / path
    return path


def load(
    data: PathLike,
    *,
    root: PathLike | None = None,
    max_queries: int | None = None,
    queries_from: PathLike | None = None,
):
    """A ``BeirDataset``: ``data`` (and ``queries_from``) are folders or names under ``root``."""
    from llama_index_ext_recursive.eval.data import BeirDataset

    return BeirDataset.load(
        folder(data, root),
        max_queries=max_queries,
        queries_from=folder(queries_from, root) if queries_from else None,
    )


def first_texts(data: PathLike, n: int, root: PathLike | None = None) -> list[str]:
    """The ``text`` of the first ``n`` corpus items, reading no further than that."""
    with open(folder(data, root) / "corpus.jsonl", encoding="utf-8") as handle:
        return [json.loads(line)["text"] for line in islice(handle, n)]


def embed_nodes(
    dataset: Any,
    model: Any,
    *,
    title_in_text: bool | None = None,
    embed_title: bool = True,
    show_progress: bool = False,
) -> list[TextNode]:
    """The dataset's nodes with ``model``'s vectors of their embedded text attached.

    ``title_in_text=None`` prepends the title on flat sets only (BEIR's
    convention); ``embed_title=False`` keeps a title held in metadata out of the
    embedded (and BM25-indexed) text.
    """
    if title_in_text is None:
        title_in_text = not dataset.hierarchical
    nodes = dataset.nodes(title_in_text=title_in_text, embed_title=embed_title)
    texts = [n.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes]
    for node, vector in zip(nodes, model.get_text_embedding_batch(texts, show_progress=show_progress)):
        node.embedding = vector
    return nodes


def query_vectors(dataset: Any, model: Any) -> dict[str, list[float]]:
    """Query id -> query vector, in ``dataset.queries`` order, embedded in one batch.

    ``CachedEmbedding`` answers a list of queries from the cache and embeds the
    misses together (the multilingual model is slow one query at a time);
    another model embeds them one by one.
    """
    qids = list(dataset.queries)
    texts = [dataset.queries[q] for q in qids]
    batch = getattr(model, "_get_query_embeddings", None)
    vectors = batch(texts) if batch is not None else [model.get_query_embedding(t) for t in texts]
    return dict(zip(qids, vectors))


def query_bundles(dataset: Any, model: Any) -> list[QueryBundle]:
    """One ``QueryBundle`` per query, its vector precomputed, so no timing includes the model."""
    vectors = query_vectors(dataset, model)
    return [QueryBundle(dataset.queries[q], embedding=v) for q, v in vectors.items()]
