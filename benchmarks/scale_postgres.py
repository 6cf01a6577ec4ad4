"""The recursive index in PostgreSQL at scale: a streaming build, then 1, 4, 16 client processes at once.

Synthetic corpus, as :mod:`scale_columnar` (:class:`harness.corpus.TopicCorpus`):
``--docs`` documents of ``--chunks`` chunks of ``--sentences`` 12-word
sentences, 384-d topic embeddings assigned up front, so no model embeds
anything (:func:`harness.models.topic_embedding` with ``lazy=True`` embeds the
summaries as their document's topic); every chunk carries ``year`` (2000 +
document number % 20) for the filtered queries (``year >= 2010``: half the
corpus). Equal fusion weights (:func:`harness.models.equal_calibration`),
``similarity_top_k=10``.

One throw-away PostgreSQL + pgvector server (:func:`harness.postgres.server`)
serves the whole run. Per size, each measured from outside in its own child
process (peak RSS from ``wait4``, :func:`harness.memory.run_child`):

* ``build`` (one process): ``RecursiveSummaryRetriever.from_nodes(generator,
  postgres=PostgresIndexStore.from_params(..., name="kb", dimension=384))``,
  the client holding no list of the corpus (the HNSW graphs are built once at
  the end); the time the generator spends making the corpus and the time from
  the last node handed over to the end (the last batch of documents, the HNSW
  build, the calibration, the settings) are reported beside the build's. Then
  the database's size (``pg_total_relation_size`` over the index's tables) and
  its rows, whether the build left planner statistics on the levels' tables,
  and (unless ``--no-analyze``) an ``ANALYZE`` of them, timed: without
  statistics the planner scans every BM25 posting of a level for an unrouted
  query, and autovacuum analyzes the tables at a moment of its own, which
  would change the serving figures in the middle of a run.
* ``serve`` (``--concurrency`` processes, e.g. 1, 4 and 16 in turn, all
  started at once): once every one has drawn its queries, they open the index
  together with ``from_postgres`` (timed), each answers one query (timed) and
  a few untimed, then waits for the others; they run ``--queries`` queries
  (``QueryBundle`` with the query's vector, so no model runs) together, wait
  again, and run the same queries filtered (``FilteredQueryBundle``,
  ``year >= 2010``) together. Each process draws its own queries. Reported:
  the pooled p50/p95 of every query, the throughput (all the processes'
  queries over the wall time of the slowest process, from the common start),
  the slowest open, the largest peak RSS of a client process, and (process 0,
  untimed) how often the query's target chunk is in the top 10.

The parent streams nothing but the children's reports: it never holds the
corpus. Progress goes to stderr (the children's stderr is relayed as it
comes); the tables go to ``--out`` (markdown, and the figures as JSON beside
it) after every step, so a later size that fails keeps the earlier ones.

Usage (repository root)::

    .venv/bin/python benchmarks/scale_postgres.py --docs 10000 --chunks 20 --queries 1000 --concurrency 1,4,16
    .venv/bin/python benchmarks/scale_postgres.py --docs 200 --chunks 20 --queries 50 --concurrency 1,4  # quick
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from harness import RESULTS, cli, memory, postgres, timing
from harness.corpus import TopicCorpus
from harness.models import equal_calibration, topic_embedding
from harness.report import Table, fmt, library_fingerprint, load_average, machine, write
from scale_columnar import TimedStream, corpus_of, nodes

pct = timing.percentile
NAME = "kb"  # the index's name: its tables are kb_index, kb_documents, kb_chunks*, kb_summaries*
LEVEL_PARTS = ("", "_postings", "_segments", "_terms", "_keys", "_state")
TABLES = [f"{NAME}_index", f"{NAME}_documents"] + [
    f"{NAME}_{level}{part}" for level in ("chunks", "summaries") for part in LEVEL_PARTS
]
FILTER = {"year": {"op": ">=", "value": 2010}}
PHASES = ("plain", "filtered")  # each run by every serving process together, after a common start
STARTS = ("open", *PHASES)  # the common starts: the serving processes open the index together too
WARMUP = 3  # untimed queries per serving process before the timed phases
TARGET_QUERIES = 100  # process 0's untimed check that the target chunk is found
# a quarter of the memory for PostgreSQL's buffers, as deployments are tuned (the default 128 MB
# made every HNSW search copy about a thousand pages from the kernel's cache at 2M chunks)
SERVER_SETTINGS = {"shared_buffers": f"{(os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES')) // 4 // 2**20}MB"}
BUILD_FIGURES = "scale_postgres_build.json"  # beside a --keep-server's data


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def connection(args) -> dict[str, object]:
    return json.loads(args.pg)


def open_store(args, **kwargs):
    from llama_index_ext_recursive.stores.pg_index import PostgresIndexStore

    return PostgresIndexStore.from_params(**connection(args), name=NAME, **kwargs)


# ------------------------------------------------------------------ children
class ProgressStream(TimedStream):
    """:class:`scale_columnar.TimedStream` that logs every ``every`` nodes and notes when the
    last one was handed over (what the build does after it: the last batch, the HNSW graphs, the
    calibration)."""

    def __init__(self, items, total: int, started: float) -> None:
        super().__init__(items)
        self.total, self.started, self.count = total, started, 0
        self.every = max(1, total // 10)
        self.exhausted_at: float | None = None

    def __next__(self):
        try:
            node = super().__next__()
        except StopIteration:
            if self.exhausted_at is None:
                self.exhausted_at = time.perf_counter()
                log(f"build: all {self.count:,} nodes handed over at {self.exhausted_at - self.started:.1f} s")
            raise
        self.count += 1
        if self.count % self.every == 0:
            elapsed = time.perf_counter() - self.started
            log(
                f"build: {self.count:,}/{self.total:,} nodes at {elapsed:.1f} s "
                f"(corpus {self.seconds:.1f} s, peak RSS {memory.peak_rss_mib():.0f} MiB)"
            )
        return node


def child_build(args) -> dict[str, object]:
    from llama_index_ext_recursive import RecursiveSummaryRetriever

    corpus = corpus_of(args)
    model = topic_embedding(corpus, lazy=True)
    store = open_store(args, dimension=corpus.dim)  # creates the tables
    started = time.perf_counter()
    stream = ProgressStream(nodes(corpus), corpus.docs * corpus.chunks, started)
    RecursiveSummaryRetriever.from_nodes(
        stream,
        postgres=store,
        embed_model=model,
        show_progress=False,
        similarity_top_k=10,
        **equal_calibration(RecursiveSummaryRetriever),
    )
    ended = time.perf_counter()
    store.close()
    log(f"build: done in {ended - started:.1f} s, peak RSS {memory.peak_rss_mib():.0f} MiB")
    return {
        "build_s": ended - started,
        "corpus_s": stream.seconds,
        "after_last_node_s": ended - stream.exhausted_at if stream.exhausted_at is not None else None,
        "nodes": stream.count,
    }


def chunk_queries(corpus: TopicCorpus, n: int, process: int) -> list[tuple[str, list[float], str, str]]:
    """Process ``process``'s ``n`` queries (process 0's are scale_columnar's), each document drawn
    alone (the corpus is never held)."""
    if process == 0:
        return corpus.sampled_chunk_queries(n, noise=1.0)
    import numpy as np

    rng = np.random.default_rng([corpus.seed + 1, process])
    out = []
    for row in rng.integers(0, corpus.docs * corpus.chunks, size=n):
        document = corpus.document(int(row) // corpus.chunks)
        chunk = document.chunks[int(row) % corpus.chunks]
        out.append(corpus._query_for(chunk, document.vocabulary, rng, 1.0))  # benchmark only
    return out


def wait_for(sync: Path, name: str, timeout: float) -> None:
    """Wait until the parent creates ``sync/name``; exit when it gives up (``sync/abort``)."""
    deadline = time.monotonic() + timeout
    while not (sync / name).exists():
        if (sync / "abort").exists() or time.monotonic() > deadline:
            log(f"serve {sync.name}: no {name} (aborted or timed out)")
            raise SystemExit(3)
        time.sleep(0.002)


def child_serve(args) -> dict[str, object]:
    from llama_index.core.schema import QueryBundle

    from llama_index_ext_recursive import FilteredQueryBundle, RecursiveSummaryRetriever

    corpus = corpus_of(args)
    queries = chunk_queries(corpus, args.queries, args.process)
    model = topic_embedding(corpus, lazy=True)
    bundles = {
        "plain": [QueryBundle(text, embedding=vector) for text, vector, _, _ in queries],
        "filtered": [FilteredQueryBundle(text, embedding=vector, filters=FILTER) for text, vector, _, _ in queries],
    }
    sync = Path(args.sync)
    rss_before = memory.peak_rss_mib()
    (sync / f"open.ready.{args.process}").touch()
    wait_for(sync, "open.go", args.timeout)  # every process opens at once, as after a deployment
    started = time.perf_counter()
    store = open_store(args)
    retriever = RecursiveSummaryRetriever.from_postgres(store, embed_model=model)
    open_s = time.perf_counter() - started
    first_ms = timing.latencies_ms(retriever.retrieve, bundles["plain"][:1])[0]
    for bundle in bundles["plain"][1 : 1 + WARMUP]:
        retriever.retrieve(bundle)
    target = None
    if args.process == 0:  # untimed, before the common start: the others wait for it
        checked = min(TARGET_QUERIES, len(queries))
        target = (
            sum(
                any(h.node.node_id == chunk for h in retriever.retrieve(b))
                for b, (_, _, chunk, _) in zip(bundles["plain"][:checked], queries[:checked], strict=True)
            )
            / checked
        )
    figures: dict[str, object] = {
        "process": args.process,
        "open_s": open_s,
        "first_ms": first_ms,
        "target_in_top10": target,
        "rss_before_open_mib": rss_before,
    }
    for phase in PHASES:
        (sync / f"{phase}.ready.{args.process}").touch()
        wait_for(sync, f"{phase}.go", args.timeout)
        begun = time.perf_counter()
        figures[f"{phase}_ms"] = timing.latencies_ms(retriever.retrieve, bundles[phase])
        figures[f"{phase}_s"] = time.perf_counter() - begun
    store.close()
    if args.process == 0:
        log(f"serve x{args.processes}: process 0 done (open {open_s:.2f} s, peak RSS {memory.peak_rss_mib():.0f} MiB)")
    return figures


CHILDREN = {"build": child_build, "serve": child_serve}


# ------------------------------------------------------------------ driver
class Relay:
    """``run_child``'s poll: copies what a child wrote to its stderr file so far to ours."""

    def __init__(self, path: Path, prefix: str) -> None:
        self.path, self.prefix, self.offset, self.partial = path, prefix, 0, ""
        self.lock = threading.Lock()

    def __call__(self, pid: int | None = None) -> None:  # noqa: ARG002 - run_child passes the pid
        with self.lock:
            try:
                with open(self.path, encoding="utf-8", errors="replace") as f:
                    f.seek(self.offset)
                    text = f.read()
                    self.offset = f.tell()
            except FileNotFoundError:
                return
            lines = (self.partial + text).split("\n")
            self.partial = lines.pop()
            for line in lines:
                print(f"{self.prefix}{line}", file=sys.stderr, flush=True)


def child_command(stage: str, docs: int, pg: dict[str, object], args) -> list[str]:
    return [
        sys.executable,
        __file__,
        "--child",
        stage,
        "--docs",
        str(docs),
        "--chunks",
        str(args.chunks),
        "--sentences",
        str(args.sentences),
        "--queries",
        str(args.queries),
        "--timeout",
        str(args.timeout),
        "--pg",
        json.dumps(pg),
    ]


def figures_of(done: memory.ChildRun, what: str, err: Path) -> dict[str, object]:
    if done.returncode != 0:
        why = "timed out" if done.timed_out else f"exit {done.returncode}"
        raise SystemExit(f"{what} failed ({why}, {done.wall_s:.1f} s):\n{err.read_text()[-4000:]}")
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    figures["peak_rss_mib"] = done.peak_rss_mib
    figures["wall_s"] = done.wall_s
    return figures


def run_build(docs: int, pg: dict[str, object], args) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="scale-postgres-build-") as tmp:
        err = Path(tmp) / "stderr"
        relay = Relay(err, "  | ")
        done = memory.run_child(
            child_command("build", docs, pg, args), env=os.environ, timeout=args.timeout, stderr=err, poll=relay
        )
        relay()
        return figures_of(done, f"build of {docs} documents", err)


def run_serve(docs: int, processes: int, pg: dict[str, object], args) -> dict[str, object]:
    """``processes`` serving children started at once, released together into each phase."""
    with tempfile.TemporaryDirectory(prefix="scale-postgres-serve-") as tmp:
        sync = Path(tmp)
        errs = [sync / f"{i}.err" for i in range(processes)]
        relays = [Relay(err, f"  {i}| ") for i, err in enumerate(errs)]
        base = child_command("serve", docs, pg, args) + ["--processes", str(processes), "--sync", tmp]
        with ThreadPoolExecutor(max_workers=processes) as pool:
            runs = [
                pool.submit(
                    memory.run_child,
                    [*base, "--process", str(i)],
                    env=os.environ,
                    timeout=args.timeout,
                    stderr=errs[i],
                    poll=relays[i],
                )
                for i in range(processes)
            ]
            try:
                for phase in STARTS:
                    waited = time.perf_counter()
                    ready = [sync / f"{phase}.ready.{i}" for i in range(processes)]
                    while not all(path.exists() for path in ready):
                        if any(run.done() for run in runs) or time.perf_counter() - waited > args.timeout:
                            raise RuntimeError(f"a serving process ended (or the wait timed out) before {phase}")
                        time.sleep(0.01)
                    (sync / f"{phase}.go").touch()
                    log(f"serve x{processes}: {phase} started (all ready after {time.perf_counter() - waited:.1f} s)")
            except BaseException:
                (sync / "abort").touch()  # the waiting processes exit; their errors are shown below
                for run in runs:
                    run.result()
                raise
            done = [run.result() for run in runs]
        for relay in relays:
            relay()
        children = [figures_of(d, f"serve process {i} of {processes}", errs[i]) for i, d in enumerate(done)]
    return pooled(children)


def pooled(children: list[dict[str, object]]) -> dict[str, object]:
    """One serving run's figures over its processes (their queries pooled)."""
    out: dict[str, object] = {
        "processes": len(children),
        "open_s_max": max(c["open_s"] for c in children),
        "open_s_median": timing.median(c["open_s"] for c in children),
        "first_ms_max": max(c["first_ms"] for c in children),
        "peak_rss_mib_max": max(c["peak_rss_mib"] for c in children),
        "rss_before_open_mib_max": max(c["rss_before_open_mib"] for c in children),
        "target_in_top10": children[0]["target_in_top10"],
        "wall_s_max": max(c["wall_s"] for c in children),
    }
    for phase in PHASES:
        latencies = [ms for c in children for ms in c[f"{phase}_ms"]]
        slowest = max(c[f"{phase}_s"] for c in children)
        out[f"{phase}_queries"] = len(latencies)
        out[f"{phase}_p50_ms"] = pct(latencies, 50)
        out[f"{phase}_p95_ms"] = pct(latencies, 95)
        out[f"{phase}_p99_ms"] = pct(latencies, 99)
        out[f"{phase}_slowest_s"] = slowest
        out[f"{phase}_qps"] = len(latencies) / slowest
    return out


def database_figures(server) -> dict[str, object]:
    """The index's size on disk (tables with their indexes and TOAST) and rows, from the server."""
    present = [t for t in TABLES if server.execute(f"SELECT to_regclass('public.{t}') IS NOT NULL")[0][0]]
    sizes = {t: int(server.execute(f"SELECT pg_total_relation_size('public.{t}')")[0][0]) for t in present}
    rows = {t: int(server.execute(f"SELECT count(*) FROM public.{t}")[0][0]) for t in present}
    missing = sorted(set(TABLES) - set(present))
    if missing:
        log(f"tables not found: {missing}")
    return {
        "db_mib": sum(sizes.values()) / 2**20,
        "table_mib": {t: s / 2**20 for t, s in sizes.items()},
        "rows": rows,
        "missing_tables": missing,
    }


def statistics(server) -> str:
    """Whether the planner has statistics on the levels' tables (an ANALYZE, by hand or by
    autovacuum, ran on them): ``yes``, ``no``, or ``some``."""
    levels = [f"{NAME}_{level}{part}" for level in ("chunks", "summaries") for part in ("", "_postings")]
    listed = ", ".join(f"'{t}'" for t in levels)
    done = server.execute(
        "SELECT count(*) FROM pg_stat_user_tables WHERE schemaname = 'public' "
        f"AND relname IN ({listed}) AND coalesce(last_analyze, last_autoanalyze) IS NOT NULL"
    )[0][0]
    return "yes" if done == len(levels) else "no" if done == 0 else "some"


def analyze(server) -> float:
    """``ANALYZE`` the index's tables; its seconds."""
    started = time.perf_counter()
    server.execute("ANALYZE " + ", ".join(f"public.{t}" for t in TABLES))
    return time.perf_counter() - started


def kept_build(args, docs: int) -> dict[str, object] | None:
    """The build figures of the index kept in ``--keep-server`` (``None``: nothing kept, build
    it); an index of another corpus there is refused rather than dropped."""
    if args.keep_server is None:
        return None
    path = args.keep_server / BUILD_FIGURES
    if not path.exists():
        return None
    kept = json.loads(path.read_text())
    wanted = corpus_key(args, docs)
    if kept["corpus"] != wanted:
        raise SystemExit(f"{args.keep_server} keeps the index of {kept['corpus']}, not {wanted}: give another DIR")
    log(f"serving the index kept in {args.keep_server} (built by code {kept['build']['code']})")
    return kept["build"]


def keep_build(args, docs: int, build: dict[str, object]) -> None:
    """Note the build's figures beside a kept server, for the runs that serve its index."""
    if args.keep_server is not None:
        figures = {"corpus": corpus_key(args, docs), "build": build}
        (args.keep_server / BUILD_FIGURES).write_text(json.dumps(figures, indent=1))


def corpus_key(args, docs: int) -> dict[str, int]:
    return {"docs": docs, "chunks": args.chunks, "sentences": args.sentences}


def drop_index(server) -> None:
    """Drop the index's tables (and the levels' sequences), so the next size is built under the same name."""
    names = ", ".join(f"public.{t}" for t in TABLES)
    server.execute(f"DROP TABLE IF EXISTS {names}")
    server.execute(f"DROP SEQUENCE IF EXISTS public.{NAME}_chunks_seq, public.{NAME}_summaries_seq")


def main(argv: list[str] | None = None) -> None:
    p = cli.parser(__doc__)
    p.add_argument("--docs", type=cli.csv(int), default=[10000], help="corpus sizes in documents")
    p.add_argument("--chunks", type=int, default=20, help="chunks per document")
    p.add_argument("--sentences", type=int, default=6, help="12-word sentences per chunk")
    p.add_argument("--queries", type=int, default=1000, help="timed queries per serving process, each kind")
    p.add_argument(
        "--concurrency", type=cli.csv(int), default=[1, 4, 16], help="serving processes run at once, in turn"
    )
    p.add_argument("--timeout", type=float, default=7200.0, help="seconds per child")
    p.add_argument(
        "--analyze",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="ANALYZE the index's tables after the build (the build leaves them without statistics, and "
        "autovacuum analyzes them at a time of its own, so the serving figures would change mid-run)",
    )
    p.add_argument(
        "--keep-server",
        type=Path,
        metavar="DIR",
        help="run the server in DIR/server and keep it, with the index and its build figures: a later run "
        "with the same DIR and sizes serves that index without building it again (one size per DIR)",
    )
    p.add_argument("--child", choices=sorted(CHILDREN), help=argparse_hidden())
    p.add_argument("--pg", help=argparse_hidden())
    p.add_argument("--process", type=int, default=0, help=argparse_hidden())
    p.add_argument("--processes", type=int, default=1, help=argparse_hidden())
    p.add_argument("--sync", help=argparse_hidden())
    cli.add_out(p, RESULTS / "scale_postgres.md")
    args = p.parse_args(argv)
    if args.child:
        args.docs_n = args.docs[0]
        print(json.dumps(CHILDREN[args.child](args)), flush=True)
        return
    rows: list[dict[str, object]] = []
    log("starting PostgreSQL")
    if args.keep_server is not None and len(args.docs) > 1:
        raise SystemExit("--keep-server keeps one index: give one size in --docs")
    kept = args.keep_server / "server" if args.keep_server else None
    with postgres.server(keep=kept, settings=SERVER_SETTINGS) as server:
        pg = server.params()
        engine = postgres.versions(server)
        log(f"{engine} on port {pg['port']}")
        for docs in args.docs:
            chunks = docs * args.chunks
            build = kept_build(args, docs)
            if build is None:
                log(f"{chunks:,} chunks ({docs} documents x {args.chunks}): build")
                build = run_build(docs, pg, args)
                build.update(database_figures(server))
                build["statistics_after_build"] = statistics(server)
                build["analyze_s"] = analyze(server) if args.analyze else None
                build["code"] = library_fingerprint()
                keep_build(args, docs, build)
            row: dict[str, object] = {"docs": docs, "chunks": chunks, "build": build, "serve": []}
            rows.append(row)
            log(
                f"built in {build['build_s']:.1f} s (corpus {build['corpus_s']:.1f} s), peak RSS "
                f"{build['peak_rss_mib']:.0f} MiB, database {build['db_mib']:.1f} MiB"
            )
            report(args, argv, engine, rows)
            for processes in args.concurrency:
                log(f"{chunks:,} chunks: serve with {processes} process(es)")
                before = statistics(server)
                serve = run_serve(docs, processes, pg, args)
                after = statistics(server)
                serve["statistics"] = before if before == after else f"{before} -> {after}"
                row["serve"].append(serve)
                log(
                    f"x{processes}: p50/p95 {serve['plain_p50_ms']:.1f}/{serve['plain_p95_ms']:.1f} ms, "
                    f"filtered {serve['filtered_p50_ms']:.1f}/{serve['filtered_p95_ms']:.1f} ms, "
                    f"{serve['plain_qps']:.1f} q/s, peak RSS {serve['peak_rss_mib_max']:.0f} MiB"
                )
                report(args, argv, engine, rows)
            if args.keep_server is None:
                drop_index(server)
    print(render(args, argv, engine, rows), flush=True)


BUILD = Table(
    [
        "chunks",
        "documents",
        "build s",
        "of which corpus s",
        "after last node s",
        "build peak RSS MiB",
        "statistics after build",
        "ANALYZE s",
        "database MiB",
        "rows chunks / summaries / documents",
    ]
)
SERVE = Table(
    [
        "chunks",
        "processes",
        "open s (max)",
        "first query ms (max)",
        "p50 / p95 ms",
        "filtered p50 / p95 ms",
        "queries/s",
        "filtered queries/s",
        "client peak RSS MiB (max)",
        "table statistics",
        "target in top 10",
    ]
)


def render(args, argv, engine: str, rows: list[dict[str, object]]) -> str:
    build_rows = []
    serve_rows = []
    for r in rows:
        b = r["build"]
        counts = b["rows"]
        build_rows.append(
            [
                f"{r['chunks']:,}",
                f"{r['docs']:,}",
                fmt(b["build_s"], 1),
                fmt(b["corpus_s"], 1),
                fmt(b["after_last_node_s"], 1),
                fmt(b["peak_rss_mib"], 0),
                b["statistics_after_build"],
                fmt(b["analyze_s"], 1),
                fmt(b["db_mib"], 1),
                " / ".join(
                    f"{counts[f'{NAME}_{t}']:,}" if f"{NAME}_{t}" in counts else "-"
                    for t in ("chunks", "summaries", "documents")
                ),
            ]
        )
        for s in r["serve"]:
            serve_rows.append(
                [
                    f"{r['chunks']:,}",
                    s["processes"],
                    fmt(s["open_s_max"], 2),
                    fmt(s["first_ms_max"], 1),
                    f"{fmt(s['plain_p50_ms'], 1)} / {fmt(s['plain_p95_ms'], 1)}",
                    f"{fmt(s['filtered_p50_ms'], 1)} / {fmt(s['filtered_p95_ms'], 1)}",
                    fmt(s["plain_qps"], 1),
                    fmt(s["filtered_qps"], 1),
                    fmt(s["peak_rss_mib_max"], 0),
                    s["statistics"],
                    fmt(s["target_in_top10"], 2),
                ]
            )
    return "\n".join(
        [
            "# Recursive index in PostgreSQL at scale",
            "",
            f"Command: `{cli.command(argv)}`",
            "",
            machine(),
            f"{engine} (throw-away server, harness/postgres.py, fsync=off, shared_buffers "
            f"{SERVER_SETTINGS['shared_buffers']}), on the same machine as the clients.",
            f"Load average at the end: {load_average():.2f}. Code: {library_fingerprint()}."
            + (
                f" The index was built by code {', '.join(str(r['build'].get('code')) for r in rows)} and kept "
                f"in `{args.keep_server}` (`--keep-server`)."
                if args.keep_server is not None
                else ""
            ),
            "",
            f"Build: one client process streaming the corpus ({args.sentences} sentences of 12 words a chunk, "
            "384-d vectors given, equal fusion weights); database MiB: `pg_total_relation_size` over the "
            f"index's {len(TABLES)} tables. Statistics after build: whether the levels' tables (rows and "
            "postings) had planner statistics when the build returned (only if autovacuum got to them); "
            "ANALYZE s: the benchmark's own ANALYZE of the index's tables after the build, so that every "
            "serving run sees the same plans ('-': `--no-analyze`, autovacuum analyzes them when it "
            "chooses; the serving table says whether they had statistics at the start and the end of each run).",
            "",
            BUILD.render(build_rows),
            "",
            "Serve: the processes open the index together (`from_postgres`), each answers a first query "
            f"(timed apart) and {WARMUP} more untimed, then "
            f"the processes run {args.queries} queries each together (top 10, query vectors given), then the "
            "same filtered (`year >= 2010`, half the corpus) together. Percentiles pool every process's "
            "queries; queries/s: all of them over the wall time of the slowest process; target in top 10: "
            f"process 0, its first {TARGET_QUERIES} queries.",
            "",
            SERVE.render(serve_rows),
        ]
    )


def report(args, argv, engine: str, rows: list[dict[str, object]]) -> None:
    """Write the result files for the steps measured so far."""
    write(args.out, render(args, argv, engine, rows) + "\n", rows)


def argparse_hidden() -> str:
    return argparse.SUPPRESS


if __name__ == "__main__":
    main()
