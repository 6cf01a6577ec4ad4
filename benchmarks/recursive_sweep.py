"""Sweep how document routing and chunk evidence combine, on every shared dataset.

For one dataset this computes, once, every signal the recursive retriever can
use (dense and BM25 scores of every chunk, dense and BM25 scores of every
document's representations), then scores many combinations of them offline
with ir-measures. It is the measurement behind the recursive retriever's
ranking and defaults (docs/BENCHMARKS.md, "Recursive retrieval: combining
document and chunk evidence").

    .venv/bin/python benchmarks/recursive_sweep.py --data ../shared/data/legalbench_contractnli
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import ir_measures
import numpy as np
from harness import cli, data, timing
from harness.models import real_model
from llama_index.core.schema import TextNode

K = 10


def minmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    low = x.min(axis=axis, keepdims=True)
    high = x.max(axis=axis, keepdims=True)
    span = np.where(high > low, high - low, 1.0)
    return (x - low) / span


def topk_minmax(x: np.ndarray, k: int) -> np.ndarray:
    """Relative-score normalisation over each row's top-k (others 0), as a fused
    top-k list sees it."""
    out = np.zeros_like(x)
    idx = np.argpartition(-x, min(k, x.shape[1] - 1), axis=1)[:, :k]
    rows = np.arange(x.shape[0])[:, None]
    vals = x[rows, idx]
    low, high = vals.min(1, keepdims=True), vals.max(1, keepdims=True)
    span = np.where(high > low, high - low, 1.0)
    out[rows, idx] = (vals - low) / span
    return out


def evaluate(scores: np.ndarray, qids: list[str], cids: list[str], qrels, doc_qrels, doc_of) -> dict[str, float]:
    top = np.argsort(-scores, axis=1)[:, :K]
    run = {q: {cids[j]: float(K - r) for r, j in enumerate(row)} for q, row in zip(qids, top)}
    out = {"nDCG@10": ir_measures.calc_aggregate([ir_measures.nDCG @ K], qrels, run)[ir_measures.nDCG @ K]}
    if doc_qrels:
        docs = {}
        for q, row in zip(qids, top):
            ranked: dict[str, float] = {}
            for r, j in enumerate(row):
                ranked.setdefault(doc_of[cids[j]], float(K - r))
            docs[q] = ranked
        out["doc:Success@10"] = ir_measures.calc_aggregate([ir_measures.Success @ K], doc_qrels, docs)[
            ir_measures.Success @ K
        ]
    return out


def _relative(lists, weights, size):
    """Weighted relative-score fusion of (indices, scores) lists into a dense vector."""
    out = np.zeros(size)
    total = sum(weights)
    for (idx, vals), w in zip(lists, weights):
        if w == 0 or len(idx) == 0:
            continue
        low, high = vals.min(), vals.max()
        norm = (vals - low) / (high - low) if high > low else np.ones_like(vals)
        np.add.at(out, idx, w / total * norm)
    return out


def _top(scores, k, mask=None, positive=False):
    keep = np.ones(len(scores), bool) if mask is None else mask.copy()
    if positive:
        keep &= scores > 0
    idx = np.flatnonzero(keep)
    if len(idx) > k:
        idx = idx[np.argpartition(-scores[idx], k - 1)[:k]]
    return idx, scores[idx]


def _union(a, b):
    idx = np.union1d(a[0], b[0])
    return idx


def list_mode(record, dense, lexical, doc_dense, doc_lexical, owner, n_chunks, label) -> None:
    """The retriever as built: every signal is a top-k list, fused by relative score."""
    n_docs = doc_dense.shape[1]
    for routed, (flat_pool, routed_pool), beta, w, wd in itertools.product(
        (8,), ((10, 10), (10, 80), (30, 80), (10, 200)), (0.5, 1.0, 2.0), (0.5, 0.7), (0.5,)
    ):
        final = np.zeros((dense.shape[0], n_chunks)) - 1e9
        for i in range(dense.shape[0]):
            depth = routed + 10
            D = _relative([_top(doc_dense[i], depth), _top(doc_lexical[i], depth, positive=True)], [wd, 1 - wd], n_docs)
            top_docs = np.argsort(-D, kind="stable")[:routed]
            mask = np.isin(owner, top_docs)
            lists = []
            for scores, positive in ((dense[i], False), (lexical[i], True)):
                flat = _top(scores, flat_pool, positive=positive)
                inside = _top(scores, routed_pool, mask, positive=positive)
                idx = np.union1d(flat[0], inside[0]).astype(int)
                lists.append((idx, scores[idx]))
            C = _relative(lists, [w, 1 - w], n_chunks)
            cand = np.union1d(lists[0][0], lists[1][0]).astype(int)
            final[i, cand] = C[cand] + beta * D[owner[cand]]
        pool = f"{flat_pool}/{routed_pool}"
        record(f"list {label} routed={routed} pool={pool} beta={beta} w_dense={w} w_doc_dense={wd}", final)


def main(argv: list[str] | None = None) -> None:
    from llama_index_ext_recursive.recursive.build import build_documents, group_nodes
    from llama_index_ext_recursive.recursive.evidence import document_text
    from llama_index_ext_recursive.retrievers.bm25 import MultilingualBM25Retriever

    p = cli.parser(__doc__)
    cli.add_data(p)
    cli.add_max_queries(p)
    cli.add_cache(p)
    p.add_argument("--out")
    p.add_argument("--list-dense", default="summary_text,centroid")
    cli.add_embed_model(p)
    p.add_argument(
        "--no-embed-title", action="store_true", help="exclude the title from chunk embeddings (the issue's convention)"
    )
    args = p.parse_args(argv)
    dataset = data.load(args.data, max_queries=args.max_queries)
    model = real_model(args.embed_model, args.cache)
    clock = timing.Stopwatch()
    nodes = data.embed_nodes(dataset, model, embed_title=not args.no_embed_title)
    cids = [n.node_id for n in nodes]
    query_vectors = data.query_vectors(dataset, model)  # one batch (the multilingual model is slow alone)
    qids = list(query_vectors)
    texts = [dataset.queries[q] for q in qids]
    E = np.asarray([n.embedding for n in nodes])
    Q = np.asarray([query_vectors[q] for q in qids])
    doc_ids = sorted({n.metadata["doc_id"] for n in nodes})
    doc_index = {d: i for i, d in enumerate(doc_ids)}
    owner = np.array([doc_index[n.metadata["doc_id"]] for n in nodes])
    onehot = np.zeros((len(nodes), len(doc_ids)))
    onehot[np.arange(len(nodes)), owner] = 1.0

    # chunk evidence
    dense = Q @ E.T
    bm25 = MultilingualBM25Retriever.from_defaults(nodes=nodes, unknown_filter_key=None)
    lexical = np.stack([bm25._score_all(bm25.tokenizer(t)) for t in texts])

    # document representations
    by_doc: dict[str, list[TextNode]] = {}
    for n in nodes:
        by_doc.setdefault(n.metadata["doc_id"], []).append(n)
    titles = [str(by_doc[d][0].metadata.get("title") or d) for d in doc_ids]
    lead = [" ".join(" ".join(c.text for c in by_doc[d]).split()[:60]) for d in doc_ids]
    content = ["\n".join(c.text for c in by_doc[d]) for d in doc_ids]
    centroid = onehot.T @ E
    centroid /= np.linalg.norm(centroid, axis=1, keepdims=True)
    ident_vec = np.asarray(model.get_text_embedding_batch([f"{title}\n{first}" for title, first in zip(titles, lead)]))

    def bm25_over(doc_texts):
        r = MultilingualBM25Retriever.from_defaults(
            nodes=[TextNode(id_=d, text=t) for d, t in zip(doc_ids, doc_texts)], unknown_filter_key=None
        )
        return np.stack([r._score_all(r.tokenizer(t)) for t in texts])

    built = build_documents(group_nodes(nodes, "doc_id"), "doc_id")
    summaries = {s.index_id: s for s in built.summary_nodes}
    summary_vec = np.asarray(model.get_text_embedding_batch([summaries[d].get_content() for d in doc_ids]))
    blend = centroid + summary_vec / np.linalg.norm(summary_vec, axis=1, keepdims=True)
    blend /= np.linalg.norm(blend, axis=1, keepdims=True)
    doc_texts = [
        document_text(
            built.records[d].title, summaries[d].metadata, summaries[d].get_content(), [c.text for c in by_doc[d]]
        )
        for d in doc_ids
    ]
    doc_signals = {
        "centroid": Q @ centroid.T,
        "summary_text": Q @ summary_vec.T,
        "blend": Q @ blend.T,
        "ident_dense": Q @ ident_vec.T,
        "document_bm25": bm25_over(doc_texts),
        "content_bm25": bm25_over([f"{t}\n{c}" for t, c in zip(titles, content)]),
    }
    # max chunk evidence per document
    setup = clock.seconds()

    def ev(s):
        return evaluate(s, qids, cids, dataset.qrels, dataset.doc_qrels, dataset.doc_of)

    results = {}

    def record(name, s):
        results[name] = ev(s)
        print(f"{name:60s} " + " ".join(f"{k}={v:.4f}" for k, v in results[name].items()), flush=True)

    D = minmax(dense)
    L = minmax(lexical)
    for w in (0.0, 0.3, 0.5, 0.7, 1.0):
        record(f"flat w_dense={w}", w * D + (1 - w) * L)
    flat = 0.5 * D + 0.5 * L
    # document-level scores: fusion of normalised signals
    norm = {k: minmax(v) for k, v in doc_signals.items()}
    gold = None
    if dataset.doc_qrels:
        gold = np.zeros((len(qids), len(doc_ids)))
        for i, q in enumerate(qids):
            for d in dataset.doc_qrels[q]:
                gold[i, doc_index[d]] = 1.0
        record("oracle: flat inside gold doc", flat + 10 * (gold @ onehot.T))
    combos = {name: norm[name] for name in norm}
    for dense_name in ("centroid", "summary_text", "blend", "ident_dense"):
        combos[f"{dense_name}+document_bm25"] = (norm[dense_name] + norm["document_bm25"]) / 2
    for name, doc in combos.items():
        top1 = np.argmax(doc, axis=1)
        if gold is not None:
            acc = float(np.mean(gold[np.arange(len(qids)), top1]))
            print(f"  routing {name}: top1 acc {acc:.4f}")
        for beta in (0.5, 1.0, 2.0):
            record(f"flat + {beta}*{name}", flat + beta * (doc @ onehot.T))
    for dense_name in args.list_dense.split(","):
        list_mode(
            record, dense, lexical, doc_signals[dense_name], doc_signals["document_bm25"], owner, len(cids), dense_name
        )
    if args.out:
        Path(args.out).write_text(json.dumps({"dataset": dataset.name, "setup_s": setup, "results": results}, indent=1))


if __name__ == "__main__":
    main()
