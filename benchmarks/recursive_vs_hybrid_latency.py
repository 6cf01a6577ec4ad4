"""p50 latency of the default recursive retriever against the flat hybrid, interleaved per query.

Both are built over the same nodes and cached embeddings (``.cache/embeddings.sqlite``); queries
carry precomputed embeddings; each query is run by one retriever then the other, for ``--rounds``
passes, so a busy neighbour slows both alike and the ratio stays meaningful.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/recursive_vs_hybrid_latency.py --data ../shared/data/scifact
"""

from __future__ import annotations

import json

from harness import cli, data, timing
from harness.models import real_model


def main(argv: list[str] | None = None) -> None:
    from llama_index_ext_recursive import RecursiveSummaryRetriever
    from llama_index_ext_recursive.retrievers.fusion import HybridFusionRetriever

    p = cli.parser(__doc__)
    cli.add_data(p)
    cli.add_max_queries(p)
    cli.add_rounds(p)
    cli.add_cache(p)
    args = p.parse_args(argv)
    dataset = data.load(args.data, max_queries=args.max_queries)
    model = real_model("minilm", args.cache)
    nodes = data.embed_nodes(dataset, model)
    bundles = data.query_bundles(dataset, model)
    retrievers = {
        "hybrid": HybridFusionRetriever.from_nodes(nodes, embed_model=model),
        "recursive": RecursiveSummaryRetriever.from_nodes(nodes, embed_model=model, show_progress=False),
    }
    times = timing.interleaved_calls(
        {name: r.retrieve for name, r in retrievers.items()}, bundles, args.rounds, warmup=1, rotate=False
    )
    p50 = {name: timing.percentile(t, 50) for name, t in times.items()}
    print(
        json.dumps(
            {
                "dataset": dataset.name,
                "queries": len(bundles),
                "rounds": args.rounds,
                "p50_ms": {k: round(v, 3) for k, v in p50.items()},
                "p95_ms": {k: round(timing.percentile(t, 95), 3) for k, t in times.items()},
                "ratio_p50": round(p50["recursive"] / p50["hybrid"], 2),
            }
        )
    )


if __name__ == "__main__":
    main()
