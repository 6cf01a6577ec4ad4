"""Cost of BackfillVectorRetriever's input checks (issue 11); figures in benchmarks/results/bad-input.md.

Reading the filter vocabulary (once per docstore; again after an unknown key),
from ``docstore.docs`` and from the stored JSON, and the per-query checks
(``check_query`` + cached filter check + ``check_vectors``) against a whole
filtered ``retrieve``, over ``--nodes`` random unit vectors.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/input_checks.py
"""

from __future__ import annotations

import numpy as np
from harness import cli, timing
from harness.corpus import random_unit_vectors
from llama_index.core import MockEmbedding, StorageContext, VectorStoreIndex
from llama_index.core.schema import TextNode


def main(argv: list[str] | None = None) -> None:
    from llama_index_ext_recursive import BackfillVectorRetriever, FilteredQueryBundle, NumpyVectorStore
    from llama_index_ext_recursive.filters import FilterVocabulary
    from llama_index_ext_recursive.validation import check_query

    p = cli.parser(__doc__)
    p.add_argument("--nodes", type=int, default=20_000)
    p.add_argument("--dim", type=int, default=384)
    p.add_argument("--reps", type=int, default=200, help="calls per figure (vocabulary reads: 3)")
    args = p.parse_args(argv)
    rng = np.random.default_rng(0)
    nodes = [
        TextNode(
            id_=f"n{i}", text=f"t{i}", embedding=v.tolist(), metadata={"group": f"g{i % 50}", "year": 2000 + i % 20}
        )
        for i, v in enumerate(random_unit_vectors(rng, args.nodes, args.dim))
    ]
    index = VectorStoreIndex(
        nodes,
        storage_context=StorageContext.from_defaults(vector_store=NumpyVectorStore()),
        embed_model=MockEmbedding(embed_dim=args.dim),
    )
    retriever = BackfillVectorRetriever(index, similarity_top_k=10)
    q = list(rng.normal(size=args.dim))
    bundle = FilteredQueryBundle("query", filters={"group": "g7"}, embedding=q)
    retriever.retrieve(bundle)

    def per_call(fn, reps: int = args.reps) -> float:
        return timing.ms_per_call(lambda _: fn(), range(reps)) / 1000

    nodes_read = per_call(lambda: FilterVocabulary.from_nodes(index.docstore.docs.values()), 3)
    json_read = per_call(lambda: retriever.refresh_filter_vocabulary(), 3)
    filters = retriever._resolve(bundle).filters
    checks = per_call(
        lambda: (check_query(bundle), retriever._check_filters(filters), retriever._checked_embedding(q, True))
    )
    total = per_call(lambda: retriever.retrieve(bundle))
    print(
        f"N={args.nodes} D={args.dim}: vocabulary from docstore.docs {nodes_read * 1e3:.0f} ms, from the stored JSON "
        f"{json_read * 1e3:.0f} ms; per-query checks {checks * 1e6:.0f} us of a {total * 1e6:.0f} us "
        f"filtered retrieve ({100 * checks / total:.1f}%)"
    )


if __name__ == "__main__":
    main()
