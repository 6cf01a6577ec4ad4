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

import argparse
import hashlib
import logging
import statistics
import time
from pathlib import Path
from typing import Iterator, List

import numpy as np
import llama_index_ext_recursive
from llama_index.core import Document
from llama_index.core.base.embeddings.base import BaseEmbedding

from llama_index_ext_recursive import RecursiveSummaryRetriever

DIM = 64


class HashedWords(BaseEmbedding):
    """Hashed bag of words: cheap and deterministic, so the timing is the index's."""

    def _vector(self, text: str) -> List[float]:
        vec = np.zeros(DIM)
        for word in text.lower().split():
            vec[int(hashlib.blake2b(word.encode(), digest_size=4).hexdigest(), 16) % DIM] += 1.0
        norm = np.linalg.norm(vec)
        return (vec / norm).tolist() if norm else [1.0 / np.sqrt(DIM)] * DIM

    def _get_query_embedding(self, query: str) -> List[float]:
        return self._vector(query)

    def _get_text_embedding(self, text: str) -> List[float]:
        return self._vector(text)

    async def _aget_query_embedding(self, query: str) -> List[float]:
        return self._vector(query)


def documents(count: int, chunks: int, start: int = 0, seed: int = 0) -> Iterator[Document]:
    """Documents of ``chunks`` paragraphs of ~120 words each, streamed."""
    rng = np.random.default_rng(seed)
    vocabulary = [f"term{i}" for i in range(20_000)]
    weights = 1.0 / np.arange(1, len(vocabulary) + 1)
    weights /= weights.sum()
    for i in range(start, start + count):
        paragraphs = [" ".join(rng.choice(vocabulary, size=120, p=weights)) + "." for _ in range(chunks)]
        yield Document(text="\n\n".join(paragraphs), doc_id=f"doc-{i}", metadata={"title": f"Document {i}"})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--docs", type=int, default=20_000)
    parser.add_argument("--chunks", type=int, default=4, help="paragraphs per document (4: about 6 chunks)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--index-dir", type=Path, default=None,
                        help="load the index persisted here, or build it and persist it here: "
                             "one build measured by two checkouts")
    parser.add_argument("--score-mode", default="fused", help="the retriever's score_mode (fused, chunk, weighted, product)")
    args = parser.parse_args()
    logging.getLogger("llama_index_ext_recursive").setLevel(logging.WARNING)
    model = HashedWords(model_name="hashed-words")
    print(f"code measured: {Path(llama_index_ext_recursive.__file__).parent}", flush=True)
    start = time.perf_counter()
    if args.index_dir is not None and args.index_dir.exists():
        retriever = RecursiveSummaryRetriever.from_persist_dir(args.index_dir, embed_model=model)
        how = f"loaded from {args.index_dir}"
    else:
        retriever = RecursiveSummaryRetriever.from_documents(
            list(documents(args.docs, args.chunks)), embed_model=model, similarity_top_k=5, show_progress=False,
            score_mode=args.score_mode,
        )
        how = "built"
        if args.index_dir is not None:
            retriever.persist(args.index_dir)
    retriever.retrieve("term1 term20 term300")
    print(f"score_mode={retriever.score_mode}")
    print(f"{len(retriever.index.documents)} documents, "
          f"{sum(len(r.chunk_ids) for r in retriever.index.documents.values())} chunks: "
          f"{how}, with the first query, in {time.perf_counter() - start:.1f} s", flush=True)
    steady = []
    for _ in range(5):
        t = time.perf_counter()
        retriever.retrieve("term7 term42 term999")
        steady.append(time.perf_counter() - t)
    print(f"query without a change: {statistics.median(steady) * 1000:.1f} ms (median of 5)")
    rows = {"add": [], "delete": []}
    for repeat in range(args.repeats):
        new = next(documents(1, args.chunks, start=args.docs + repeat, seed=1000 + repeat))
        t = time.perf_counter()
        retriever.add_documents([new], show_progress=False)
        update = time.perf_counter() - t
        t = time.perf_counter()
        hits = retriever.retrieve(new.text.split()[5] + " " + new.text.split()[9])
        rows["add"].append((update, time.perf_counter() - t))
        assert hits, "the added document's words find something"
        t = time.perf_counter()
        retriever.delete_document(f"doc-{repeat}")
        update = time.perf_counter() - t
        t = time.perf_counter()
        hits = retriever.retrieve("term3 term17")
        rows["delete"].append((update, time.perf_counter() - t))
        assert all(h.node.ref_doc_id != f"doc-{repeat}" for h in hits)
    for change, timings in rows.items():
        updates = [u for u, _ in timings]
        firsts = [q for _, q in timings]
        print(f"{change} one document: update {statistics.median(updates):.3f} s, first query after it "
              f"{statistics.median(firsts):.3f} s (median of {len(timings)}; max {max(firsts):.3f} s)")


if __name__ == "__main__":
    main()
