"""Approximate vector search structures for issue 25, side by side: recall@10, latency, build, RSS.

Issue 25 needs recall@10 >= 0.99 against an exact scan for the chunk level at
2M rows, within a recursive query's p95 of 50 ms in all; ``VectorColumn``'s
IVF-SQ8 over k-means lists reaches 0.96 at 2M with its default probes and 0.99
only past 1024 probes (benchmarks/results/vector_recall.md), and its k-means
dominates the build's time and peak memory. This script measures candidate
structures on the same vectors (:class:`harness.corpus.TopicCorpus`: documents
of 20 chunks ``unit(topic + 0.5 u)``, queries ``unit(chunk + 1.0 u)``),
vectors only, the corpus streamed in batches of whole documents, each variant
in its own child process (its peak RSS from the kernel):

* ``kmeans``: the column's structure (IVF-SQ8, ``_nlist`` lists trained on
  ``_TRAIN_ROWS_PER_LIST`` rows per list, spherical k-means, codes without
  residual), trained once on every row at the end of the stream, as the
  build's final ``retrain()`` does;
* ``docivf``: one inverted list per document, its centroid the unit mean of
  the document's chunk vectors, no k-means: each document's centroid is added
  to the coarse quantizer and its rows' SQ8 codes to its list as it streams
  (``IndexIVF.add_core`` with the list numbers given); the coarse step is a flat
  scan of the centroids, then an HNSW graph over them (``IndexHNSWFlat``);
* ``hnsw:M:efC``: ``IndexHNSWSQ`` (SQ8 codes in an HNSW graph of ``M``
  neighbours built with ``efConstruction``), plus its file size and whether
  ``read_index(..., IO_FLAG_MMAP)`` opens it (open time and RSS after, in a
  fresh process).

Every variant proposes ``max(100, 10 k)`` candidates and rescores them exactly
on the float32 rows, as ``VectorColumn`` does, so recall counts only what the
approximate step misses. The truth is a float32 scan of every row.

``real`` mode answers how document lists behave on real embeddings: a real
dataset's chunks and queries through the shared embedding cache (queries not
cached are skipped and counted), document lists against k-means lists at the
same share of rows scanned.

Times are wall clock on 2 cores shared with other sessions: compare rows of
one run, and read the load average recorded. Children run under ``nice``.

Usage (repository root)::

    PYTHONPATH=. .venv/bin/python benchmarks/ann_variants.py --sizes 500000
    PYTHONPATH=. .venv/bin/python benchmarks/ann_variants.py --sizes 60000 --queries 100   # quick
    PYTHONPATH=. .venv/bin/python benchmarks/ann_variants.py real --data legalbench_contractnli
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from harness import RESULTS, cli, memory, timing
from harness.corpus import TopicCorpus
from harness.report import Table, fmt, load_average, machine, write

DIM = 384
CHUNKS = 20
K = 10
CANDIDATES = max(100, 10 * K)
SQ_TRAIN_ROWS = 65_536
pct = timing.percentile


def emit(event: dict[str, Any]) -> None:
    """One JSON line to the parent, with this process's peak RSS so far and the load average."""
    event["peak_rss_mib"] = round(memory.peak_rss_mib())
    event["load"] = round(load_average(), 2)
    print(json.dumps(event), flush=True)


def current_rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


# ------------------------------------------------------------------ structures
def doc_batches(corpus: TopicCorpus, batch_rows: int) -> Any:
    """(first document, rows of its batch) for batches of whole documents, drawn as they come."""
    per = max(1, batch_rows // CHUNKS)
    for first in range(0, corpus.docs, per):
        stop = min(first + per, corpus.docs)
        yield first, np.concatenate([corpus.chunk_vectors(d) for d in range(first, stop)]).astype(np.float32)


def sq_index(faiss: Any, nlist: int) -> Any:
    quantizer = faiss.IndexFlatIP(DIM)
    index = faiss.IndexIVFScalarQuantizer(
        quantizer, DIM, nlist, faiss.ScalarQuantizer.QT_8bit, faiss.METRIC_INNER_PRODUCT, False
    )
    return index


def build_kmeans(faiss: Any, vectors: np.ndarray) -> tuple[Any, dict[str, float]]:
    """The column's own training rule (module constants), on every row, then every row added."""
    from llama_index_ext_recursive.columnar import vectors as column

    rows = len(vectors)
    nlist = column._nlist(rows)
    index = sq_index(faiss, nlist)
    index.cp.spherical = True
    sample = np.sort(
        np.random.default_rng(rows).choice(rows, size=min(rows, nlist * column._TRAIN_ROWS_PER_LIST), replace=False)
    )
    train_s = timing.seconds(lambda: index.train(vectors[sample]))
    add_s = timing.seconds(lambda: [index.add(vectors[s : s + 262_144]) for s in range(0, rows, 262_144)])
    return index, {"train_s": train_s, "add_s": add_s, "nlist": nlist, "default_nprobe": column._nprobe(nlist)}


class DocIVF:
    """One list per document, filled as documents stream (centroid first, then the rows' codes)."""

    def __init__(self, faiss: Any, docs: int) -> None:
        self.faiss = faiss
        self.index = sq_index(faiss, docs)
        self.index.quantizer.is_trained = True
        self.added = 0

    def train_sq(self, sample: np.ndarray) -> None:
        """The SQ8 ranges from the first rows (no coarse training: the quantizer is the documents)."""
        self.index.sq.train(np.ascontiguousarray(sample))
        self.index.is_trained = True

    def add(self, first_doc: int, rows: np.ndarray) -> None:
        docs = len(rows) // CHUNKS
        means = rows.reshape(docs, CHUNKS, DIM).mean(axis=1)
        self.index.quantizer.add(means / np.linalg.norm(means, axis=1, keepdims=True))
        lists = np.repeat(np.arange(first_doc, first_doc + docs, dtype=np.int64), CHUNKS)
        ids = np.arange(self.added, self.added + len(rows), dtype=np.int64)
        swig = self.faiss.swig_ptr
        self.index.add_core(len(rows), swig(np.ascontiguousarray(rows)), swig(ids), swig(lists))
        self.added += len(rows)


def stream_build(args: argparse.Namespace, corpus: TopicCorpus, variant: str) -> tuple[Any, np.ndarray, dict[str, Any]]:
    """The float32 rows (for the exact rescoring and the truth) and the variant's index, streamed."""
    import faiss

    faiss.omp_set_num_threads(2)
    rows = corpus.docs * CHUNKS
    vectors = np.empty((rows, DIM), dtype=np.float32)
    info: dict[str, Any] = {}
    build_s = 0.0
    docivf = DocIVF(faiss, corpus.docs) if variant == "docivf" else None
    hnsw = None
    if variant.startswith("hnsw"):
        _, m, ef = variant.split(":")
        hnsw = faiss.IndexHNSWSQ(DIM, faiss.ScalarQuantizer.QT_8bit, int(m), faiss.METRIC_INNER_PRODUCT)
        hnsw.hnsw.efConstruction = int(ef)
    for first, batch in doc_batches(corpus, args.batch):
        start = first * CHUNKS
        vectors[start : start + len(batch)] = batch
        stop = start + len(batch)
        if docivf is None and hnsw is None:
            continue
        first_rows = min(rows, SQ_TRAIN_ROWS)
        if start < first_rows <= stop:  # the SQ8 ranges from the first rows, then what came so far
            train = vectors[:first_rows]
            build_s += timing.seconds(lambda: docivf.train_sq(train) if docivf else hnsw.train(train))
            build_s += timing.seconds(lambda: docivf.add(0, vectors[:stop]) if docivf else hnsw.add(vectors[:stop]))
        elif stop > first_rows:
            build_s += timing.seconds(lambda: docivf.add(first, batch) if docivf else hnsw.add(batch))
    if variant == "kmeans":
        index, info = build_kmeans(faiss, vectors)
        build_s = info["train_s"] + info["add_s"]
    elif docivf is not None:
        index = docivf.index
        info = {"nlist": corpus.docs}
    else:
        index = hnsw
    info["build_s"] = build_s
    return index, vectors, info


# ------------------------------------------------------------------ search
def rescored(vectors: np.ndarray, query: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """The k best candidates by their exact scores (as ``VectorColumn`` rescores)."""
    candidates = np.unique(ids[ids >= 0])
    scores = vectors[candidates] @ query
    return candidates[np.argsort(-scores, kind="stable")[:K]]


def sweep(
    variant: str, setting: str, value: int, search: Any, vectors: np.ndarray, queries: np.ndarray, truth: np.ndarray
) -> None:
    found: list[np.ndarray] = []
    calls = timing.latencies_ms(
        lambda q: rescored(vectors, q, search(q[None, :])[0]), list(queries), warmup=5, results=found
    )
    recall = float(np.mean([len(np.intersect1d(a, t)) / K for a, t in zip(found, truth, strict=True)]))
    emit(
        {
            "stage": "recall",
            "variant": variant,
            "setting": setting,
            "value": value,
            "recall": recall,
            "p50_ms": pct(calls, 50),
            "p95_ms": pct(calls, 95),
        }
    )


def exact_truth(vectors: np.ndarray, queries: np.ndarray) -> np.ndarray:
    scores = np.empty((len(queries), 0), dtype=np.float32)
    best = np.empty((len(queries), 0), dtype=np.int64)
    for start in range(0, len(vectors), 262_144):
        block = vectors[start : start + 262_144] @ queries.T  # rows x queries
        top = np.argpartition(-block, K, axis=0)[:K].T + start
        scores = np.concatenate([scores, np.take_along_axis(block.T, top - start, axis=1)], axis=1)
        best = np.concatenate([best, top], axis=1)
        keep = np.argsort(-scores, axis=1, kind="stable")[:, :K]
        scores, best = np.take_along_axis(scores, keep, axis=1), np.take_along_axis(best, keep, axis=1)
    return best


def mmap_probe(path: str) -> dict[str, Any]:
    """Open ``path`` with IO_FLAG_MMAP in a fresh process: seconds, RSS after, or the error."""
    code = (
        "import faiss,time,json\n"
        "r0=[int(l.split()[1])/1024 for l in open('/proc/self/status') if l.startswith('VmRSS')][0]\n"
        "t=time.perf_counter()\n"
        "try:\n"
        f"  i=faiss.read_index({path!r}, faiss.IO_FLAG_MMAP); err=None\n"
        "except Exception as e:\n"
        "  err=str(e).splitlines()[0][:200]\n"
        "s=time.perf_counter()-t\n"
        "rss=[int(l.split()[1])/1024 for l in open('/proc/self/status') if l.startswith('VmRSS')][0]\n"
        "anon=[int(l.split()[1])/1024 for l in open('/proc/self/status') if l.startswith('RssAnon')][0]\n"
        "print(json.dumps({'mmap_open_s':s,'mmap_rss_mib':rss,'mmap_anon_mib':anon,'rss_before_open_mib':r0,"
        "'mmap_error':err}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    try:
        return json.loads(out.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        return {"mmap_error": out.stderr[-300:]}


def docivf_sweeps(
    args: argparse.Namespace, faiss: Any, index: Any, vectors: np.ndarray, queries: np.ndarray, truth: np.ndarray
) -> None:
    """Document lists probed through each coarse step of ``--quantizers``: a flat scan of the
    centroids, a flat scan of their SQ8 codes, an HNSW graph over them (efSearch ``--quantizer-ef``,
    0 meaning twice nprobe)."""
    centroids = index.quantizer.reconstruct_n(0, index.nlist)
    flat = index.quantizer
    for kind in args.quantizers:
        efs = [0]
        if kind == "sq8":
            coarse = faiss.IndexScalarQuantizer(DIM, faiss.ScalarQuantizer.QT_8bit, faiss.METRIC_INNER_PRODUCT)
            coarse.train(centroids)
        elif kind == "hnsw":
            coarse = faiss.IndexHNSWFlat(DIM, 32, faiss.METRIC_INNER_PRODUCT)
            coarse.hnsw.efConstruction = 40
            efs = args.quantizer_ef
        else:
            coarse = flat
        if coarse is not flat:
            faiss.omp_set_num_threads(2)
            seconds = timing.seconds(lambda c=coarse: c.add(centroids))
            faiss.omp_set_num_threads(1)
            emit(
                {
                    "stage": "quantizer",
                    "variant": "docivf",
                    "kind": kind,
                    "build_s": seconds,
                    "centroids": len(centroids),
                }
            )
        index.quantizer = coarse
        for n in args.nprobes:
            for ef in efs:
                if kind == "hnsw":
                    params = faiss.SearchParametersIVF(
                        nprobe=n, quantizer_params=faiss.SearchParametersHNSW(efSearch=ef or max(2 * n, 64))
                    )
                    setting = f"nprobe (HNSW quantizer, efSearch {ef or 'max(2 nprobe, 64)'})"
                else:
                    params = faiss.SearchParametersIVF(nprobe=n)
                    setting = f"nprobe ({kind} quantizer)"
                sweep(
                    "docivf",
                    setting,
                    n,
                    lambda q, p=params: index.search(q, CANDIDATES, params=p)[1],
                    vectors,
                    queries,
                    truth,
                )
    index.quantizer = flat


def child(args: argparse.Namespace) -> None:
    import faiss

    variant = args.variant
    corpus = TopicCorpus(args.size // CHUNKS, CHUNKS, dim=DIM, seed=args.seed)
    index, vectors, info = stream_build(args, corpus, variant)
    with tempfile.TemporaryDirectory(dir=args.scratch) as scratch:
        path = os.path.join(scratch, "index.faiss")
        faiss.write_index(index, path)
        info["file_mib"] = os.path.getsize(path) / 2**20
        if variant.startswith("hnsw"):
            info.update(mmap_probe(path))
    emit(
        {
            "stage": "build",
            "variant": variant,
            "rss_mib": current_rss_mib(),
            "vectors_mib": vectors.nbytes / 2**20,
            **info,
        }
    )
    queries = np.asarray(
        [v for _, v, _, _ in corpus.sampled_chunk_queries(args.queries, noise=args.query_noise)], dtype=np.float32
    )
    truth = exact_truth(vectors, queries)
    faiss.omp_set_num_threads(1)  # one query at a time, as a server thread answers it
    if variant == "kmeans":
        nprobes = sorted({info["default_nprobe"], *args.nprobes_kmeans})
        for n in nprobes:
            params = faiss.SearchParametersIVF(nprobe=n)
            sweep(
                variant,
                "nprobe",
                n,
                lambda q, p=params: index.search(q, CANDIDATES, params=p)[1],
                vectors,
                queries,
                truth,
            )
    elif variant == "docivf":
        docivf_sweeps(args, faiss, index, vectors, queries, truth)
    else:
        for ef in args.ef_search:
            params = faiss.SearchParametersHNSW(efSearch=ef)
            sweep(
                variant,
                "efSearch",
                ef,
                lambda q, p=params: index.search(q, CANDIDATES, params=p)[1],
                vectors,
                queries,
                truth,
            )


# ------------------------------------------------------------------ real embeddings
def real(args: argparse.Namespace) -> str:
    """Document lists against k-means lists on a real dataset's cached embeddings.

    The vectors are read here (the cache needs the model's identity, so torch is
    loaded) and searched in a child process: FAISS's OpenMP and torch's crash
    together in ``add_core``.
    """
    from harness import data
    from harness.models import real_model
    from llama_index.core.schema import MetadataMode

    dataset = data.load(args.data)
    model = real_model(args.embed_model, args.cache)
    nodes = dataset.nodes(title_in_text=not dataset.hierarchical, embed_title=True)
    keys = [model._key("text", n.get_content(metadata_mode=MetadataMode.EMBED)) for n in nodes]
    found = model._lookup(keys)  # the cache only: nothing is embedded here
    kept = [(n, found[k]) for n, k in zip(nodes, keys, strict=True) if k in found]
    qids = list(dataset.queries)
    qkeys = [model._key("query", dataset.queries[q]) for q in qids]
    qfound = model._lookup(qkeys)
    queries = np.asarray([qfound[k] for k in qkeys if k in qfound], dtype=np.float32)
    vectors = np.asarray([v for _, v in kept], dtype=np.float32)
    docs = [dataset.doc_of.get(n.node_id, n.node_id) for n, _ in kept]
    number = {d: i for i, d in enumerate(sorted(set(docs)))}
    lists = np.asarray([number[d] for d in docs], dtype=np.int64)
    with tempfile.TemporaryDirectory(dir=args.scratch) as scratch:
        arrays = os.path.join(scratch, "real.npz")
        np.savez(arrays, vectors=vectors, queries=queries, lists=lists)
        command = [
            sys.executable,
            __file__,
            "real-child",
            "--arrays",
            arrays,
            "--real-candidates",
            str(args.real_candidates),
        ]
        for flag in ("real_nprobes", "real_kmeans_lists", "real_shares"):
            command += [f"--{flag.replace('_', '-')}", ",".join(map(str, getattr(args, flag)))]
        out = subprocess.run(command, capture_output=True, text=True, check=True)
    rows_out = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("[")]
    sizes = np.bincount(lists)
    lines = [
        f"Command: `{command_line()}`",
        "",
        f"Dataset {args.data}: {len(nodes)} chunks, {len(kept)} with a cached vector ({len(nodes) - len(kept)} "
        f"not cached, left out); {len(number)} documents (chunks per document: median {int(np.median(sizes))}, "
        f"max {sizes.max()}); {len(qids)} queries, {len(queries)} in the cache ({len(qids) - len(queries)} "
        f"skipped); model {args.embed_model}.",
        "",
        f"Recall@10 of the approximate step ({args.real_candidates} candidates rescored exactly) against the exact "
        "scan; `rows scanned` is the mean share of the rows in the probed lists:",
        "",
        Table(["lists", "count", "nprobe", "rows scanned", "recall@10"]).render(rows_out),
    ]
    return "\n".join(lines)


def real_child(args: argparse.Namespace) -> None:
    """The searches of :func:`real`, one JSON row per setting."""
    import faiss

    with np.load(args.arrays, allow_pickle=False) as arrays:
        vectors, queries, lists = arrays["vectors"], arrays["queries"], arrays["lists"]
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    truth = exact_truth(vectors, queries)
    docs = int(lists.max()) + 1

    def recall_of(index: Any, nprobe: int) -> tuple[float, float]:
        _, ids = index.search(queries, args.real_candidates, params=faiss.SearchParametersIVF(nprobe=nprobe))
        got = [rescored(vectors, q, i) for q, i in zip(queries, ids, strict=True)]
        assigned = index.quantizer.search(queries, nprobe)[1]
        sizes = np.asarray([index.invlists.list_size(j) for j in range(index.nlist)])
        scanned = float(np.mean([sizes[a[a >= 0]].sum() for a in assigned])) / len(vectors)
        return float(np.mean([len(np.intersect1d(a, t)) / K for a, t in zip(got, truth, strict=True)])), scanned

    doc_index = DocIVF(faiss, docs)
    doc_index.train_sq(vectors)
    order = np.argsort(lists, kind="stable")
    means = np.stack([vectors[lists == i].mean(axis=0) for i in range(docs)])
    doc_index.index.quantizer.add(means / np.linalg.norm(means, axis=1, keepdims=True))
    ordered, ids, assigned = (np.ascontiguousarray(a) for a in (vectors[order], order.astype(np.int64), lists[order]))
    swig = faiss.swig_ptr
    doc_index.index.add_core(len(order), swig(ordered), swig(ids), swig(assigned))
    for n in args.real_nprobes:
        r, share = recall_of(doc_index.index, n)
        print(json.dumps(["document lists (unit mean)", docs, n, fmt(share, 3), fmt(r, 4)]))
    for nlist in args.real_kmeans_lists:
        km = sq_index(faiss, nlist)
        km.cp.spherical = True
        km.train(vectors)
        km.add(vectors)
        for n in sorted({max(1, round(nlist * s)) for s in args.real_shares}):
            r, share = recall_of(km, n)
            print(json.dumps(["k-means lists (spherical)", nlist, n, fmt(share, 3), fmt(r, 4)]))


# ------------------------------------------------------------------ parent
def command_line() -> str:
    path = os.environ.get("PYTHONPATH")
    return (f"PYTHONPATH={path} " if path else "") + cli.command()


def run_variant(args: argparse.Namespace, size: int, variant: str) -> dict[str, Any]:
    command = ["nice", "-n", "10", sys.executable, __file__, "child", "--size", str(size), "--variant", variant]
    for flag in ("batch", "queries", "seed", "query_noise", "scratch"):
        command += [f"--{flag.replace('_', '-')}", str(getattr(args, flag))]
    for flag in ("nprobes", "nprobes_kmeans", "ef_search", "quantizers", "quantizer_ef"):
        command += [f"--{flag.replace('_', '-')}", ",".join(map(str, getattr(args, flag)))]
    print(f"[{size:,} {variant}] started {time.strftime('%H:%M:%S')}", file=sys.stderr, flush=True)
    progress = args.out.with_name(f"{args.out.stem}_{size}_{variant.replace(':', '-')}.log")
    progress.parent.mkdir(parents=True, exist_ok=True)
    run = memory.run_child(command, env=dict(os.environ), timeout=args.timeout, stdout=progress)
    events = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    out: dict[str, Any] = {"size": size, "variant": variant, "events": events, **run.usage()}
    if run.returncode != 0:
        out["error"] = f"exit {run.returncode}: {run.stderr[-2000:]}"
    print(f"[{size:,} {variant}] done {time.strftime('%H:%M:%S')} {out.get('error', '')}", file=sys.stderr, flush=True)
    return out


def report(results: list[dict[str, Any]]) -> str:
    def stage(r: dict[str, Any], name: str) -> dict[str, Any]:
        return next((e for e in r["events"] if e.get("stage") == name), {})

    lines = [
        f"Command: `{command_line()}`",
        "",
        f"Machine: {machine()}",
        "",
        "Build (seconds without drawing the corpus; 2 FAISS threads), the index file, the child's RSS after the "
        "build, its peak until then and over its whole life (the last adds the exact truth's scratch; all include "
        "the float32 rows kept for rescoring, `vectors MiB`, which a served column maps from disk instead):",
        "",
        Table(
            [
                "rows",
                "variant",
                "lists",
                "build s",
                "of it k-means s",
                "index file MiB",
                "vectors MiB",
                "RSS after build MiB",
                "peak RSS to end of build MiB",
                "child peak RSS MiB",
                "mmap open",
                "load",
            ]
        ).render(
            (
                f"{r['size']:,}",
                r["variant"],
                stage(r, "build").get("nlist", "-"),
                fmt(stage(r, "build").get("build_s"), 1),
                fmt(stage(r, "build").get("train_s"), 1),
                fmt(stage(r, "build").get("file_mib"), 0),
                fmt(stage(r, "build").get("vectors_mib"), 0),
                fmt(stage(r, "build").get("rss_mib"), 0),
                stage(r, "build").get("peak_rss_mib", "-"),
                round(r["max_rss_kb"] / 1024),
                mmap_cell(stage(r, "build")),
                stage(r, "build").get("load", "-"),
            )
            for r in results
        ),
        "",
        f"Recall@10 against the exact scan, {CANDIDATES} candidates rescored exactly; milliseconds per query "
        "(one at a time, one FAISS thread, rescoring included):",
        "",
        Table(["rows", "variant", "setting", "value", "recall@10", "p50 ms", "p95 ms", "load"]).render(
            (
                f"{r['size']:,}",
                r["variant"],
                e["setting"],
                e["value"],
                fmt(e["recall"], 4),
                fmt(e["p50_ms"]),
                fmt(e["p95_ms"]),
                e["load"],
            )
            for r in results
            for e in r["events"]
            if e.get("stage") == "recall"
        ),
    ]
    quantizers = [(r["size"], e) for r in results for e in r["events"] if e.get("stage") == "quantizer"]
    lines += [
        f"\nCoarse step {e.get('kind', 'hnsw')} (HNSW: M 32, efConstruction 40) over {e['centroids']:,} "
        f"centroids at {size:,} rows: built in {fmt(e.get('build_s', e.get('hnsw_quantizer_build_s')), 1)} s"
        for size, e in quantizers
    ]
    errors = [f"- {r['size']:,} {r['variant']}: {r['error']}" for r in results if "error" in r]
    if errors:
        lines += ["", "Failures:", "", *errors]
    return "\n".join(lines)


def mmap_cell(build: dict[str, Any]) -> str:
    if "mmap_error" not in build:
        return "-"
    if build["mmap_error"]:
        return f"fails: {build['mmap_error']}"
    return (
        f"{fmt(build['mmap_open_s'], 2)} s, RSS {fmt(build['rss_before_open_mib'], 0)} -> "
        f"{fmt(build['mmap_rss_mib'], 0)} MiB (anonymous {fmt(build.get('mmap_anon_mib'), 0)})"
    )


def main() -> None:
    p = cli.parser(__doc__)
    p.add_argument(
        "mode", nargs="?", choices=("run", "child", "real", "real-child"), default="run", help=argparse.SUPPRESS
    )
    p.add_argument("--sizes", type=cli.csv(int), default=[500_000])
    p.add_argument("--variants", type=cli.csv(str), default=["docivf", "hnsw:16:40", "hnsw:32:80", "kmeans"])
    p.add_argument("--size", type=int, help=argparse.SUPPRESS)
    p.add_argument("--variant", help=argparse.SUPPRESS)
    p.add_argument("--batch", type=int, default=5000, help="rows per streamed batch")
    p.add_argument("--queries", type=int, default=500)
    p.add_argument("--query-noise", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--nprobes", type=cli.csv(int), default=[8, 16, 32, 64, 128, 256], help="document lists probed")
    p.add_argument("--quantizers", type=cli.csv(str), default=["flat", "sq8", "hnsw"], help="docivf coarse steps")
    p.add_argument("--quantizer-ef", type=cli.csv(int), default=[0], help="HNSW quantizer efSearch (0: 2 nprobe)")
    p.add_argument("--nprobes-kmeans", type=cli.csv(int), default=[128, 256, 512])
    p.add_argument("--ef-search", type=cli.csv(int), default=[100, 128, 192, 256, 384])
    p.add_argument("--scratch", default=tempfile.gettempdir(), help="where an index file is written and removed")
    p.add_argument("--timeout", type=float, default=5400.0, help="seconds per child")
    cli.add_data(p, required=False, default="legalbench_contractnli")
    cli.add_cache(p)
    cli.add_embed_model(p)
    p.add_argument("--arrays", help=argparse.SUPPRESS)
    p.add_argument(
        "--real-candidates", type=int, default=20, help="candidates rescored on the real set (of ~2000 rows)"
    )
    p.add_argument("--real-nprobes", type=cli.csv(int), default=[1, 2, 3, 5, 8, 12, 16])
    p.add_argument("--real-kmeans-lists", type=cli.csv(int), default=[95, 188])
    p.add_argument("--real-shares", type=cli.csv(float), default=[0.02, 0.05, 0.1, 0.15, 0.2])
    cli.add_out(p, RESULTS / "ann_variants_run.md")
    args = p.parse_args()
    if args.mode == "child":
        child(args)
        return
    if args.mode == "real-child":
        real_child(args)
        return
    if args.mode == "real":
        text = real(args)
        write(
            args.out,
            "# Document lists on real embeddings (issue 25)\n\n" + text,
            {"args": {k: str(v) for k, v in vars(args).items()}},
        )
        print(text)
        return
    results = [run_variant(args, size, v) for size in args.sizes for v in args.variants]
    text = report(results)
    write(
        args.out,
        "# Approximate search structures (issue 25)\n\n" + text,
        {"args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}, "results": results},
    )
    print(text)


if __name__ == "__main__":
    main()
