"""Latency of ``hybrid`` against the sum of its two children, on real datasets, one run.

For each dataset, ``HybridFusionRetriever.from_nodes`` is built over the
dataset's nodes with cached embeddings (``.cache/embeddings.sqlite``, the
bundled model). Every query is embedded up front and passed as
``QueryBundle(query, embedding=...)``, so no timing includes the model. The
two children (``retriever._retrievers``: vector over ``NumpyVectorStore`` and
``MultilingualBM25Retriever``) and the hybrid are timed in interleaved rounds
(every retriever once per query, the order rotating from query
to query so none profits from caches the previous one warmed; after 3
warm-up queries), and the report
gives median and mean per-query milliseconds and
``overhead = hybrid / (vector + bm25)`` (ratio of means; 1.0 means fusion
itself is free). The same is measured for upstream's
``QueryFusionRetriever([vector, bm25], num_queries=1, mode="reciprocal_rerank",
use_async=False)`` over ``VectorStoreIndex(nodes).as_retriever()`` and
``BM25Retriever.from_defaults`` (``upstream_overhead``; ``use_async=False``
is its cheapest sync path). Only queries for which the hybrid runs both children count
(calibration may give a child weight 0 for a script, e.g. the English model
on Chinese queries; those are counted and reported separately).

Usage (repository root)::

    .venv/bin/python benchmarks/fusion_overhead.py                 # scifact, xquad_en_fine
    .venv/bin/python benchmarks/fusion_overhead.py --datasets scifact --max-queries 100
"""

from __future__ import annotations

import json
import statistics

from harness import RESULTS, cli, data, timing
from harness.models import real_model


def measure(dataset, model, rounds: int) -> dict[str, object]:
    from llama_index.core import VectorStoreIndex
    from llama_index.core.llms import MockLLM
    from llama_index.core.retrievers import QueryFusionRetriever
    from llama_index.retrievers.bm25 import BM25Retriever

    from llama_index_ext_recursive.retrievers.fusion import HybridFusionRetriever

    nodes = data.embed_nodes(dataset, model)
    hybrid = HybridFusionRetriever.from_nodes(nodes, embed_model=model)
    vector_child, bm25_child = hybrid._retrievers
    upstream_vector = VectorStoreIndex(nodes, embed_model=model).as_retriever(similarity_top_k=10)
    upstream_bm25 = BM25Retriever.from_defaults(nodes=nodes, similarity_top_k=10)
    upstream = QueryFusionRetriever(
        [upstream_vector, upstream_bm25],
        llm=MockLLM(),
        num_queries=1,
        mode="reciprocal_rerank",
        similarity_top_k=10,
        use_async=False,
    )
    contestants = {
        "vector": vector_child,
        "bm25": bm25_child,
        "hybrid": hybrid,
        "upstream_vector": upstream_vector,
        "upstream_bm25": upstream_bm25,
        "upstream_fusion": upstream,
    }
    bundles = [b for b in data.query_bundles(dataset, model) if all(w > 0 for w in hybrid.weights_for(b.query_str))]
    timings = timing.interleaved_calls({name: r.retrieve for name, r in contestants.items()}, bundles, rounds, warmup=3)
    mean = {name: statistics.fmean(values) for name, values in timings.items()}
    return {
        "dataset": dataset.name,
        "corpus": len(nodes),
        "queries_timed": len(bundles),
        "queries_single_child": len(dataset.queries) - len(bundles),
        "rounds": rounds,
        "median_ms": {name: timing.median(values) for name, values in timings.items()},
        "mean_ms": mean,
        "overhead": mean["hybrid"] / (mean["vector"] + mean["bm25"]),
        "upstream_overhead": mean["upstream_fusion"] / (mean["upstream_vector"] + mean["upstream_bm25"]),
    }


def main(argv: list[str] | None = None) -> None:
    p = cli.parser(__doc__)
    cli.add_datasets(p, "scifact,xquad_en_fine")
    cli.add_data_root(p)
    cli.add_cache(p)
    cli.add_max_queries(p)
    cli.add_rounds(p)
    cli.add_out(p, RESULTS / "fusion_overhead.json")
    args = p.parse_args(argv)
    model = real_model("minilm", args.cache)
    reports = []
    for name in cli.csv()(args.datasets):
        report = measure(data.load(name, root=args.data_root, max_queries=args.max_queries), model, args.rounds)
        reports.append(report)
        med, mean = report["median_ms"], report["mean_ms"]
        print(
            f"{name}: {report['queries_timed']} queries x {args.rounds} rounds; mean ms "
            f"vector {mean['vector']:.2f} + bm25 {mean['bm25']:.2f} -> hybrid {mean['hybrid']:.2f} "
            f"(median {med['vector']:.2f} + {med['bm25']:.2f} -> {med['hybrid']:.2f}); "
            f"overhead x{report['overhead']:.3f}; {report['queries_single_child']} queries use one child. "
            f"upstream: {mean['upstream_vector']:.2f} + {mean['upstream_bm25']:.2f} -> "
            f"{mean['upstream_fusion']:.2f}, overhead x{report['upstream_overhead']:.3f}"
        )
    args.out.write_text(json.dumps(reports, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
