"""p50 latency of the default recursive retriever against the flat hybrid, interleaved per query.

Both are built over the same nodes and cached embeddings (``.cache/embeddings.sqlite``); queries
carry precomputed embeddings; each query is run by one retriever then the other, for ``--rounds``
passes, so a busy neighbour slows both alike and the ratio stays meaningful.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/recursive_vs_hybrid_latency.py --data ../shared/data/scifact
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
from llama_index.core.schema import MetadataMode, QueryBundle

from llama_index_ext_recursive import RecursiveSummaryRetriever
from llama_index_ext_recursive.models import resolve_embed_model
from llama_index_ext_recursive.embedding_cache import CachedEmbedding
from llama_index_ext_recursive.eval.data import BeirDataset
from llama_index_ext_recursive.retrievers.fusion import HybridFusionRetriever


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--max-queries", type=int)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cache", default=".cache/embeddings.sqlite")
    args = parser.parse_args()
    dataset = BeirDataset.load(args.data, max_queries=args.max_queries)
    model = CachedEmbedding(resolve_embed_model(None), args.cache)
    nodes = dataset.nodes(title_in_text=not dataset.hierarchical)
    vectors = model.get_text_embedding_batch([n.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes])
    for node, vector in zip(nodes, vectors):
        node.embedding = vector
    qids = list(dataset.queries)
    embedded = model._get_query_embeddings([dataset.queries[q] for q in qids])
    bundles = [QueryBundle(dataset.queries[q], embedding=v) for q, v in zip(qids, embedded)]
    retrievers = {
        "hybrid": HybridFusionRetriever.from_nodes(nodes, embed_model=model),
        "recursive": RecursiveSummaryRetriever.from_nodes(nodes, embed_model=model, show_progress=False),
    }
    times = {name: [] for name in retrievers}
    for retriever in retrievers.values():
        retriever.retrieve(bundles[0])
    for _ in range(args.rounds):
        for bundle in bundles:
            for name, retriever in retrievers.items():
                started = time.perf_counter()
                retriever.retrieve(bundle)
                times[name].append((time.perf_counter() - started) * 1e3)
    p50 = {name: float(np.percentile(t, 50)) for name, t in times.items()}
    print(json.dumps({
        "dataset": dataset.name, "queries": len(bundles), "rounds": args.rounds,
        "p50_ms": {k: round(v, 3) for k, v in p50.items()},
        "p95_ms": {k: round(float(np.percentile(t, 95)), 3) for k, t in times.items()},
        "ratio_p50": round(p50["recursive"] / p50["hybrid"], 2),
    }))


if __name__ == "__main__":
    main()
