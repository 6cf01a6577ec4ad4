"""Fusion weights measured on the corpus itself, and kept.

A hybrid of a dense and a lexical retriever is only as good as its weights:
the bundled English MiniLM finds 0.23 nDCG@10 on XQuAD-zh where Chinese BM25
finds 0.90, and equal weights drag the hybrid far below BM25 alone. The
weights are therefore fitted per query script (:class:`QueryScript`) on
pseudo-queries cut from the indexed nodes (:func:`pseudo_queries`), whose
answer is known: the node they were cut from.

The fit is measured, not a switch: every point of a small weight grid
(:func:`weight_grid`, each child alone included) is scored by the fused mean
reciprocal rank of the source nodes (:func:`fused_mrr`), and
:func:`fit_weights` keeps, among the points within ``tolerance`` of the best,
the one closest to weights proportional to the children's squared MRR.
Pseudo-queries are windows of a chunk's own words, which BM25 finds almost
perfectly, so a plain argmax would hand BM25 nearly all the weight even where
real questions need both children; the tolerance absorbs that bias
(``DEFAULT_TOLERANCE``, chosen on the shared datasets by
``benchmarks/calibration.py``; figures in ``benchmarks/results/calibration.md``).

Fitting is fast and quiet: the children answer through their ``_retrieve``
(no callback or instrumentation event reaches the user's handlers), the
queries are embedded in batches with the model's query prompt, and each grid
point only re-fuses the collected score maps (pure functions below, in the
style of Haystack's ``utils/misc.py``). The result, a :class:`Calibration`,
round-trips through JSON (:meth:`Calibration.to_dict`), so a saved index is
not recalibrated when loaded.

About 510 lines: pseudo-query sampling, the grid, the scoring of each grid
point and the choice rule are one fit whose steps share the sampled queries
and their embedded vectors; the pure fusion functions are in
:mod:`.fusion_scores`, the saved result in :mod:`.calibration`.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Iterable, Mapping, Sequence
from functools import partial
from itertools import product
from typing import (
    Any,
)

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import BaseNode, MetadataMode, QueryBundle

from llama_index_ext_recursive.progress import progress_bar
from llama_index_ext_recursive.query_embeddings import embed_queries
from llama_index_ext_recursive.retrievers.calibration import Calibration, ScriptCalibration
from llama_index_ext_recursive.retrievers.fusion_scores import (
    FuseFunction,
    ScoreMap,
    relative_score_fusion,
    score_map,
)
from llama_index_ext_recursive.text import QueryScript, query_script
from llama_index_ext_recursive.validation import check_count, check_real, check_weights

logger = logging.getLogger(__name__)

DEFAULT_CALIBRATION_SAMPLES = 200  # fewer made the decision noisy across seeds
MIN_CALIBRATION_SAMPLES = 8
# How far (in pseudo-query MRR) the chosen weights may fall below the best grid
# point to lean to the children's measured quality; 0, 0.005 and 0.01 gave BM25
# too much weight on XQuAD-en with titles not embedded (0.921/0.926/0.926 nDCG@10
# against 0.929 at 0.02), see benchmarks/results/calibration.md.
DEFAULT_TOLERANCE = 0.02
SKILL_FLOOR = 0.1  # see fit_weights
GRID_STEP = 0.1
MAX_GRID_POINTS = 300  # a simplex grid coarser than GRID_STEP beyond this
PROGRESS_MIN_QUERIES = 500  # show_progress=None shows a bar from this many queries


def pseudo_queries(
    nodes: Sequence[BaseNode], per_script: int = DEFAULT_CALIBRATION_SAMPLES, seed: int = 0
) -> dict[QueryScript, list[tuple[str, str]]]:
    """Up to ``per_script`` (node_id, query) pairs per script, cut from sampled nodes.

    A query is a random window of the node's text: 5-9 words for Latin text,
    8-16 characters for CJK text. Deterministic for a given ``seed``.

    Args:
        nodes: the indexed nodes (their text without metadata is cut).
        per_script: the most pairs per script.
        seed: the random seed of the sampling.
    """
    check_count("per_script", per_script)
    rng = random.Random(seed)
    by_script: dict[QueryScript, list[BaseNode]] = {}
    for node in nodes:
        text = node.get_content(metadata_mode=MetadataMode.NONE)
        by_script.setdefault(query_script(text), []).append(node)
    out: dict[QueryScript, list[tuple[str, str]]] = {}
    for script, group in sorted(by_script.items()):
        pairs = []
        for node in rng.sample(group, len(group)):
            text = node.get_content(metadata_mode=MetadataMode.NONE)
            if script == QueryScript.CJK:
                units, joiner, low, high = [c for c in text if not c.isspace()], "", 8, 16
            else:
                units, joiner, low, high = text.split(), " ", 5, 9
            if len(units) < low:
                continue
            length = rng.randint(low, min(high, len(units)))
            start = rng.randint(0, len(units) - length)
            pairs.append((node.node_id, joiner.join(units[start : start + length])))
            if len(pairs) == per_script:
                break
        out[script] = pairs
    return out


# ------------------------------------------------------------ measurement


ResultsPerChild = Sequence[Sequence[ScoreMap]]  # [child][query] -> node_id -> score


def collect_child_results(
    children: Sequence[BaseRetriever],
    queries: Sequence[str],
    embed_model: BaseEmbedding | None = None,
    show_progress: bool | None = None,
    *,
    score_directions: Sequence[str] | None = None,
) -> list[list[dict[str, float]]]:
    """What each child finds for each query, as ``node_id -> score`` maps.

    Queries are embedded in batches (:func:`embed_queries`) and passed as
    ``QueryBundle(query, embedding=vector)``; each child answers through its
    ``_retrieve``, so calibration adds no callback or instrumentation events
    to the user's traces. A map keeps the child's order and its first
    (best-ranked) hit of a node; hits without a score, and zero-score hits of
    similarity children (a BM25 non-match), are left out, as
    :class:`~llama_index_ext_recursive.retrievers.fusion.HybridFusionRetriever` does.

    Args:
        children: the retrievers.
        queries: the query texts.
        embed_model: embeds the queries for every child; ``None``: each
            child's own ``_embed_model`` (a vector retriever's), one batch per
            distinct model; children without one get no embedding.
        show_progress: a progress bar; ``None``: from
            ``PROGRESS_MIN_QUERIES`` (500) queries on.
        score_directions: per child ``"similarity"`` (default) or ``"distance"``.

    Returns:
        ``results[child][query]``: ``node_id -> score``.
    """
    children = list(children)
    queries = list(queries)
    distance = _distance_flags(score_directions, len(children))
    show = len(queries) >= PROGRESS_MIN_QUERIES if show_progress is None else bool(show_progress)
    models: list[BaseEmbedding | None] = [
        embed_model if embed_model is not None else getattr(child, "_embed_model", None) for child in children
    ]
    distinct = {id(m): m for m in models if m is not None}
    steps = len(queries) * (len(distinct) + len(children))
    with progress_bar(total=steps, desc="calibrating fusion weights", disable=not show) as bar:
        vectors = {key: embed_queries(model, queries, bar) for key, model in distinct.items()}
        out: list[list[dict[str, float]]] = []
        for child, model, is_distance in zip(children, models, distance):
            embedded = vectors.get(id(model)) if model is not None else None
            per_query = []
            for q, text in enumerate(queries):
                bundle = QueryBundle(text, embedding=embedded[q] if embedded else None)
                per_query.append(score_map(child._retrieve(bundle), is_distance))
                bar.update()
            out.append(per_query)
    return out


def _distance_flags(directions: Sequence[str] | None, count: int) -> list[bool]:
    if directions is None:
        return [False] * count
    if len(directions) != count:
        raise ValueError(f"score_directions has {len(directions)} entries for {count} retrievers")
    flags = []
    for i, direction in enumerate(directions):
        value = getattr(direction, "value", direction)
        if value not in ("similarity", "distance"):
            raise ValueError(f"score_directions[{i}] is {direction!r}: use 'similarity' or 'distance'")
        flags.append(value == "distance")
    return flags


def _reciprocal_rank(fused: Mapping[str, float], target: str) -> float:
    """1 / rank of ``target`` in ``fused`` ordered by (-score, node_id), as the hybrid orders."""
    if target not in fused:
        return 0.0
    mine = fused[target]
    ahead = sum(1 for node_id, s in fused.items() if s > mine or (s == mine and node_id < target))
    return 1.0 / (ahead + 1)


def fused_mrr(
    results_per_child: ResultsPerChild,
    targets: Sequence[str],
    weights: Sequence[float],
    fuse: FuseFunction = relative_score_fusion,
) -> float:
    """Mean reciprocal rank of each query's target node in the fused lists.

    Args:
        results_per_child: ``results[child][query]`` maps (:func:`collect_child_results`).
        targets: the node id each query should find, one per query.
        weights: one weight per child.
        fuse: the fusion function (``relative_score_fusion``, ...).
    """
    _check_results(results_per_child, targets, len(weights))
    if not targets:
        return 0.0
    total = 0.0
    for q, target in enumerate(targets):
        fused = fuse([child[q] for child in results_per_child], weights)
        total += _reciprocal_rank(fused, target)
    return total / len(targets)


def weight_grid(count: int, step: float = GRID_STEP) -> list[list[float]]:
    """Points of the weight simplex (weights summing to 1) with the given step.

    Each child alone is a point. Two children, step 0.1: ``(1 - t, t)`` for
    t = 0, 0.1, ..., 1. The step is made coarser until at most
    ``MAX_GRID_POINTS`` points remain (3 children: 66 points at 0.1).
    """
    check_count("count", count)
    if count == 1:
        return [[1.0]]
    divisions = max(1, round(1 / step))
    while divisions > 1 and math.comb(divisions + count - 1, count - 1) > MAX_GRID_POINTS:
        divisions -= 1
    points = []
    for head in product(range(divisions + 1), repeat=count - 1):
        if sum(head) <= divisions:
            units = list(head) + [divisions - sum(head)]
            points.append([u / divisions for u in units])
    return sorted(points, reverse=True)


def fit_weights(
    results_per_child: ResultsPerChild,
    targets: Sequence[str],
    grid: Sequence[Sequence[float]] | None = None,
    fuse: FuseFunction = relative_score_fusion,
    tolerance: float = DEFAULT_TOLERANCE,
) -> tuple[list[float], list[tuple[list[float], float]]]:
    """Fused MRR at every grid point, and the weights chosen from them.

    Chosen: among the points whose MRR is within ``tolerance`` of the best
    point, the one closest to weights proportional to the square root of each
    child's skill: its MRR alone above ``SKILL_FLOOR`` times the best child's,
    so a child that cannot read the text (an English model on Chinese) gets
    nothing for its chance hits (ties: higher MRR, then grid order). Of the rules
    measured against real queries on seven dataset/convention pairs
    (``benchmarks/results/calibration.md``) this lost least in total: a square
    (or plain) proportion starves dense search on SciFact and ContractNLI,
    whose pseudo-queries it finds poorly but whose real questions it helps
    with; equal weights lose 0.1 nDCG@10 on Chinese with an English model. Pseudo-queries are
    the chunk's own words, so BM25 finds them almost perfectly and the argmax
    gives it nearly all the weight even where real questions need both
    children (XQuAD-en: pseudo-query MRR 0.993 for BM25 alone, 0.985 at
    0.4/0.6, while real questions rank 0.918 with BM25 alone and 0.936 at
    0.4/0.6); the tolerance lets the choice lean to the children's measured
    quality, and a child that finds nothing (MRR near 0) gets weight 0 even
    when mixing it in would not move any target. With ``tolerance=0`` the
    choice is the argmax, whose MRR is never below the best child's.

    Args:
        results_per_child: ``results[child][query]`` maps.
        targets: the node id each query should find.
        grid: weight vectors to try (default :func:`weight_grid`); single
            children are added when missing.
        fuse: the fusion function.
        tolerance: pseudo-query MRR the choice may give up to lean to the
            children's measured quality.

    Returns:
        ``(weights, [(weights, mrr), ...])`` for every grid point.
    """
    count = len(results_per_child)
    check_count("number of children", count)
    check_real("tolerance", tolerance, low=0.0)
    _check_results(results_per_child, targets, count)
    points = [check_weights(f"grid[{i}]", list(p), count) for i, p in enumerate(grid or weight_grid(count))]
    for i in range(count):
        only_i = [1.0 if j == i else 0.0 for j in range(count)]
        if not any(_same_direction(p, only_i) for p in points):
            points.append(only_i)
    scored = [(p, fused_mrr(results_per_child, targets, p, fuse)) for p in points]
    alone = {_single(p): mrr for p, mrr in scored if _single(p) is not None}
    best = max(mrr for _, mrr in scored)
    admissible = [(i, p, mrr) for i, (p, mrr) in enumerate(scored) if mrr >= best - tolerance]
    solo = [alone.get(i, 0.0) for i in range(count)]
    floor = SKILL_FLOOR * max(solo)  # what a child that cannot read the text still hits
    quality = [max(m - floor, 0.0) ** 0.5 for m in solo]
    target = [q / sum(quality) for q in quality] if sum(quality) > 0 else [1 / count] * count
    _, chosen, _ = min(admissible, key=lambda item: (_distance(item[1], target), -item[2], item[0]))
    return list(chosen), [(list(p), mrr) for p, mrr in scored]


def _same_direction(a: Sequence[float], b: Sequence[float]) -> bool:
    """Whether two weight vectors are proportional (fusion divides by the sum)."""
    sa, sb = sum(a), sum(b)
    return all(abs(x / sa - y / sb) < 1e-12 for x, y in zip(a, b))


def _single(weights: Sequence[float]) -> int | None:
    """The child a weight vector gives all the weight to, if it does."""
    positive = [i for i, w in enumerate(weights) if w > 0]
    return positive[0] if len(positive) == 1 else None


def _distance(weights: Sequence[float], target: Sequence[float]) -> float:
    total = sum(weights)
    return math.fsum((w / total - t) ** 2 for w, t in zip(weights, target))


def _check_results(results_per_child: ResultsPerChild, targets: Sequence[str], count: int) -> None:
    if len(results_per_child) != count:
        raise ValueError(
            f"results_per_child has {len(results_per_child)} children for {count} weights: give one weight per child"
        )
    for i, child in enumerate(results_per_child):
        if len(child) != len(targets):
            raise ValueError(
                f"results_per_child[{i}] has {len(child)} queries for {len(targets)} targets: give one target per query"
            )


# ------------------------------------------------------------ calibrating


PairsByScript = Mapping[str | QueryScript, Sequence[tuple[str, str]]]


def calibrate_children(
    children: Sequence[BaseRetriever],
    nodes_or_pairs: Sequence[BaseNode] | PairsByScript | Sequence[tuple[str, str]],
    embed_model: BaseEmbedding | None = None,
    fuse: FuseFunction = relative_score_fusion,
    grid: Sequence[Sequence[float]] | None = None,
    tolerance: float = DEFAULT_TOLERANCE,
    show_progress: bool | None = None,
    names: Sequence[str] | None = None,
    *,
    score_directions: Sequence[str] | None = None,
    samples_per_script: int = DEFAULT_CALIBRATION_SAMPLES,
    seed: int = 0,
    fusion: str | None = None,
    absent_script_weights: Sequence[float] | None = None,
) -> Calibration:
    """Fit fusion weights per query script for ``children``.

    Args:
        children: the retrievers to fuse (they must index the targets).
        nodes_or_pairs: the indexed nodes (pairs from :func:`pseudo_queries`),
            or ``(target_node_id, query)`` pairs, by script
            (``{"latin": [...], "cjk": [...]}``) or flat (grouped by
            :func:`query_script` of each query).
        embed_model: embeds the queries (see :func:`collect_child_results`).
        fuse: the fusion function the weights are fitted for.
        grid: weight vectors to try (default :func:`weight_grid`).
        tolerance: see :func:`fit_weights`.
        show_progress: a progress bar (``None``: from 500 queries on).
        names: the children's names (default: class names).
        score_directions: per child ``"similarity"`` or ``"distance"``.
        samples_per_script: pseudo-queries per script when given nodes.
        seed: the pseudo-query sampling seed when given nodes.
        fusion: the fusion mode name to record.
        absent_script_weights: the weights for a query script none of the
            pseudo-queries is in (the corpus has no text in it, as English
            questions over Chinese passages): nothing can be measured for it,
            so the caller who knows its children says how to weigh them.
            ``None``: no entry (the default weights apply).

    Returns:
        A :class:`Calibration`; a script with fewer than
        ``MIN_CALIBRATION_SAMPLES`` pairs gets ``weights=None``.
    """
    children = list(children)
    check_count("number of children", len(children))
    names = list(names) if names is not None else [type(c).__name__ for c in children]
    if len(names) != len(children):
        raise ValueError(f"names has {len(names)} entries for {len(children)} children")
    check_real("tolerance", tolerance, low=0.0)
    if absent_script_weights is not None:
        absent_script_weights = check_weights("absent_script_weights", absent_script_weights, len(children))
    pairs_by_script = _pairs_by_script(nodes_or_pairs, samples_per_script, seed)
    measured = {s: p for s, p in pairs_by_script.items() if len(p) >= MIN_CALIBRATION_SAMPLES}
    queries = [query for pairs in measured.values() for _, query in pairs]
    results = (
        collect_child_results(children, queries, embed_model, show_progress, score_directions=score_directions)
        if queries
        else [[] for _ in children]
    )
    distance = _distance_flags(score_directions, len(children))
    if any(distance):
        fuse = partial(fuse, distance=distance)
    scripts: dict[str, ScriptCalibration] = {}
    offset = 0
    for script, pairs in pairs_by_script.items():
        if script not in measured:
            scripts[script] = ScriptCalibration(len(pairs), [], None, [])
            logger.info("fusion calibration %s: %d pseudo-queries, too few to fit weights", script, len(pairs))
            continue
        part = [child[offset : offset + len(pairs)] for child in results]
        offset += len(pairs)
        targets = [target for target, _ in pairs]
        weights, points = fit_weights(part, targets, grid, fuse, tolerance)
        child_mrr = [
            fused_mrr(part, targets, [1.0 if j == i else 0.0 for j in range(len(children))], fuse)
            for i in range(len(children))
        ]
        scripts[script] = ScriptCalibration(len(pairs), child_mrr, weights, points)
        chosen = scripts[script].mrr
        logger.info(
            "fusion calibration %s: %d pseudo-queries, child MRR %s, weights %s (MRR %.3f)",
            script,
            len(pairs),
            dict(zip(names, (round(m, 3) for m in child_mrr))),
            weights,
            chosen,
        )
    if absent_script_weights is not None:
        for script in QueryScript:
            if script.value not in pairs_by_script:
                scripts[script.value] = ScriptCalibration(0, [], list(absent_script_weights), [])
                logger.info(
                    "fusion calibration %s: no text in this script, weights %s",
                    script.value,
                    scripts[script.value].weights,
                )
    return Calibration(scripts=scripts, names=names, fusion=fusion)


def _pairs_by_script(nodes_or_pairs: Any, samples_per_script: int, seed: int) -> dict[str, list[tuple[str, str]]]:
    if isinstance(nodes_or_pairs, Mapping):
        out = {}
        known = [s.value for s in QueryScript]
        for script, pairs in nodes_or_pairs.items():
            name = getattr(script, "value", script)
            if name not in known:
                raise ValueError(f"nodes_or_pairs has an unknown script {script!r}: use one of {known}")
            out[name] = _checked_pairs(pairs, f"nodes_or_pairs[{name!r}]")
        return out
    items = list(nodes_or_pairs)
    if items and all(isinstance(item, BaseNode) for item in items):
        return {s.value: p for s, p in pseudo_queries(items, samples_per_script, seed).items()}
    pairs = _checked_pairs(items, "nodes_or_pairs")
    grouped: dict[str, list[tuple[str, str]]] = {}
    for target, query in pairs:
        grouped.setdefault(query_script(query).value, []).append((target, query))
    return dict(sorted(grouped.items()))


def _checked_pairs(pairs: Iterable[Any], where: str) -> list[tuple[str, str]]:
    out = []
    for i, pair in enumerate(pairs):
        if (
            not isinstance(pair, (tuple, list))
            or len(pair) != 2
            or not all(isinstance(x, str) for x in pair)
            or not pair[1].strip()
        ):
            raise ValueError(
                f"{where}[{i}] is {pair!r}: give nodes, or (target_node_id, query) pairs of non-empty strings"
            )
        out.append((pair[0], pair[1]))
    return out
