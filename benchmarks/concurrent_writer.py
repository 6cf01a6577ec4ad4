"""Retrieval latency of RecursiveSummaryRetriever with and without a concurrent writer.

Readers share a read lock; an update holds the write lock only while it swaps
prepared nodes in (issue 11). This measures what that costs a reader: the
same queries are timed alone, then while a writer thread keeps updating one
document (``add_nodes`` of a changed version, then ``delete_document``), with
pre-computed embeddings (through the shared cache) so the writer's cost is
the update itself, not the embedding model competing for the two cores.

Usage::

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/concurrent_writer.py \
        --data ../shared/data/xquad_en_fine --queries 300 --rounds 3

Writes ``benchmarks/results/concurrent_writer.md`` (``--out``).
"""

from __future__ import annotations

import platform
import statistics
import threading

from harness import RESULTS, cli, data, timing
from harness.models import real_model
from harness.report import Table, write


def main(argv: list[str] | None = None) -> None:
    from llama_index_ext_recursive import RecursiveSummaryRetriever

    p = cli.parser(__doc__)
    cli.add_data(p, required=False, default="../shared/data/xquad_en_fine")
    p.add_argument("--queries", type=int, default=300)
    cli.add_rounds(p)
    cli.add_cache(p)
    cli.add_out(p, RESULTS / "concurrent_writer.md")
    args = p.parse_args(argv)

    dataset = data.load(args.data, max_queries=args.queries)
    model = real_model("minilm", args.cache)
    nodes = data.embed_nodes(dataset, model, show_progress=True)
    retriever = RecursiveSummaryRetriever.from_nodes(nodes, embed_model=model, similarity_top_k=10)
    bundles = data.query_bundles(dataset, model)

    def timed(items) -> list[float]:
        return timing.latencies_ms(retriever.retrieve, items)

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
        clock = timing.Stopwatch()
        values = timed(bundles)
        elapsed = clock.seconds()
        stop.set()
        thread.join()
        return values, count[0] / elapsed

    timed(bundles[:50])  # warm up
    conditions = {"no writer": [], "writer, 2 updates/s": [], "writer flat out": []}
    rates = {name: [] for name in conditions}
    for _ in range(args.rounds):
        conditions["no writer"] += timed(bundles)
        for name, pause in (("writer, 2 updates/s", 1.0), ("writer flat out", 0.0)):
            values, rate = with_writer(pause)
            conditions[name] += values
            rates[name].append(rate)
    alone = conditions["no writer"]
    p50, p95 = (lambda v: timing.percentile(v, 50)), (lambda v: timing.percentile(v, 95))
    lines = [
        "# Retrieval latency with a concurrent writer",
        "",
        f"Command: `HF_HUB_OFFLINE=1 {cli.command(argv, __file__)}`",
        "",
        f"{len(nodes)} chunks in {len(retriever.documents)} documents, all-MiniLM-L6-v2 vectors computed "
        f"up front; {len(alone)} timed `retrieve` calls per condition (queries pre-embedded), "
        f"conditions alternating in {args.rounds} rounds; an update is `add_nodes` of an "
        f"{len(template)}-chunk document or its `delete_document`, in a thread of the same process. "
        f"{platform.processor() or platform.machine()}, 2 cores, one run.",
        "",
        Table(["condition", "updates/s done", "p50 ms", "p95 ms", "mean ms", "p50 ratio", "p95 ratio"]).render(
            (
                name,
                f"{statistics.mean(rates[name]):.1f}" if rates[name] else "0",
                f"{p50(values):.2f}",
                f"{p95(values):.2f}",
                f"{statistics.mean(values):.2f}",
                f"{p50(values) / p50(alone):.2f}x",
                f"{p95(values) / p95(alone):.2f}x",
            )
            for name, values in conditions.items()
        ),
    ]
    text = "\n".join(lines)
    print(text)
    write(args.out, text)


if __name__ == "__main__":
    main()
