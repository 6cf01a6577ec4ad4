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

``real`` mode answers how document lists behave on real embeddings: real
datasets' chunks and queries through the shared embedding cache (queries not
cached are skipped and counted; nothing is embedded), the datasets of one
embedding model combined into one corpus (document ids prefixed by the
dataset; a set without ``documents.jsonl`` gives one document per chunk), every
set's queries searched against it. Document lists (every row of the probed
lists scored exactly; the coarse step over the centroids in float32, SQ8, or
the column's signed bytes) against the column's k-means lists (IVF-SQ8, 100
candidates rescored) at the same share of rows scanned.

Times are wall clock on 2 cores shared with other sessions: compare rows of
one run, and read the load average recorded. Children run under ``nice``.

Usage (repository root)::

    PYTHONPATH=. .venv/bin/python benchmarks/ann_variants.py --sizes 500000
    PYTHONPATH=. .venv/bin/python benchmarks/ann_variants.py --sizes 60000 --queries 100   # quick
    PYTHONPATH=. .venv/bin/python benchmarks/ann_variants.py real --data legalbench_contractnli
    PYTHONPATH=. nice -n 10 .venv/bin/python benchmarks/ann_variants.py real \
        --data xquad_en_fine,xquad_en,scifact,legalbench_contractnli,llamaindex_blockchain_solana,xquad_zh_fine,xquad_zh,cmrc2018 \
        --cache /work/main/.cache/embeddings.sqlite --out benchmarks/results/ann_real_lists.md
"""

from __future__ import annotations

import argparse
import json
import math
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
def real_model_of(name: str, texts: list[str], chosen: str | None) -> str:
    """The model a dataset's vectors come from: ``--embed-model`` when given, else the one
    ``llama-recursive build`` chooses for its texts (multilingual from a 10% share of CJK texts)."""
    from llama_index_ext_recursive.models import MULTILINGUAL_CORPUS_SHARE, cjk_share

    if chosen is not None:
        return "minilm" if chosen == "default" else chosen
    return "multilingual" if cjk_share(texts) >= MULTILINGUAL_CORPUS_SHARE else "minilm"


def real(args: argparse.Namespace) -> tuple[str, dict[str, Any]]:
    """Document lists against k-means lists on real datasets' cached embeddings, one
    combined corpus per embedding model (vectors of two models share no space).

    The vectors are read here (the cache needs the model's identity, so torch is
    loaded) and searched in a child process per model: FAISS's OpenMP and
    torch's crash together in ``add_core``.
    """
    from harness import data
    from harness.models import real_model
    from llama_index.core.schema import MetadataMode

    groups: dict[str, list[tuple[str, Any, list[Any]]]] = {}
    for name in args.data:
        dataset = data.load(name)
        nodes = dataset.nodes(title_in_text=not dataset.hierarchical, embed_title=True)
        texts = [n.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes]
        groups.setdefault(real_model_of(name, texts, args.embed_model), []).append((name, dataset, nodes))
    lines = [f"Command: `{command_line()}`"]
    results: dict[str, Any] = {}
    for model_name, sets in groups.items():
        model = real_model(model_name, args.cache)
        vectors: list[Any] = []
        docs: list[str] = []
        queries: list[Any] = []
        query_sets: list[int] = []  # the dataset of each query (its place in ``sets``)
        counts: list[str] = []
        for name, dataset, nodes in sets:
            own_documents = (data.folder(name) / "documents.jsonl").exists()
            keys = [model._key("text", n.get_content(metadata_mode=MetadataMode.EMBED)) for n in nodes]
            found = model._lookup(keys)  # the cache only: nothing is embedded here
            kept = [(n, found[k]) for n, k in zip(nodes, keys, strict=True) if k in found]
            vectors += [v for _, v in kept]
            # doc ids prefixed by the dataset, so two sets' documents stay apart
            docs += [
                f"{name}/{dataset.doc_of.get(n.node_id, n.node_id) if own_documents else n.node_id}" for n, _ in kept
            ]
            qkeys = [model._key("query", text) for text in dataset.queries.values()]
            qfound = model._lookup(qkeys)
            queries += [qfound[k] for k in qkeys if k in qfound]
            query_sets += [len(counts)] * sum(k in qfound for k in qkeys)
            counts.append(
                f"{name}: {len(nodes)} chunks ({len(nodes) - len(kept)} not cached, left out), "
                f"{len({d for d in docs if d.startswith(name + '/')})} documents"
                f"{'' if own_documents else ' (no documents.jsonl: one per chunk)'}, "
                f"{len(qkeys)} queries ({len(qkeys) - len(qfound)} not cached, skipped)"
            )
        number = {d: i for i, d in enumerate(sorted(set(docs)))}
        lists = np.asarray([number[d] for d in docs], dtype=np.int64)
        query_matrix = np.asarray(queries, dtype=np.float32)
        with tempfile.TemporaryDirectory(dir=args.scratch) as scratch:
            arrays = os.path.join(scratch, "real.npz")
            np.savez(
                arrays,
                vectors=np.asarray(vectors, dtype=np.float32),
                queries=query_matrix,
                lists=lists,
                query_sets=np.asarray(query_sets, dtype=np.int64),
            )
            command = ["nice", "-n", "10", sys.executable, __file__, "real-child", "--arrays", arrays]
            command += ["--real-candidates", str(args.real_candidates)]
            for flag in ("real_nprobes", "real_kmeans_lists", "real_shares", "real_probes"):
                command += [f"--{flag.replace('_', '-')}", ",".join(map(str, getattr(args, flag)))]
            out = subprocess.run(command, capture_output=True, text=True, check=True)
        events = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
        results[model_name] = events
        lines += ["", f"## {model_name}: {', '.join(name for name, _, _ in sets)}", ""]
        lines += real_report(events, lists, query_matrix, counts, [name for name, _, _ in sets], args)
    return "\n".join(lines), results


def real_report(
    events: list[dict[str, Any]],
    lists: np.ndarray,
    queries: np.ndarray,
    counts: list[str],
    names: list[str],
    args: argparse.Namespace,
) -> list[str]:
    """The tables of one model's combined corpus."""
    sizes = np.bincount(lists)
    distinct = len(np.unique(queries, axis=0))
    of = {kind: [e for e in events if e["kind"] == kind] for kind in ("documents", "kmeans", "legacy")}
    docs = {(e["coarse"], e["probes"]): e for e in of["documents"]}
    kmeans = of["kmeans"]
    lines = [
        "; ".join(counts) + ".",
        "",
        f"Combined: {len(lists)} rows in {len(sizes)} documents, rows per document mean {sizes.mean():.2f}, "
        f"median {np.median(sizes):g}, max {sizes.max()}; {len(queries)} queries ({distinct} distinct vectors), "
        "each searched against the whole combined corpus; truth = exact scan of it.",
        "",
        "(a), (c) Document lists (centroid = unit mean of a document's chunks): the probed lists are the "
        "nearest centroids by the coarse step named, and ALL their rows are scored exactly (no SQ8 codes, no "
        "candidate cap); `share` = mean share of the rows in the probed lists. Coarse steps: float32 flat; "
        "SQ8 = `IndexScalarQuantizer` `QT_8bit` (per-dimension ranges trained on the centroids), inner product; "
        "signed bytes = the column's own coarse step (`QT_8bit_direct_signed`, one scale so that the largest "
        "component is 127). `column` = the column's default probes, enough lists to score about 4096 rows, "
        "at least 32.",
        "",
        Table(
            [
                "probes",
                "share (float32)",
                "recall@10 float32",
                "share (SQ8)",
                "recall@10 SQ8",
                "share (signed bytes)",
                "recall@10 signed bytes",
            ]
        ).render(
            [
                str(probes),
                *[
                    cell
                    for coarse in ("float32", "sq8", "signed")
                    for cell in (fmt(docs[coarse, probes]["share"], 4), fmt(docs[coarse, probes]["recall"], 4))
                ],
            ]
            for probes in sorted({p for _, p in docs}, key=lambda p: (isinstance(p, str), p))
        ),
        "",
        f"(b) k-means lists as the column trains them (spherical, `_nlist` = 4 sqrt(rows) = {kmeans[0]['nlist']} "
        f"lists, trained on at most 64 rows per list), IVF-SQ8 codes, {CANDIDATES} candidates rescored exactly "
        "(the column's search); nprobe chosen so that the share of rows in the probed lists matches the document "
        "lists' share at the probes named (float32 coarse), plus the column's default nprobe (one list in 16, at "
        "least 16). `all rows exact` scores every row of the same probed lists exactly (the partition alone, as in "
        "(a)):",
        "",
        Table(
            [
                "matches document probes",
                "nprobe",
                "share of lists",
                "share of rows",
                f"recall@10 ({CANDIDATES} candidates)",
                "recall@10 all rows exact",
            ]
        ).render(
            [
                str(e["matches"]),
                str(e["nprobe"]),
                fmt(e["nprobe"] / e["nlist"], 4),
                fmt(e["share"], 4),
                fmt(e["recall"], 4),
                fmt(e["recall_exact"], 4),
            ]
            for e in kmeans
        ),
        "",
        "Recall@10 by dataset (its queries against the combined corpus): document lists (float32 coarse) at the "
        "probes named, and k-means lists at the nprobe matching their share (100 candidates):",
        "",
        Table(["probes", "share", *[f"{n} documents" for n in names], *[f"{n} k-means" for n in names]]).render(
            [
                str(probes),
                fmt(docs["float32", probes]["share"], 4),
                *[fmt(r, 3) for r in docs["float32", probes]["by_set"]],
                *[fmt(r, 3) for r in matched_kmeans(kmeans, probes)["by_set"]],
            ]
            for probes in sorted({p for _, p in docs}, key=lambda p: (isinstance(p, str), p))
        ),
        "",
        f"Earlier single-set table (IVF-SQ8 codes, {args.real_candidates} candidates rescored; k-means lists of "
        "fixed counts, trained on every row):",
        "",
        Table(["lists", "count", "nprobe", "rows scanned", "recall@10"]).render(e["row"] for e in of["legacy"]),
    ]
    return lines


def matched_kmeans(kmeans: list[dict[str, Any]], probes: int | str) -> dict[str, Any]:
    """The k-means event whose share matches the document lists' at ``probes``."""
    label = probes if isinstance(probes, int) else probes.split("(")[1].rstrip(")")
    return next(e for e in kmeans if str(label) in e["matches"].split(", "))


def probed_recall(
    vectors: np.ndarray, queries: np.ndarray, truth: np.ndarray, lists: np.ndarray, probed: np.ndarray
) -> tuple[np.ndarray, float]:
    """Each query's recall@10 and the mean share of rows when every row of its ``probed`` lists is
    scored exactly (``-1`` in ``probed``: no list)."""
    sizes = np.bincount(lists)
    hits, share = np.zeros(len(queries)), 0.0
    for start in range(0, len(queries), 256):
        block = slice(start, start + 256)
        chosen = probed[block]
        wanted = np.zeros((len(chosen), len(sizes)), dtype=bool)
        rows_of_query = np.repeat(np.arange(len(chosen)), chosen.shape[1])
        valid = chosen.ravel() >= 0
        wanted[rows_of_query[valid], chosen.ravel()[valid]] = True
        mask = wanted[:, lists]  # queries x rows
        scores = np.where(mask, queries[block] @ vectors.T, -np.inf)
        top = np.argpartition(-scores, K, axis=1)[:, :K]
        for q, found in enumerate(top):
            found = found[np.isfinite(scores[q, found])]
            hits[start + q] = len(np.intersect1d(found, truth[start + q])) / K
        share += float(np.where(wanted, sizes, 0).sum())
    return hits, share / len(queries) / len(vectors)


def real_child(args: argparse.Namespace) -> None:
    """The searches of :func:`real` on one combined corpus, one JSON event per setting."""
    import faiss

    from llama_index_ext_recursive.columnar import vectors as column

    faiss.omp_set_num_threads(1)
    with np.load(args.arrays, allow_pickle=False) as arrays:
        vectors, queries, lists = arrays["vectors"], arrays["queries"], arrays["lists"]
        query_sets = arrays["query_sets"]
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    truth = exact_truth(vectors, queries)
    docs = int(lists.max()) + 1

    def by_set(recalls: np.ndarray) -> list[float]:
        """Mean recall of each dataset's queries."""
        return [float(recalls[query_sets == i].mean()) for i in range(int(query_sets.max()) + 1)]

    means = np.zeros((docs, vectors.shape[1]), dtype=np.float32)
    np.add.at(means, lists, vectors)
    centroids = np.ascontiguousarray(means / np.linalg.norm(means, axis=1, keepdims=True))

    # (a), (c): document lists, every row of the probed lists scored exactly
    sq8 = faiss.IndexScalarQuantizer(vectors.shape[1], faiss.ScalarQuantizer.QT_8bit, faiss.METRIC_INNER_PRODUCT)
    sq8.train(centroids)
    sq8.add(centroids)
    # the column's coarse step, built as VectorColumn._coarse_template builds it
    scale = np.float32(127.0 / float(np.abs(centroids).max()))
    transform = faiss.LinearTransform(vectors.shape[1], vectors.shape[1], False)
    faiss.copy_array_to_vector((np.eye(vectors.shape[1], dtype=np.float32) * scale).ravel(), transform.A)
    transform.is_trained = True
    codes = faiss.IndexScalarQuantizer(
        vectors.shape[1], faiss.ScalarQuantizer.QT_8bit_direct_signed, faiss.METRIC_INNER_PRODUCT
    )
    signed = faiss.IndexPreTransform(transform, codes)
    signed.add(centroids)
    flat = faiss.IndexFlatIP(vectors.shape[1])
    flat.add(centroids)
    default = max(column._LIST_PROBES, math.ceil(column._LIST_ROWS_SCORED / (len(vectors) / docs)))
    probes = [*sorted(set(args.real_probes)), default]
    most = min(docs, max(probes))
    ranked = {
        "float32": flat.search(queries, most)[1],
        "sq8": sq8.search(queries, most)[1],
        "signed": signed.search(queries, most)[1],
    }
    float_shares: dict[int, float] = {}
    for label, n in [(p, p) for p in probes[:-1]] + [(f"column ({default})", default)]:
        for coarse, order in ranked.items():
            recalls, share = probed_recall(vectors, queries, truth, lists, order[:, : min(n, docs)])
            if coarse == "float32":
                float_shares[n] = share
            event = {"kind": "documents", "coarse": coarse, "probes": label, "share": share}
            print(json.dumps(event | {"recall": float(recalls.mean()), "by_set": by_set(recalls)}))

    # (b): k-means lists by the column's rule, IVF-SQ8 with 100 candidates rescored
    index, info = build_kmeans(faiss, vectors)
    nlist = int(info["nlist"])
    assigned = index.quantizer.search(vectors, 1)[1][:, 0]
    list_sizes = np.bincount(assigned, minlength=nlist)
    order = index.quantizer.search(queries, nlist)[1]
    curve = np.cumsum(list_sizes[order], axis=1).mean(axis=0) / len(vectors)  # mean share by nprobe - 1
    chosen: dict[int, list[str]] = {}
    for n, share in float_shares.items():
        chosen.setdefault(int(np.abs(curve - share).argmin()) + 1, []).append(str(n))
    chosen.setdefault(int(info["default_nprobe"]), []).append("column default")
    for nprobe, matches in sorted(chosen.items()):
        _, ids = index.search(queries, CANDIDATES, params=faiss.SearchParametersIVF(nprobe=nprobe))
        got = [rescored(vectors, q, i) for q, i in zip(queries, ids, strict=True)]
        recalls = np.asarray([len(np.intersect1d(a, t)) / K for a, t in zip(got, truth, strict=True)])
        exact, share = probed_recall(vectors, queries, truth, assigned, order[:, :nprobe])
        event = {"kind": "kmeans", "nlist": nlist, "nprobe": nprobe, "matches": ", ".join(matches), "share": share}
        event |= {"recall": float(recalls.mean()), "recall_exact": float(exact.mean()), "by_set": by_set(recalls)}
        print(json.dumps(event))

    # the earlier single-set table: IVF-SQ8 codes, --real-candidates candidates
    def recall_of(index: Any, nprobe: int) -> tuple[float, float]:
        _, ids = index.search(queries, args.real_candidates, params=faiss.SearchParametersIVF(nprobe=nprobe))
        got = [rescored(vectors, q, i) for q, i in zip(queries, ids, strict=True)]
        assigned = index.quantizer.search(queries, nprobe)[1]
        sizes = np.asarray([index.invlists.list_size(j) for j in range(index.nlist)])
        scanned = float(np.mean([sizes[a[a >= 0]].sum() for a in assigned])) / len(vectors)
        return float(np.mean([len(np.intersect1d(a, t)) / K for a, t in zip(got, truth, strict=True)])), scanned

    def legacy(row: list[Any]) -> None:
        print(json.dumps({"kind": "legacy", "row": row}))

    doc_index = DocIVF(faiss, docs)
    doc_index.train_sq(vectors)
    rows_in_order = np.argsort(lists, kind="stable")
    doc_index.index.quantizer.add(centroids)
    ordered, ids, own = (
        np.ascontiguousarray(a) for a in (vectors[rows_in_order], rows_in_order.astype(np.int64), lists[rows_in_order])
    )
    swig = faiss.swig_ptr
    doc_index.index.add_core(len(rows_in_order), swig(ordered), swig(ids), swig(own))
    for n in args.real_nprobes:
        r, share = recall_of(doc_index.index, n)
        legacy(["document lists (unit mean)", docs, n, fmt(share, 3), fmt(r, 4)])
    for nlist in args.real_kmeans_lists:
        km = sq_index(faiss, nlist)
        km.cp.spherical = True
        km.train(vectors)
        km.add(vectors)
        for n in sorted({max(1, round(nlist * s)) for s in args.real_shares}):
            r, share = recall_of(km, n)
            legacy(["k-means lists (spherical)", nlist, n, fmt(share, 3), fmt(r, 4)])


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
    p.add_argument(
        "--data",
        type=cli.csv(str),
        default=["legalbench_contractnli"],
        help="real mode: dataset folder names (comma-separated), combined into one corpus per embedding model",
    )
    cli.add_cache(p)
    cli.add_embed_model(p, default=None)
    p.add_argument("--arrays", help=argparse.SUPPRESS)
    p.add_argument(
        "--real-candidates", type=int, default=20, help="candidates rescored on the real set (of ~2000 rows)"
    )
    p.add_argument("--real-nprobes", type=cli.csv(int), default=[1, 2, 3, 5, 8, 12, 16])
    p.add_argument("--real-kmeans-lists", type=cli.csv(int), default=[95, 188])
    p.add_argument("--real-shares", type=cli.csv(float), default=[0.02, 0.05, 0.1, 0.15, 0.2])
    p.add_argument(
        "--real-probes", type=cli.csv(int), default=[1, 2, 4, 8, 16, 32, 64, 128], help="document lists probed"
    )
    cli.add_out(p, RESULTS / "ann_variants_run.md")
    args = p.parse_args()
    if args.mode == "child":
        child(args)
        return
    if args.mode == "real-child":
        real_child(args)
        return
    if args.mode == "real":
        text, events = real(args)
        write(
            args.out,
            "# Document lists on real embeddings (issue 25)\n\n" + text,
            {"args": {k: str(v) for k, v in vars(args).items()}, "events": events},
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
