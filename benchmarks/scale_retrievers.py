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
import platform
import shlex
import statistics
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
from llama_index.core.schema import QueryBundle, TextNode

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scale_recursive import (  # noqa: E402  (helpers of the sibling benchmark)
    VOCAB_SIZE,
    TopicFakeEmbedding,
    _unit,
    blas_info,
    cpu_model,
    pct,
    source_fingerprint,
)

from llama_index_ext_recursive.recursive.build import build_documents, group_nodes  # noqa: E402
from llama_index_ext_recursive.eval.registry import REGISTRY, BuildContext, build_retriever  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results" / "eval"


# ------------------------------------------------------------ synthetic data
def make_corpus(
    n_docs: int, chunks: int, dim: int, seed: int, noise: float
) -> Tuple[List[TextNode], np.ndarray, List[np.ndarray]]:
    """Nodes with topical embeddings and per-document vocabularies.

    Returns (nodes, chunk embedding matrix, per-document vocabulary index arrays).
    """
    rng = np.random.default_rng(seed)
    vocab = [f"w{i:04d}" for i in range(VOCAB_SIZE)]
    topics = rng.standard_normal((n_docs, dim))
    topics /= np.linalg.norm(topics, axis=1, keepdims=True)
    nodes: List[TextNode] = []
    matrix = np.empty((n_docs * chunks, dim))
    vocabs = []
    for d in range(n_docs):
        doc_id = f"doc{d:05d}"
        doc_vocab = rng.choice(VOCAB_SIZE, size=200, replace=False)
        vocabs.append(doc_vocab)
        noises = rng.standard_normal((chunks, dim))
        noises /= np.linalg.norm(noises, axis=1, keepdims=True)
        embs = topics[d] + noise * noises
        embs /= np.linalg.norm(embs, axis=1, keepdims=True)
        matrix[d * chunks : (d + 1) * chunks] = embs
        for c in range(chunks):
            sentences = [
                " ".join(vocab[w] for w in rng.choice(doc_vocab, size=8)).capitalize() + "."
                for _ in range(3)
            ]
            nodes.append(
                TextNode(
                    id_=f"{doc_id}-c{c:03d}",
                    text=" ".join(sentences),
                    metadata={"doc_id": doc_id},
                    excluded_embed_metadata_keys=["doc_id"],
                    embedding=embs[c].tolist(),
                )
            )
    return nodes, matrix, vocabs, topics


def make_queries(
    nodes: List[TextNode], matrix: np.ndarray, vocabs: List[np.ndarray], chunks: int,
    n: int, seed: int, noise: float,
) -> List[Tuple[str, List[float], str, str]]:
    """(query text, embedding, target chunk id, target doc id) per query."""
    rng = np.random.default_rng(seed + 1)
    vocab = [f"w{i:04d}" for i in range(VOCAB_SIZE)]
    out = []
    for row in rng.integers(0, len(nodes), size=n):
        node = nodes[int(row)]
        words = node.text.replace(".", "").lower().split()
        picked = list(rng.choice(words, size=6, replace=False))
        picked += [vocab[w] for w in rng.choice(vocabs[int(row) // chunks], size=2)]
        z = rng.standard_normal(matrix.shape[1])
        vec = _unit(matrix[int(row)] + noise * _unit(z)).tolist()
        out.append((" ".join(picked), vec, node.node_id, node.metadata["doc_id"]))
    return out


# ------------------------------------------------------------------- timing
def time_retriever(
    retriever, queries, budget_s: float, min_queries: int, warmup: int = 3
) -> Dict[str, object]:
    t0 = time.perf_counter()
    retriever.retrieve(QueryBundle(queries[0][0], embedding=queries[0][1]))
    first_ms = (time.perf_counter() - t0) * 1e3
    for text, vec, _, _ in queries[1 : 1 + warmup]:
        retriever.retrieve(QueryBundle(text, embedding=vec))
    latencies: List[float] = []
    chunk_hits = doc_hits = 0
    spent = 0.0
    for text, vec, chunk_id, doc_id in queries:
        bundle = QueryBundle(text, embedding=vec)
        t0 = time.perf_counter()
        results = retriever.retrieve(bundle)
        ms = (time.perf_counter() - t0) * 1e3
        latencies.append(ms)
        spent += ms / 1e3
        ids = [r.node.node_id for r in results]
        chunk_hits += chunk_id in ids
        doc_hits += any(i.startswith(doc_id + "-") for i in ids)
        if spent > budget_s and len(latencies) >= min_queries:
            break
    n = len(latencies)
    return {
        "n": n, "p50": pct(latencies, 50), "p95": pct(latencies, 95), "first_ms": first_ms,
        "chunk_hit": chunk_hits / n, "doc_hit": doc_hits / n,
    }


def bench_size(args: argparse.Namespace, total: int, names: Sequence[str]) -> List[Dict[str, object]]:
    n_docs = max(1, total // args.chunks)
    nodes, matrix, vocabs, topics = make_corpus(n_docs, args.chunks, args.dim, args.seed, args.noise)
    queries = make_queries(nodes, matrix, vocabs, args.chunks, args.queries, args.seed, args.query_noise)
    fake = TopicFakeEmbedding(dim=args.dim)
    for d, topic in enumerate(topics):
        fake.register_topic(f"doc{d:05d}", topic)
    rows = []
    for name in names:
        print(f"[scale_retrievers] {len(nodes)} chunks: building {name} ...", file=sys.stderr, flush=True)
        gc.collect()
        fake.calls = 0
        t0 = time.perf_counter()
        retriever = build_retriever(name, BuildContext(nodes, fake, top_k=10))
        build_s = time.perf_counter() - t0
        embed_calls = fake.calls
        timing = time_retriever(retriever, queries, args.budget_s, args.min_queries)
        row = {"retriever": name, "chunks": len(nodes), "docs": n_docs, "build_s": build_s,
               "embed_calls_in_build": embed_calls, "query_embed_calls": fake.calls - embed_calls,
               **timing}
        rows.append(row)
        print(f"[scale_retrievers]   {json.dumps(row)}", file=sys.stderr, flush=True)
        del retriever
        gc.collect()
    del nodes, matrix
    gc.collect()
    return rows


def scale_table(rows: List[Dict[str, object]]) -> str:
    if not rows:
        return "(no sizes run)"
    head = ["retriever", "chunks (docs)", "build s", "p50 ms", "p95 ms", "queries timed",
            "first query ms", "target chunk in top-10", "target doc in top-10"]
    lines = ["| " + " | ".join(head) + " |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(
            f"| {r['retriever']} | {r['chunks']} ({r['docs']}) | {r['build_s']:.2f} | {r['p50']:.2f} | "
            f"{r['p95']:.2f} | {r['n']} | {r['first_ms']:.1f} | {r['chunk_hit']:.2f} | {r['doc_hit']:.2f} |"
        )
    return "\n".join(lines)


def pivot(rows: List[Dict[str, object]], sizes: Sequence[int]) -> str:
    """retriever x size: p50 / p95 ms (build s)."""
    if not rows:
        return "(no sizes run)"
    by = {(r["retriever"], r["chunks"]): r for r in rows}
    names = list(dict.fromkeys(r["retriever"] for r in rows))
    chunk_sizes = sorted({r["chunks"] for r in rows})
    head = ["retriever"] + [f"{c // 1000}k: p50 / p95 ms (build s)" for c in chunk_sizes]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * len(chunk_sizes)]
    for name in names:
        cells = [name]
        for c in chunk_sizes:
            r = by.get((name, c))
            if r is None:
                cells.append("-")
                continue
            note = f", n={r['n']}" if r["n"] < max(x["n"] for x in rows if x["chunks"] == c) else ""
            cells.append(f"{r['p50']:.2f} / {r['p95']:.2f} ({r['build_s']:.1f} s{note})")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


# ----------------------------------------------------------- build breakdown
def build_breakdown(args: argparse.Namespace) -> Dict[str, object]:
    from llama_index.core.schema import MetadataMode

    from llama_index_ext_recursive.models import bundled_embed_model
    from llama_index_ext_recursive.eval import BeirDataset, CachedEmbedding

    dataset = BeirDataset.load(args.breakdown_data)
    nodes = dataset.nodes(title_in_text=not dataset.hierarchical)
    cache = CachedEmbedding(bundled_embed_model(), args.cache)
    t0 = time.perf_counter()
    vectors = cache.get_text_embedding_batch(
        [n.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes]
    )
    cached_embed_s = time.perf_counter() - t0
    for node, vector in zip(nodes, vectors):
        node.embedding = vector
    if cache.computed:
        print(f"[scale_retrievers] warning: {cache.computed} chunk texts were not in the cache",
              file=sys.stderr)
    ctx = BuildContext(nodes, cache, top_k=10)
    summaries, totals = [], []
    for _ in range(args.breakdown_repeats):
        gc.collect()
        t0 = time.perf_counter()
        built = build_documents(group_nodes(nodes, "doc_id"), "doc_id")
        summaries.append(time.perf_counter() - t0)
        del built
        gc.collect()
        before = cache.computed
        t0 = time.perf_counter()
        retriever = build_retriever("recursive", ctx)
        totals.append(time.perf_counter() - t0)
        assert cache.computed == before, "recursive build embedded texts"
        del retriever
    out: Dict[str, object] = {
        "dataset": dataset.name, "chunks": len(nodes), "docs": len(set(dataset.doc_of.values())),
        "queries": len(dataset.queries), "summaries_s": statistics.median(summaries),
        "build_s": statistics.median(totals), "summaries_all": summaries, "build_all": totals,
        "cached_lookup_s": cached_embed_s,
    }
    out["indexing_s"] = out["build_s"] - out["summaries_s"]
    if args.breakdown_json and Path(args.breakdown_json).exists():
        data = json.loads(Path(args.breakdown_json).read_text())
        out["embedding_s"] = data["embedding_seconds"]
        out["texts_embedded"] = data["texts_embedded"]
        out["eval_build_s"] = data["retrievers"]["recursive"]["build_seconds"]
    out["distinct_queries"] = len(set(dataset.queries.values()))
    if args.chunk_embed_repeats:
        # the chunks alone through the bundled model, no cache: the part of the
        # cold-cache embedding time that belongs to the build (queries are query time)
        model = bundled_embed_model()
        texts = [n.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes]
        runs = []
        for _ in range(args.chunk_embed_repeats):
            t0 = time.perf_counter()
            model.get_text_embedding_batch(texts)
            runs.append(time.perf_counter() - t0)
        out["chunk_embed_all"] = runs
        out["chunk_embed_s"] = statistics.median(runs)
    return out


def breakdown_table(b: Dict[str, object]) -> str:
    emb = b.get("embedding_s")
    chunk = b.get("chunk_embed_s")
    lines = ["| step | seconds | share of build |", "|---|---:|---:|"]
    build_total = (chunk if chunk is not None else 0.0) + b["build_s"]
    rows = [
        (f"embedding the {b['chunks']} chunks (all-MiniLM-L6-v2, no cache, measured directly)", chunk),
        ("summaries (`group_nodes` + `build_documents`, extractive)", b["summaries_s"]),
        ("indexing (rest of `from_nodes`: centroids, docstores, vector stores)", b["indexing_s"]),
    ]
    for label, secs in rows:
        lines.append(f"| {label} | {secs:.2f} | {100 * secs / build_total:.1f}% |" if secs is not None
                     else f"| {label} | - | - |")
    lines.append(f"| build total | {build_total:.2f} | 100% |")
    if emb is not None:
        lines.append(
            f"| for reference: eval `embedding_seconds`, cold cache = {b['chunks']} chunks + "
            f"{b['queries']} queries ({b['distinct_queries']} distinct), one query at a time | {emb:.2f} | |"
        )
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--chunks-total", default="1000,10000,50000")
    p.add_argument("--chunks", type=int, default=50, help="chunks per document")
    p.add_argument("--dim", type=int, default=384)
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--budget-s", type=float, default=30.0, help="stop timing a retriever after this")
    p.add_argument("--min-queries", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--noise", type=float, default=0.5)
    p.add_argument("--query-noise", type=float, default=1.0)
    p.add_argument("--retrievers", default=",".join(REGISTRY))
    p.add_argument("--breakdown-data", default=str((REPO / ".." / "shared" / "data" / "xquad_en_fine").resolve()),
                   help="'' to skip the build breakdown")
    p.add_argument("--breakdown-json", default=str(RESULTS / "cold_cache_repeats" / "xquad_en_fine.json"),
                   help="eval JSON of the cold-cache run (embedding_seconds)")
    p.add_argument("--breakdown-repeats", type=int, default=5)
    p.add_argument("--chunk-embed-repeats", type=int, default=3,
                   help="embed the breakdown dataset's chunks this many times without cache (0: skip)")
    p.add_argument("--cache", default=str(REPO / ".cache" / "embeddings.sqlite"))
    p.add_argument("--out", default=str(RESULTS / "scale_retrievers.md"))
    args = p.parse_args(argv)
    names = [n.strip() for n in args.retrievers.split(",") if n.strip()]
    sizes = [int(x) for x in args.chunks_total.split(",") if x.strip()]
    command = ".venv/bin/python benchmarks/scale_retrievers.py " + " ".join(
        shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    load_before = os.getloadavg()
    fingerprint = source_fingerprint()
    started = time.perf_counter()
    rows: List[Dict[str, object]] = []
    for total in sizes:
        rows += bench_size(args, total, names)
    breakdown = build_breakdown(args) if args.breakdown_data else None
    md = [
        "# Retriever latency at scale (synthetic) and `recursive` build breakdown (xquad_en_fine)",
        "",
        f"Command: `{command}` (cwd: repository root)",
        f"Machine: nproc={os.cpu_count()}, CPU {cpu_model()}, Python {platform.python_version()}, "
        f"numpy {np.__version__}, BLAS {blas_info()}",
        f"Library sources (sha256[:12]): {fingerprint}",
        f"Load average at start {load_before[0]:.2f} / end {os.getloadavg()[0]:.2f} "
        f"(another process may share the 2 cores); wall time {time.perf_counter() - started:.0f} s.",
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
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text, encoding="utf-8")
    Path(args.out).with_suffix(".json").write_text(
        json.dumps({"command": command, "rows": rows, "breakdown": breakdown}, indent=1), encoding="utf-8"
    )
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
