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

import argparse
import logging
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from llama_index.core.schema import MetadataMode  # noqa: E402

from llama_index_ext_recursive import RecursiveSummaryRetriever  # noqa: E402
from llama_index_ext_recursive.embedding_cache import CachedEmbedding  # noqa: E402
from llama_index_ext_recursive.eval import BeirDataset  # noqa: E402
from llama_index_ext_recursive.eval.runner import evaluate_retriever  # noqa: E402
from llama_index_ext_recursive.models import bundled_multilingual_model  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
PAIRS = (("xquad_en", "xquad_zh"), ("xquad_zh", "xquad_en"))  # (queries, corpus)
WEIGHTS = (1.0, 0.5, 0.25, 0.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-root", default=str((REPO / ".." / "shared" / "data").resolve()))
    parser.add_argument("--cache", default=str(REPO / ".cache" / "embeddings.sqlite"))
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    model = CachedEmbedding(bundled_multilingual_model(), args.cache)
    print("| queries -> corpus | " + " | ".join(f"rule off, document_weight={w}" for w in WEIGHTS)
          + " | rule on (default) |")
    print("|---|" + "---:|" * (len(WEIGHTS) + 1))
    for queries, corpus in PAIRS:
        root = Path(args.data_root)
        dataset = BeirDataset.load(root / corpus, queries_from=root / queries)
        nodes = dataset.nodes(title_in_text=False, embed_title=False)
        texts = [n.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes]
        for node, vector in zip(nodes, model.get_text_embedding_batch(texts)):
            node.embedding = vector
        query_vectors = dict(zip(dataset.queries, model._get_query_embeddings(list(dataset.queries.values()))))
        cells = []
        for weight in [*WEIGHTS, None]:
            retriever = RecursiveSummaryRetriever.from_nodes(
                nodes, doc_id_key="doc_id", embed_model=model, similarity_top_k=10,
                **({} if weight is None else {"document_weight": weight}),
            )
            if weight is not None:  # the rule off: every query gets document_weight
                retriever._document_weight = lambda script, r=retriever: r.document_weight
            result, _ = evaluate_retriever(retriever, dataset, 10, query_vectors)
            cells.append(f"{result.aggregate['nDCG@10']:.4f}")
        print(f"| {queries} -> {corpus} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
