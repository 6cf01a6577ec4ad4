"""Replay a query log with repeats against the recursive retriever: uncached, in-process cache,
Redis, and four processes sharing one Redis while one of them updates the index.

The index: the bundled sample corpus ``--copies`` times (each copy its own
documents, the same texts; 4445 copies are 200k chunks), built once with the
real default model (all-MiniLM-L6-v2; the repeated texts come from the
embedding cache) into a columnar folder. Every mode opens that folder; query
vectors come from the bare model, as an app's would.

The log: ``--queries`` queries drawn Zipf(``--zipf``) from ``--distinct``
distinct ones (the sample questions, each asked in several phrasings), a
metadata filter on ``--filter-share`` of them, and an update (a new document
added) every ``--update-every`` queries.

Modes, each in its own child process (``shared`` in four):
- ``uncached``, ``memory`` (``RetrievalCache()``), ``redis``
  (``RetrievalCache.from_url``; a fresh redis-server on 127.0.0.1 started
  here): one process that adds the documents itself (no persist).
- ``shared``: four processes, one Redis, a copy of the folder. Process 0
  adds a document every ``--update-every`` of its queries and persists; the
  three others check the folder's published generation before each query
  and reopen it when it changed, as an app's readers would.

Per mode: the hit rate of results and of query vectors, p50/p95/p99 of every
query and of the hits, throughput, and stale answers: after every cached
answer, a retriever without a result cache over the same index and settings
answers the same query, and any difference in ids or scores is counted
(outside the timed part). The table also gives the ceiling of a cache that is
never stale on this log: a result cached before an update cannot be served
after it (a new document changes BM25's statistics, so every score).

    .venv/bin/python benchmarks/cache_replay.py --copies 4445 --out benchmarks/results/cache_replay.md
    .venv/bin/python benchmarks/cache_replay.py --copies 10 --queries 2000 --distinct 400  # a quick look
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from harness import cli, memory, report, timing
from harness.models import real_model
from scale_columnar import stores

TESTS = Path(__file__).resolve().parent.parent / "tests"
READERS = 3  # processes beside the writer in the shared mode
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


def query_log(args, seed: int = 7) -> list[tuple[str, bool]]:
    """``(query, filtered)`` pairs: Zipf over the distinct queries, a share filtered (each
    process of the shared mode draws its own log from the same distribution)."""
    from llama_index_ext_recursive import load_sample_questions

    questions = [q["question"] for q in load_sample_questions()]
    phrased = [p.format(q=q) for p in PHRASINGS for q in questions]
    # beyond the phrasings, a numbered variant of one (a word more for BM25 and the model)
    distinct = [phrased[i] if i < len(phrased) else f"{phrased[i % len(phrased)]} v{i}" for i in range(args.distinct)]
    rng = np.random.default_rng(seed)
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


def ceiling(args) -> float:
    """The hit rate of a never-stale result cache on the single-process log: a query is a hit
    when it was asked (with the same filter) since the last update."""
    log = query_log(args)
    seen: set[tuple[str, bool]] = set()
    hits = 0
    for n, entry in enumerate(log):
        if args.update_every and n and n % args.update_every == 0:
            seen.clear()
        hits += entry in seen
        seen.add(entry)
    return hits / len(log)


def child_build(args) -> dict[str, object]:
    from llama_index_ext_recursive import RecursiveSummaryRetriever

    started = time.perf_counter()
    RecursiveSummaryRetriever.from_documents(
        documents(args.copies), persist_dir=args.folder, embed_model=real_model("minilm"), **stores(True)
    )
    return {"build_s": time.perf_counter() - started}


def child_replay(args) -> dict[str, object]:
    from llama_index_ext_recursive import FilteredQueryBundle, RecursiveSummaryRetriever, RetrievalCache
    from llama_index_ext_recursive.persist import published_directory

    cache = None
    if args.child == "memory":
        cache = RetrievalCache()
    elif args.child in ("redis", "shared"):
        cache = RetrievalCache.from_url(args.redis_url, prefix=args.prefix)
    model = real_model("minilm", cache=None)  # queries: the bare model, as an app's
    check_vectors = RetrievalCache(results=False)  # the stale check searches afresh, its vectors cached

    def opened():
        retriever = RecursiveSummaryRetriever.from_persist_dir(args.folder, embed_model=model, cache=cache)
        reference = RecursiveSummaryRetriever.from_dict(retriever.to_dict(), retriever.index, cache=check_vectors)
        return retriever, reference, published_directory(args.folder)

    retriever, reference, generation = opened()
    writer, shared = args.role == "writer", args.child == "shared"
    log = query_log(args, seed=args.seed)
    latencies, hit_latencies, stale, added, reopened = [], [], 0, 0, 0
    for n, (text, filtered) in enumerate(log):
        if writer and args.update_every and n and n % args.update_every == 0:
            retriever.add_documents(list(documents(1, start=args.copies + args.seed * 1000 + added)))
            added += 1
            if shared:
                retriever.persist(args.folder)
        elif not writer and published_directory(args.folder) != generation:
            retriever, reference, generation = opened()  # the writer published: read its generation
            reopened += 1
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
    stats = cache.stats() if cache is not None else None
    return {
        "queries": len(log),
        "hits": 0 if stats is None else stats.hits["results"],
        "vector_hits": 0 if stats is None else stats.hits["embeddings"],
        "latencies": latencies,
        "hit_latencies": hit_latencies,
        "stale": stale,
        "updates": added,
        "reopened": reopened,
    }


def summary(runs: list[dict[str, object]]) -> dict[str, object]:
    """One mode's figures over its processes (their queries pooled)."""
    latencies = [ms for run in runs for ms in run["latencies"]]
    hit_latencies = [ms for run in runs for ms in run["hit_latencies"]]
    queries = sum(run["queries"] for run in runs)
    pct = timing.percentile
    return {
        "processes": len(runs),
        "queries": queries,
        "hit_rate": sum(run["hits"] for run in runs) / queries,
        "vector_hit_rate": sum(run["vector_hits"] for run in runs) / queries,
        "p50_ms": pct(latencies, 50),
        "p95_ms": pct(latencies, 95),
        "p99_ms": pct(latencies, 99),
        "hit_p50_ms": pct(hit_latencies, 50) if hit_latencies else None,
        "hit_p95_ms": pct(hit_latencies, 95) if hit_latencies else None,
        # per process, as it would serve alone; the shared mode's processes run at once
        "throughput_qps": sum(run["queries"] / (sum(run["latencies"]) / 1000) for run in runs),
        "stale": sum(run["stale"] for run in runs),
        "updates": sum(run["updates"] for run in runs),
        "reopened": sum(run["reopened"] for run in runs),
    }


def run_mode(mode: str, folder: Path, args, redis_url: str | None) -> dict[str, object]:
    """One mode's children, run to the end (the shared mode's four at once)."""
    base = [sys.executable, __file__, *_passed(args), "--folder", str(folder), "--child", mode]
    prefix = ["--prefix", f"replay-{mode}-{time.time_ns()}"]
    extra = ["--redis-url", redis_url] if redis_url else []
    if mode != "shared":
        done = memory.run_child([*base, *extra, *prefix, "--role", "writer"], timeout=7200)
        if done.returncode != 0:
            raise SystemExit(f"{mode} failed:\n{done.stderr[-3000:]}")
        return summary([json.loads(done.stdout.strip().splitlines()[-1])])
    with tempfile.TemporaryDirectory(prefix="cache-replay-shared-") as tmp:
        copy = Path(tmp) / "index"
        shutil.copytree(folder, copy)  # the writer persists into its own copy
        base[base.index(str(folder))] = str(copy)
        roles = ["writer"] + ["reader"] * READERS
        outs = [Path(tmp) / f"{i}.out" for i in range(len(roles))]
        errs = [Path(tmp) / f"{i}.err" for i in range(len(roles))]
        procs = []
        for i, role in enumerate(roles):  # output to files: a full pipe would stall a process mid-run
            with open(outs[i], "w") as out, open(errs[i], "w") as err:
                command = [*base, *extra, *prefix, "--role", role, "--seed", str(7 + i)]
                procs.append(subprocess.Popen(command, stdout=out, stderr=err))
        for proc, err_path in zip(procs, errs, strict=True):
            if proc.wait(timeout=7200) != 0:
                raise SystemExit(f"shared failed:\n{err_path.read_text()[-3000:]}")
        runs = [json.loads(path.read_text().strip().splitlines()[-1]) for path in outs]
    return summary(runs)


def main(argv: list[str] | None = None) -> None:
    p = cli.parser(__doc__)
    p.add_argument("--copies", type=int, default=10, help="copies of the 12-document sample corpus")
    p.add_argument("--queries", type=int, default=10_000)
    p.add_argument("--distinct", type=int, default=2_000)
    p.add_argument("--zipf", type=float, default=1.1)
    p.add_argument("--filter-share", type=float, default=0.2)
    p.add_argument("--update-every", type=int, default=1_000, help="queries between updates (0: none)")
    p.add_argument("--modes", type=cli.csv(), default=["uncached", "memory", "redis", "shared"])
    p.add_argument("--folder", help="the index: built there when missing, then kept (default: a temporary folder)")
    p.add_argument("--child", choices=["build", "uncached", "memory", "redis", "shared"], help=argparse_hidden())
    p.add_argument("--role", choices=["writer", "reader"], default="writer", help=argparse_hidden())
    p.add_argument("--seed", type=int, default=7, help=argparse_hidden())
    p.add_argument("--prefix", default="replay", help=argparse_hidden())
    p.add_argument("--redis-url", help=argparse_hidden())
    cli.add_out(p, None)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child_build(args) if args.child == "build" else child_replay(args)))
        return
    sys.path.insert(0, str(TESTS))
    from redis_server import running_redis

    rows = []
    with tempfile.TemporaryDirectory(prefix="cache-replay-") as tmp:
        folder = Path(args.folder) if args.folder else Path(tmp) / "index"
        if not folder.exists():
            done = memory.run_child(
                [sys.executable, __file__, *_passed(args), "--folder", str(folder), "--child", "build"], timeout=7200
            )
            if done.returncode != 0:
                raise SystemExit(f"build failed:\n{done.stderr[-3000:]}")
            print("built", done.stdout.strip().splitlines()[-1], f"peak {done.peak_rss_mib:.0f} MiB", flush=True)
        for mode in args.modes:
            if mode in ("redis", "shared"):
                with running_redis() as server:
                    figures = run_mode(mode, folder, args, server.url)
            else:
                figures = run_mode(mode, folder, args, None)
            rows.append((mode, figures))
            print(mode, figures, flush=True)
    base = dict(rows).get("uncached", {}).get("throughput_qps")
    fmt = report.fmt
    table = report.table(
        [
            "mode",
            "processes",
            "queries",
            "hit rate (results / vectors)",
            "p50 / p95 / p99 ms",
            "hit p50 / p95 ms",
            "queries/s",
            "x uncached",
            "stale",
        ],
        [
            [
                mode,
                f["processes"],
                f["queries"],
                f"{fmt(f['hit_rate'], 3)} / {fmt(f['vector_hit_rate'], 3)}",
                f"{fmt(f['p50_ms'], 1)} / {fmt(f['p95_ms'], 1)} / {fmt(f['p99_ms'], 1)}",
                f"{fmt(f['hit_p50_ms'], 3)} / {fmt(f['hit_p95_ms'], 3)}",
                fmt(f["throughput_qps"], 1),
                fmt(f["throughput_qps"] / base, 1) if base else "-",
                f["stale"],
            ]
            for mode, f in rows
        ],
    )
    note = f"Never-stale ceiling of the results hit rate on the one-process log: {ceiling(args):.3f}."
    print(table, note, sep="\n")
    if args.out:
        Path(args.out).write_text(
            f"Command: `{cli.command(argv, __file__)}`\n\n{report.machine()}\n\n{table}\n\n{note}\n"
        )


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
