"""Recall@10 and latency of VectorColumn's approximate step at 500k and 2M rows (issue 25).

Issue 25 asks for recall@10 >= 0.99 of the chunk level's approximate search
against an exact scan, with the recursive query's p95 under 50 ms at 2M rows
in all (this search is one part of it). This script measures the approximate
step alone, on the vectors :mod:`scale_columnar` indexes: the
:class:`harness.corpus.TopicCorpus` of ``rows / 20`` documents of 20 chunks
(every document a random direction, its chunks ``unit(topic + 0.5 u)``),
without text, embeddings or an index around it.

One child process per size (its peak RSS from the kernel, ``wait4``):

* build: a :class:`VectorColumn` filled by appends of ``--batch`` (5000) rows,
  document after document, streamed from the corpus (only the column holds
  rows), then ``retrain()`` as a build does at its end;
* ground truth: the column's exact search (threshold raised above the rows)
  for ``--queries`` queries ``unit(chunk + 1.0 u)`` of random chunks
  (``TopicCorpus.sampled_chunk_queries``, as :mod:`scale_columnar` draws them);
* sweep: for each training variant (``--nlist-factors``: lists = factor x
  sqrt(rows); ``--train-per-list``: k-means rows per list; the first pair is
  the trained column's own, the others train again), each ``--nprobes`` and
  ``--candidates`` multiplier, and the column's default nprobe: recall@10
  against the exact answer and the p50/p95 of one ``search(q, 10)`` per query,
  query by query; with the milliseconds the coarse quantizer takes alone
  (a flat scan of the centroids), which bounds what an HNSW quantizer could save.

Times are wall clock on 2 cores shared with other sessions: compare rows of
one run, and read the load average recorded.

Usage (repository root; ``PYTHONPATH=.`` so a worktree measures its own package)::

    PYTHONPATH=. .venv/bin/python benchmarks/vector_recall.py                       # 500k and 2M, ~40 min
    PYTHONPATH=. .venv/bin/python benchmarks/vector_recall.py --sizes 60000 --queries 100   # quick
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from harness import RESULTS, cli, memory, timing
from harness.corpus import TopicCorpus
from harness.report import Table, fmt, library_fingerprint, load_average, machine, write

DIM = 384
CHUNKS = 20
K = 10
pct = timing.percentile


def emit(event: dict[str, Any]) -> None:
    """One JSON line to the parent, with this process's peak RSS so far and the load average."""
    event["peak_rss_mib"] = round(memory.peak_rss_mib())
    event["load"] = round(load_average(), 2)
    print(json.dumps(event), flush=True)


def build(args: argparse.Namespace, corpus: TopicCorpus) -> Any:
    """A column of the corpus's chunk vectors, appended ``--batch`` rows at a time, then retrained."""
    from llama_index_ext_recursive.columnar.vectors import VectorColumn

    column = VectorColumn(DIM, name="chunk_vectors")
    threshold = column.approximate_threshold
    if args.train_once:
        column.approximate_threshold = corpus.docs * CHUNKS + 1  # no training while appending
    docs_per_batch = max(1, args.batch // CHUNKS)
    append_s = generate_s = 0.0
    for first in range(0, corpus.docs, docs_per_batch):
        started = time.perf_counter()
        batch = np.concatenate(
            [corpus.chunk_vectors(d) for d in range(first, min(first + docs_per_batch, corpus.docs))]
        )
        generate_s += time.perf_counter() - started
        append_s += timing.seconds(lambda: column.append(batch))
    emit({"stage": "append", "seconds": append_s, "generate_s": generate_s, "rows": column.live_count})
    column.approximate_threshold = threshold
    # the build's retraining at its end, or (--train-once) the same training, on every row, as the first
    retrain_s = timing.seconds(column._train if args.train_once else column.retrain)
    emit({"stage": "retrain", "seconds": retrain_s, **trained(column)})
    return column


def trained(column: Any) -> dict[str, int]:
    """The approximate index's lists and the rows it was trained for."""
    approximate = column._approximate  # benchmark only: the trained index's shape
    return {"nlist": int(approximate.index.nlist), "trained_rows": int(approximate.trained_rows)}


def retrain_with(column: Any, factor: float, per_list: int) -> float:
    """Train the column's approximate step again with ``factor`` x sqrt(rows) lists and
    ``per_list`` k-means rows per list (the module's rules patched for this call); seconds taken."""
    from llama_index_ext_recursive.columnar import vectors

    rule, sample = vectors._nlist, vectors._TRAIN_ROWS_PER_LIST
    vectors._nlist = lambda rows: max(16, int(factor * np.sqrt(rows)))
    vectors._TRAIN_ROWS_PER_LIST = per_list
    try:
        return timing.seconds(column._train)
    finally:
        vectors._nlist, vectors._TRAIN_ROWS_PER_LIST = rule, sample


def sweep(args: argparse.Namespace, column: Any, queries: np.ndarray, truth: list[np.ndarray], variant: str) -> None:
    """Recall@10 and latency at each nprobe and candidates multiplier (and the default nprobe)."""
    default_nprobe, default_candidates = column.nprobe, column.candidates
    index = column._approximate.index
    settings = [(default_nprobe, default_candidates, True)]
    settings += [(n, c, False) for n in args.nprobes for c in args.candidates]
    for nprobe, candidates, is_default in settings:
        column.nprobe, column.candidates = nprobe, candidates
        found: list[np.ndarray] = []
        calls = timing.latencies_ms(lambda q: column.search(q, K)[0], list(queries), warmup=5, results=found)
        recall = float(np.mean([len(np.intersect1d(a, t)) / K for a, t in zip(found, truth, strict=True)]))
        probes = int(column.probes)
        quantizer = timing.latencies_ms(lambda q: index.quantizer.search(q[None, :], probes), list(queries[:200]))
        emit(
            {
                "stage": "recall",
                "variant": variant,
                "default": is_default,
                "nprobe": probes,
                "candidates": candidates,
                "recall": recall,
                "n": len(calls),
                "p50_ms": pct(calls, 50),
                "p95_ms": pct(calls, 95),
                "quantizer_p50_ms": pct(quantizer, 50),
                **trained(column),
            }
        )
    column.nprobe, column.candidates = default_nprobe, default_candidates


def child(args: argparse.Namespace) -> None:
    corpus = TopicCorpus(args.size // CHUNKS, CHUNKS, dim=DIM, seed=args.seed)
    column = build(args, corpus)
    queries = np.asarray(
        [vector for _, vector, _, _ in corpus.sampled_chunk_queries(args.queries, noise=args.query_noise)],
        dtype=np.float32,
    )
    threshold = column.approximate_threshold
    column.approximate_threshold = 10**12  # exact: the whole column scanned
    truth: list[np.ndarray] = []
    exact_s = 0.0
    for start in range(0, len(queries), 100):
        exact_s += timing.seconds(lambda: truth.extend(column.search_many(queries[start : start + 100], K)[0]))
    column.approximate_threshold = threshold
    emit({"stage": "exact", "seconds": exact_s, "queries": len(queries)})
    for i, (factor, per_list) in enumerate((f, p) for f in args.nlist_factors for p in args.train_per_list):
        variant = f"lists {factor:g} sqrt(rows), {per_list} training rows per list"
        if i:
            emit({"stage": "train", "variant": variant, "seconds": retrain_with(column, factor, per_list)})
        sweep(args, column, queries, truth, variant)


def run_size(args: argparse.Namespace, size: int) -> dict[str, Any]:
    command = [sys.executable, __file__, "child", "--size", str(size)]
    for flag in ("batch", "queries", "seed", "query_noise"):
        command += [f"--{flag.replace('_', '-')}", str(getattr(args, flag))]
    command += ["--train-once"] if args.train_once else []
    for flag in ("nprobes", "candidates", "nlist_factors", "train_per_list"):
        command += [f"--{flag.replace('_', '-')}", ",".join(map(str, getattr(args, flag)))]
    print(f"[{size:,} rows] {' '.join(command[2:])}", file=sys.stderr, flush=True)
    # the child's lines go to a file beside the results as they come, to follow a long run
    progress = args.out.with_name(f"{args.out.stem}_{size}.log")
    progress.parent.mkdir(parents=True, exist_ok=True)
    run = memory.run_child(command, env=dict(os.environ), timeout=args.timeout, stdout=progress)
    events = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    for event in events:
        print(f"[{size:,} rows] {event}", file=sys.stderr, flush=True)
    out: dict[str, Any] = {"size": size, "events": events, **run.usage()}
    if run.returncode != 0:
        out["error"] = f"exit {run.returncode}: {run.stderr[-2000:]}"
    return out


def command_line() -> str:
    """The command as typed, with the ``PYTHONPATH`` that chose the package measured."""
    path = os.environ.get("PYTHONPATH")
    return (f"PYTHONPATH={path} " if path else "") + cli.command()


def report(args: argparse.Namespace, results: list[dict[str, Any]], fingerprints: tuple[str, str]) -> str:
    def stage(r: dict[str, Any], name: str) -> dict[str, Any]:
        return next((e for e in r["events"] if e.get("stage") == name), {})

    lines = [
        f"Command: `{command_line()}`",
        "",
        f"Machine: {machine()}; code {fingerprints[0]}"
        + ("" if fingerprints[0] == fingerprints[1] else f" (changed to {fingerprints[1]} during the run)"),
        "",
        Table(
            ["rows", "append s", "retrain s", "lists", "exact search s (queries)", "child peak RSS MiB", "load"]
        ).render(
            (
                f"{r['size']:,}",
                fmt(stage(r, "append").get("seconds"), 1),
                fmt(stage(r, "retrain").get("seconds"), 1),
                stage(r, "retrain").get("nlist", "-"),
                f"{fmt(stage(r, 'exact').get('seconds'), 1)} ({stage(r, 'exact').get('queries', '-')})",
                round(r["max_rss_kb"] / 1024),
                stage(r, "exact").get("load", "-"),
            )
            for r in results
        ),
        "",
        "Recall@10 against the exact search and milliseconds per `search(q, 10)` (one query at a time); "
        "`candidates` is the multiplier of k (at least 100 in all) rescored exactly; the quantizer column "
        "is the coarse step alone (nprobe nearest centroids of the lists, a flat scan); "
        "**default** marks the column's own setting:",
        "",
        Table(
            [
                "rows",
                "training",
                "lists",
                "nprobe",
                "nprobe/lists",
                "candidates",
                "recall@10",
                "p50 ms",
                "p95 ms",
                "quantizer p50 ms",
                "load",
            ]
        ).render(
            (
                f"{r['size']:,}",
                e["variant"],
                e["nlist"],
                f"**{e['nprobe']}** (default)" if e["default"] else e["nprobe"],
                fmt(e["nprobe"] / e["nlist"], 3),
                e["candidates"],
                fmt(e["recall"], 4),
                fmt(e["p50_ms"]),
                fmt(e["p95_ms"]),
                fmt(e["quantizer_p50_ms"], 3),
                e["load"],
            )
            for r in results
            for e in r["events"]
            if e.get("stage") == "recall"
        ),
    ]
    trainings = [(r["size"], e) for r in results for e in r["events"] if e.get("stage") == "train"]
    if trainings:
        lines += ["", "Training again for the other variants:", ""]
        lines += [f"- {size:,} rows, {e['variant']}: {fmt(e['seconds'], 1)} s" for size, e in trainings]
    errors = [f"- {r['size']:,} rows: {r['error']}" for r in results if "error" in r]
    if errors:
        lines += ["", "Failures:", "", *errors]
    return "\n".join(lines)


def main() -> None:
    p = cli.parser(__doc__)
    p.add_argument("mode", nargs="?", choices=("run", "child"), default="run", help=argparse.SUPPRESS)
    p.add_argument("--sizes", type=cli.csv(int), default=[500_000, 2_000_000])
    p.add_argument("--size", type=int, help=argparse.SUPPRESS)
    p.add_argument("--batch", type=int, default=5000, help="rows per append")
    p.add_argument("--queries", type=int, default=1000)
    p.add_argument("--query-noise", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--nprobes", type=cli.csv(int), default=[16, 32, 64, 128, 256])
    p.add_argument("--candidates", type=cli.csv(int), default=[10], help="candidates per result rescored")
    p.add_argument("--nlist-factors", type=cli.csv(float), default=[4.0], help="lists = factor x sqrt(rows)")
    p.add_argument("--train-per-list", type=cli.csv(int), default=[64], help="k-means training rows per list")
    p.add_argument(
        "--train-once",
        action="store_true",
        help="append without the approximate step, then train it once on every row: the index the "
        "build's end-of-build retraining makes (same sample, seeded by the live rows), without the "
        "trainings appends make on the way (10 of the 21 minutes of a 2M build)",
    )
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds per child")
    cli.add_out(p, RESULTS / "vector_recall.md")
    args = p.parse_args()
    if args.mode == "child":
        child(args)
        return
    before = library_fingerprint()
    results = [run_size(args, size) for size in args.sizes]
    text = report(args, results, (before, library_fingerprint()))
    write(
        args.out,
        "# Recall of the approximate vector search at 500k and 2M rows (issue 25)\n\n" + text,
        {"args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}, "results": results},
    )
    print(text)


if __name__ == "__main__":
    main()
