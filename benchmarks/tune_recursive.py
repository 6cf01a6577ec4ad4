"""Tune RecursiveSummaryRetriever defaults on a BEIR-layout hierarchical dataset.

Grid: num_routed_docs (n) x score_mode (chunk / product / weighted@alpha) x
summary routing representation (text = embedding of the extractive summary,
centroid = mean of the document's chunk embeddings, blend = normalized sum of
the two unit vectors), plus a flat (unrouted) baseline over the same chunk index.

Chunk and query embeddings are computed once with the bundled model, through
the shared embedding cache (``--cache``), so every config only pays for
retrieval.

    .venv/bin/python benchmarks/tune_recursive.py --data ../shared/data/xquad_en_fine

Metrics (ir_measures): nDCG@10, RR@10, R@10, Success@1 on chunk qrels
(qrels/test.tsv) and Success@10 on document qrels (qrels/test.doc-level.tsv,
the run mapped to doc ids with the max score per doc). Run scores handed to
ir_measures are rank-based (top_k - rank) so the retriever's own order, ties
included, is what is evaluated.
"""

from __future__ import annotations

import inspect
import logging
import random
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import ir_measures
import numpy as np
from harness import RESULTS, cli, data, timing
from harness.models import real_model
from harness.report import Table, library_fingerprint, write
from ir_measures import RR, R, Success, nDCG
from llama_index.core import StorageContext, VectorStoreIndex
from llama_index.core.indices.vector_store.retrievers import VectorIndexRetriever
from llama_index.core.schema import IndexNode, MetadataMode, QueryBundle

TOP_K = 10
FLAT = ("flat (no routing)", "-", "-", "-")
# The defaults this tuning started from (representation, n, score_mode, alpha); every
# row is compared against them. The library's defaults at run time are printed too.
BASELINE_DEFAULTS = ("text", "5", "weighted", "0.3")
CHUNK_MEASURES = [nDCG @ 10, RR @ 10, R @ 10, Success @ 1]
DOC_MEASURE = Success @ 10


# ----------------------------------------------------------- representations
def unit(v: np.ndarray) -> np.ndarray:
    n = np.linalg.norm(v)
    return v / n if n else v


def summary_index_with(
    base,
    model,
    vectors: dict[str, np.ndarray],
) -> VectorStoreIndex:
    """A new summary index: copies of base's summary IndexNodes carrying ``vectors[doc_id]``."""
    docstore = base.index.summary_index.docstore
    nodes = []
    for node_id in base.index.summary_index.index_struct.nodes_dict.values():
        node = docstore.get_node(node_id)
        assert isinstance(node, IndexNode)
        copy = node.model_copy(deep=True)
        copy.embedding = [float(x) for x in vectors[copy.index_id]]
        nodes.append(copy)
    from llama_index_ext_recursive.stores.numpy_store import NumpyVectorStore

    return VectorStoreIndex(
        nodes,
        storage_context=StorageContext.from_defaults(vector_store=NumpyVectorStore()),
        embed_model=model,
    )


def representations(
    base, model, chunk_vecs: dict[str, np.ndarray]
) -> tuple[dict[str, VectorStoreIndex], dict[str, dict[str, np.ndarray]]]:
    # Embed the summary texts here (exactly what the index does for a summary without
    # an embedding) rather than reading base's summary store, so the ``text`` row does
    # not depend on which routing vector the library builds by default.
    docstore = base.index.summary_index.docstore
    summaries = [docstore.get_node(i) for i in base.index.summary_index.index_struct.nodes_dict.values()]
    embedded = model.get_text_embedding_batch([s.get_content(metadata_mode=MetadataMode.EMBED) for s in summaries])
    text_vecs = {s.index_id: unit(np.asarray(e, dtype=np.float64)) for s, e in zip(summaries, embedded)}
    centroid = {
        doc_id: unit(np.mean([chunk_vecs[c] for c in rec.chunk_ids], axis=0)) for doc_id, rec in base.documents.items()
    }
    blend = {d: unit(text_vecs[d] + centroid[d]) for d in text_vecs}
    vecs = {"text": text_vecs, "centroid": centroid, "blend": blend}
    indices = {name: summary_index_with(base, model, table) for name, table in vecs.items()}
    return indices, vecs


# ---------------------------------------------------------------- evaluation
Run = dict[str, dict[str, float]]


def run_retriever(
    retrieve: Callable[[QueryBundle], list], queries: list[tuple[str, str, list[float]]]
) -> tuple[Run, float]:
    results: list = []
    ms = timing.latencies_ms(
        retrieve, [QueryBundle(query_str=text, embedding=emb) for _, text, emb in queries], results=results
    )
    # rank-based scores: ir_measures evaluates exactly the retriever's order
    run: Run = {
        qid: {h.node.node_id: float(TOP_K - i) for i, h in enumerate(hits[:TOP_K])}
        for (qid, _, _), hits in zip(queries, results)
    }
    return run, float(np.mean(ms)) if ms else 0.0


def to_doc_run(run: Run, chunk_doc: dict[str, str]) -> Run:
    out: Run = {}
    for qid, hits in run.items():
        docs: dict[str, float] = {}
        for cid, score in hits.items():
            d = chunk_doc[cid]
            docs[d] = max(score, docs.get(d, float("-inf")))
        out[qid] = docs
    return out


def score(run: Run, qrels, doc_qrels, chunk_doc) -> dict[str, float]:
    agg = ir_measures.calc_aggregate(CHUNK_MEASURES, qrels, run)
    doc = ir_measures.calc_aggregate([DOC_MEASURE], doc_qrels, to_doc_run(run, chunk_doc))
    out = {str(m): float(agg[m]) for m in CHUNK_MEASURES}
    out["doc Success@10"] = float(doc[DOC_MEASURE])
    return out


def per_query(run: Run, qrels, qids: Sequence[str]) -> np.ndarray:
    """Per-query nDCG@10 in ``qids`` order (a query missing from the run scores 0)."""
    vals = {m.query_id: m.value for m in ir_measures.iter_calc([nDCG @ 10], qrels, run)}
    return np.asarray([vals.get(q, 0.0) for q in qids], dtype=np.float64)


def paired_p(a: np.ndarray, b: np.ndarray, samples: int = 10000, seed: int = 0) -> float:
    """Two-sided paired sign-flip permutation test on the mean difference."""
    d = a - b
    if not np.any(d):
        return 1.0
    rng = np.random.default_rng(seed)
    observed = abs(d.mean())
    count = 0
    for start in range(0, samples, 2000):
        signs = rng.choice((-1.0, 1.0), size=(min(2000, samples - start), d.size))
        count += int(np.sum(np.abs(signs @ d) / d.size >= observed - 1e-12))
    return (count + 1) / (samples + 1)


def routing_table(
    vecs: dict[str, dict[str, np.ndarray]],
    queries: list[tuple[str, str, list[float]]],
    doc_qrels,
    ns: Sequence[int],
) -> list[str]:
    """Share of queries whose relevant document is among the top-n summaries."""
    q = np.asarray([e for _, _, e in queries], dtype=np.float64)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    table_ = Table(["representation", *(f"gold doc in top-{n}" for n in ns)])
    lines = [table_.header()]
    for rep, table in vecs.items():
        doc_ids = list(table)
        mat = np.asarray([table[d] for d in doc_ids])
        order = np.argsort(-(q @ mat.T), axis=1, kind="stable")
        cells = []
        for n in ns:
            hit = [
                any(doc_ids[j] in doc_qrels.get(qid, {}) for j in order[i, :n]) for i, (qid, _, _) in enumerate(queries)
            ]
            cells.append(f"{np.mean(hit):.3f}")
        lines.append(table_.row(rep, *cells))
    return lines


# ---------------------------------------------------------------------- main
def main(argv: Sequence[str] | None = None) -> None:
    from llama_index_ext_recursive.recursive import settings as recursive_settings
    from llama_index_ext_recursive.recursive.index import RecursiveIndex
    from llama_index_ext_recursive.recursive.retriever import RecursiveSummaryRetriever

    ap = cli.parser(__doc__)
    ap.add_argument("--data", required=True, type=Path, help="BEIR-layout dataset directory")
    ap.add_argument("--max-queries", type=int, default=0, help="evaluate a seeded random sample (0 = all)")
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--ns", type=cli.csv(int), default=[1, 2, 3, 5, 8], help="num_routed_docs values")
    ap.add_argument(
        "--alphas", type=cli.csv(float), default=[0.2, 0.3, 0.5], help="score_alpha values for weighted mode"
    )
    ap.add_argument("--reps", type=cli.csv(), default=["text", "centroid", "blend"], help="routing representations")
    cli.add_cache(ap)
    ap.add_argument("--out", type=Path, default=None, help="markdown output (default results/tune_<dataset>.md)")
    args = ap.parse_args(argv)
    command = cli.command(argv, __file__)

    t_start = time.time()
    logging.basicConfig(level=logging.WARNING)
    ns, alphas, reps = args.ns, args.alphas, args.reps

    model = real_model("minilm", args.cache)
    dataset = data.load(args.data)
    name = dataset.name
    nodes = data.embed_nodes(dataset, model, title_in_text=False)
    chunk_doc = {n.node_id: n.metadata["doc_id"] for n in nodes}
    chunk_vecs = {n.node_id: np.asarray(n.embedding, dtype=np.float64) for n in nodes}

    query_vectors = data.query_vectors(dataset, model)
    queries = [(qid, dataset.queries[qid], vector) for qid, vector in query_vectors.items()]
    judged = len(queries)
    if args.max_queries and args.max_queries < len(queries):
        queries = random.Random(args.seed).sample(queries, args.max_queries)
    # ir_measures averages over every query in the qrels: keep only evaluated ones
    kept = {qid for qid, _, _ in queries}
    qrels = {q: v for q, v in dataset.qrels.items() if q in kept}
    doc_qrels = {q: v for q, v in (dataset.doc_qrels or {}).items() if q in kept}
    print(f"{name}: {len(nodes)} chunks, {len(queries)} queries", file=sys.stderr)

    t0 = time.time()
    base = RecursiveSummaryRetriever.from_nodes(
        nodes, doc_id_key="doc_id", embed_model=model, similarity_top_k=TOP_K, show_progress=False
    )
    print(f"built retriever ({len(base.documents)} docs) in {time.time() - t0:.1f}s", file=sys.stderr)
    indices, vecs = representations(base, model, chunk_vecs)

    modes: list[tuple[str, float]] = [("chunk", 0.0), ("product", 0.0)] + [("weighted", a) for a in alphas]
    rows: list[tuple[str, str, str, str, dict[str, float], float]] = []

    flat = VectorIndexRetriever(base.index.chunk_index, similarity_top_k=TOP_K, embed_model=model)
    qids = [qid for qid, _, _ in queries]
    perq: dict[tuple[str, str, str, str], np.ndarray] = {}
    run, ms = run_retriever(flat.retrieve, queries)
    rows.append(("flat (no routing)", "-", "-", "-", score(run, qrels, doc_qrels, chunk_doc), ms))
    perq[FLAT] = per_query(run, qrels, qids)
    print(f"flat: {rows[-1][4]}  {ms:.1f} ms/q", file=sys.stderr)

    for rep in reps:
        for n in ns:
            for mode, alpha in modes:
                r = RecursiveSummaryRetriever(
                    RecursiveIndex(indices[rep], base.index.chunk_index, documents=base.documents, embed_model=model),
                    similarity_top_k=TOP_K,
                    num_routed_docs=n,
                    score_mode=mode,
                    score_alpha=alpha if mode == "weighted" else recursive_settings.DEFAULT_SCORE_ALPHA,
                )
                run, ms = run_retriever(r.retrieve, queries)
                m = score(run, qrels, doc_qrels, chunk_doc)
                a = f"{alpha:g}" if mode == "weighted" else "-"
                rows.append((rep, str(n), mode, a, m, ms))
                perq[(rep, str(n), mode, a)] = per_query(run, qrels, qids)
                print(
                    f"{rep:8s} n={n} {mode:8s} a={a:3s} "
                    + " ".join(f"{k}={v:.4f}" for k, v in m.items())
                    + f" {ms:.1f}ms/q",
                    file=sys.stderr,
                )

    metric_names = list(rows[0][4])
    default_key = BASELINE_DEFAULTS
    base_q = perq.get(default_key)
    configs = Table(
        ["representation", "n", "score_mode", "alpha", *metric_names, "ΔnDCG@10 vs default", "p", "ms/query"],
        align="lrlr" + "r" * (len(metric_names) + 3),
    )
    header = configs.header()

    def fmt(row) -> str:
        rep, n, mode, a, m, ms = row
        key = (rep, n, mode, a)
        if base_q is None or key == default_key:
            delta, p = "-", "-"
        else:
            delta = f"{perq[key].mean() - base_q.mean():+.4f}"
            p = f"{paired_p(perq[key], base_q):.4f}"
        return configs.row(rep, n, mode, a, *(f"{m[k]:.4f}" for k in metric_names), delta, p, f"{ms:.1f}")

    def compare(a_key, b_key) -> str:
        if a_key not in perq or b_key not in perq:
            return ""
        x, y = perq[a_key], perq[b_key]
        label = lambda k: " ".join(v for v in k if v != "-")  # noqa: E731
        return paired.row(
            label(a_key),
            label(b_key),
            f"{x.mean() - y.mean():+.4f}",
            f"{int(np.sum(x > y))}/{int(np.sum(x < y))}",
            f"{paired_p(x, y):.4f}",
        )

    paired = Table(["A", "B", "mean ΔnDCG@10 (A−B)", "queries A>B / A<B", "p"], align="llrrr")
    pairs = []
    best = max((k for k in perq if k != FLAT), key=lambda k: perq[k].mean())
    pairs.append((FLAT, best))
    if base_q is not None:
        pairs.append((best, default_key))
    for n in [n for n in ns if n >= 5] or ns[-1:]:
        sn = str(n)
        for mode, a in (("chunk", "-"), ("weighted", "0.2")):
            pairs += [
                (("centroid", sn, mode, a), ("text", sn, mode, a)),
                (("blend", sn, mode, a), ("text", sn, mode, a)),
                (("blend", sn, mode, a), ("centroid", sn, mode, a)),
            ]
        for r in reps:
            pairs += [
                ((r, sn, "weighted", "0.2"), (r, sn, "chunk", "-")),
                ((r, sn, "weighted", "0.3"), (r, sn, "weighted", "0.2")),
                ((r, sn, "chunk", "-"), (r, sn, "product", "-")),
            ]
    comparisons = [paired.header()] + [line for line in (compare(a, b) for a, b in pairs) if line]

    table = header + "\n" + "\n".join(fmt(r) for r in rows)
    ranked = sorted(rows[1:], key=lambda r: (-r[4]["nDCG@10"], -r[4]["doc Success@10"]))
    top = header + "\n" + fmt(rows[0]) + "\n" + "\n".join(fmt(r) for r in ranked[:12])
    sig = inspect.signature(RecursiveSummaryRetriever.from_nodes).parameters
    lib_rep = sig["summary_embedding"].default if "summary_embedding" in sig else "text"
    defaults = (
        "pre-tuning defaults compared against: representation=text, num_routed_docs=5, "
        "score_mode=weighted, score_alpha=0.3; library defaults at run time: "
        f"num_routed_docs={recursive_settings.DEFAULT_NUM_ROUTED_DOCS}, "
        f"score_alpha={recursive_settings.DEFAULT_SCORE_ALPHA}, "
        f"summary_embedding={getattr(lib_rep, 'value', lib_rep)}"
    )
    lib_hash = library_fingerprint()
    sample = (
        f"seeded random sample of {len(queries)} (seed {args.seed})"
        if args.max_queries and args.max_queries < judged
        else f"all {len(queries)}"
    )
    md = "\n".join(
        [
            f"# RecursiveSummaryRetriever tuning: {name}",
            "",
            "Command:",
            "",
            "```",
            command,
            "```",
            "",
            f"Corpus: {len(nodes)} chunks in {len(base.documents)} documents; queries: {sample}. "
            f"similarity_top_k={TOP_K}; embedding model: bundled all-MiniLM-L6-v2. "
            f"Defaults: {defaults}. Library sources (sha256[:12]) at run time: {lib_hash}. "
            f"Wall time: {time.time() - t_start:.0f}s.",
            "",
            "Chunk-level metrics use qrels/test.tsv; `doc Success@10` uses qrels/test.doc-level.tsv "
            "(top-10 chunks mapped to their doc_id). Representations: `text` = embedding of the "
            "extractive summary (current), `centroid` = normalized mean of the document's chunk "
            "embeddings, `blend` = normalized sum of the two unit vectors.",
            "",
            "## Routing accuracy (gold document among the top-n summaries)",
            "",
            *routing_table(vecs, queries, doc_qrels, ns),
            "",
            "## Best 12 configs by nDCG@10 (plus flat baseline)",
            "",
            f"ΔnDCG@10 and p: paired against the pre-tuning defaults {default_key} "
            "(per-query nDCG@10, two-sided sign-flip permutation test, 10,000 samples).",
            "",
            top,
            "",
            "## Paired factor comparisons (per-query nDCG@10)",
            "",
            *comparisons,
            "",
            "## All configs",
            "",
            table,
            "",
        ]
    )
    print(md)
    write(args.out or RESULTS / f"tune_{name}.md", md)


if __name__ == "__main__":
    main()
