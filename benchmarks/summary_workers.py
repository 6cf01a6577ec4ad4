"""Extractive summaries of a streaming build on worker processes against in process (issue 25).

A streaming build summarises each batch of documents (about 250 at 20 chunks each) with the
default :class:`ExtractiveSummarizer`; :func:`llama_index_ext_recursive.workers.summarize_texts`
runs it on the worker processes that also tokenise. This times the summaries of
``--docs`` documents of :class:`harness.corpus.TopicCorpus` (the scale benchmark's corpus) in
batches of ``--batch``, with 1 and 2 workers alternately, ``--repeats`` times (the workers are
started before the timing), and checks the summaries are the same.

Usage (repository root)::

    .venv/bin/python benchmarks/summary_workers.py --out benchmarks/results/summary_workers.md
"""

from __future__ import annotations

import argparse
import time

from harness.corpus import TopicCorpus
from harness.report import Table, load_average, machine, write
from llama_index.core.schema import MetadataMode

from llama_index_ext_recursive.extractive import ExtractiveSummarizer
from llama_index_ext_recursive.workers import summarize_texts


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--docs", type=int, default=1000)
    p.add_argument("--batch", type=int, default=250)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", default=None)
    args = p.parse_args()
    corpus = TopicCorpus(args.docs, 20, sentences=12, words=12)
    documents = [
        (corpus.doc_id(d), "\n".join(n.get_content(metadata_mode=MetadataMode.NONE) for n in corpus.document(d).chunks))
        for d in range(args.docs)
    ]
    summarizer = ExtractiveSummarizer()
    summarize_texts(documents[:64], summarizer, workers=2, min_parallel=2)  # start the workers
    seconds = {1: 0.0, 2: 0.0}
    made: dict[int, list[str]] = {1: [], 2: []}
    for _ in range(args.repeats):
        for workers in (1, 2):
            made[workers] = []
            for start in range(0, args.docs, args.batch):
                started = time.perf_counter()
                made[workers] += summarize_texts(documents[start : start + args.batch], summarizer, workers=workers)
                seconds[workers] += time.perf_counter() - started
    assert made[1] == made[2], "the workers' summaries differ from the serial ones"
    table = Table(["workers", "documents", "ms per document", "speed-up"])
    per_doc = {w: seconds[w] / (args.repeats * args.docs) * 1000 for w in seconds}
    rows = [[str(w), str(args.docs), f"{per_doc[w]:.2f}", f"{per_doc[1] / per_doc[w]:.2f}"] for w in (1, 2)]
    text = "\n".join(
        [
            "# Extractive summaries on worker processes (issue 25)",
            "",
            "Command: `.venv/bin/python benchmarks/summary_workers.py "
            + f"--docs {args.docs} --batch {args.batch} --repeats {args.repeats}`",
            "",
            machine(blas=False) + f"; load average at the end {load_average():.2f}",
            "",
            table.render(rows),
        ]
    )
    print(text)
    if args.out:
        write(args.out, text, {"ms_per_document": per_doc})


if __name__ == "__main__":
    main()
