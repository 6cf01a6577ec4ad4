"""Speed and memory of the columnar components at 200k and 2M rows (issue 25).

Issue 25 asks for a 2M-chunk index (100k documents x 20 chunks, 384-d) in
bounded memory on this 2-core / 24 GB machine: build peak RSS <= 6 GB, a
reopened index serving queries <= 2.5 GB, open <= 10 s, a one-document change
<= 2 s with its persist. This script measures the four components of
``llama_index_ext_recursive/columnar/`` alone, before they are wired into an
index, so each one's share of those budgets is known:

* ``vectors``: :class:`VectorColumn` at each of ``--sizes`` rows. Build child:
  appends in batches of ``--batch`` (50k) rows, then one ``write``; the append
  rate, the write time and the build's peak RSS. Query child (a fresh process
  on the written folder): ``open`` time; ``--queries`` (1000) top-10 searches
  at the defaults (approximate above 50k live rows, nprobe by the lists) and the RSS
  after them; restricted searches (``rows=`` of 20, 2000 and 200k rows, the
  chunks of random documents); recall@10 of the approximate path against the
  exact answer for nprobe in ``--nprobes`` (8 to 256); then the exact path
  (``approximate_threshold`` above the size) against a bare NumPy float32
  ``matrix @ q`` + ``argpartition`` over the same vectors, query by query in
  turn, with a time budget (``--exact-budget-s``), as their ratio; last, a
  one-document update (append 20 rows, ``write``).
* ``postings``: :class:`Postings` at each of ``--sizes`` rows, ~150 tokens per
  row (100-200, uniform) drawn as strings from a Zipf law (1/rank) over
  ``--vocabulary`` (200k) terms. Build child: append rate in batches, write.
  Query child: open; 3-6-token queries drawn from the same law, unrestricted
  and restricted to 2000 rows (100 random documents' chunks), within
  ``--postings-budget-s`` seconds each; RSS after them; a one-document update.
* ``metadata``: :class:`MetadataColumns` with ``--metadata-rows`` (2M) rows:
  ``doc_id`` (one value per 20 rows: 100k distinct), ``category`` (20
  values), ``year`` (a number, 25 values). Build child: append in batches,
  write. Query child: open; mask latency of ``doc_id == x``, ``doc_id in
  [20 ids]``, ``year > y`` and ``category == c AND year > y`` (each with new
  values per call; the first call, which builds the value lookup, reported
  apart).
* ``rows``: :class:`RowStore` with ``--row-nodes`` (200k) ``TextNode``\\ s of
  ~1 KB text, appended in transactions of ``--row-batch`` nodes. Query child:
  open (construct + count), hydrating 10 random rows (``nodes(rows)``).

Data: generated and streamed by the script, batch by batch from seeded
generators (no list of all rows is ever held). Vectors have topic structure:
``--themes`` (1000) random unit theme vectors; document ``d`` has topic
``unit(theme + --doc-noise * u)``, its 20 chunks ``unit(topic + --chunk-noise
* u)`` (``u``: a random unit vector); a query is ``unit(chunk +
--query-noise * u)`` for a random chunk. The build child keeps the queries'
vectors and a plain float32 copy of all vectors (a ``.npy`` beside the
column, for the NumPy baseline and the ground truth) in the work folder.
Ground truth for recall: each query's 50 best rows by float32 BLAS, rescored
by the column's own exact path (``search(q, 10, rows=those 50)``), so ties and
rounding are the column's; the table says on how many queries that matched the
full exact scan.

Each case runs in its own child process (``harness.memory.run_child``): its
peak RSS is the kernel's, and the child reports its peak after each stage
(so "after open + queries" excludes the later full scans). Times are wall
clock on 2 cores shared with other sessions (the load average is recorded).

Usage (repository root; ``PYTHONPATH=.`` so a worktree measures its own package, not
the editable install's)::

    PYTHONPATH=. .venv/bin/python benchmarks/columnar_components.py            # ~20 min
    PYTHONPATH=. .venv/bin/python benchmarks/columnar_components.py --quick    # < 1 min
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
from harness import RESULTS, cli, memory, timing
from harness.corpus import unit_rows, vocabulary, zipf_weights
from harness.report import Table, fmt, library_fingerprint, load_average, machine, write

DIM = 384
CHUNKS_PER_DOC = 20
K = 10
GROUND_TRUTH_CANDIDATES = 50
RESTRICTIONS = (20, 2000, 200_000)
pct = timing.percentile


# ------------------------------------------------------------------ data
def vector_batches(args: argparse.Namespace, size: int) -> Iterator[tuple[int, np.ndarray]]:
    """``(first row, [rows, DIM] float32 unit vectors)`` per batch: chunks of documents of topics of themes.

    Each batch is drawn from its own generator, so a batch is the same whichever size is built.
    """
    themes = unit_rows(np.random.default_rng([args.seed, 0]).standard_normal((args.themes, DIM)))
    for start in range(0, size, args.batch):
        rows = min(args.batch, size - start)
        rng = np.random.default_rng([args.seed, 1, start])
        docs = -(-rows // CHUNKS_PER_DOC)
        topics = unit_rows(
            themes[rng.integers(0, args.themes, docs)] + args.doc_noise * unit_rows(rng.standard_normal((docs, DIM)))
        )
        chunks = unit_rows(
            np.repeat(topics, CHUNKS_PER_DOC, axis=0)[:rows]
            + args.chunk_noise * unit_rows(rng.standard_normal((rows, DIM)))
        )
        yield start, chunks.astype(np.float32)


def token_batches(args: argparse.Namespace, size: int, first: int = 0) -> Iterator[list[list[str]]]:
    """Token lists (100-200 tokens each, Zipf over the vocabulary, as strings), one list per batch."""
    terms = np.asarray(vocabulary(args.vocabulary, "t"), dtype=object)
    cumulative = np.cumsum(zipf_weights(args.vocabulary))
    for start in range(first, first + size, args.batch):
        rows = min(args.batch, first + size - start)
        rng = np.random.default_rng([args.seed, 2, start])
        lengths = rng.integers(100, 201, rows)
        ids = np.minimum(np.searchsorted(cumulative, rng.random(int(lengths.sum()))), args.vocabulary - 1)
        flat = terms[ids].tolist()
        bounds = np.concatenate([[0], np.cumsum(lengths)]).tolist()
        yield [flat[a:b] for a, b in zip(bounds[:-1], bounds[1:])]


def token_queries(args: argparse.Namespace, n: int) -> list[list[str]]:
    """``n`` queries of 3-6 tokens drawn from the documents' Zipf law."""
    terms = vocabulary(args.vocabulary, "t")
    cumulative = np.cumsum(zipf_weights(args.vocabulary))
    rng = np.random.default_rng([args.seed, 3])
    out = []
    for length in rng.integers(3, 7, n):
        ids = np.minimum(np.searchsorted(cumulative, rng.random(int(length))), args.vocabulary - 1)
        out.append([terms[i] for i in ids])
    return out


def document_rows(rng: np.random.Generator, size: int, wanted: int) -> np.ndarray:
    """About ``wanted`` rows (sorted): every chunk of random documents (all rows if ``wanted >= size``)."""
    if wanted >= size:
        return np.arange(size, dtype=np.int64)
    docs = rng.choice(size // CHUNKS_PER_DOC, size=max(1, wanted // CHUNKS_PER_DOC), replace=False)
    rows = (np.sort(docs)[:, None] * CHUNKS_PER_DOC + np.arange(CHUNKS_PER_DOC)[None, :]).reshape(-1)
    return rows.astype(np.int64)


def metadata_batches(args: argparse.Namespace, size: int) -> Iterator[list[dict[str, Any]]]:
    """Metadata dicts per batch: ``doc_id`` (per 20 rows), ``category`` (20 values), ``year`` (25 numbers)."""
    for start in range(0, size, args.batch):
        rows = range(start, min(start + args.batch, size))
        yield [
            {"doc_id": f"doc{row // CHUNKS_PER_DOC:06d}", "category": f"cat{row % 20:02d}", "year": 2000 + row % 25}
            for row in rows
        ]


def text_nodes(args: argparse.Namespace, first: int, count: int) -> list[Any]:
    """``count`` TextNodes from row ``first``: ~1 KB of pseudo-words, a source document, ``doc_id`` metadata."""
    from llama_index.core.schema import NodeRelationship, RelatedNodeInfo, TextNode

    rng = np.random.default_rng([args.seed, 4, first])
    words = np.asarray(vocabulary(20_000, "word"), dtype=object)
    ids = rng.integers(0, len(words), (count, 120)).tolist()  # 120 words of ~8.5 characters: ~1 KB
    nodes = []
    for offset, row_words in enumerate(ids):
        row = first + offset
        doc_id = f"doc{row // CHUNKS_PER_DOC:06d}"
        nodes.append(
            TextNode(
                id_=f"{doc_id}-c{row % CHUNKS_PER_DOC:02d}",
                text=" ".join(words[row_words].tolist()) + ".",
                metadata={"doc_id": doc_id},
                relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id=doc_id)},
            )
        )
    return nodes


# ------------------------------------------------------------------ child
def resident_mib() -> dict[str, int]:
    """This process's resident memory now, split as the kernel counts it: ``anon`` (its own heap,
    arrays, FAISS index) and ``file`` (pages of memory-mapped files it has touched: page cache the
    kernel can drop, but counted in RSS and in the peak)."""
    fields = {"RssAnon:": "anon_mib", "RssFile:": "file_mib"}
    out: dict[str, int] = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        name, _, value = line.partition("\t")
        if name in fields:
            out[fields[name]] = round(int(value.split()[0]) / 1024)
    return out


def emit(event: dict[str, Any]) -> None:
    """One JSON line to the parent, with this process's peak RSS so far and its resident memory now."""
    event["peak_rss_mib"] = round(memory.peak_rss_mib())
    event.update(resident_mib())
    print(json.dumps(event), flush=True)


def summary_ms(values: list[float]) -> dict[str, float]:
    return {"n": len(values), "p50_ms": pct(values, 50), "p95_ms": pct(values, 95)}


def vectors_build(args: argparse.Namespace, size: int, folder: Path) -> None:
    from llama_index_ext_recursive.columnar.vectors import VectorColumn

    column = VectorColumn(DIM, name="chunk_vectors")
    # the plain copy is written through a file, not a writable map, whose dirty pages would count as this
    # process's RSS and inflate the build's peak by the whole matrix
    plain = open(folder / "plain.npy", "wb")  # noqa: SIM115 (closed after the loop)
    np.lib.format.write_array_header_1_0(plain, {"descr": "<f4", "fortran_order": False, "shape": (size, DIM)})
    query_rows = np.sort(np.random.default_rng([args.seed, 5]).choice(size, args.queries, replace=False))
    query_vectors = np.empty((args.queries, DIM), dtype=np.float32)
    append_s = 0.0
    for start, batch in vector_batches(args, size):
        plain.write(batch.tobytes())
        here = (query_rows >= start) & (query_rows < start + len(batch))
        query_vectors[here] = batch[query_rows[here] - start]
        append_s += timing.seconds(lambda: column.append(batch))
    plain.close()
    emit({"stage": "append", "seconds": append_s, "rows_per_s": size / append_s, "approximate": column.approximate})
    write_s = timing.seconds(lambda: column.write(folder / "column"))
    emit({"stage": "write", "seconds": write_s})
    noise = unit_rows(np.random.default_rng([args.seed, 6]).standard_normal((args.queries, DIM)))
    np.save(folder / "queries.npy", unit_rows(query_vectors + args.query_noise * noise).astype(np.float32))


def vectors_query(args: argparse.Namespace, size: int, folder: Path) -> None:
    from llama_index_ext_recursive.columnar.vectors import VectorColumn

    queries = np.load(folder / "queries.npy", allow_pickle=False)
    opened: list[VectorColumn] = []
    open_s = timing.seconds(lambda: opened.append(VectorColumn.open(folder / "column", name="chunk_vectors")))
    column = opened[0]
    emit({"stage": "open", "seconds": open_s, "approximate": column.approximate})

    # the default path, as an index serves it
    default_nprobe, threshold = column.nprobe, column.approximate_threshold
    calls = timing.latencies_ms(lambda q: column.search(q, K), list(queries), warmup=5)
    emit({"stage": "search", "nprobe": column.probes, **summary_ms(calls)})

    rng = np.random.default_rng([args.seed, 7])
    for wanted in RESTRICTIONS:
        allowed = [document_rows(rng, size, wanted) for _ in range(20)]
        items = [(q, allowed[i % len(allowed)]) for i, q in enumerate(queries)]
        calls = timing.latencies_ms(
            lambda item: column.search(item[0], K, rows=item[1]), items, warmup=2, budget_s=args.restricted_budget_s
        )
        emit({"stage": "restricted", "allowed": int(np.mean([len(a) for a in allowed])), **summary_ms(calls)})

    sweep: dict[int, list[float]] = {}
    found: dict[int, list[np.ndarray]] = {}
    for nprobe in args.nprobes:
        column.nprobe = nprobe
        results: list[np.ndarray] = []
        sweep[nprobe] = timing.latencies_ms(lambda q: column.search(q, K)[0], list(queries), warmup=5, results=results)
        found[nprobe] = results
    column.nprobe = default_nprobe
    emit({"stage": "after_queries"})  # the serving RSS: open + every search above, no full scan yet

    # ground truth: float32 BLAS candidates, rescored by the column's exact path on those rows
    plain = np.load(folder / "plain.npy", mmap_mode="r", allow_pickle=False)
    clock = timing.Stopwatch()
    candidates = blas_candidates(plain, queries, GROUND_TRUTH_CANDIDATES)
    truth = [column.search(q, K, rows=np.sort(candidates[i]))[0] for i, q in enumerate(queries)]
    emit({"stage": "ground_truth", "seconds": clock.seconds()})
    for nprobe, calls in sweep.items():
        recall = float(np.mean([len(np.intersect1d(a, t)) / K for a, t in zip(found[nprobe], truth)]))
        emit({"stage": "recall", "nprobe": nprobe, "recall": recall, **summary_ms(calls)})

    # the exact path against bare numpy on the same matrix, query by query in turn
    column.approximate_threshold = size + 1
    matrix = plain

    def bare_numpy(q: np.ndarray) -> np.ndarray:
        scores = matrix @ q
        top = np.argpartition(-scores, K - 1)[:K]
        return top[np.argsort(-scores[top])]

    exact_ms: list[float] = []
    numpy_ms: list[float] = []
    agree = 0
    spent = 0.0
    for i, q in enumerate(queries):
        numpy_ms.append(timing.seconds(lambda: bare_numpy(q)) * 1e3)
        rows: list[np.ndarray] = []
        exact_ms.append(timing.seconds(lambda: rows.append(column.search(q, K)[0])) * 1e3)
        agree += bool(np.array_equal(rows[0], truth[i]))
        spent += (exact_ms[-1] + numpy_ms[-1]) / 1e3
        if spent > args.exact_budget_s and len(exact_ms) >= 3:
            break
    emit(
        {
            "stage": "exact",
            **summary_ms(exact_ms),
            "numpy_p50_ms": pct(numpy_ms, 50),
            "numpy_p95_ms": pct(numpy_ms, 95),
            "ratio_p50": pct(exact_ms, 50) / pct(numpy_ms, 50),
            "truth_agrees": agree,
        }
    )
    column.approximate_threshold = threshold
    one_document = next(vector_batches(args, CHUNKS_PER_DOC))[1]
    update_s = timing.seconds(lambda: (column.append(one_document), column.write(folder / "column")))
    emit({"stage": "update", "seconds": update_s})


def blas_candidates(matrix: np.ndarray, queries: np.ndarray, keep: int) -> np.ndarray:
    """``[queries, keep]``: each query's ``keep`` best rows of ``matrix`` by float32 BLAS, block by block."""
    best_rows = np.zeros((len(queries), 0), dtype=np.int64)
    best_scores = np.zeros((len(queries), 0), dtype=np.float32)
    for start in range(0, len(matrix), 20_000):
        scores = queries @ np.asarray(matrix[start : start + 20_000]).T
        rows = np.broadcast_to(np.arange(start, start + scores.shape[1]), scores.shape)
        scores, rows = np.hstack([best_scores, scores]), np.hstack([best_rows, rows])
        top = np.argpartition(-scores, min(keep, scores.shape[1]) - 1, axis=1)[:, :keep]
        best_rows, best_scores = np.take_along_axis(rows, top, 1), np.take_along_axis(scores, top, 1)
    return best_rows


def postings_build(args: argparse.Namespace, size: int, folder: Path) -> None:
    from llama_index_ext_recursive.columnar.postings import Postings

    postings = Postings()
    append_s = generate_s = 0.0
    tokens = 0
    clock = timing.Stopwatch()
    for batch in token_batches(args, size):
        generate_s += clock.seconds()
        tokens += sum(map(len, batch))
        append_s += timing.seconds(lambda: postings.append(batch))
        clock.restart()
    emit(
        {
            "stage": "append",
            "seconds": append_s,
            "rows_per_s": size / append_s,
            "tokens": tokens,
            "generate_s": generate_s,
            "vocabulary": postings.vocabulary_size,
            "segments": postings.segment_count,
        }
    )
    emit({"stage": "write", "seconds": timing.seconds(lambda: postings.write(folder / "postings"))})


def postings_query(args: argparse.Namespace, size: int, folder: Path) -> None:
    from llama_index_ext_recursive.columnar.postings import Postings

    opened: list[Postings] = []
    open_s = timing.seconds(lambda: opened.append(Postings.open(folder / "postings")))
    postings = opened[0]
    emit({"stage": "open", "seconds": open_s})
    queries = token_queries(args, args.queries)
    calls = timing.latencies_ms(
        lambda q: postings.search(q, K), queries, warmup=5, budget_s=args.postings_budget_s, min_calls=20
    )
    emit({"stage": "search", **summary_ms(calls)})
    rng = np.random.default_rng([args.seed, 8])
    allowed = [document_rows(rng, size, 2000) for _ in range(20)]
    items = [(q, allowed[i % len(allowed)]) for i, q in enumerate(queries)]
    calls = timing.latencies_ms(
        lambda item: postings.search(item[0], K, rows=item[1]),
        items,
        warmup=5,
        budget_s=args.postings_budget_s,
        min_calls=20,
    )
    emit({"stage": "restricted", "allowed": 2000, **summary_ms(calls)})
    emit({"stage": "after_queries"})
    one_document = next(token_batches(args, CHUNKS_PER_DOC, first=size))
    update_s = timing.seconds(lambda: (postings.append(one_document), postings.write(folder / "postings")))
    emit({"stage": "update", "seconds": update_s})


def metadata_build(args: argparse.Namespace, size: int, folder: Path) -> None:
    from llama_index_ext_recursive.columnar.metadata import MetadataColumns

    columns = MetadataColumns()
    append_s = 0.0
    for batch in metadata_batches(args, size):
        append_s += timing.seconds(lambda: columns.append(batch))
    emit({"stage": "append", "seconds": append_s, "rows_per_s": size / append_s})
    emit({"stage": "write", "seconds": timing.seconds(lambda: columns.write(folder / "metadata"))})


def metadata_query(args: argparse.Namespace, size: int, folder: Path) -> None:
    from llama_index.core.vector_stores.types import FilterCondition, FilterOperator, MetadataFilter, MetadataFilters

    from llama_index_ext_recursive.columnar.metadata import MetadataColumns

    opened: list[MetadataColumns] = []
    open_s = timing.seconds(lambda: opened.append(MetadataColumns.open(folder / "metadata")))
    columns = opened[0]
    emit({"stage": "open", "seconds": open_s})
    rng = np.random.default_rng([args.seed, 9])
    docs = size // CHUNKS_PER_DOC

    def doc(d: int) -> str:
        return f"doc{int(d):06d}"

    def leaf(key: str, value: Any, operator: FilterOperator) -> MetadataFilter:
        return MetadataFilter(key=key, value=value, operator=operator)

    kinds: dict[str, Callable[[], MetadataFilters]] = {
        "doc_id == x (100k values)": lambda: MetadataFilters(
            filters=[leaf("doc_id", doc(rng.integers(docs)), FilterOperator.EQ)]
        ),
        "doc_id in [20 ids]": lambda: MetadataFilters(
            filters=[leaf("doc_id", [doc(d) for d in rng.integers(0, docs, 20)], FilterOperator.IN)]
        ),
        "year > y (25 numbers)": lambda: MetadataFilters(
            filters=[leaf("year", int(rng.integers(2000, 2025)), FilterOperator.GT)]
        ),
        "category == c AND year > y": lambda: MetadataFilters(
            filters=[
                leaf("category", f"cat{int(rng.integers(20)):02d}", FilterOperator.EQ),
                leaf("year", int(rng.integers(2000, 2025)), FilterOperator.GT),
            ],
            condition=FilterCondition.AND,
        ),
    }
    for name, make in kinds.items():
        first_ms = timing.seconds(lambda: columns.mask(make())) * 1e3
        filters = [make() for _ in range(args.mask_calls)]
        calls = timing.latencies_ms(columns.mask, filters)
        matched = int(columns.mask(filters[0]).sum())
        emit({"stage": "mask", "filter": name, "first_ms": first_ms, "matched": matched, **summary_ms(calls)})
    emit({"stage": "after_queries"})


def rows_build(args: argparse.Namespace, size: int, folder: Path) -> None:
    from llama_index_ext_recursive.columnar.rows import RowStore

    store = RowStore(folder / "rows.sqlite3")
    append_s = generate_s = 0.0
    for first in range(0, size, args.row_batch):
        clock = timing.Stopwatch()
        nodes = text_nodes(args, first, min(args.row_batch, size - first))
        generate_s += clock.seconds()
        append_s += timing.seconds(lambda: store.append(nodes))
    store.close()
    megabytes = (folder / "rows.sqlite3").stat().st_size / 2**20
    emit(
        {
            "stage": "append",
            "seconds": append_s,
            "rows_per_s": size / append_s,
            "generate_s": generate_s,
            "mib": megabytes,
        }
    )


def rows_query(args: argparse.Namespace, size: int, folder: Path) -> None:
    from llama_index_ext_recursive.columnar.rows import RowStore

    opened: list[RowStore] = []
    open_s = timing.seconds(lambda: opened.append(RowStore(folder / "rows.sqlite3")) or len(opened[0]))
    store = opened[0]
    emit({"stage": "open", "seconds": open_s})
    rng = np.random.default_rng([args.seed, 10])
    picks = [rng.choice(size, 10, replace=False) for _ in range(args.mask_calls)]
    calls = timing.latencies_ms(store.nodes, picks, warmup=5)
    emit({"stage": "hydrate", **summary_ms(calls)})
    emit({"stage": "after_queries"})
    store.close()


CASES: dict[str, tuple[Callable[[argparse.Namespace, int, Path], None], ...]] = {
    "vectors": (vectors_build, vectors_query),
    "postings": (postings_build, postings_query),
    "metadata": (metadata_build, metadata_query),
    "rows": (rows_build, rows_query),
}


def child(args: argparse.Namespace) -> None:
    build, query = CASES[args.case]
    step = build if args.phase == "build" else query
    try:
        step(args, args.size, Path(args.work))
    except BaseException as exc:  # report where it failed, with the peak so far
        emit({"stage": "failed", "error": f"{type(exc).__name__}: {str(exc)[:300]}"})
        raise


# ------------------------------------------------------------------ parent
SHARED_FLAGS = (
    "seed",
    "batch",
    "queries",
    "themes",
    "doc_noise",
    "chunk_noise",
    "query_noise",
    "vocabulary",
    "restricted_budget_s",
    "exact_budget_s",
    "postings_budget_s",
    "mask_calls",
    "row_batch",
)


def run_case(args: argparse.Namespace, case: str, size: int, work: Path) -> dict[str, Any]:
    """Both phases of one case, each in its own child; events keyed by stage."""
    folder = work / f"{case}-{size}"
    folder.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"case": case, "size": size}
    for phase in ("build", "query"):
        command = [sys.executable, __file__, "child", "--case", case, "--phase", phase, "--size", str(size)]
        command += ["--work", str(folder), "--nprobes", ",".join(map(str, args.nprobes))]
        for flag in SHARED_FLAGS:
            command += [f"--{flag.replace('_', '-')}", str(getattr(args, flag))]
        load_before = load_average()
        done = memory.run_child(command, timeout=args.timeout)
        events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
        failed = [e["error"] for e in events if "error" in e]
        if done.timed_out:
            failed.append(f"timed out after {args.timeout:.0f} s")
        elif done.returncode != 0 and not failed:
            failed.append(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}")
        result[phase] = {
            "events": events,
            "peak_rss_mib": round(done.peak_rss_mib),
            "wall_s": round(done.wall_s, 1),
            "load": [round(load_before, 2), round(load_average(), 2)],
            "error": "; ".join(failed) or None,
        }
        print(json.dumps({"case": case, "size": size, "phase": phase, **result[phase]}), file=sys.stderr, flush=True)
        if failed:
            break
    if not args.keep:
        shutil.rmtree(folder, ignore_errors=True)
    return result


def stage(result: dict[str, Any], phase: str, name: str, **match: Any) -> dict[str, Any]:
    """The first event of ``phase`` named ``name`` whose fields equal ``match`` (empty if none)."""
    for event in result.get(phase, {}).get("events", []):
        if event.get("stage") == name and all(event.get(k) == v for k, v in match.items()):
            return event
    return {}


def figure(event: dict[str, Any], key: str, digits: int = 2) -> str:
    value = event.get(key)
    return fmt(value, digits) if isinstance(value, (int, float)) else "-"


def report(args: argparse.Namespace, results: list[dict[str, Any]], fingerprints: tuple[str, str]) -> str:
    def of(case: str) -> list[dict[str, Any]]:
        return [r for r in results if r["case"] == case]

    errors = [
        f"- {r['case']} {r['size']:,} {phase}: {r[phase]['error']}"
        for r in results
        for phase in ("build", "query")
        if r.get(phase, {}).get("error")
    ]
    loads = [x for r in results for phase in ("build", "query") for x in r.get(phase, {}).get("load", [])]
    lines = [
        f"Command: `{command_line()}`",
        "",
        f"Machine: {machine()}. Package measured: {package_folder()}, fingerprint {fingerprints[0]}"
        + ("" if fingerprints[0] == fingerprints[1] else f" (changed to {fingerprints[1]} during the run)")
        + f". 1-minute load average at the children's starts and ends: {min(loads, default=0):.1f}-"
        f"{max(loads, default=0):.1f} (2 cores, shared with other sessions while this ran).",
        "",
        "RSS figures after a stage: the peak so far (anonymous + file-backed resident now). File-backed "
        "pages are the memory-mapped segments a search touched: page cache the kernel may drop, but "
        "counted in RSS.",
        "",
        "### VectorColumn (384-d, k=10)",
        "",
        Table(
            [
                "rows",
                "append rows/s",
                "write s",
                "build peak RSS MiB",
                "open s",
                "RSS after open MiB",
                "search p50 ms",
                "search p95 ms",
                f"RSS after open + {args.queries} searches MiB",
                "1-doc update s",
            ]
        ).render(
            (
                f"{r['size']:,}",
                figure(stage(r, "build", "append"), "rows_per_s", 0),
                figure(stage(r, "build", "write"), "seconds"),
                r.get("build", {}).get("peak_rss_mib", "-"),
                figure(stage(r, "query", "open"), "seconds"),
                rss(stage(r, "query", "open")),
                figure(stage(r, "query", "search"), "p50_ms"),
                figure(stage(r, "query", "search"), "p95_ms"),
                rss(stage(r, "query", "search")),
                figure(stage(r, "query", "update"), "seconds"),
            )
            for r in of("vectors")
        ),
        "",
        "Recall@10 of the approximate path against the exact answer, and its latency, by nprobe "
        f"({args.queries} queries; the default nprobe: "
        + ", ".join(f"{stage(r, 'query', 'search').get('nprobe')} at {r['size']:,} rows" for r in of("vectors"))
        + "):",
        "",
        Table(["rows", "nprobe", "recall@10", "p50 ms", "p95 ms", ">= 0.99"]).render(
            (
                f"{r['size']:,}",
                e["nprobe"],
                f"{e['recall']:.4f}",
                fmt(e["p50_ms"]),
                fmt(e["p95_ms"]),
                "yes" if e["recall"] >= 0.99 else "no",
            )
            for r in of("vectors")
            for e in r.get("query", {}).get("events", [])
            if e.get("stage") == "recall"
        ),
        "",
        "Restricted searches (`rows=`: all chunks of random documents; always exact) and the exact full "
        "scan against bare NumPy (`matrix @ q` + `argpartition`, float32, the same vectors memory-mapped), "
        "query by query in turn:",
        "",
        Table(["rows", "search", "queries", "p50 ms", "p95 ms", "NumPy p50 ms", "exact / NumPy (p50)"]).render(
            [
                (f"{r['size']:,}", f"rows= {e['allowed']:,} rows", e["n"], fmt(e["p50_ms"]), fmt(e["p95_ms"]), "", "")
                for r in of("vectors")
                for e in r.get("query", {}).get("events", [])
                if e.get("stage") == "restricted"
            ]
            + [
                (
                    f"{r['size']:,}",
                    "exact, all rows",
                    e["n"],
                    fmt(e["p50_ms"]),
                    fmt(e["p95_ms"]),
                    fmt(e["numpy_p50_ms"]),
                    fmt(e["ratio_p50"], 1),
                )
                for r in of("vectors")
                if (e := stage(r, "query", "exact"))
            ]
        ),
        "",
        "Ground truth (50 float32 BLAS candidates per query rescored by the exact path) equalled the exact "
        "full scan on "
        + ", ".join(
            f"{e['truth_agrees']}/{e['n']} queries at {r['size']:,} rows"
            for r in of("vectors")
            if (e := stage(r, "query", "exact"))
        )
        + ".",
        "",
        "### Postings (BM25; ~150 Zipf tokens per row, 3-6-token queries)",
        "",
        Table(
            [
                "rows",
                "tokens",
                "terms",
                "append rows/s",
                "write s",
                "build peak RSS MiB",
                "open s",
                "search p50 / p95 ms (n)",
                "rows=2000 p50 / p95 ms (n)",
                "RSS after open + queries MiB",
                "1-doc update s",
            ]
        ).render(
            (
                f"{r['size']:,}",
                f"{stage(r, 'build', 'append').get('tokens', 0):,}",
                f"{stage(r, 'build', 'append').get('vocabulary', 0):,}",
                figure(stage(r, "build", "append"), "rows_per_s", 0),
                figure(stage(r, "build", "write"), "seconds"),
                r.get("build", {}).get("peak_rss_mib", "-"),
                figure(stage(r, "query", "open"), "seconds"),
                latency(stage(r, "query", "search")),
                latency(stage(r, "query", "restricted")),
                rss(stage(r, "query", "after_queries")),
                figure(stage(r, "query", "update"), "seconds"),
            )
            for r in of("postings")
        ),
        "",
        "### MetadataColumns (doc_id: 1 value per 20 rows; category: 20 values; year: 25 numbers)",
        "",
    ]
    for r in of("metadata"):
        lines += [
            f"{r['size']:,} rows: append {figure(stage(r, 'build', 'append'), 'rows_per_s', 0)} rows/s, "
            f"write {figure(stage(r, 'build', 'write'), 'seconds')} s, build peak RSS "
            f"{r.get('build', {}).get('peak_rss_mib', '-')} MiB; open {figure(stage(r, 'query', 'open'), 'seconds', 3)} s, "
            f"RSS after open + masks {rss(stage(r, 'query', 'after_queries'))} MiB.",
            "",
            Table(["filter", "rows matched (first)", "first call ms", "p50 ms", "p95 ms", "calls"]).render(
                (e["filter"], f"{e['matched']:,}", fmt(e["first_ms"]), fmt(e["p50_ms"]), fmt(e["p95_ms"]), e["n"])
                for e in r.get("query", {}).get("events", [])
                if e.get("stage") == "mask"
            ),
            "",
        ]
    lines += [
        "### RowStore (SQLite; TextNodes of ~1 KB text)",
        "",
        Table(
            ["nodes", "append rows/s", "database MiB", "build peak RSS MiB", "open s", "hydrate 10 rows p50 / p95 ms"]
        ).render(
            (
                f"{r['size']:,}",
                figure(stage(r, "build", "append"), "rows_per_s", 0),
                figure(stage(r, "build", "append"), "mib", 0),
                r.get("build", {}).get("peak_rss_mib", "-"),
                figure(stage(r, "query", "open"), "seconds", 3),
                latency(stage(r, "query", "hydrate")),
            )
            for r in of("rows")
        ),
    ]
    if errors:
        lines += ["", "Failures:", "", *errors]
    return "\n".join(lines)


def command_line() -> str:
    """The command as typed, with the ``PYTHONPATH`` that chose the package measured."""
    path = os.environ.get("PYTHONPATH")
    return (f"PYTHONPATH={path} " if path else "") + cli.command()


def package_folder() -> str:
    """Where ``llama_index_ext_recursive`` was imported from (``PYTHONPATH=.`` picks this checkout)."""
    import llama_index_ext_recursive as package

    return str(Path(package.__file__).parent)


def rss(event: dict[str, Any]) -> str:
    if not event:
        return "-"
    return f"{event['peak_rss_mib']} ({event.get('anon_mib', '?')} + {event.get('file_mib', '?')})"


def latency(event: dict[str, Any]) -> str:
    if not event:
        return "-"
    return f"{fmt(event['p50_ms'])} / {fmt(event['p95_ms'])} ({event['n']})"


def main() -> None:
    p = cli.parser(__doc__)
    p.add_argument("mode", nargs="?", choices=("run", "child"), default="run", help=argparse.SUPPRESS)
    p.add_argument("--sizes", type=cli.csv(int), default=[200_000, 2_000_000], help="rows of vectors and postings")
    p.add_argument("--metadata-rows", type=int, default=2_000_000)
    p.add_argument("--row-nodes", type=int, default=200_000)
    p.add_argument("--cases", type=cli.csv(), default=list(CASES), help="any of vectors,postings,metadata,rows")
    p.add_argument("--quick", action="store_true", help="small sizes and budgets (< 1 minute), for a smoke run")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch", type=int, default=50_000, help="rows per append")
    p.add_argument("--queries", type=int, default=1000)
    p.add_argument("--nprobes", type=cli.csv(int), default=[8, 16, 32, 48, 64, 128, 256])
    p.add_argument("--themes", type=int, default=1000)
    p.add_argument("--doc-noise", type=float, default=1.0)
    p.add_argument("--chunk-noise", type=float, default=1.0)
    p.add_argument("--query-noise", type=float, default=0.5)
    p.add_argument("--vocabulary", type=int, default=200_000)
    p.add_argument("--restricted-budget-s", type=float, default=10.0, help="seconds per rows= size")
    p.add_argument("--exact-budget-s", type=float, default=40.0, help="seconds for exact + NumPy full scans")
    p.add_argument("--postings-budget-s", type=float, default=30.0, help="seconds per postings query kind")
    p.add_argument("--mask-calls", type=int, default=200)
    p.add_argument("--row-batch", type=int, default=2000, help="nodes per RowStore transaction")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per child")
    p.add_argument("--work", default=None, help="folder for the indexes (default: a temporary one, removed)")
    p.add_argument("--keep", action="store_true", help="keep the written indexes")
    p.add_argument("--case", choices=list(CASES), help=argparse.SUPPRESS)
    p.add_argument("--phase", choices=("build", "query"), help=argparse.SUPPRESS)
    p.add_argument("--size", type=int, help=argparse.SUPPRESS)
    cli.add_out(p, RESULTS / "columnar_components.md")
    args = p.parse_args()
    if args.mode == "child":
        child(args)
        return
    if args.quick:
        args.sizes, args.metadata_rows, args.row_nodes = [60_000], 100_000, 5_000
        args.batch, args.queries, args.mask_calls = 20_000, 100, 50
        args.restricted_budget_s = args.exact_budget_s = args.postings_budget_s = 2.0
        if args.out == RESULTS / "columnar_components.md":
            args.out = Path(tempfile.gettempdir()) / "columnar_components_quick.md"
    sizes = {"vectors": args.sizes, "postings": args.sizes, "metadata": [args.metadata_rows], "rows": [args.row_nodes]}
    work = Path(args.work or tempfile.mkdtemp(prefix="columnar-bench-"))
    before = library_fingerprint()
    results = [run_case(args, case, size, work) for case in args.cases for size in sizes[case]]
    text = report(args, results, (before, library_fingerprint()))
    if args.work is None and not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    write(
        args.out,
        "# Columnar components at scale (issue 25)\n\n" + text,
        {"args": {k: v if not isinstance(v, Path) else str(v) for k, v in vars(args).items()}, "results": results},
    )
    print(text)


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
