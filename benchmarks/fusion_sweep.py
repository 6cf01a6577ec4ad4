"""Why hybrid weights are calibrated per script: fixed-weight fusion swept on real datasets.

For each dataset, each child's top-100 list is computed once per query (the
vector child of ``HybridFusionRetriever.from_nodes`` and its
``MultilingualBM25Retriever``, cached embeddings from
``.cache/embeddings.sqlite``, query embeddings precomputed). The stored lists
are then fused by ``HybridFusionRetriever`` itself (children that replay the
stored lists, cut to ``--child-k``) in ``reciprocal_rerank`` and
``relative_score`` mode with vector weight ``w`` and BM25 weight ``1 - w``,
and scored with ir-measures (nDCG@10). The table also gives the
calibration ``from_nodes`` performs on the same nodes.

Usage (repository root)::

    .venv/bin/python benchmarks/fusion_sweep.py     # scifact, xquad_en_fine, xquad_zh_fine, cmrc2018 (1000 q)

With the multilingual model, every vector weight from 0 to 1 (issue 14), and English questions over
the Chinese paragraphs (XQuAD ids align; titles kept out of the embedded and indexed text)::

    .venv/bin/python benchmarks/fusion_sweep.py --datasets xquad_zh_fine,cmrc2018 --embed-model multilingual \
        --weights 0,0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9,1 --out benchmarks/results/fusion_sweep_multilingual.json
    .venv/bin/python benchmarks/fusion_sweep.py --datasets xquad_zh --queries-from xquad_en --no-embed-title \
        --embed-model multilingual --weights 0,0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9,1 \
        --out benchmarks/results/fusion_sweep_en_to_zh.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Dict, List

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle

from llama_index_ext_recursive.models import bundled_embed_model, bundled_multilingual_model
from llama_index_ext_recursive.embedding_cache import CachedEmbedding
from llama_index_ext_recursive.eval.data import BeirDataset
from llama_index_ext_recursive.eval.runner import score
from llama_index_ext_recursive.retrievers.fusion import HybridFusionRetriever

REPO = Path(__file__).resolve().parent.parent
WEIGHTS = [0.0, 0.05, 0.1, 0.2, 0.3, 0.5]
MODES = ["reciprocal_rerank", "relative_score"]
DATASETS = {"scifact": None, "xquad_en_fine": None, "xquad_zh_fine": None, "cmrc2018": 1000}


class Replay(BaseRetriever):
    """Returns a stored list per query text."""

    def __init__(self, lists: Dict[str, List[NodeWithScore]], k: int) -> None:
        self._lists, self._k = lists, k
        super().__init__()

    def _retrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        return self._lists[query_bundle.query_str][: self._k]


def sweep(
    dataset: BeirDataset, model: CachedEmbedding, child_k: int, weights_tried: List[float], embed_title: bool
) -> Dict[str, object]:
    nodes = dataset.nodes(title_in_text=embed_title and not dataset.hierarchical, embed_title=embed_title)
    vectors = model.get_text_embedding_batch([n.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes])
    for node, vector in zip(nodes, vectors):
        node.embedding = vector
    hybrid = HybridFusionRetriever.from_nodes(nodes, embed_model=model, child_top_k=100)
    vector_child, bm25_child = hybrid._retrievers
    texts = dict(dataset.queries)
    query_vectors = dict(zip(texts.values(), model._get_query_embeddings(list(texts.values()))))
    stored: List[Dict[str, List[NodeWithScore]]] = [{}, {}]
    for text in texts.values():
        bundle = QueryBundle(text, embedding=query_vectors[text])
        stored[0][text] = vector_child.retrieve(bundle)
        stored[1][text] = bm25_child.retrieve(bundle)

    def ndcg(retriever: BaseRetriever) -> float:
        run = {qid: [n.node.node_id for n in retriever.retrieve(text)] for qid, text in texts.items()}
        return score(run, dataset.qrels, 10).aggregate["nDCG@10"]

    report: Dict[str, object] = {
        "dataset": dataset.name,
        "queries": len(texts),
        "vector": ndcg(Replay(stored[0], 10)),
        "bm25": ndcg(Replay(stored[1], 10)),
        "calibration": hybrid.calibration.to_dict() if hybrid.calibration else None,
        "fixed": {},
    }
    for mode in MODES:
        for w in weights_tried:
            weights = [w, 1.0 - w] if w > 0 else [0.0, 1.0]
            fused = HybridFusionRetriever(
                [Replay(stored[0], child_k), Replay(stored[1], child_k)],
                mode=mode, retriever_weights=weights,
            )
            report["fixed"][f"{mode} w={w}"] = ndcg(fused)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--datasets", default=",".join(DATASETS))
    parser.add_argument("--data-root", default=str((REPO / ".." / "shared" / "data").resolve()))
    parser.add_argument("--cache", default=str(REPO / ".cache" / "embeddings.sqlite"))
    parser.add_argument("--child-k", type=int, default=10, help="hits per child fed to fusion")
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "fusion_sweep.json"))
    parser.add_argument("--embed-model", choices=["minilm", "multilingual"], default="minilm")
    parser.add_argument("--weights", default=",".join(map(str, WEIGHTS)), help="vector weights to try")
    parser.add_argument("--queries-from", help="a dataset folder name whose queries are asked (ids aligned)")
    parser.add_argument("--no-embed-title", action="store_true")
    args = parser.parse_args()
    weights_tried = [float(w) for w in args.weights.split(",")]
    base = bundled_multilingual_model() if args.embed_model == "multilingual" else bundled_embed_model()
    model = CachedEmbedding(base, args.cache)
    reports = []
    header = "| dataset | vector | bm25 | " + " | ".join(f"{m.split('_')[0]} w={w}" for m in MODES for w in weights_tried) + " |"
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    for name in args.datasets.split(","):
        dataset = BeirDataset.load(
            Path(args.data_root) / name, max_queries=DATASETS.get(name),
            queries_from=Path(args.data_root) / args.queries_from if args.queries_from else None,
        )
        report = sweep(dataset, model, args.child_k, weights_tried, not args.no_embed_title)
        reports.append(report)
        cells = [f"{report['vector']:.3f}", f"{report['bm25']:.3f}"] + [
            f"{value:.3f}" for value in report["fixed"].values()
        ]
        print(f"| {name} | " + " | ".join(cells) + " |")
    Path(args.out).write_text(json.dumps(reports, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
