"""Persist and load time of a ~5k-node RecursiveSummaryRetriever and a 5k-node BM25 index.

Data: ``--docs`` (500) documents of ``--chunks`` (10) chunks, each chunk a
seeded sentence of 12 words from a 2,000-word vocabulary, carrying a seeded
random unit vector of ``--dim`` (384) dimensions, so nothing is embedded
(``MockEmbedding`` only answers queries). Summaries come from the default
extractive summarizer. Each operation runs ``--repeats`` (3) times into a fresh
folder under a temporary directory; the table reports the median. The BM25
index is built over the same 5k chunks.

Besides the wall times, ``checksum`` is the time to sha256 every file of the
persisted index once (what loading now verifies and persisting now records),
measured separately on the same files.

Run: ``HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/persist_speed.py``
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from llama_index.core.embeddings import MockEmbedding
from llama_index.core.schema import TextNode

from llama_index_ext_recursive import MultilingualBM25Retriever, RecursiveSummaryRetriever


def corpus(docs: int, chunks: int, dim: int, seed: int) -> list:
    rng = np.random.default_rng(seed)
    vocabulary = [f"word{i}" for i in range(2000)]
    nodes = []
    for d in range(docs):
        for c in range(chunks):
            vector = rng.normal(size=dim)
            words = rng.choice(vocabulary, size=12)
            nodes.append(
                TextNode(
                    id_=f"doc{d:04d}-{c:02d}",
                    text=" ".join(words) + ".",
                    embedding=list(vector / np.linalg.norm(vector)),
                    metadata={"doc_id": f"doc{d:04d}", "year": 2000 + d % 25},
                )
            )
    return nodes


def timed(action) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def checksum_seconds(folder: Path) -> float:
    started = time.perf_counter()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        hashlib.sha256(path.read_bytes()).hexdigest()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=500)
    parser.add_argument("--chunks", type=int, default=10)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    nodes = corpus(args.docs, args.chunks, args.dim, args.seed)
    model = MockEmbedding(embed_dim=args.dim)
    recursive = RecursiveSummaryRetriever.from_nodes(nodes, embed_model=model, show_progress=False)
    bm25 = MultilingualBM25Retriever.from_defaults(nodes=nodes)
    work = Path(tempfile.mkdtemp(prefix="persist-speed-"))
    rows = []
    try:
        for name, retriever, load in (
            ("RecursiveSummaryRetriever", recursive,
             lambda p: RecursiveSummaryRetriever.from_persist_dir(p, embed_model=model)),
            ("MultilingualBM25Retriever", bm25, MultilingualBM25Retriever.from_persist_dir),
        ):
            persists, loads, sums = [], [], []
            for i in range(args.repeats):
                target = work / f"{name}-{i}"
                persists.append(timed(lambda: retriever.persist(target)))
                loads.append(timed(lambda: load(target)))
                sums.append(checksum_seconds(target))
            size = sum(p.stat().st_size for p in (work / f"{name}-0").rglob("*") if p.is_file())
            rows.append((name, len(nodes), size / 2**20, statistics.median(persists),
                         statistics.median(loads), statistics.median(sums)))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("| index | nodes | MiB on disk | persist s | load s | sha256 of all files s |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, n, mib, p, l, s in rows:
        print(f"| {name} | {n} | {mib:.1f} | {p:.2f} | {l:.2f} | {s:.3f} |")


if __name__ == "__main__":
    main()
