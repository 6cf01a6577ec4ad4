"""Why a cross-lingual query is ranked without the documents' evidence (issue 14).

XQuAD questions in one language over the paragraphs of another (ids align), the bundled
multilingual model, titles kept out of the embedded and indexed text. The default
``RecursiveSummaryRetriever`` is scored with the rule off (``document_weight`` applies to
every query, as before issue 14) at several document weights, and with the rule on (the
default: 0 for a query in a script the corpus has no text in). nDCG@10 through the eval
runner (ir-measures); embeddings from ``.cache/embeddings.sqlite``.

    .venv/bin/python benchmarks/cross_lingual_document_weight.py \\
        > benchmarks/results/cross_lingual_document_weight.md
"""

from __future__ import annotations

import logging

from harness import cli, data
from harness.models import real_model
from harness.report import Table

PAIRS = (("xquad_en", "xquad_zh"), ("xquad_zh", "xquad_en"))  # (queries, corpus)
WEIGHTS = (1.0, 0.5, 0.25, 0.0)


def main(argv: list[str] | None = None) -> None:
    from llama_index_ext_recursive import RecursiveSummaryRetriever
    from llama_index_ext_recursive.eval.runner import evaluate_retriever

    p = cli.parser(__doc__)
    cli.add_data_root(p)
    cli.add_cache(p)
    cli.add_max_queries(p)
    args = p.parse_args(argv)
    logging.disable(logging.WARNING)
    model = real_model("multilingual", args.cache)
    table = Table(["queries -> corpus", *(f"rule off, document_weight={w}" for w in WEIGHTS), "rule on (default)"])
    print(table.header())
    for queries, corpus in PAIRS:
        dataset = data.load(corpus, root=args.data_root, queries_from=queries, max_queries=args.max_queries)
        nodes = data.embed_nodes(dataset, model, title_in_text=False, embed_title=False)
        query_vectors = data.query_vectors(dataset, model)
        cells = []
        for weight in [*WEIGHTS, None]:
            retriever = RecursiveSummaryRetriever.from_nodes(
                nodes,
                doc_id_key="doc_id",
                embed_model=model,
                similarity_top_k=10,
                **({} if weight is None else {"document_weight": weight}),
            )
            if weight is not None:  # the rule off: every query gets document_weight
                retriever._document_weight = lambda script, r=retriever: r.document_weight
            result, _ = evaluate_retriever(retriever, dataset, 10, query_vectors)
            cells.append(f"{result.aggregate['nDCG@10']:.4f}")
        print(table.row(f"{queries} -> {corpus}", *cells), flush=True)


if __name__ == "__main__":
    main()
