"""Retrieval latency of RecursiveSummaryRetriever with and without a concurrent writer.

Readers share a read lock; an update holds the write lock only while it swaps
prepared nodes in (issue 11). This measures what that costs a reader: the
same queries are timed alone, then while a writer thread keeps updating one
document (``add_nodes`` of a changed version, then ``delete_document``), with
pre-computed embeddings so the writer's cost is the update itself, not the
embedding model competing for the two cores.

Usage::

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/concurrent_writer.py \
        --data ../shared/data/xquad_en_fine --queries 300 --rounds 3

Writes ``benchmarks/results/concurrent_writer.md``.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import threading
import time
from pathlib import Path
from typing import List

from llama_index.core.schema import QueryBundle

from llama_index_ext_recursive import RecursiveSummaryRetriever, bundled_embed_model
from llama_index_ext_recursive.eval import BeirDataset

RESULTS = Path(__file__).parent / "results" / "concurrent_writer.md"


def timed(retriever: RecursiveSummaryRetriever, bundles: List[QueryBundle]) -> List[float]:
    out = []
    for bundle in bundles:
        start = time.perf_counter()
        retriever.retrieve(bundle)
        out.append((time.perf_counter() - start) * 1000)
    return out


def pct(values: List[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="../shared/data/xquad_en_fine")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    dataset = BeirDataset.load(args.data)
    model = bundled_embed_model()
    nodes = dataset.nodes()
    vectors = model.get_text_embedding_batch([n.get_content() for n in nodes], show_progress=True)
    for node, vector in zip(nodes, vectors):
        node.embedding = vector
    retriever = RecursiveSummaryRetriever.from_nodes(nodes, embed_model=model, similarity_top_k=10)
    queries = list(dataset.queries.values())[: args.queries]
    bundles = [
        QueryBundle(query_str=q, embedding=e)
        for q, e in zip(queries, model.get_text_embedding_batch(queries))
    ]

    # the writer's document: a copy of one document under a new id, pre-embedded
    first_doc = nodes[0].metadata["doc_id"]
    template = [n for n in nodes if n.metadata["doc_id"] == first_doc]
    version = [0]

    def new_version():
        version[0] += 1
        out = []
        for i, node in enumerate(template):
            copy = node.model_copy()
            copy.id_ = f"writer-{version[0]}-{i}"
            copy.metadata = {**node.metadata, "doc_id": "writer-doc"}
            copy.set_content(f"{node.get_content()} (version {version[0]})")
            out.append(copy)
        return out

    def with_writer(pause: float) -> tuple:
        """Time the queries while a writer updates every ``pause`` seconds (0: flat out)."""
        stop = threading.Event()
        count = [0]

        def writer():
            while not stop.is_set():
                retriever.add_nodes(new_version())
                retriever.delete_document("writer-doc")
                count[0] += 2
                stop.wait(pause)

        thread = threading.Thread(target=writer)
        thread.start()
        start = time.perf_counter()
        values = timed(retriever, bundles)
        elapsed = time.perf_counter() - start
        stop.set()
        thread.join()
        return values, count[0] / elapsed

    timed(retriever, bundles[:50])  # warm up
    conditions = {"no writer": [], "writer, 2 updates/s": [], "writer flat out": []}
    rates = {name: [] for name in conditions}
    for _ in range(args.rounds):
        conditions["no writer"] += timed(retriever, bundles)
        for name, pause in (("writer, 2 updates/s", 1.0), ("writer flat out", 0.0)):
            values, rate = with_writer(pause)
            conditions[name] += values
            rates[name].append(rate)
    alone = conditions["no writer"]
    lines = [
        "# Retrieval latency with a concurrent writer",
        "",
        f"Command: `HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/concurrent_writer.py --data {args.data} "
        f"--queries {args.queries} --rounds {args.rounds}`",
        "",
        f"{len(nodes)} chunks in {len(retriever.documents)} documents, all-MiniLM-L6-v2 vectors computed "
        f"up front; {len(alone)} timed `retrieve` calls per condition (queries pre-embedded), "
        f"conditions alternating in {args.rounds} rounds; an update is `add_nodes` of an "
        f"{len(template)}-chunk document or its `delete_document`, in a thread of the same process. "
        f"{platform.processor() or platform.machine()}, 2 cores, one run.",
        "",
        "| condition | updates/s done | p50 ms | p95 ms | mean ms | p50 ratio | p95 ratio |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, values in conditions.items():
        rate = f"{statistics.mean(rates[name]):.1f}" if rates[name] else "0"
        lines.append(
            f"| {name} | {rate} | {statistics.median(values):.2f} | {pct(values, 95):.2f} | "
            f"{statistics.mean(values):.2f} | {statistics.median(values) / statistics.median(alone):.2f}x | "
            f"{pct(values, 95) / pct(alone, 95):.2f}x |"
        )
    lines.append("")
    RESULTS.write_text("\n".join(lines), encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
