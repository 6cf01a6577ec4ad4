"""Issue 25 at scale: a summary index over ColumnarVectorStores, built from a stream, reopened, updated.

Synthetic corpus (:class:`harness.corpus.TopicCorpus`): ``--docs`` documents of
``--chunks`` chunks; chunk text of ``--sentences`` sentences of 12 words
(about 900 characters at the default 12), 384-d topic embeddings assigned up
front, so no model embeds anything (:func:`harness.models.topic_embedding`
with ``lazy=True`` embeds the summaries as their document's topic). Every
chunk also carries ``year`` (2000 + document number % 20) for the filtered
queries (``year >= 2010``: half the corpus).

Each size runs in three child processes, each measured from outside (peak
RSS from ``wait4``):

* ``build``: ``RecursiveSummaryRetriever.from_nodes(persist_dir=...)`` over a
  generator of the corpus's nodes (the caller holds no list), both levels
  ``ColumnarVectorStore(tokenizer=MultilingualTokenizer())``, equal fusion
  weights (no calibration): checkpointed into the folder every
  ``CHECKPOINT_NODES`` chunks and persisted at its end (the default storage:
  built, then ``persist``); the time the generator spends making the corpus
  is reported beside the build's;
* ``serve``: ``from_persist_dir`` (open), the first query, then ``--queries``
  queries of the default recursive retriever (fused mode), the same queries
  filtered, and their p50/p95; then a flat hybrid retriever (dense and BM25
  over every chunk, relative-score fusion, no routing), unfiltered and
  filtered (``flat_*`` in the JSON); peak RSS is the open plus the queries;
* ``recall``: recall@10 of the chunk level's approximate step against an exact
  scan, at several nprobe (its own process: the exact scans map the vectors);
* ``update``: open, add one new document (``--chunks`` chunks) and persist,
  delete one document and persist.

``--baseline`` sizes also build the default storage (NumpyVectorStore and
in-memory docstore and BM25) in a child, for the same figures side by side.

``--keep FOLDER`` builds each size into ``FOLDER/<storage>-<docs>`` (refused
when that exists: nothing is overwritten) and keeps it, without the update
child (it would change the index), so one build serves repeated profiling:
``--child serve --docs N --folder FOLDER/columnar-N --queries Q`` prints the
serve figures of that folder as JSON.

Usage (repository root)::

    .venv/bin/python benchmarks/scale_columnar.py --docs 2500,10000 --queries 1000
    .venv/bin/python benchmarks/scale_columnar.py --docs 200 --queries 50   # quick
    .venv/bin/python benchmarks/scale_columnar.py --docs 10000 --baseline 0 --keep /tmp/indexes
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from harness import RESULTS, cli, memory, timing
from harness.corpus import TopicCorpus
from harness.models import equal_calibration, topic_embedding
from harness.report import Table, fmt, library_fingerprint, load_average, machine, write

pct = timing.percentile
WORDS = 12


def corpus_of(args) -> TopicCorpus:
    return TopicCorpus(args.docs_n, args.chunks, sentences=args.sentences, words=WORDS)


def nodes(corpus: TopicCorpus, first: int = 0, count: int | None = None):
    """The corpus's chunks, document after document, with a ``year`` to filter on."""
    for d in range(first, corpus.docs if count is None else first + count):
        for node in corpus.document(d).chunks:
            node.metadata["year"] = 2000 + d % 20
            node.excluded_embed_metadata_keys.append("year")
            yield node


def stores(columnar: bool) -> dict[str, object]:
    if not columnar:
        return {}
    from llama_index_ext_recursive.stores.columnar_store import ColumnarVectorStore
    from llama_index_ext_recursive.tokenizer import MultilingualTokenizer

    return {
        "chunk_vector_store": ColumnarVectorStore(tokenizer=MultilingualTokenizer()),
        "summary_vector_store": ColumnarVectorStore(tokenizer=MultilingualTokenizer()),
    }


# ------------------------------------------------------------------ children
def child_build(args) -> dict[str, object]:
    from llama_index_ext_recursive import RecursiveSummaryRetriever

    corpus = corpus_of(args)
    model = topic_embedding(corpus, lazy=True)
    stream = TimedStream(nodes(corpus))
    started = time.perf_counter()
    if args.storage == "columnar":  # checkpointed into the folder as it goes, persisted at the end
        RecursiveSummaryRetriever.from_nodes(
            stream,
            persist_dir=args.folder,
            embed_model=model,
            show_progress=False,
            **stores(True),
            **equal_calibration(RecursiveSummaryRetriever),
        )
    else:
        retriever = RecursiveSummaryRetriever.from_nodes(
            stream, embed_model=model, show_progress=False, **equal_calibration(RecursiveSummaryRetriever)
        )
        retriever.persist(args.folder)
    return {"build_s": time.perf_counter() - started, "corpus_s": stream.seconds}


class TimedStream:
    """The corpus's nodes, counting the time spent making them: the benchmark's own work,
    inside the build's time, reported beside it."""

    def __init__(self, items) -> None:
        self.items = iter(items)
        self.seconds = 0.0

    def __iter__(self):
        return self

    def __next__(self):
        started = time.perf_counter()
        try:
            return next(self.items)
        finally:
            self.seconds += time.perf_counter() - started


def child_serve(args) -> dict[str, object]:
    from llama_index.core.schema import QueryBundle

    from llama_index_ext_recursive import FilteredQueryBundle, HybridFusionRetriever, RecursiveSummaryRetriever

    corpus = corpus_of(args)
    queries = corpus.sampled_chunk_queries(args.queries, noise=1.0)
    model = topic_embedding(corpus, lazy=True)
    rss_before = memory.peak_rss_mib()
    started = time.perf_counter()
    retriever = RecursiveSummaryRetriever.from_persist_dir(args.folder, embed_model=model)
    open_s = time.perf_counter() - started
    bundles = [QueryBundle(text, embedding=vector) for text, vector, _, _ in queries]
    first_ms = timing.latencies_ms(retriever.retrieve, bundles[:1])[0]
    plain = timing.latencies_ms(retriever.retrieve, bundles[1:], warmup=0)
    filtered_bundles = [
        FilteredQueryBundle(text, embedding=vector, filters={"year": {"op": ">=", "value": 2010}})
        for text, vector, _, _ in queries
    ]
    filtered = timing.latencies_ms(retriever.retrieve, filtered_bundles, warmup=3)
    hits = sum(
        any(h.node.node_id == chunk for h in retriever.retrieve(b))
        for b, (_, _, chunk, _) in zip(bundles[:100], queries[:100], strict=True)
    )
    # flat hybrid: dense and BM25 over every chunk, fused by relative score, no routing
    levels = retriever._levels()
    flat = HybridFusionRetriever(
        [levels.chunk_vector, levels.chunk_bm25], mode="relative_score", similarity_top_k=10, use_async=False
    )
    flat_plain = timing.latencies_ms(flat.retrieve, bundles[1:], warmup=3)
    flat_filtered = timing.latencies_ms(flat.retrieve, filtered_bundles, warmup=3)
    return {
        "flat_p50_ms": pct(flat_plain, 50),
        "flat_p95_ms": pct(flat_plain, 95),
        "flat_filtered_p50_ms": pct(flat_filtered, 50),
        "flat_filtered_p95_ms": pct(flat_filtered, 95),
        "open_s": open_s,
        "first_ms": first_ms,
        "p50_ms": pct(plain, 50),
        "p95_ms": pct(plain, 95),
        "filtered_p50_ms": pct(filtered, 50),
        "filtered_p95_ms": pct(filtered, 95),
        "target_in_top10": hits / min(100, len(queries)),
        "rss_before_open_mib": rss_before,
    }


def child_recall(args) -> dict[str, object]:
    """The approximate step's recall, in its own process: its exact scans map the whole vector
    file, which would count in the serving process's peak RSS."""
    from llama_index_ext_recursive import RecursiveSummaryRetriever

    corpus = corpus_of(args)
    queries = corpus.sampled_chunk_queries(200, noise=1.0)
    retriever = RecursiveSummaryRetriever.from_persist_dir(args.folder, embed_model=topic_embedding(corpus, lazy=True))
    return approximate_recall(retriever, [vector for _, vector, _, _ in queries])


def approximate_recall(retriever, vectors: list[list[float]]) -> dict[str, object]:
    """Recall@10 of the chunk level's approximate search against its exact search, for the
    columnar store (``{}`` for the default one, which is exact), at its default probes and at
    nprobe 8, 16, 32, 64 and 128."""
    import numpy as np

    store = retriever.index.chunk_index.vector_store
    column = getattr(store, "_vectors", None)  # the store's VectorColumn (benchmark only)
    if column is None or not column.approximate:
        return {}
    queries = np.asarray(vectors, dtype=np.float32)
    threshold = column.approximate_threshold
    column.approximate_threshold = 10**12  # exact: the whole column scanned
    exact, _ = column.search_many(queries, 10)
    column.approximate_threshold = threshold
    nprobe = column.nprobe
    recall = {}
    for probes in (None, 8, 16, 32, 64, 128):
        column.nprobe = probes
        found, _ = column.search_many(queries, 10)
        name = f"nprobe={probes}" if probes else f"default nprobe={column.probes}, {column.approximate_kind}"
        recall[f"recall@10 {name}"] = float(
            np.mean([len(np.intersect1d(a, b)) / 10 for a, b in zip(found, exact, strict=True)])
        )
    column.nprobe = nprobe
    return recall


def child_update(args) -> dict[str, object]:
    from llama_index_ext_recursive import RecursiveSummaryRetriever

    corpus = TopicCorpus(args.docs_n + 1, args.chunks, sentences=args.sentences, words=WORDS)
    model = topic_embedding(corpus, lazy=True)
    retriever = RecursiveSummaryRetriever.from_persist_dir(args.folder, embed_model=model)
    new = list(nodes(corpus, first=args.docs_n, count=1))
    started = time.perf_counter()
    retriever.add_nodes(new)
    added = time.perf_counter() - started
    started = time.perf_counter()
    retriever.persist(args.folder)
    add_persist = time.perf_counter() - started
    started = time.perf_counter()
    retriever.delete_document(corpus.doc_id(0))
    deleted = time.perf_counter() - started
    started = time.perf_counter()
    retriever.persist(args.folder)
    delete_persist = time.perf_counter() - started
    return {"add_s": added, "add_persist_s": add_persist, "delete_s": deleted, "delete_persist_s": delete_persist}


CHILDREN = {"build": child_build, "serve": child_serve, "recall": child_recall, "update": child_update}


# ------------------------------------------------------------------ driver
def run(stage: str, storage: str, docs: int, folder: Path, args) -> dict[str, object]:
    command = [
        sys.executable,
        __file__,
        "--child",
        stage,
        "--storage",
        storage,
        "--docs",
        str(docs),
        "--chunks",
        str(args.chunks),
        "--sentences",
        str(args.sentences),
        "--queries",
        str(args.queries),
        "--folder",
        str(folder),
    ]
    done = memory.run_child(command, env=os.environ, timeout=args.timeout)
    if done.returncode != 0:
        raise SystemExit(f"{stage} {storage} {docs} failed ({done.returncode}):\n{done.stderr[-4000:]}")
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    figures["peak_rss_mib"] = done.peak_rss_mib
    figures["wall_s"] = done.wall_s
    return figures


def main(argv: list[str] | None = None) -> None:
    p = cli.parser(__doc__)
    p.add_argument("--docs", type=cli.csv(int), default=[2500, 10000], help="corpus sizes in documents")
    p.add_argument("--chunks", type=int, default=20, help="chunks per document")
    p.add_argument("--sentences", type=int, default=6, help="12-word sentences per chunk")
    p.add_argument("--queries", type=int, default=1000, help="timed queries per size")
    p.add_argument("--baseline", type=cli.csv(int), default=[2500], help="sizes also built with the default storage")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds per child")
    p.add_argument(
        "--keep", type=Path, help="build into FOLDER/<storage>-<docs> and keep it (no update child: it changes it)"
    )
    p.add_argument("--child", choices=sorted(CHILDREN), help=argparse_hidden())
    p.add_argument("--storage", default="columnar", help=argparse_hidden())
    p.add_argument("--folder", type=Path, help=argparse_hidden())
    cli.add_out(p, RESULTS / "scale_columnar.md")
    args = p.parse_args(argv)
    if args.child:
        args.docs_n = args.docs[0]
        print(json.dumps(CHILDREN[args.child](args)), flush=True)
        return
    rows = []
    table = Table(
        [
            "storage",
            "chunks",
            "build s",
            "of which corpus s",
            "build peak RSS MiB",
            "open s",
            "first query ms",
            "p50 / p95 ms",
            "filtered p50 / p95 ms",
            "serving peak RSS MiB",
            "add+persist s",
            "delete+persist s",
            "target in top 10",
        ],
        align="lrrrrrrrrrrrr",
    )
    print(table.header(), flush=True)
    for docs in args.docs:
        for storage in ("default", "columnar") if docs in args.baseline else ("columnar",):
            with contextlib.ExitStack() as stack:
                if args.keep is None:
                    folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="scale-columnar-"))) / "index"
                else:
                    folder = args.keep / f"{storage}-{docs}"
                    if folder.exists():
                        raise SystemExit(
                            f"{folder} exists: --keep builds into a new folder (remove it, or pick another)"
                        )
                build = run("build", storage, docs, folder, args)
                serve = run("serve", storage, docs, folder, args)
                if storage == "columnar":
                    recall = run("recall", storage, docs, folder, args)
                    serve.update({k: v for k, v in recall.items() if k.startswith("recall")})
                keep_unchanged = args.keep is not None
                update = (
                    run("update", storage, docs, folder, args) if storage == "columnar" and not keep_unchanged else {}
                )
            row = {"storage": storage, "chunks": docs * args.chunks, "build": build, "serve": serve, "update": update}
            rows.append(row)
            report(args, argv, table, rows)  # after every size: a later size that fails keeps these
            print(
                table.row(
                    storage,
                    f"{docs * args.chunks:,}",
                    fmt(build["build_s"], 1),
                    fmt(build["corpus_s"], 1),
                    fmt(build["peak_rss_mib"], 0),
                    fmt(serve["open_s"], 2),
                    fmt(serve["first_ms"], 1),
                    f"{fmt(serve['p50_ms'], 1)} / {fmt(serve['p95_ms'], 1)}",
                    f"{fmt(serve['filtered_p50_ms'], 1)} / {fmt(serve['filtered_p95_ms'], 1)}",
                    fmt(serve["peak_rss_mib"], 0),
                    fmt(update["add_s"] + update["add_persist_s"], 2) if update else "-",
                    fmt(update["delete_s"] + update["delete_persist_s"], 2) if update else "-",
                    fmt(serve["target_in_top10"], 2),
                ),
                flush=True,
            )


def report(args, argv, table: Table, rows: list[dict[str, object]]) -> None:
    """Write the result files for the sizes measured so far."""
    text = "\n".join(
        [
            "# Columnar summary index at scale (issue 25)",
            "",
            f"Command: `{cli.command(argv)}`",
            "",
            machine(),
            f"Load average at the end: {load_average():.2f}. Code: {library_fingerprint()}.",
            "",
            table.render(
                [
                    [
                        r["storage"],
                        f"{r['chunks']:,}",
                        fmt(r["build"]["build_s"], 1),
                        fmt(r["build"]["corpus_s"], 1),
                        fmt(r["build"]["peak_rss_mib"], 0),
                        fmt(r["serve"]["open_s"], 2),
                        fmt(r["serve"]["first_ms"], 1),
                        f"{fmt(r['serve']['p50_ms'], 1)} / {fmt(r['serve']['p95_ms'], 1)}",
                        f"{fmt(r['serve']['filtered_p50_ms'], 1)} / {fmt(r['serve']['filtered_p95_ms'], 1)}",
                        fmt(r["serve"]["peak_rss_mib"], 0),
                        fmt(r["update"]["add_s"] + r["update"]["add_persist_s"], 2) if r["update"] else "-",
                        fmt(r["update"]["delete_s"] + r["update"]["delete_persist_s"], 2) if r["update"] else "-",
                        fmt(r["serve"]["target_in_top10"], 2),
                    ]
                    for r in rows
                ]
            ),
        ]
    )
    write(args.out, text + "\n", rows)


def argparse_hidden() -> str:
    import argparse

    return argparse.SUPPRESS


if __name__ == "__main__":
    main()
