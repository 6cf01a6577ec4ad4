"""Run any retriever over a dataset's queries and score it with ir-measures.

Metrics are trec_eval's, through ``ir_measures`` (nDCG is cut at k, unlike
LlamaIndex's ``RetrieverEvaluator``). Our ranking order is what is scored:
each result gets score ``n - rank``, so ties in retriever scores cannot be
reordered by trec_eval's document-id tie-breaking.
"""

from __future__ import annotations

import asyncio
import logging
import time
import tracemalloc
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import ir_measures
import numpy as np
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.schema import QueryBundle

from llama_index_ext_recursive.eval.data import BeirDataset, Qrels, from_pairs
from llama_index_ext_recursive.progress import progress_bar
from llama_index_ext_recursive.validation import check_count

logger = logging.getLogger(__name__)

Run = dict[str, list[str]]  # query id -> ranked node ids
DOC_PREFIX = "doc:"


def chunk_measures(k: int = 10) -> list:
    """nDCG@k, RR@k, R@k, Success@1, Success@k."""
    return [
        ir_measures.nDCG @ k,
        ir_measures.RR @ k,
        ir_measures.R @ k,
        ir_measures.Success @ 1,
        ir_measures.Success @ k,
    ]


@dataclass
class RetrievalRun:
    """Ranked results and per-query latency of one retriever over one query set."""

    ranking: Run
    latencies_ms: list[float]

    def percentile(self, q: float) -> float:
        return float(np.percentile(self.latencies_ms, q)) if self.latencies_ms else float("nan")


@dataclass
class EvalResult:
    """Aggregate and per-query metrics, keyed by ir-measures names (``nDCG@10``).

    Document-level metrics are prefixed ``doc:`` (``doc:Success@10``).
    """

    aggregate: dict[str, float]
    per_query: dict[str, dict[str, float]] = field(default_factory=dict)


def _as_ir_run(ranking: Run) -> dict[str, dict[str, float]]:
    """Scores ``n - rank``; an id repeated in a ranking keeps its first (best) rank."""
    run: dict[str, dict[str, float]] = {}
    for qid, ids in ranking.items():
        scores: dict[str, float] = {}
        for rank, node_id in enumerate(ids):
            scores.setdefault(node_id, float(len(ids) - rank))
        run[qid] = scores
    return run


def to_documents(ranking: Run, doc_of: Mapping[str, str]) -> Run:
    """Map a chunk ranking to documents, keeping each document's best rank."""
    docs: Run = {}
    for qid, ids in ranking.items():
        seen: dict[str, None] = {}
        for node_id in ids:
            seen.setdefault(doc_of.get(node_id, node_id), None)
        docs[qid] = list(seen)
    return docs


def score(
    ranking: Run,
    qrels: Qrels,
    k: int = 10,
    doc_of: Mapping[str, str] | None = None,
    doc_qrels: Qrels | None = None,
) -> EvalResult:
    """Score a ranking against qrels with ir-measures; add document-level Success@k.

    Queries in ``qrels`` that the ranking lacks count as empty results (zeros),
    never silently skipped. ``k`` must be a positive integer: ``nDCG@0`` or
    ``nDCG@2.5`` would be reported as if meaningful.
    """
    k = check_count("k", k)
    full = {qid: ranking.get(qid, []) for qid in qrels}
    per_query: dict[str, dict[str, float]] = {qid: {} for qid in qrels}
    measures = chunk_measures(k)
    for metric in ir_measures.iter_calc(measures, qrels, _as_ir_run(full)):
        per_query[metric.query_id][str(metric.measure)] = metric.value
    if doc_of is not None and doc_qrels is not None:
        # the documents of the top-k chunks, as the chunk metrics see them
        docs = _as_ir_run(to_documents({q: ids[:k] for q, ids in full.items()}, doc_of))
        for metric in ir_measures.iter_calc([ir_measures.Success @ k], doc_qrels, docs):
            per_query[metric.query_id][DOC_PREFIX + str(metric.measure)] = metric.value
    names = sorted({name for values in per_query.values() for name in values})
    aggregate = {name: float(np.mean([values.get(name, 0.0) for values in per_query.values()])) for name in names}
    return EvalResult(aggregate, per_query)


def run_queries(
    retriever: BaseRetriever,
    queries: Mapping[str, str],
    query_embeddings: Mapping[str, list[float]] | None = None,
    concurrency: int = 1,
    show_progress: bool = False,
    desc: str = "Retrieving",
) -> RetrievalRun:
    """Retrieve for every query; ``concurrency > 1`` uses ``aretrieve`` with that many in flight.

    With ``query_embeddings`` the bundles carry precomputed embeddings, so the
    latency measured is retrieval alone. ``concurrency`` is checked first
    (``0`` or ``True`` would otherwise silently mean "sequential").
    """
    concurrency = check_count("concurrency", concurrency)
    bundles = {qid: QueryBundle(text, embedding=(query_embeddings or {}).get(qid)) for qid, text in queries.items()}
    if concurrency > 1:
        return asyncio.run(_arun(retriever, bundles, concurrency, show_progress, desc))
    ranking: Run = {}
    latencies: list[float] = []
    for qid, bundle in progress_bar(bundles.items(), desc=desc, disable=not show_progress):
        started = time.perf_counter()
        results = retriever.retrieve(bundle)
        latencies.append((time.perf_counter() - started) * 1000)
        ranking[qid] = [r.node.node_id for r in results]
    return RetrievalRun(ranking, latencies)


async def _arun(
    retriever: BaseRetriever, bundles: Mapping[str, QueryBundle], concurrency: int, show_progress: bool, desc: str
) -> RetrievalRun:
    limit = asyncio.Semaphore(concurrency)
    progress = progress_bar(total=len(bundles), desc=desc, disable=not show_progress)

    async def one(qid: str, bundle: QueryBundle) -> tuple[str, list[str], float]:
        async with limit:
            started = time.perf_counter()
            results = await retriever.aretrieve(bundle)
            progress.update()
            return qid, [r.node.node_id for r in results], (time.perf_counter() - started) * 1000

    done = await asyncio.gather(*(one(qid, b) for qid, b in bundles.items()))
    progress.close()
    return RetrievalRun({qid: ids for qid, ids, _ in done}, [ms for _, _, ms in done])


def measure_build(build: Callable[[], BaseRetriever]) -> tuple[BaseRetriever, float, float]:
    """Build a retriever; return it with build seconds and peak traced memory (MB).

    Timed on an untraced build (tracing slows allocation-heavy builds about
    3x); the memory figure comes from a second, traced build.
    """
    started = time.perf_counter()
    retriever = build()
    seconds = time.perf_counter() - started
    tracemalloc.start()
    try:
        build()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return retriever, seconds, peak / 2**20


def evaluate_retriever(
    retriever: BaseRetriever,
    dataset: BeirDataset,
    k: int = 10,
    query_embeddings: Mapping[str, list[float]] | None = None,
    concurrency: int = 1,
    show_progress: bool = False,
) -> tuple[EvalResult, RetrievalRun]:
    """Run ``retriever`` over ``dataset`` and score it (document level where known).

    ``k`` and ``concurrency`` are checked before the first query runs.
    """
    k = check_count("k", k)
    concurrency = check_count("concurrency", concurrency)
    run = run_queries(retriever, dataset.queries, query_embeddings, concurrency, show_progress)
    doc_of = dataset.doc_of if dataset.hierarchical else None
    return score(run.ranking, dataset.qrels, k, doc_of, dataset.doc_qrels), run


def evaluate_pairs(retriever: BaseRetriever, pairs: Sequence[tuple[str, Sequence[str]]], k: int = 10) -> EvalResult:
    """Score a retriever on ``(query, expected node ids)`` pairs, as LlamaIndex users keep them."""
    k = check_count("k", k)
    queries, qrels = from_pairs(pairs)
    return score(run_queries(retriever, queries).ranking, qrels, k)
