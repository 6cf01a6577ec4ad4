"""Query latency of ``RecursiveSummaryRetriever`` with its defaults, at scale (synthetic).

The corpus of ``scale_recursive.py`` (topic embeddings, words drawn from a
per-document vocabulary), with queries that carry both an embedding near their
document's topic and six words of that document, so the lexical searches of a
hybrid configuration do real work. Run it once per version of the package to
compare (``PYTHONPATH`` picks the version), in the same session:

    git archive 9b2d52e llama_index_ext_recursive | tar -x -C /tmp/before
    PYTHONPATH=/tmp/before .venv/bin/python benchmarks/recursive_latency.py   # before
    .venv/bin/python benchmarks/recursive_latency.py                          # now
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
import time
from pathlib import Path

import numpy as np
from llama_index.core.schema import QueryBundle

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scale_recursive import TopicFakeEmbedding, make_corpus, make_queries  # noqa: E402

import llama_index_ext_recursive  # noqa: E402
from llama_index_ext_recursive import RecursiveSummaryRetriever  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=1000)
    parser.add_argument("--chunks", type=int, default=50)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    nodes, topics, doc_ids = make_corpus(args.docs, args.chunks, args.dim, 0, 0.5)
    fake = TopicFakeEmbedding(dim=args.dim)
    for doc_id, topic in zip(doc_ids, topics):
        fake.register_topic(doc_id, topic)
    extra = {}
    if "calibration" in inspect.signature(RecursiveSummaryRetriever.__init__).parameters:
        # the fake model cannot embed pseudo-queries, so calibration would drop the
        # dense searches: fix equal weights, so that every search runs as on real text
        from llama_index_ext_recursive.retrievers.calibrate import Calibration, ScriptCalibration

        equal = Calibration({"latin": ScriptCalibration(0, [], [0.5, 0.5], [])}, ["vector", "bm25"])
        extra["calibration"] = {"documents": equal, "chunks": equal}
    started = time.perf_counter()
    retriever = RecursiveSummaryRetriever.from_nodes(
        nodes, embed_model=fake, similarity_top_k=10, show_progress=False, **extra
    )
    build = time.perf_counter() - started
    vectors, targets = make_queries(topics, args.queries, 0, 0.5)
    rng = np.random.default_rng(2)
    words = {}
    for node in nodes:
        words.setdefault(node.metadata["doc_id"], []).extend(node.text.rstrip(".").lower().split())
    texts = [" ".join(rng.choice(words[doc_ids[t]], size=6)) for t in targets]
    bundles = [QueryBundle(query_str=t, embedding=v) for t, v in zip(texts, vectors)]
    retriever.retrieve(bundles[0])  # lazy matrices and postings
    times, hits = [], 0
    for _ in range(args.rounds):
        for bundle, target in zip(bundles, targets):
            t0 = time.perf_counter()
            results = retriever.retrieve(bundle)
            times.append((time.perf_counter() - t0) * 1e3)
            hits += bool(results) and results[0].node.metadata["doc_id"] == doc_ids[target]
    print(json.dumps({
        "package": str(Path(llama_index_ext_recursive.__file__).parent),
        "docs": args.docs, "chunks": args.docs * args.chunks,
        "settings": {k: getattr(getattr(retriever, k, None), "value", getattr(retriever, k, None))
                     for k in ("score_mode", "summary_mode", "chunk_mode", "summary_embedding")},
        "build_s": round(build, 2),
        "p50_ms": round(float(np.percentile(times, 50)), 3),
        "p95_ms": round(float(np.percentile(times, 95)), 3),
        "top1_in_target_doc": round(hits / len(times), 4),
    }))


if __name__ == "__main__":
    main()
