"""Pure fusion functions over ``node_id -> score`` maps.

One function per ``FUSION_MODES`` value, in the style of Haystack's
``utils/misc.py``: :class:`~llama_index_ext_recursive.retrievers.fusion.HybridFusionRetriever`
ranks with the same arithmetic, calibration (:mod:`.calibrate`) re-fuses
collected score maps with them at every weight grid point, and recursive
retrieval fuses its evidence with :func:`relative_score_fusion`.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

from llama_index.core.retrievers.fusion_retriever import FUSION_MODES
from llama_index.core.schema import NodeWithScore

DEFAULT_RRF_K = 60.0

ScoreMap = Mapping[str, float]


class FuseFunction(Protocol):
    """A fusion function below: score maps and weights, and per list whether it holds distances
    (calibration passes ``distance`` whenever a child scores by distance)."""

    def __call__(
        self, lists: Sequence[ScoreMap], weights: Sequence[float], *, distance: Sequence[bool] | None = None
    ) -> dict[str, float]: ...


RankedHits = list[tuple[int, NodeWithScore]]
# what reciprocal_rank_fusion ranks: node ids, or any other key (row numbers in eval's oracle)
_Key = TypeVar("_Key", bound=Hashable)


def usable_hits(hits: Sequence[NodeWithScore], distance: bool = False) -> RankedHits:
    """``(rank, hit)`` for each hit of one child's list that fusion can credit.

    The rank is 1-based in the child's own order; a node listed twice counts
    at its first (best) rank; hits without a score, and zero-score hits of a
    similarity list (a BM25 non-match), get no credit.
    """
    seen: set = set()
    kept: RankedHits = []
    for rank, hit in enumerate(hits, start=1):
        node_id = hit.node.node_id
        if node_id in seen:
            continue
        seen.add(node_id)
        if hit.score is None or (not distance and hit.score == 0.0):
            continue
        kept.append((rank, hit))
    return kept


def score_map(hits: Sequence[NodeWithScore], distance: bool = False) -> dict[str, float]:
    """One child's list as the ``node_id -> score`` map the functions below fuse."""
    return {hit.node.node_id: float(hit.score) for _, hit in usable_hits(hits, distance)}  # type: ignore[arg-type]


def contributions(
    hits: RankedHits,
    mode: FUSION_MODES,
    weights: Sequence[float],
    child: int,
    *,
    distance: bool = False,
    rrf_k: float = DEFAULT_RRF_K,
    num_lists: int = 1,
) -> list[float]:
    """What each of one child's usable hits adds to its node's fused score, as the
    ``mode``'s function below computes it (``num_lists``: lists fused per child,
    one per query)."""
    w = weights[child]
    if mode == FUSION_MODES.RECIPROCAL_RANK:
        return [w / (rrf_k + rank) for rank, _ in hits]
    if mode == FUSION_MODES.SIMPLE:
        top = max(weights)
        return [
            (w / top) * (1.0 / (1.0 + max(h.score, 0.0)) if distance else h.score)  # type: ignore[type-var,operator]
            for _, h in hits
        ]
    scores = [h.score for _, h in hits]
    scale = dist_based_scores if mode == FUSION_MODES.DIST_BASED_SCORE else min_max_scores
    total = sum(weights)
    return [value * (w / total) / num_lists for value in scale(scores, distance)]  # type: ignore[arg-type]


def min_max_scores(scores: Sequence[float], distance: bool = False) -> list[float]:
    """Scores scaled to [0, 1] by their min and max (1 = best).

    A list whose scores are all equal gives 1.0 when they are > 0 (or are
    distances), else 0.0, as upstream's ``relative_score`` mode.
    """
    if not scores:
        return []
    return _scaled(scores, min(scores), max(scores), distance)


def head_scores(scores: Sequence[float], head: int, distance: bool = False) -> list[float]:
    """Scores scaled so the best is 1 and the ``head``-th best is 0; those below go negative.

    With at most ``head`` scores this is :func:`min_max_scores`. A pool that
    also holds candidates from other searches (a recursive call's routed
    chunks) is then scaled as a flat top-``head`` list is, so one long list
    cannot squeeze the other's differences into the top of its range.
    """
    if len(scores) <= head:
        return min_max_scores(scores, distance)
    best = heapq.nsmallest(head, scores) if distance else heapq.nlargest(head, scores)
    low, high = sorted((best[0], best[-1]))
    return _scaled(scores, low, high, distance)


def dist_based_scores(scores: Sequence[float], distance: bool = False) -> list[float]:
    """Scores scaled by mean +- 3 standard deviations (upstream's ``dist_based_score``)."""
    if not scores:
        return []
    mean = sum(scores) / len(scores)
    std = (sum((s - mean) ** 2 for s in scores) / len(scores)) ** 0.5
    return _scaled(scores, mean - 3 * std, mean + 3 * std, distance)


def _scaled(scores: Sequence[float], low: float, high: float, distance: bool) -> list[float]:
    if high == low:
        return [1.0 if (distance or high > 0) else 0.0] * len(scores)
    if distance:
        return [(high - s) / (high - low) for s in scores]
    return [(s - low) / (high - low) for s in scores]


def _weighted_sum(
    lists: Sequence[ScoreMap],
    weights: Sequence[float],
    normalize: Callable[[Sequence[float], bool], list[float]],
    distance: Sequence[bool] | None,
) -> dict[str, float]:
    total = _check_fusion_input(lists, weights, distance)
    parts: dict[str, list[float]] = {}
    for i, (scores, w) in enumerate(zip(lists, weights)):
        if w <= 0 or not scores:
            continue
        share = w / total
        values = normalize(list(scores.values()), bool(distance and distance[i]))
        for node_id, value in zip(scores, values):
            parts.setdefault(node_id, []).append(value * share)
    # fsum is exactly rounded: the fused score does not depend on list order
    return {node_id: math.fsum(values) for node_id, values in parts.items()}


def relative_score_fusion(
    lists: Sequence[ScoreMap],
    weights: Sequence[float],
    *,
    distance: Sequence[bool] | None = None,
    head: int | None = None,
) -> dict[str, float]:
    """Weighted sum of min-max normalised scores, divided by the sum of the weights.

    Args:
        lists: one ``node_id -> score`` map per retriever.
        weights: one non-negative weight per list; a list of weight 0 is ignored.
        distance: per list, whether its scores are distances (lower is better).
        head: scale each list by its best ``head`` scores (:func:`head_scores`)
            instead of all of them.

    Returns:
        ``node_id -> fused score``; an id missing from a list gets nothing from it.
    """
    if head is None:
        return _weighted_sum(lists, weights, min_max_scores, distance)
    return _weighted_sum(lists, weights, lambda scores, d: head_scores(scores, head, d), distance)


def distribution_based_fusion(
    lists: Sequence[ScoreMap], weights: Sequence[float], *, distance: Sequence[bool] | None = None
) -> dict[str, float]:
    """As :func:`relative_score_fusion`, each list scaled by its mean +- 3 std."""
    return _weighted_sum(lists, weights, dist_based_scores, distance)


def reciprocal_rank_fusion(
    lists: Sequence[Mapping[_Key, float]],
    weights: Sequence[float],
    k: float = DEFAULT_RRF_K,
    *,
    distance: Sequence[bool] | None = None,
) -> dict[_Key, float]:
    """Weighted reciprocal rank fusion, ``sum_i w_i / (k + rank_i)``.

    Ranks are 1-based, by descending score (ascending for distance lists;
    ties keep the map's order).

    Args:
        lists: one ``node_id -> score`` map per retriever.
        weights: one non-negative weight per list; a list of weight 0 is ignored.
        k: the RRF constant (60 in the paper).
        distance: per list, whether its scores are distances.
    """
    _check_fusion_input(lists, weights, distance)
    parts: dict[_Key, list[float]] = {}
    for i, (scores, w) in enumerate(zip(lists, weights)):
        if w <= 0:
            continue
        sign = 1.0 if distance and distance[i] else -1.0
        ordered = sorted(scores, key=lambda node_id: sign * scores[node_id])
        for rank, node_id in enumerate(ordered, start=1):
            parts.setdefault(node_id, []).append(w / (k + rank))
    return {node_id: math.fsum(values) for node_id, values in parts.items()}


def simple_fusion(
    lists: Sequence[ScoreMap], weights: Sequence[float], *, distance: Sequence[bool] | None = None
) -> dict[str, float]:
    """Each node's best raw score, scaled by ``w_i / max(w)`` (upstream's ``simple`` mode).

    Distances ``d`` count as ``1 / (1 + max(d, 0))``.
    """
    _check_fusion_input(lists, weights, distance)
    top = max(weights)
    fused: dict[str, float] = {}
    for i, (scores, w) in enumerate(zip(lists, weights)):
        if w <= 0:
            continue
        for node_id, s in scores.items():
            value = (w / top) * (1.0 / (1.0 + max(s, 0.0)) if distance and distance[i] else s)
            fused[node_id] = max(fused.get(node_id, value), value)
    return fused


def _check_fusion_input(
    lists: Sequence[Mapping[Any, float]], weights: Sequence[float], distance: Sequence[bool] | None
) -> float:
    if len(weights) != len(lists):
        raise ValueError(f"weights has {len(weights)} values for {len(lists)} score lists: give one per list")
    if distance is not None and len(distance) != len(lists):
        raise ValueError(f"distance has {len(distance)} values for {len(lists)} score lists: give one per list")
    total = sum(weights)
    if not total > 0:
        raise ValueError(f"weights {list(weights)} sum to {total}: at least one must be positive")
    return total
