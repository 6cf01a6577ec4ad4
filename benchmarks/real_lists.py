"""Document lists against k-means lists on real embeddings: ``VectorColumn`` itself, every
shared dataset of one embedding model combined into one column.

The chunk level's approximate step probes the lists (documents) whose
centroids are nearest the query and scores their rows exactly; on the
synthetic scale corpus that gives recall@10 1.0 from 8 probes, but there every
query's neighbours sit in its own document. Real questions' neighbours spread
over documents, so this script puts the shared datasets of one model into one
column (their chunks appended document by document, as
``ColumnarVectorStore.add`` does; a set without documents gives one list per
chunk), every set's queries searched against the whole column, and reports
recall@10 against the exact scan and the share of rows scored, by probes, next
to the k-means lists the column would use otherwise (``lists=None``), and
which of the two the column's rule picks (document lists when they hold 4 rows
on average). Vectors come from the embedding cache only: nothing is embedded.

Usage (repository root)::

    .venv/bin/python benchmarks/real_lists.py --out benchmarks/results/real_lists.md
"""

from __future__ import annotations

import numpy as np
from harness import RESULTS, cli, data
from harness.models import real_model
from harness.report import Table, fmt, write
from llama_index.core.schema import MetadataMode

from llama_index_ext_recursive.columnar import vectors
from llama_index_ext_recursive.columnar.vectors import VectorColumn

GROUPS = {
    "minilm": ["legalbench_contractnli", "xquad_en_fine", "xquad_en", "scifact", "llamaindex_blockchain_solana"],
    "multilingual": ["xquad_zh_fine", "xquad_zh", "cmrc2018"],
}
K = 10


def cached(model, kind: str, texts: list[str]) -> list[np.ndarray | None]:
    """The cached vectors of ``texts`` (``None`` where the cache has none)."""
    keys = [model._key(kind, text) for text in texts]
    found = model._lookup(keys)
    return [None if key not in found else np.asarray(found[key], dtype=np.float32) for key in keys]


def group_arrays(name: str, sets: list[str], cache: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict]:
    """Rows (document by document), each list's first row, queries, and counts."""
    model = real_model(name, cache)
    rows: list[np.ndarray] = []
    starts: list[int] = []
    queries: list[np.ndarray] = []
    counts = {"chunks": 0, "not cached": 0, "queries": 0, "queries not cached": 0, "documents": 0}
    for set_name in sets:
        dataset = data.load(set_name)
        nodes = dataset.nodes(title_in_text=not dataset.hierarchical, embed_title=True)
        vectors = cached(model, "text", [n.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes])
        by_doc: dict[str, list[np.ndarray]] = {}
        for node, vector in zip(nodes, vectors, strict=True):
            counts["chunks"] += 1
            if vector is None:
                counts["not cached"] += 1
                continue
            by_doc.setdefault(dataset.doc_of.get(node.node_id, node.node_id), []).append(vector)
        for chunk_vectors in by_doc.values():
            starts.append(sum(len(r) for r in rows) if rows else 0)
            rows.append(np.stack(chunk_vectors))
        counts["documents"] += len(by_doc)
        asked = cached(model, "query", list(dataset.queries.values()))
        counts["queries"] += len(asked)
        counts["queries not cached"] += sum(v is None for v in asked)
        queries.extend(v for v in asked if v is not None)
    matrix = np.concatenate(rows)
    return matrix, np.asarray(starts, dtype=np.int64), np.stack(queries), counts


def measure(name: str, sets: list[str], cache: str, probes: list[int]) -> tuple[dict, list[list[str]]]:
    matrix, starts, queries, counts = group_arrays(name, sets, cache)
    exact = VectorColumn(matrix.shape[1], approximate_threshold=10**9)
    exact.append(matrix)
    truth = exact.search_many(queries, K)[0]
    table: list[list[str]] = []

    def recall(found: list[np.ndarray]) -> float:
        return float(np.mean([len(np.intersect1d(a, b)) / K for a, b in zip(found, truth, strict=True)]))

    chosen = VectorColumn(matrix.shape[1], approximate_threshold=1)
    chosen.append(matrix, lists=starts)
    counts["the column's choice"] = chosen.approximate_kind
    rule, vectors._MIN_LIST_ROWS = vectors._MIN_LIST_ROWS, 1  # document lists, whatever their size
    try:
        lists = VectorColumn(matrix.shape[1], approximate_threshold=1)
        lists.append(matrix, lists=starts)
    finally:
        vectors._MIN_LIST_ROWS = rule
    assert lists.approximate_kind == "lists"
    sizes = np.diff(np.r_[starts, len(matrix)])
    for n in probes:
        lists.nprobe = n
        found = lists.search_many(queries, K)[0]
        centroids = lists._approximate.index.search(  # benchmark only: which lists were probed
            (queries / np.linalg.norm(queries, axis=1, keepdims=True)).astype(np.float32), min(n, len(starts))
        )[1]
        share = float(np.mean([sizes[c[c >= 0]].sum() for c in centroids])) / len(matrix)
        table.append(["documents", str(len(starts)), str(n), fmt(share, 3), fmt(recall(found), 4)])
    kmeans = VectorColumn(matrix.shape[1], approximate_threshold=1)
    kmeans.append(matrix)
    assert kmeans.approximate_kind == "kmeans"
    nlist = int(kmeans._approximate.index.nlist)
    for n in sorted({max(1, round(nlist * s)) for s in (0.02, 0.05, 0.1, 0.2, 0.3)} | {kmeans.probes or 1}):
        kmeans.nprobe = n
        found = kmeans.search_many(queries, K)[0]
        table.append(["k-means", str(nlist), str(n), fmt(n / nlist, 3) + " (lists)", fmt(recall(found), 4)])
    counts.update(rows=len(matrix), median_rows_per_document=float(np.median(sizes)), mean=float(sizes.mean()))
    return counts, table


def main() -> None:
    p = cli.parser(__doc__)
    p.add_argument("--cache", default=".cache/embeddings.sqlite")
    p.add_argument("--probes", type=cli.csv(int), default=[1, 2, 4, 8, 16, 32, 64, 128])
    cli.add_out(p, RESULTS / "real_lists.md")
    args = p.parse_args()
    lines = [f"Command: `{cli.command()}`", ""]
    for name, sets in GROUPS.items():
        counts, table = measure(name, sets, args.cache, args.probes)
        lines += [
            f"## {name}: {', '.join(sets)}",
            "",
            ", ".join(f"{k}: {fmt(v, 1) if isinstance(v, float) else v}" for k, v in counts.items()),
            "",
            Table(["lists", "count", "probes", "share of rows scored", "recall@10"]).render(table),
            "",
        ]
        print("\n".join(lines[-6:]), flush=True)
    write(args.out, "\n".join(lines))


if __name__ == "__main__":
    main()
