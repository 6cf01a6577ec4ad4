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

import hashlib
import shutil
import tempfile
from pathlib import Path

from harness import cli, timing
from harness.corpus import vocabulary, word_nodes
from harness.report import Table
from llama_index.core.embeddings import MockEmbedding


def checksum_seconds(folder: Path) -> float:
    def digest() -> None:
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            hashlib.sha256(path.read_bytes()).hexdigest()

    return timing.seconds(digest)


def main(argv: list[str] | None = None) -> None:
    from llama_index_ext_recursive import MultilingualBM25Retriever, RecursiveSummaryRetriever

    p = cli.parser(__doc__)
    p.add_argument("--docs", type=int, default=500)
    p.add_argument("--chunks", type=int, default=10)
    p.add_argument("--dim", type=int, default=384)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    nodes = list(
        word_nodes(args.docs, args.chunks, vocabulary=vocabulary(2000, "word"), words=12, dim=args.dim, seed=args.seed)
    )
    model = MockEmbedding(embed_dim=args.dim)
    recursive = RecursiveSummaryRetriever.from_nodes(nodes, embed_model=model, show_progress=False)
    bm25 = MultilingualBM25Retriever.from_defaults(nodes=nodes)
    work = Path(tempfile.mkdtemp(prefix="persist-speed-"))
    rows = []
    try:
        for name, retriever, load in (
            (
                "RecursiveSummaryRetriever",
                recursive,
                lambda p: RecursiveSummaryRetriever.from_persist_dir(p, embed_model=model),
            ),
            ("MultilingualBM25Retriever", bm25, MultilingualBM25Retriever.from_persist_dir),
        ):
            persists, loads, sums = [], [], []
            for i in range(args.repeats):
                target = work / f"{name}-{i}"
                persists.append(timing.seconds(lambda: retriever.persist(target)))
                loads.append(timing.seconds(lambda: load(target)))
                sums.append(checksum_seconds(target))
            size = sum(p.stat().st_size for p in (work / f"{name}-0").rglob("*") if p.is_file())
            rows.append(
                (
                    name,
                    len(nodes),
                    f"{size / 2**20:.1f}",
                    f"{timing.median(persists):.2f}",
                    f"{timing.median(loads):.2f}",
                    f"{timing.median(sums):.3f}",
                )
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(Table(["index", "nodes", "MiB on disk", "persist s", "load s", "sha256 of all files s"]).render(rows))


if __name__ == "__main__":
    main()
