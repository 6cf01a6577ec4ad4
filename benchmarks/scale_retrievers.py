"""Latency scaling of every registered retriever, synthetic corpus, plus a real build breakdown.

Part 1 (``--chunks-total``, default 1k, 10k and 50k chunks): documents of
``--chunks`` chunks each; every document is a topic with a 384-dim unit topic
vector and its own 200-word vocabulary (drawn from a 5000-word pool).
A chunk's embedding is ``unit(topic + 0.5 * unit_noise)`` and its text is three
8-word sentences from its document's vocabulary (the approach and helpers of
``benchmarks/scale_recursive.py``: ``TopicFakeEmbedding`` maps a summary that
starts with ``"<doc id>. "`` to the topic, so upstream-recursive's text-embedded
summaries route like real ones). A query targets one chunk: its embedding is
``unit(chunk + 1.0 * unit_noise)`` (``--query-noise``), precomputed (``QueryBundle(query_str, embedding=vec)``),
its text 6 words of that chunk plus 2 other words of the document (so BM25 has
something to find, as XQuAD questions reuse their passage's words).
Every registered retriever is built through
``registry.build_retriever(name, BuildContext(nodes, fake_model, top_k=10))``;
build seconds are one build, latencies are per-query wall times after 3 untimed
warm-up queries. Retrievers are measured one after the other and dropped before
the next is built. A retriever gets ``--queries`` queries, but stops early once
its timed queries exceed ``--budget-s`` seconds (at least ``--min-queries``):
SimpleVectorStore-based ones (upstream-vector, upstream-fusion) are pure Python
over all rows and get fewer queries at 50k; the table states n.
Sanity columns: the target chunk / its document in the top-10.

Part 2 (``--breakdown-data``): build time of ``recursive`` on a real dataset
(xquad_en_fine). Embedding = ``embedding_seconds`` of the cold-cache eval run
(read from ``--breakdown-json``; chunks and queries through the bundled model),
summaries = ``builder.group_nodes`` + ``builder.build_documents`` on the same
nodes, indexing = ``build_retriever("recursive", ...)`` with embeddings attached
minus the summaries. Medians over ``--breakdown-repeats`` builds.

Usage (repository root)::

    .venv/bin/python benchmarks/scale_retrievers.py
    .venv/bin/python benchmarks/scale_retrievers.py --chunks-total 1000 --queries 50   # quick
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from harness import REPO, RESULTS, cli, data, timing
from harness.corpus import TopicCorpus
from harness.models import real_model, topic_embedding
from harness.report import Table, library_fingerprint, load_average, machine, write
from llama_index.core.schema import QueryBundle

EVAL_RESULTS = RESULTS / "eval"
pct = timing.percentile


def time_retriever(retriever, queries, budget_s: float, min_queries: int, warmup: int = 3) -> dict[str, object]:
    bundles = [QueryBundle(text, embedding=vec) for text, vec, _, _ in queries]
    first_ms = timing.latencies_ms(retriever.retrieve, bundles[:1])[0]
    timing.latencies_ms(retriever.retrieve, bundles[1 : 1 + warmup])
    results: list = []
    latencies = timing.latencies_ms(
        retriever.retrieve, bundles, budget_s=budget_s, min_calls=min_queries, results=results
    )
    chunk_hits = doc_hits = 0
    for hits, (_, _, chunk_id, doc_id) in zip(results, queries):
        ids = [r.node.node_id for r in hits]
        chunk_hits += chunk_id in ids
        doc_hits += any(i.startswith(doc_id + "-") for i in ids)
    n = len(latencies)
    return {
        "n": n,
        "p50": pct(latencies, 50),
        "p95": pct(latencies, 95),
        "first_ms": first_ms,
        "chunk_hit": chunk_hits / n,
        "doc_hit": doc_hits / n,
    }


def bench_size(args: argparse.Namespace, total: int, names: Sequence[str]) -> list[dict[str, object]]:
    from llama_index_ext_recursive.eval.registry import BuildContext, build_retriever

    n_docs = max(1, total // args.chunks)
    corpus = TopicCorpus(n_docs, args.chunks, args.dim, args.seed, args.noise)
    nodes, vocabs = [], []
    for document in corpus.documents():
        nodes += document.chunks
        vocabs.append(document.vocabulary)
    queries = corpus.chunk_queries(nodes, vocabs, args.queries, args.query_noise)
    fake = topic_embedding(corpus)
    rows = []
    for name in names:
        print(f"[scale_retrievers] {len(nodes)} chunks: building {name} ...", file=sys.stderr, flush=True)
        gc.collect()
        fake.calls = 0
        clock = timing.Stopwatch()
        retriever = build_retriever(name, BuildContext(nodes, fake, top_k=10))
        build_s = clock.seconds()
        embed_calls = fake.calls
        latency = time_retriever(retriever, queries, args.budget_s, args.min_queries)
        row = {
            "retriever": name,
            "chunks": len(nodes),
            "docs": n_docs,
            "build_s": build_s,
            "embed_calls_in_build": embed_calls,
            "query_embed_calls": fake.calls - embed_calls,
            **latency,
        }
        rows.append(row)
        print(f"[scale_retrievers]   {json.dumps(row)}", file=sys.stderr, flush=True)
        del retriever
        gc.collect()
    del nodes
    gc.collect()
    return rows


def scale_table(rows: list[dict[str, object]]) -> str:
    if not rows:
        return "(no sizes run)"
    return Table(
        [
            "retriever",
            "chunks (docs)",
            "build s",
            "p50 ms",
            "p95 ms",
            "queries timed",
            "first query ms",
            "target chunk in top-10",
            "target doc in top-10",
        ]
    ).render(
        (
            r["retriever"],
            f"{r['chunks']} ({r['docs']})",
            f"{r['build_s']:.2f}",
            f"{r['p50']:.2f}",
            f"{r['p95']:.2f}",
            r["n"],
            f"{r['first_ms']:.1f}",
            f"{r['chunk_hit']:.2f}",
            f"{r['doc_hit']:.2f}",
        )
        for r in rows
    )


def pivot(rows: list[dict[str, object]], sizes: Sequence[int]) -> str:
    """retriever x size: p50 / p95 ms (build s)."""
    if not rows:
        return "(no sizes run)"
    by = {(r["retriever"], r["chunks"]): r for r in rows}
    chunk_sizes = sorted({r["chunks"] for r in rows})

    def cell(name: str, c: int) -> str:
        r = by.get((name, c))
        if r is None:
            return "-"
        note = f", n={r['n']}" if r["n"] < max(x["n"] for x in rows if x["chunks"] == c) else ""
        return f"{r['p50']:.2f} / {r['p95']:.2f} ({r['build_s']:.1f} s{note})"

    return Table(["retriever"] + [f"{c // 1000}k: p50 / p95 ms (build s)" for c in chunk_sizes]).render(
        [name] + [cell(name, c) for c in chunk_sizes] for name in dict.fromkeys(r["retriever"] for r in rows)
    )


# ----------------------------------------------------------- build breakdown
def build_breakdown(args: argparse.Namespace) -> dict[str, object]:
    from llama_index_ext_recursive.eval.registry import BuildContext, build_retriever
    from llama_index_ext_recursive.recursive.build import build_documents, group_nodes

    dataset = data.load(args.breakdown_data)
    cache = real_model("minilm", args.cache)
    clock = timing.Stopwatch()
    nodes = data.embed_nodes(dataset, cache)
    cached_embed_s = clock.seconds()
    if cache.computed:
        print(f"[scale_retrievers] warning: {cache.computed} chunk texts were not in the cache", file=sys.stderr)
    ctx = BuildContext(nodes, cache, top_k=10)
    summaries, totals = [], []
    for _ in range(args.breakdown_repeats):
        gc.collect()
        summaries.append(timing.seconds(lambda: build_documents(group_nodes(nodes, "doc_id"), "doc_id")))
        gc.collect()
        before = cache.computed
        totals.append(timing.seconds(lambda: build_retriever("recursive", ctx)))
        assert cache.computed == before, "recursive build embedded texts"
    out: dict[str, object] = {
        "dataset": dataset.name,
        "chunks": len(nodes),
        "docs": len(set(dataset.doc_of.values())),
        "queries": len(dataset.queries),
        "summaries_s": timing.median(summaries),
        "build_s": timing.median(totals),
        "summaries_all": summaries,
        "build_all": totals,
        "cached_lookup_s": cached_embed_s,
    }
    out["indexing_s"] = out["build_s"] - out["summaries_s"]
    if args.breakdown_json and Path(args.breakdown_json).exists():
        figures = json.loads(Path(args.breakdown_json).read_text())
        out["embedding_s"] = figures["embedding_seconds"]
        out["texts_embedded"] = figures["texts_embedded"]
        out["eval_build_s"] = figures["retrievers"]["recursive"]["build_seconds"]
    out["distinct_queries"] = len(set(dataset.queries.values()))
    if args.chunk_embed_repeats:
        # the chunks alone through the bundled model, no cache: the part of the
        # cold-cache embedding time that belongs to the build (queries are query time)
        from llama_index.core.schema import MetadataMode

        model = real_model("minilm", cache=None)
        texts = [n.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes]
        runs = [timing.seconds(lambda: model.get_text_embedding_batch(texts)) for _ in range(args.chunk_embed_repeats)]
        out["chunk_embed_all"] = runs
        out["chunk_embed_s"] = timing.median(runs)
    return out


def breakdown_table(b: dict[str, object]) -> str:
    emb = b.get("embedding_s")
    chunk = b.get("chunk_embed_s")
    build_total = (chunk if chunk is not None else 0.0) + b["build_s"]
    steps = [
        (f"embedding the {b['chunks']} chunks (all-MiniLM-L6-v2, no cache, measured directly)", chunk),
        ("summaries (`group_nodes` + `build_documents`, extractive)", b["summaries_s"]),
        ("indexing (rest of `from_nodes`: centroids, docstores, vector stores)", b["indexing_s"]),
    ]
    rows = [
        (label, "-", "-") if secs is None else (label, f"{secs:.2f}", f"{100 * secs / build_total:.1f}%")
        for label, secs in steps
    ]
    rows.append(("build total", f"{build_total:.2f}", "100%"))
    if emb is not None:
        rows.append(
            (
                f"for reference: eval `embedding_seconds`, cold cache = {b['chunks']} chunks + "
                f"{b['queries']} queries ({b['distinct_queries']} distinct), one query at a time",
                f"{emb:.2f}",
                "",
            )
        )
    return Table(["step", "seconds", "share of build"]).render(rows)


def main(argv: list[str] | None = None) -> None:
    from llama_index_ext_recursive.eval.registry import REGISTRY

    p = cli.parser(__doc__)
    p.add_argument("--chunks-total", type=cli.csv(int), default=[1000, 10000, 50000])
    p.add_argument("--chunks", type=int, default=50, help="chunks per document")
    p.add_argument("--dim", type=int, default=384)
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--budget-s", type=float, default=30.0, help="stop timing a retriever after this")
    p.add_argument("--min-queries", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--noise", type=float, default=0.5)
    p.add_argument("--query-noise", type=float, default=1.0)
    p.add_argument("--retrievers", type=cli.csv(), default=list(REGISTRY))
    p.add_argument(
        "--breakdown-data", default=str(data.DATA_ROOT / "xquad_en_fine"), help="'' to skip the build breakdown"
    )
    p.add_argument(
        "--breakdown-json",
        default=str(EVAL_RESULTS / "cold_cache_repeats" / "xquad_en_fine.json"),
        help="eval JSON of the cold-cache run (embedding_seconds)",
    )
    p.add_argument("--breakdown-repeats", type=int, default=5)
    p.add_argument(
        "--chunk-embed-repeats",
        type=int,
        default=3,
        help="embed the breakdown dataset's chunks this many times without cache (0: skip)",
    )
    cli.add_cache(p)
    cli.add_out(p, EVAL_RESULTS / "scale_retrievers.md")
    args = p.parse_args(argv)
    names, sizes = args.retrievers, args.chunks_total
    command = cli.command(argv, __file__)
    load_before = load_average()
    fingerprint = library_fingerprint()
    clock = timing.Stopwatch()
    rows: list[dict[str, object]] = []
    for total in sizes:
        rows += bench_size(args, total, names)
    breakdown = build_breakdown(args) if args.breakdown_data else None
    md = [
        "# Retriever latency at scale (synthetic) and `recursive` build breakdown (xquad_en_fine)",
        "",
        f"Command: `{command}` (cwd: repository root)",
        f"Machine: {machine()}",
        f"Library sources (sha256[:12]): {fingerprint}",
        f"Load average at start {load_before:.2f} / end {load_average():.2f} "
        f"(another process may share the 2 cores); wall time {clock.seconds():.0f} s.",
        f"Setup: {args.chunks} chunks per document, dim {args.dim}, chunk = unit(topic + "
        f"{args.noise}*noise), query = unit(target chunk + {args.query_noise}*noise), query text = 6 words "
        f"of the target chunk + 2 of its document's vocabulary; top_k=10; up to {args.queries} queries "
        f"per retriever, stopped after {args.budget_s:.0f} s of timed queries (min {args.min_queries}); "
        "3 warm-up queries untimed.",
        "",
        "## p50 / p95 latency in ms (build seconds)",
        "",
        pivot(rows, sizes),
        "",
        "## All figures",
        "",
        scale_table(rows),
        "",
    ]
    if breakdown:
        md += [
            f"## Build breakdown of `recursive` on {breakdown['dataset']} "
            f"({breakdown['docs']} documents, {breakdown['chunks']} chunks)",
            "",
            breakdown_table(breakdown),
            "",
            f"Medians of {args.breakdown_repeats} builds (summaries: {', '.join(f'{s:.3f}' for s in breakdown['summaries_all'])} s; "
            f"whole build with embeddings attached: {', '.join(f'{s:.3f}' for s in breakdown['build_all'])} s). "
            "Chunk embedding: median of "
            f"{', '.join(f'{s:.1f}' for s in breakdown.get('chunk_embed_all', []))} s. "
            f"Reference row: `embedding_seconds` of `{os.path.relpath(args.breakdown_json, REPO)}` "
            f"(its `texts_embedded` {breakdown.get('texts_embedded', '?')} also counts the summaries upstream-recursive "
            "embeds during its build, which that figure does not time); the eval run's own `recursive` build "
            f"took {breakdown.get('eval_build_s', float('nan')):.2f} s (under tracemalloc). "
            f"Reading the {breakdown['chunks']} chunk vectors back from the SQLite cache took "
            f"{breakdown['cached_lookup_s']:.2f} s.",
            "",
        ]
    text = "\n".join(md)
    print(text)
    write(args.out, text, {"command": command, "rows": rows, "breakdown": breakdown})


if __name__ == "__main__":
    main()
