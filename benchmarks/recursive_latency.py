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

import json

import numpy as np
from harness import cli, timing
from harness.corpus import TopicCorpus
from harness.models import equal_calibration, topic_embedding
from harness.versions import package_dir
from llama_index.core.schema import QueryBundle


def main(argv: list[str] | None = None) -> None:
    from llama_index_ext_recursive import RecursiveSummaryRetriever

    p = cli.parser(__doc__)
    p.add_argument("--docs", type=int, default=1000)
    p.add_argument("--chunks", type=int, default=50)
    p.add_argument("--dim", type=int, default=384)
    p.add_argument("--queries", type=int, default=200)
    cli.add_rounds(p)
    args = p.parse_args(argv)
    corpus = TopicCorpus(args.docs, args.chunks, args.dim, seed=0, noise=0.5)
    nodes, doc_ids = list(corpus.nodes()), corpus.doc_ids
    clock = timing.Stopwatch()
    retriever = RecursiveSummaryRetriever.from_nodes(
        nodes,
        embed_model=topic_embedding(corpus),
        similarity_top_k=10,
        show_progress=False,
        **equal_calibration(RecursiveSummaryRetriever),
    )
    build = clock.seconds()
    vectors, targets = corpus.document_queries(args.queries, noise=0.5)
    rng = np.random.default_rng(2)
    words = {}
    for node in nodes:
        words.setdefault(node.metadata["doc_id"], []).extend(node.text.rstrip(".").lower().split())
    texts = [" ".join(rng.choice(words[doc_ids[t]], size=6)) for t in targets]
    bundles = [QueryBundle(query_str=t, embedding=v) for t, v in zip(texts, vectors)]
    retriever.retrieve(bundles[0])  # lazy matrices and postings
    results: list = []
    times = timing.latencies_ms(retriever.retrieve, bundles * args.rounds, results=results)
    hits = sum(bool(r) and r[0].node.metadata["doc_id"] == doc_ids[t] for r, t in zip(results, targets * args.rounds))
    print(
        json.dumps(
            {
                "package": str(package_dir()),
                "docs": args.docs,
                "chunks": args.docs * args.chunks,
                "settings": {
                    k: getattr(getattr(retriever, k, None), "value", getattr(retriever, k, None))
                    for k in ("score_mode", "summary_mode", "chunk_mode", "summary_embedding")
                },
                "build_s": round(build, 2),
                "p50_ms": round(timing.percentile(times, 50), 3),
                "p95_ms": round(timing.percentile(times, 95), 3),
                "top1_in_target_doc": round(hits / len(times), 4),
            }
        )
    )


if __name__ == "__main__":
    main()
