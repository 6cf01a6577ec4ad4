"""The first query after a one-document change, at 20,000 documents (issue 23).

A ``RecursiveSummaryRetriever`` over a synthetic corpus (``--docs`` documents
of ``--chunks`` chunks of realistic length, words drawn from a Zipf-like
vocabulary so BM25 has real postings), embedded by a cheap hashed bag-of-words
model (the model is not what is measured). Then, ``--repeats`` times: add one
new document and time the update and the first query after it; delete one
document and time the same. The first query is where the levels derived from
the nodes (BM25 over documents and over chunks) are brought up to date.

Usage::

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/update_latency.py [--docs 20000] [--chunks 4] [--index-dir DIR]

Run it with ``PYTHONPATH=<another checkout>`` to measure that checkout's code (the
first line printed names the code measured).

Figures: docs/BENCHMARKS.md, "Updates: the first query after a one-document change (issue 23)".
"""

from __future__ import annotations

import logging
from pathlib import Path

from harness import cli, timing
from harness.corpus import zipf_documents
from harness.models import hashed_words
from harness.versions import package_dir

DIM = 64


def main(argv: list[str] | None = None) -> None:
    from llama_index_ext_recursive import RecursiveSummaryRetriever

    p = cli.parser(__doc__)
    p.add_argument("--docs", type=int, default=20_000)
    p.add_argument("--chunks", type=int, default=4, help="paragraphs per document (4: about 6 chunks)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument(
        "--index-dir",
        type=Path,
        default=None,
        help="load the index persisted here, or build it and persist it here: one build measured by two checkouts",
    )
    p.add_argument("--score-mode", default="fused", help="the retriever's score_mode (fused, chunk, weighted, product)")
    args = p.parse_args(argv)
    logging.getLogger("llama_index_ext_recursive").setLevel(logging.WARNING)
    model = hashed_words(DIM)
    print(f"code measured: {package_dir()}", flush=True)
    clock = timing.Stopwatch()
    if args.index_dir is not None and args.index_dir.exists():
        retriever = RecursiveSummaryRetriever.from_persist_dir(args.index_dir, embed_model=model)
        how = f"loaded from {args.index_dir}"
    else:
        retriever = RecursiveSummaryRetriever.from_documents(
            list(zipf_documents(args.docs, args.chunks)),
            embed_model=model,
            similarity_top_k=5,
            show_progress=False,
            score_mode=args.score_mode,
        )
        how = "built"
        if args.index_dir is not None:
            retriever.persist(args.index_dir)
    retriever.retrieve("term1 term20 term300")
    print(f"score_mode={retriever.score_mode}")
    print(
        f"{len(retriever.index.documents)} documents, "
        f"{sum(len(r.chunk_ids) for r in retriever.index.documents.values())} chunks: "
        f"{how}, with the first query, in {clock.seconds():.1f} s",
        flush=True,
    )
    steady = [timing.seconds(lambda: retriever.retrieve("term7 term42 term999")) for _ in range(5)]
    print(f"query without a change: {timing.median(steady) * 1000:.1f} ms (median of 5)")
    rows = {"add": [], "delete": []}

    def first_query(text: str) -> tuple:
        """(seconds, hits) of the first query after a change."""
        hits: list = []
        return timing.latencies_ms(retriever.retrieve, [text], results=hits)[0] / 1000, hits[0]

    for repeat in range(args.repeats):
        new = next(zipf_documents(1, args.chunks, start=args.docs + repeat, seed=1000 + repeat))
        update = timing.seconds(lambda: retriever.add_documents([new], show_progress=False))
        first, hits = first_query(new.text.split()[5] + " " + new.text.split()[9])
        rows["add"].append((update, first))
        assert hits, "the added document's words find something"
        update = timing.seconds(lambda: retriever.delete_document(f"doc-{repeat}"))
        first, hits = first_query("term3 term17")
        rows["delete"].append((update, first))
        assert all(h.node.ref_doc_id != f"doc-{repeat}" for h in hits)
    for change, timings in rows.items():
        updates = [u for u, _ in timings]
        firsts = [q for _, q in timings]
        print(
            f"{change} one document: update {timing.median(updates):.3f} s, first query after it "
            f"{timing.median(firsts):.3f} s (median of {len(timings)}; max {max(firsts):.3f} s)"
        )


if __name__ == "__main__":
    main()
