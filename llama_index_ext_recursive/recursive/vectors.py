"""The vectors of a summary index: chunk embeddings, routing vectors, reuse of stored ones.

Every vector, computed or supplied with its node or read from an existing
index's store, is checked (finite, one dimension) before anything is indexed,
so a NaN from the model or a stray vector is refused naming the model and the
node. Summaries are routed by :class:`~llama_index_ext_recursive.recursive.build.SummaryEmbedding`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

import numpy as np
from llama_index.core import VectorStoreIndex
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.indices.utils import embed_nodes
from llama_index.core.schema import BaseNode
from llama_index.core.vector_stores.simple import SimpleVectorStore

from llama_index_ext_recursive.models import embed_model_name
from llama_index_ext_recursive.recursive.build import BuiltDocuments, SummaryEmbedding
from llama_index_ext_recursive.validation import check_vectors

logger = logging.getLogger(__name__)

_Node = TypeVar("_Node", bound=BaseNode)


def _unit(vector: Sequence[float]) -> np.ndarray:
    array = np.asarray(vector, dtype=np.float64)
    norm = np.linalg.norm(array)
    return array / norm if norm else array


def attach_embeddings(
    built: BuiltDocuments,
    embed_model: BaseEmbedding,
    summary_embedding: SummaryEmbedding = SummaryEmbedding.TEXT,
    show_progress: bool = False,
    dim: int | None = None,
) -> int | None:
    """Embed chunks that lack an embedding, then set each summary's routing vector.

    Works on the builder's own copies; chunks that already carry embeddings
    are not embedded again. Every vector, computed or supplied with its node,
    is checked before any is attached: finite, and one dimension for all (and
    ``dim`` when given), so a NaN from the model or a stray supplied vector is
    refused, naming the model and the chunk, before anything is indexed.

    Args:
        built: :func:`build_documents` output.
        embed_model: the model for chunks without an embedding (and summaries).
        summary_embedding: what summaries are routed by (:class:`SummaryEmbedding`).
        show_progress: show the embedding progress bar.
        dim: the dimension the index already holds (e.g. in ``add_nodes``).

    Returns:
        The vectors' dimension (``dim`` when there are no chunks).

    Raises:
        ValueError: a vector is empty, has NaN/inf values or the wrong dimension.
    """
    mode = SummaryEmbedding(summary_embedding)
    model_name = getattr(embed_model, "model_name", None) or type(embed_model).__name__
    supplied = {c.node_id for c in built.chunk_nodes if c.embedding is not None}
    vectors = embed_nodes(built.chunk_nodes, embed_model, show_progress=show_progress)

    def chunk(node: BaseNode) -> str:
        source = "its own embedding, supplied with the node" if node.node_id in supplied else "computed"
        return f"chunk {node.node_id!r} of document {node.ref_doc_id!r} ({source})"

    dim = _check_embeddings(built.chunk_nodes, vectors, model_name, chunk, dim)
    texts = (
        embed_nodes(built.summary_nodes, embed_model, show_progress=show_progress)
        if mode == SummaryEmbedding.BLEND
        else {}
    )
    if texts:
        _check_embeddings(built.summary_nodes, texts, model_name, lambda n: f"the summary of {n.index_id!r}", dim)
    for node in built.chunk_nodes:
        node.embedding = vectors[node.node_id]
    if mode == SummaryEmbedding.TEXT:
        return dim  # summaries are embedded from their text by the index
    for summary in built.summary_nodes:
        record = built.records[summary.index_id]
        centroid = _unit(np.mean([vectors[c] for c in record.chunk_ids], axis=0))
        if mode == SummaryEmbedding.BLEND:
            centroid = _unit(centroid + _unit(texts[summary.node_id]))
        summary.embedding = centroid.tolist()
    return dim


def _check_embeddings(
    nodes: Sequence[_Node],
    vectors: Mapping[str, Sequence[float]],
    model_name: str,
    describe: Callable[[_Node], str],
    dim: int | None,
    block: int = 4096,
) -> int | None:
    """:func:`check_vectors` over every node's vector, ``block`` rows at a time.

    The bulk check is one numpy pass per block; only a failing vector is
    checked alone, so the error names its node.
    """
    for node in nodes:
        vector = vectors[node.node_id]
        if dim is None and len(vector):
            dim = len(vector)
        if not len(vector) or len(vector) != dim:
            check_vectors(vector, model_name, describe(node), dim=dim)
    for start in range(0, len(nodes), block):
        part = nodes[start : start + block]
        rows = np.asarray([vectors[n.node_id] for n in part], dtype=np.float64)
        finite = np.isfinite(rows).all(axis=1)
        if not finite.all():
            bad = part[int(np.argmin(finite))]
            check_vectors(vectors[bad.node_id], model_name, describe(bad), dim=dim)
    return dim


def embed_summaries(built: BuiltDocuments, embed_model: BaseEmbedding, dim: int | None) -> None:
    """Embed (and check) summaries that still lack a vector (``SummaryEmbedding.TEXT``)
    before anything is indexed, so neither a build nor an update's swap calls the model."""
    todo = [s for s in built.summary_nodes if s.embedding is None]
    if not todo:
        return
    vectors = embed_nodes(todo, embed_model)
    name = embed_model_name(embed_model)
    for summary in todo:
        check_vectors(vectors[summary.node_id], name, f"the summary of {summary.index_id!r}", dim)
        summary.embedding = vectors[summary.node_id]


def _stored_vectors(index: VectorStoreIndex, node_ids: list[str]) -> dict[str, list[float]]:
    """The vectors an index's store holds for ``node_ids`` (those it can tell)."""
    store = index.vector_store
    if isinstance(store, SimpleVectorStore):
        table = store.data.embedding_dict
        return {i: table[i] for i in node_ids if i in table}
    try:
        return {n.node_id: n.embedding for n in store.get_nodes(node_ids) if n.embedding is not None}
    except Exception:  # a store without get_nodes: those nodes are embedded again
        logger.debug("%s cannot return stored vectors", type(store).__name__, exc_info=True)
        return {}


def with_stored_embeddings(index: VectorStoreIndex, nodes: list[BaseNode]) -> list[BaseNode]:
    """Copies of an index's nodes carrying the vectors its store holds for them."""
    vectors = _stored_vectors(index, [n.node_id for n in nodes])
    missing = [n.node_id for n in nodes if n.node_id not in vectors and n.embedding is None]
    if missing:
        logger.warning(
            "%s holds no vector for %d of %d nodes (e.g. %r); they are embedded again",
            type(index.vector_store).__name__,
            len(missing),
            len(nodes),
            missing[0],
        )
    out = []
    for node in nodes:
        copy = node.model_copy()
        if node.node_id in vectors:
            copy.embedding = list(vectors[node.node_id])
        out.append(copy)
    return out
