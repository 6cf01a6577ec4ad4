"""Scale benchmark for ``RecursiveSummaryRetriever`` with synthetic embeddings.

No real embedding model is used: chunk embeddings are assigned up front
(``node.embedding``) from per-document "topic" vectors, summaries are embedded
by a deterministic fake model that maps a document's summary to its topic, and
queries are passed as ``QueryBundle(embedding=...)`` so embedding costs nothing.

Measured for each corpus size (documents x chunks):

* build: ``from_nodes`` total, and ``group_nodes`` and ``build_documents`` alone
  on the same nodes (summarization); indexing ~= total - both;
* recursive ``retrieve`` and ``aretrieve`` latency (p50/p95 per query);
* the summary search alone (``VectorIndexRetriever`` over ``_summary_index``,
  top ``num_routed_docs``), one per-document chunk search (``ref_doc_id``
  filter, as the retriever issues it), the bare ``NumpyVectorStore.query`` of
  that filtered search, and ``_plan`` alone;
* flat top-10 over all chunks (``VectorIndexRetriever`` over ``_chunk_index``,
  i.e. ``NumpyVectorStore``);
* optionally, flat top-10 with upstream ``SimpleVectorStore`` (default storage
  context) at the sizes given by ``--svs-docs``.

Usage::

    .venv/bin/python benchmarks/scale_recursive.py --docs 100,300,1000 \
        --chunks 50 --dim 384 --queries 200
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import io
import os
import pstats
import statistics
import sys
import time

import numpy as np
from harness import RESULTS, cli, memory, timing
from harness.corpus import TopicCorpus
from harness.models import equal_calibration, topic_embedding
from harness.report import Table, fmt, library_fingerprint, machine, write
from llama_index.core import VectorStoreIndex
from llama_index.core.indices.vector_store.retrievers import VectorIndexRetriever
from llama_index.core.schema import QueryBundle
from llama_index.core.vector_stores.types import (
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
)

SERIES = (
    "sync",
    "async",
    "summary",
    "routed_chunk",
    "per_doc",
    "store_filtered",
    "intersect",
    "plan",
    "flat",
)
pct = timing.percentile


def time_calls(fn, queries: list[list[float]], warmup: int = 3) -> list[float]:
    """Per-call latencies in ms of ``fn`` over bundles of the query vectors (built outside the timing)."""
    return timing.latencies_ms(fn, [QueryBundle(query_str="q", embedding=v) for v in queries], warmup=warmup)


def routing_filter(doc_id: str) -> MetadataFilters:
    from llama_index_ext_recursive.recursive.build import ROUTING_KEY

    return MetadataFilters(filters=[MetadataFilter(key=ROUTING_KEY, value=doc_id, operator=FilterOperator.EQ)])


# -------------------------------------------------------------------- bench
def bench_size(args: argparse.Namespace, n_docs: int) -> dict[str, object]:
    from llama_index_ext_recursive import RecursiveSummaryRetriever
    from llama_index_ext_recursive.recursive.build import ROUTING_KEY, build_documents, group_nodes
    from llama_index_ext_recursive.recursive.summarize import ExtractiveSummarizer, SummaryCache

    row: dict[str, object] = {"docs": n_docs, "chunks": n_docs * args.chunks}
    corpus = TopicCorpus(n_docs, args.chunks, args.dim, args.seed, args.noise)
    nodes, doc_ids = list(corpus.nodes()), corpus.doc_ids
    fake = topic_embedding(corpus)

    # summarization alone (same steps from_nodes runs before indexing)
    gc.collect()
    clock = timing.Stopwatch()
    groups = group_nodes(nodes, "doc_id")
    row["group_s"] = clock.seconds()
    clock.restart()
    built = build_documents(groups, "doc_id", ExtractiveSummarizer(), SummaryCache(), False)
    row["summarize_s"] = clock.seconds()
    # sanity: every summary starts with its doc id, so the fake model maps it
    # to the topic when summaries are embedded from text (summary_embedding=text)
    misses = sum(1 for s in built.summary_nodes if not s.text.startswith(f"{s.index_id}. "))
    row["summary_prefix_misses"] = misses
    del groups, built
    gc.collect()

    fake.calls = 0
    clock.restart()
    # the topic model cannot embed calibration's pseudo-queries: fixed equal weights, every search runs
    extra = equal_calibration(RecursiveSummaryRetriever)
    if args.summary_embedding:
        extra["summary_embedding"] = args.summary_embedding
    r = RecursiveSummaryRetriever.from_nodes(
        nodes,
        doc_id_key="doc_id",
        embed_model=fake,
        similarity_top_k=10,
        show_progress=False,
        **extra,
    )
    row["build_s"] = clock.seconds()
    row["index_s"] = row["build_s"] - row["group_s"] - row["summarize_s"]
    row["embed_calls"] = fake.calls
    row["rss_mb"] = memory.peak_rss_mib()
    row["settings"] = (
        f"similarity_top_k={r.similarity_top_k}, num_routed_docs={r.num_routed_docs}, "
        f"score_mode={r.score_mode.value}, score_alpha={r.score_alpha}, summary_embedding="
        f"{getattr(getattr(r, 'summary_embedding', None), 'value', 'n/a (text)')}"
        + (", equal fusion weights (calibration fixed)" if "calibration" in extra else "")
    )

    queries, targets = corpus.document_queries(args.queries, args.query_noise)

    # cold first query (NumpyVectorStore builds its matrix and postings lazily)
    row["first_query_ms"] = timing.seconds(lambda: r.retrieve(QueryBundle(query_str="q", embedding=queries[0]))) * 1e3

    summary_ret = VectorIndexRetriever(r.index.summary_index, similarity_top_k=r.num_routed_docs, embed_model=fake)
    flat = VectorIndexRetriever(r.index.chunk_index, similarity_top_k=10, embed_model=fake)
    per_doc_ret: dict[str, VectorIndexRetriever] = {}

    def per_doc(doc_id: str) -> VectorIndexRetriever:
        # one per-document chunk search, exactly as _chunk_retriever issues it
        if doc_id not in per_doc_ret:
            per_doc_ret[doc_id] = VectorIndexRetriever(
                r.index.chunk_index,
                similarity_top_k=r.similarity_top_k,
                filters=routing_filter(doc_id),
                embed_model=fake,
            )
        return per_doc_ret[doc_id]

    store = r.index.chunk_index.vector_store
    n_rows = len(store._ids)
    postings = store._postings[ROUTING_KEY]
    row.update({k: [] for k in SERIES})
    row.update({k + "_cpu": [] for k in SERIES})

    def start() -> tuple[float, float]:
        return time.perf_counter(), time.thread_time()

    def stop(key: str, t: tuple[float, float], acc: dict[str, float] | None = None) -> None:
        wall = (time.perf_counter() - t[0]) * 1e3
        cpu = (time.thread_time() - t[1]) * 1e3
        if acc is None:
            row[key].append(wall)
            row[key + "_cpu"].append(cpu)
        else:
            acc["wall"] += wall
            acc["cpu"] += cpu

    async def measure(rounds: int) -> None:
        # every operation is timed back to back for the same query, so a
        # concurrent process slows all columns alike; samples pool over rounds.
        # Wall time and this thread's CPU time are both kept (CPU time is
        # robust to being descheduled by a concurrent process).
        for _ in range(rounds):
            for vec, t_idx in zip(queries, targets):
                target = doc_ids[t_idx]
                b = QueryBundle(query_str="q", embedding=vec)
                t = start()
                r.retrieve(b)
                stop("sync", t)
                b = QueryBundle(query_str="q", embedding=vec)
                t = start()
                await r.aretrieve(b)
                stop("async", t)
                b = QueryBundle(query_str="q", embedding=vec)
                t = start()
                hits = summary_ret.retrieve(b)
                stop("summary", t)
                # the same per-document searches the recursive call made
                acc = {"wall": 0.0, "cpu": 0.0}
                for doc_id in [h.node.index_id for h in hits]:
                    ret = per_doc(doc_id)
                    b = QueryBundle(query_str="q", embedding=vec)
                    t = start()
                    ret.retrieve(b)
                    stop("", t, acc)
                row["routed_chunk"].append(acc["wall"])
                row["routed_chunk_cpu"].append(acc["cpu"])
                ret = per_doc(target)
                b = QueryBundle(query_str="q", embedding=vec)
                t = start()
                ret.retrieve(b)
                stop("per_doc", t)
                query = VectorStoreQuery(query_embedding=vec, similarity_top_k=10, filters=routing_filter(target))
                t = start()
                store.query(query)
                stop("store_filtered", t)
                post = np.unique(postings[target])
                t = start()
                np.intersect1d(np.arange(n_rows), post, assume_unique=True)
                stop("intersect", t)
                b = QueryBundle(query_str="q", embedding=vec)
                t = start()
                r._plan(r._resolve(b), vec)
                stop("plan", t)

    def measure_flat(rounds: int) -> None:
        # separate pass: a multi-threaded BLAS matvec leaves OpenBLAS worker
        # threads spinning, which would slow whatever is timed right after it
        for vec in queries[:5]:
            flat.retrieve(QueryBundle(query_str="q", embedding=vec))
        for _ in range(rounds):
            for vec in queries:
                b = QueryBundle(query_str="q", embedding=vec)
                t = start()
                flat.retrieve(b)
                stop("flat", t)

    async def warm() -> None:
        for vec in queries[:5]:
            r.retrieve(QueryBundle(query_str="q", embedding=vec))
            await r.aretrieve(QueryBundle(query_str="q", embedding=vec))

    async def run() -> None:
        await warm()
        await measure(args.rounds)

    asyncio.run(run())
    measure_flat(args.rounds)

    # quality sanity: routed to the query's document? overlap with flat top-10?
    routed_hits, overlap = 0, []
    for vec, t in zip(queries[:50], targets[:50]):
        b = QueryBundle(query_str="q", embedding=vec)
        rec = r.retrieve(b)
        fl = flat.retrieve(QueryBundle(query_str="q", embedding=vec))
        routed_hits += any(n.node.ref_doc_id == doc_ids[t] for n in rec)
        overlap.append(len({n.node.node_id for n in rec} & {n.node.node_id for n in fl}) / 10)
    row["target_doc_in_results"] = routed_hits / min(50, len(queries))
    row["overlap_with_flat"] = statistics.mean(overlap)

    if args.profile_docs and n_docs == args.profile_docs:
        row["profile"] = profile_queries(r, queries, args.profile_queries)

    if n_docs in args.svs_docs:
        svs_queries = queries[: args.svs_queries]
        clock.restart()
        upstream = VectorStoreIndex(nodes, embed_model=fake, show_progress=False)
        row["svs_build_s"] = clock.seconds()
        svs = VectorIndexRetriever(upstream, similarity_top_k=10, embed_model=fake)
        row["svs"] = time_calls(svs.retrieve, svs_queries, warmup=1)
        row["svs_n"] = len(svs_queries)
        # same answers as the numpy flat search?
        same = 0
        for vec in svs_queries[:5]:
            a = [n.node.node_id for n in svs.retrieve(QueryBundle(query_str="q", embedding=vec))]
            b = [n.node.node_id for n in flat.retrieve(QueryBundle(query_str="q", embedding=vec))]
            same += a == b
        row["svs_same_top10"] = f"{same}/5"
        del upstream, svs
    del nodes  # the retriever goes with this frame
    gc.collect()
    return row


def profile_queries(r, queries, n: int) -> str:
    bundles = [QueryBundle(query_str="q", embedding=v) for v in queries[:n]]
    time.sleep(0.1)  # let OpenBLAS workers from earlier flat searches go idle
    prof = cProfile.Profile()
    prof.enable()
    for b in bundles:
        r.retrieve(b)
    prof.disable()
    buf = io.StringIO()
    stats = pstats.Stats(prof, stream=buf)
    buf.write(f"cProfile over {n} sync retrieve() calls (divide times by {n} for per-query)\n")
    stats.sort_stats("cumulative").print_stats(25)
    stats.sort_stats("tottime").print_stats(15)
    return buf.getvalue()


# ------------------------------------------------------------------- report
def p50(r: dict[str, object], key: str) -> float:
    return pct(r[key], 50)


def table(rows: list[dict[str, object]]) -> str:
    """The headline table."""
    return Table(
        [
            "docs",
            "chunks",
            "build s",
            "summarize s",
            "index s",
            "recursive p50 ms",
            "recursive p95 ms",
            "async p50 ms",
            "summary-search p50 ms",
            "flat-numpy p50 ms",
            "flat-SimpleVectorStore p50 ms",
        ],
        align="r" * 11,
    ).render(
        (
            r["docs"],
            r["chunks"],
            fmt(r["build_s"]),
            fmt(r["summarize_s"]),
            fmt(r["index_s"]),
            fmt(p50(r, "sync")),
            fmt(pct(r["sync"], 95)),
            fmt(p50(r, "async")),
            fmt(p50(r, "summary"), 3),
            fmt(p50(r, "flat")),
            f"{pct(r['svs'], 50):.1f} (n={r['svs_n']})" if r.get("svs") else "-",
        )
        for r in rows
    )


def breakdown(rows: list[dict[str, object]]) -> str:
    """Where a recursive query's time goes: medians, "wall / thread-CPU" ms."""

    def both(r: dict[str, object], key: str, digits: int = 2) -> str:
        return f"{p50(r, key):.{digits}f} / {p50(r, key + '_cpu'):.{digits}f}"

    def rest(r: dict[str, object], sfx: str) -> float:
        return timing.median(
            np.asarray(r["sync" + sfx]) - np.asarray(r["summary" + sfx]) - np.asarray(r["routed_chunk" + sfx])
        )

    return Table(
        [
            "docs",
            "recursive",
            "summary search",
            "routed chunk searches (sum)",
            "recursive - summary - routed",
            "one per-doc chunk search",
            "NumpyVectorStore.query(ref_doc_id==doc)",
            "ref: intersect1d(arange(N), posting)",
            "_plan",
            "flat-numpy",
        ],
        align="r" * 10,
    ).render(
        (
            r["docs"],
            both(r, "sync"),
            both(r, "summary", 3),
            both(r, "routed_chunk"),
            f"{rest(r, ''):.2f} / {rest(r, '_cpu'):.2f}",
            both(r, "per_doc", 3),
            both(r, "store_filtered", 3),
            both(r, "intersect", 3),
            both(r, "plan", 3),
            both(r, "flat"),
        )
        for r in rows
    )


def details(rows: list[dict[str, object]]) -> str:
    out = []
    for r in rows:
        extra = [
            f"docs={r['docs']}",
            f"group_nodes {r['group_s']:.2f}s",
            f"first (cold) query {r['first_query_ms']:.1f} ms",
            f"samples per latency column {len(r['sync'])}",
            f"recursive CPU p50/p95 {pct(r['sync_cpu'], 50):.2f}/{pct(r['sync_cpu'], 95):.2f} ms",
            f"async p95 {pct(r['async'], 95):.2f} ms",
            f"summary-search p95 {pct(r['summary'], 95):.3f} ms",
            f"flat-numpy p95 {pct(r['flat'], 95):.2f} ms",
            f"embed calls during build {r['embed_calls']}",
            f"summary prefix misses {r['summary_prefix_misses']}",
            f"target doc in recursive top-10 {r['target_doc_in_results']:.0%}",
            f"overlap with flat top-10 {r['overlap_with_flat']:.0%}",
            f"max RSS so far {r['rss_mb']:.0f} MB",
        ]
        if "svs" in r:
            extra.append(
                f"SimpleVectorStore build {r['svs_build_s']:.1f}s, "
                f"p95 {pct(r['svs'], 95):.1f} ms, same top-10 as numpy {r['svs_same_top10']}"
            )
        out.append("- " + "; ".join(extra))
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    p = cli.parser(__doc__)
    p.add_argument("--docs", type=cli.csv(int), default=[100, 300, 1000])
    p.add_argument("--chunks", type=int, default=50)
    p.add_argument("--dim", type=int, default=384)
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rounds", type=int, default=3, help="passes over the queries (samples pool)")
    p.add_argument("--noise", type=float, default=0.5, help="chunk = unit(topic + noise*unit_noise)")
    p.add_argument("--query-noise", type=float, default=0.5)
    p.add_argument(
        "--svs-docs", type=cli.csv(int), default=[1000], help="sizes at which to time SimpleVectorStore ('' = none)"
    )
    p.add_argument("--svs-queries", type=int, default=20)
    p.add_argument(
        "--profile-docs", type=int, default=None, help="cProfile recursive retrieve at this size (default: largest)"
    )
    p.add_argument("--profile-queries", type=int, default=50)
    p.add_argument(
        "--summary-embedding",
        default=None,
        help="pass summary_embedding= to from_nodes (default: the library's default)",
    )
    p.add_argument(
        "--blas-threads",
        type=int,
        default=None,
        help="limit BLAS threads with threadpoolctl (default: numpy's default)",
    )
    cli.add_out(p, RESULTS / "scale_recursive.md")
    args = p.parse_args(argv)
    sizes = args.docs
    args.svs_docs = set(args.svs_docs)
    if args.profile_docs is None:
        args.profile_docs = max(sizes)

    limiter = None
    if args.blas_threads is not None:
        from threadpoolctl import threadpool_limits

        limiter = threadpool_limits(limits=args.blas_threads, user_api="blas")  # noqa: F841 - held for the run
    fingerprint = library_fingerprint()
    rows = []
    for n in sizes:
        print(f"[scale_recursive] {n} docs x {args.chunks} chunks ...", file=sys.stderr, flush=True)
        rows.append(bench_size(args, n))
        print(table(rows[-1:]) + "\n" + breakdown(rows[-1:]), file=sys.stderr, flush=True)

    md = [
        "# RecursiveSummaryRetriever at scale (synthetic embeddings)",
        "",
        f"Command: `{cli.command(argv, __file__)}` (cwd {os.getcwd()})",
        f"Machine: {machine()}",
        f"Library sources (sha256[:12]): {fingerprint}"
        + ("" if library_fingerprint() == fingerprint else " -- WARNING: changed during the run"),
        f"Setup: dim={args.dim}, chunks/doc={args.chunks}, queries={args.queries} "
        f"x {args.rounds} rounds, interleaved per query (SimpleVectorStore: {args.svs_queries}), chunk = unit(topic + {args.noise}*unit_noise), "
        f"query = unit(topic + {args.query_noise}*unit_noise); retriever: {rows[0]['settings']} "
        "(library defaults except similarity_top_k).",
        "Latencies are medians/p95 of per-query wall time (ms); another process may share the 2 cores.",
        "",
        table(rows),
        "",
        "summarize s = `build_documents` alone on the same groups (`group_nodes` time is listed "
        "below); index s = build s - group_nodes - summarize s (embedding attachment, docstores, "
        "vector stores). "
        "flat-numpy = `VectorIndexRetriever(r.index.chunk_index, similarity_top_k=10)`; "
        "flat-SimpleVectorStore = `VectorStoreIndex` over the same nodes, default storage context.",
        "",
        "### Breakdown of a recursive query",
        "",
        breakdown(rows),
        "",
        "Cells are medians in ms, `wall / main-thread CPU time` (CPU time is not inflated when a "
        "concurrent process deschedules this one; it excludes OpenBLAS worker threads, which only "
        "matter for the flat matvec). flat-numpy is timed in its own pass after the others. "
        "routed chunk searches = the num_routed_docs `VectorIndexRetriever(_chunk_index, "
        "filters=ref_doc_id==doc)` calls for the documents the summary search picked, timed one by "
        "one; one per-doc chunk search = one such call; ref: intersect1d = "
        "`np.intersect1d(np.arange(N), posting, assume_unique=True)` (N = chunk rows), the "
        "O(N log N) step an earlier `NumpyVectorStore._candidate_rows` ran once per routed "
        "document; kept as a reference point (the current store starts from the posting list).",
        "",
        details(rows),
        "",
    ]
    for r in rows:
        if "profile" in r:
            md += [f"## cProfile, {r['docs']} docs", "", "```", r["profile"].rstrip(), "```", ""]
    text = "\n".join(md)
    print(text)
    write(args.out, text)


if __name__ == "__main__":
    main()
