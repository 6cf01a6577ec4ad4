"""How :class:`~llama_index_ext_recursive.stores.numpy_store.NumpyVectorStore` answers a query.

One matrix product over float32 unit rows and a screen (any row whose
float32 score is within the float32 error bound of the (k+1)-th survives),
then float64 scores for the survivors; near-ties replay upstream's heap so
ids and their order are exactly ``SimpleVectorStore``'s (see the store's
module docstring).
"""

from __future__ import annotations

import heapq
import math

import numpy as np
from llama_index.core.base.embeddings.base import similarity as upstream_similarity
from llama_index.core.vector_stores.types import VectorStoreQuery, VectorStoreQueryResult

from llama_index_ext_recursive.stores.numpy_rows import RowState

TIE_TOLERANCE = 1e-10  # scores this close may be equal in upstream's arithmetic


def answer_query(state: RowState, query: VectorStoreQuery) -> VectorStoreQueryResult:
    n = state.n
    if query.query_embedding is None or n == state.n_dead:
        return VectorStoreQueryResult(similarities=[], ids=[])
    scope: np.ndarray | None = None  # None: every live row
    if query.node_ids is not None:
        scope = state.allowed(query.node_ids)
    rows: np.ndarray | None = None  # None: every row (and none is dead)
    filters = query.filters
    if filters is not None and filters.filters:
        base = scope if scope is not None else state.alive[:n]
        if state.no_meta[:n].any():  # upstream looks metadata up by id and fails the same way
            missing = np.flatnonzero(state.no_meta[:n] & base)
            if len(missing):
                raise KeyError(state.ids[missing[0]])
        rows = state.equality_rows(filters)  # e.g. the ref_doc_id routing filter
        if rows is not None:
            rows = rows[base[rows]]
        else:
            rows = np.flatnonzero(state.filter_mask(filters, base))
    elif scope is not None:
        rows = np.flatnonzero(scope)
    elif state.n_dead:
        rows = np.flatnonzero(state.alive[:n])
    count = n if rows is None else len(rows)
    if count == 0:
        return VectorStoreQueryResult(similarities=[], ids=[])
    k = min(query.similarity_top_k or count, count)

    q = np.asarray(query.query_embedding, dtype=np.float64)
    q_norm = float(np.sqrt(q @ q))
    unit = q / q_norm if math.isfinite(q_norm) and q_norm > 0 else q
    if unit is q or (state.n_bad and state.bad[:n][rows if rows is not None else slice(None)].any()):
        # NaN scores (zero or non-finite vectors), as upstream computes them
        return _replay_upstream(state, query, rows, _scores(state, rows, unit))

    if k < count and count > _SCREEN_FROM:
        # float32 screen, then float64 for the rows that can be in the top k+1:
        # float32 scores are within `slack` of the float64 ones (rounding of
        # both unit vectors plus a d-term dot product, in any order)
        width = state.matrix.shape[1]
        slack = (width + 4) * 2.0**-24 * 1.01 + 1e-12
        unit32 = unit.astype(np.float32)
        if rows is None:
            rough = state.matrix32[:n] @ unit32
        elif 4 * count > n:  # a large share of the rows: one pass over all of them
            rough = (state.matrix32[:n] @ unit32)[rows]
        else:
            rough = _gather_dot(state, state.matrix32, rows, unit32)
        part = np.argpartition(rough, count - k - 1)[count - k - 1 :]
        near = np.flatnonzero(rough >= rough[part].min() - 2 * slack)
        cand = near if rows is None else rows[near]
    else:  # few rows, or every row asked for: float64 directly
        cand = np.arange(n) if rows is None else rows
    scores = _scores(state, cand if len(cand) < n else None, unit)
    m = len(scores)
    if k < m:
        part = np.argpartition(scores, m - k - 1)[m - k - 1 :]  # the k+1 highest
        order = part[np.argsort(-scores[part])]
    else:
        order = np.argsort(-scores)
    values = scores[order]
    if len(values) > 1 and (values[:-1] - values[1:] <= TIE_TOLERANCE).any():
        # near-equal scores in the top k+1: upstream's heap decides their order
        return _replay_upstream(state, query, rows, _scores(state, rows, unit))
    ids = state.ids
    return VectorStoreQueryResult(similarities=values[:k].tolist(), ids=[ids[cand[t]] for t in order[:k].tolist()])


_SCREEN_FROM = 512  # more candidate rows than this: float32 screen first
_BLOCK = 512  # rows gathered at a time into a reused buffer


def _scores(state: RowState, rows: np.ndarray | None, unit: np.ndarray) -> np.ndarray:
    """float64 scores of ``rows`` (all rows when ``None``)."""
    if rows is None:
        return state.matrix[: state.n] @ unit
    if len(rows) <= _BLOCK:
        return state.matrix[rows] @ unit
    return _gather_dot(state, state.matrix, rows, unit)


def _gather_dot(state: RowState, matrix: np.ndarray, rows: np.ndarray, vector: np.ndarray) -> np.ndarray:
    """``matrix[rows] @ vector``, gathered block by block into a reused buffer.

    A fresh multi-megabyte copy per query costs more in page faults than the product.
    """
    key = (matrix.dtype.char, matrix.shape[1])
    buffer = state.buffers.get(key)
    if buffer is None:
        buffer = state.buffers[key] = np.empty((_BLOCK, matrix.shape[1]), dtype=matrix.dtype)
    out = np.empty(len(rows), dtype=matrix.dtype)
    for start in range(0, len(rows), _BLOCK):
        block = rows[start : start + _BLOCK]
        gathered = buffer[: len(block)]
        np.take(matrix, block, axis=0, out=gathered)
        np.matmul(gathered, vector, out=out[start : start + len(block)])
    return out


def _replay_upstream(
    state: RowState, query: VectorStoreQuery, rows: np.ndarray | None, scores: np.ndarray
) -> VectorStoreQueryResult:
    """Upstream's heap over ``rows`` in dict order: the exact answer with ties or NaN.

    Scores within ``TIE_TOLERANCE`` of another (and those of zero or
    non-finite vectors) are recomputed with upstream's ``similarity``, so every
    comparison the heap makes has upstream's outcome.
    """
    ids, emb = state.ids, state.emb
    rows = np.arange(state.n) if rows is None else rows
    q_np = np.array(query.query_embedding)
    values = scores.copy()
    with np.errstate(all="ignore"):
        q_norm = float(np.linalg.norm(q_np))
        if q_norm == 0:
            values[:] = np.nan  # upstream: 0 / 0 for every row
        else:
            if not math.isfinite(q_norm):
                recompute = np.arange(len(rows))
            else:
                recompute = np.flatnonzero(state.bad[rows])
                finite = np.flatnonzero(~state.bad[rows])
                by_score = finite[np.argsort(values[finite], kind="stable")]
                close = np.flatnonzero(np.diff(values[by_score]) <= TIE_TOLERANCE)
                recompute = np.union1d(recompute, np.union1d(by_score[close], by_score[close + 1]))
            for i in recompute.tolist():
                # arrays, as upstream's own store passes them (it types the arguments as lists)
                values[i] = upstream_similarity(q_np, np.array(emb[state.live_id(rows[i])]))  # type: ignore[arg-type]
    top_k = query.similarity_top_k
    heap: list[tuple] = []
    push, pop = heapq.heappush, heapq.heappop
    for value, row in zip(values.tolist(), rows.tolist()):
        push(heap, (value, ids[row]))
        if top_k and len(heap) > top_k:
            pop(heap)
    ranked = sorted(heap, key=lambda x: x[0], reverse=True)
    return VectorStoreQueryResult(similarities=[s for s, _ in ranked], ids=[i for _, i in ranked])
