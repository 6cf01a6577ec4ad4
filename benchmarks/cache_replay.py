"""Replay a query log with repeats against the recursive retriever: uncached, in-process cache, Redis.

The log: ``--queries`` queries drawn Zipf(``--zipf``) from ``--distinct``
distinct ones (the sample questions, each asked in several phrasings), a
metadata filter on ``--filter-share`` of them, and an update (a new document
added) every ``--update-every`` queries. The index: the bundled sample corpus,
``--copies`` times (each copy its own documents, the same texts, so the shared
embedding cache embeds them once), with the real default model; query vectors
are computed by the bare model (no embedding cache), as an app's would be.

Each mode runs in its own child process: ``uncached``, ``memory``
(``RetrievalCache()``), ``redis`` (``RetrievalCache.from_url``, a fresh
redis-server on 127.0.0.1 started here). Per mode: hit rate, p50/p95/p99 of
every query and of the hits, throughput, and stale answers: after every
cached answer, an uncached retriever over the same index answers the same
query, and any difference is counted (outside the timed part).

    .venv/bin/python benchmarks/cache_replay.py --copies 10 --queries 2000 --out benchmarks/results/cache_replay_small.md
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
from harness import cli, memory, report, timing
from harness.models import real_model

PHRASINGS = [
    "{q}",
    "{q} Please explain.",
    "Briefly: {q}",
    "{q} Answer for a beginner.",
    "Question: {q}",
    "{q} Give details.",
    "I wonder, {q}",
    "{q} (short answer)",
    "Tell me: {q}",
    "{q} Thanks!",
]
FILTER = {"language": "en"}


def query_log(args) -> list[tuple[str, bool]]:
    """``(query, filtered)`` pairs: Zipf over the distinct queries, a share filtered."""
    from llama_index_ext_recursive import load_sample_questions

    questions = [q["question"] for q in load_sample_questions()]
    phrased = [p.format(q=q) for p in PHRASINGS for q in questions]
    # beyond the phrasings, a numbered variant of one (a word more for BM25 and the model)
    distinct = [phrased[i] if i < len(phrased) else f"{phrased[i % len(phrased)]} v{i}" for i in range(args.distinct)]
    rng = np.random.default_rng(7)
    weights = 1.0 / np.arange(1, len(distinct) + 1) ** args.zipf
    picks = rng.choice(len(distinct), size=args.queries, p=weights / weights.sum())
    filtered = rng.random(args.queries) < args.filter_share
    return [(distinct[i], bool(f)) for i, f in zip(picks.tolist(), filtered.tolist(), strict=True)]


def documents(copies: int, start: int = 0):
    from llama_index.core.schema import Document

    from llama_index_ext_recursive import load_sample_documents

    sample = load_sample_documents()
    for copy in range(start, start + copies):
        for doc in sample:
            doc_id = f"{doc.metadata.get('doc_id', doc.doc_id)}-{copy}"
            yield Document(id_=doc_id, text=doc.text, metadata={**doc.metadata, "doc_id": doc_id})


def child(args) -> dict[str, object]:
    from llama_index_ext_recursive import FilteredQueryBundle, RecursiveSummaryRetriever, RetrievalCache

    cache = None
    if args.child == "memory":
        cache = RetrievalCache()
    elif args.child == "redis":
        cache = RetrievalCache.from_url(args.redis_url, prefix=f"replay-{time.time_ns()}")
    retriever = RecursiveSummaryRetriever.from_documents(
        documents(args.copies), embed_model=real_model("minilm"), embedding_cache=None, cache=cache
    )
    retriever.index.embed_model = real_model("minilm", cache=None)  # queries: the bare model, as an app's
    reference = RecursiveSummaryRetriever(retriever.index)  # uncached, the same index and settings
    log = query_log(args)
    latencies, hit_latencies, stale, added = [], [], 0, 0
    for n, (text, filtered) in enumerate(log):
        if n and n % args.update_every == 0:
            retriever.add_documents(list(documents(1, start=args.copies + added)))
            added += 1
        bundle = FilteredQueryBundle(text, filters=FILTER if filtered else None)
        hits_before = cache.stats().hits["results"] if cache is not None else 0
        started = time.perf_counter()
        answer = retriever.retrieve(bundle)
        ms = (time.perf_counter() - started) * 1000
        latencies.append(ms)
        if cache is not None and cache.stats().hits["results"] > hits_before:
            hit_latencies.append(ms)
            fresh = reference.retrieve(bundle)
            stale += [(h.node.node_id, h.score) for h in answer] != [(h.node.node_id, h.score) for h in fresh]
    pct = timing.percentile
    stats = cache.stats() if cache is not None else None
    return {
        "queries": len(log),
        "hit_rate": 0.0 if stats is None else stats.hits["results"] / len(log),
        "p50_ms": pct(latencies, 50),
        "p95_ms": pct(latencies, 95),
        "p99_ms": pct(latencies, 99),
        "hit_p50_ms": pct(hit_latencies, 50) if hit_latencies else None,
        "hit_p95_ms": pct(hit_latencies, 95) if hit_latencies else None,
        "throughput_qps": len(log) / (sum(latencies) / 1000),
        "stale": stale,
        "updates": added,
    }


def main(argv: list[str] | None = None) -> None:
    p = cli.parser(__doc__)
    p.add_argument("--copies", type=int, default=10, help="copies of the 12-document sample corpus")
    p.add_argument("--queries", type=int, default=10_000)
    p.add_argument("--distinct", type=int, default=2_000)
    p.add_argument("--zipf", type=float, default=1.1)
    p.add_argument("--filter-share", type=float, default=0.2)
    p.add_argument("--update-every", type=int, default=1_000)
    p.add_argument("--modes", type=cli.csv(), default=["uncached", "memory", "redis"])
    p.add_argument("--child", choices=["uncached", "memory", "redis"], help=argparse_hidden())
    p.add_argument("--redis-url", help=argparse_hidden())
    cli.add_out(p, None)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(args)))
        return
    rows = []
    for mode in args.modes:
        command = [sys.executable, __file__, "--child", mode, *_passed(args)]
        if mode == "redis":
            sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
            from redis_server import running_redis

            with running_redis() as server:
                done = memory.run_child([*command, "--redis-url", server.url], timeout=7200)
        else:
            done = memory.run_child(command, timeout=7200)
        if done.returncode != 0:
            raise SystemExit(f"{mode} failed:\n{done.stderr[-3000:]}")
        figures = json.loads(done.stdout.strip().splitlines()[-1])
        rows.append((mode, figures))
        print(mode, figures, flush=True)
    base = dict(rows).get("uncached", {}).get("throughput_qps")
    fmt = report.fmt
    table = report.table(
        ["mode", "queries", "hit rate", "p50 / p95 / p99 ms", "hit p50 / p95 ms", "queries/s", "x uncached", "stale"],
        [
            [
                mode,
                f["queries"],
                fmt(f["hit_rate"], 3),
                f"{fmt(f['p50_ms'], 1)} / {fmt(f['p95_ms'], 1)} / {fmt(f['p99_ms'], 1)}",
                f"{fmt(f['hit_p50_ms'], 3)} / {fmt(f['hit_p95_ms'], 3)}",
                fmt(f["throughput_qps"], 1),
                fmt(f["throughput_qps"] / base, 1) if base else "-",
                f["stale"],
            ]
            for mode, f in rows
        ],
    )
    print(table)
    if args.out:
        Path(args.out).write_text(f"Command: `{cli.command(argv, __file__)}`\n\n{report.machine()}\n\n{table}\n")


def _passed(args) -> list[str]:
    return [
        "--copies", str(args.copies), "--queries", str(args.queries), "--distinct", str(args.distinct),
        "--zipf", str(args.zipf), "--filter-share", str(args.filter_share), "--update-every", str(args.update_every),
    ]  # fmt: skip


def argparse_hidden() -> str:
    import argparse

    return argparse.SUPPRESS


if __name__ == "__main__":
    main()
