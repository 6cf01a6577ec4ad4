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

import json

from harness import RESULTS, cli, data
from harness.models import real_model
from harness.report import Table
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle

WEIGHTS = [0.0, 0.05, 0.1, 0.2, 0.3, 0.5]
MODES = ["reciprocal_rerank", "relative_score"]
DATASETS = {"scifact": None, "xquad_en_fine": None, "xquad_zh_fine": None, "cmrc2018": 1000}


class Replay(BaseRetriever):
    """Returns a stored list per query text."""

    def __init__(self, lists: dict[str, list[NodeWithScore]], k: int) -> None:
        self._lists, self._k = lists, k
        super().__init__()

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return self._lists[query_bundle.query_str][: self._k]


def sweep(dataset, model, child_k: int, weights_tried: list[float], embed_title: bool) -> dict[str, object]:
    from llama_index_ext_recursive.eval.runner import score
    from llama_index_ext_recursive.retrievers.fusion import HybridFusionRetriever

    nodes = data.embed_nodes(
        dataset, model, title_in_text=embed_title and not dataset.hierarchical, embed_title=embed_title
    )
    hybrid = HybridFusionRetriever.from_nodes(nodes, embed_model=model, child_top_k=100)
    vector_child, bm25_child = hybrid._retrievers
    texts = dict(dataset.queries)
    stored: list[dict[str, list[NodeWithScore]]] = [{}, {}]
    for bundle in data.query_bundles(dataset, model):
        stored[0][bundle.query_str] = vector_child.retrieve(bundle)
        stored[1][bundle.query_str] = bm25_child.retrieve(bundle)

    def ndcg(retriever: BaseRetriever) -> float:
        run = {qid: [n.node.node_id for n in retriever.retrieve(text)] for qid, text in texts.items()}
        return score(run, dataset.qrels, 10).aggregate["nDCG@10"]

    report: dict[str, object] = {
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
                mode=mode,
                retriever_weights=weights,
            )
            report["fixed"][f"{mode} w={w}"] = ndcg(fused)
    return report


def main(argv: list[str] | None = None) -> None:
    p = cli.parser(__doc__)
    cli.add_datasets(p, ",".join(DATASETS))
    cli.add_data_root(p)
    cli.add_cache(p)
    p.add_argument("--child-k", type=int, default=10, help="hits per child fed to fusion")
    cli.add_out(p, RESULTS / "fusion_sweep.json")
    cli.add_embed_model(p)
    p.add_argument("--weights", type=cli.csv(float), default=WEIGHTS, help="vector weights to try")
    p.add_argument("--queries-from", help="a dataset folder name whose queries are asked (ids aligned)")
    p.add_argument("--no-embed-title", action="store_true")
    p.add_argument(
        "--max-queries", type=int, default=None, help="cap every dataset at N queries (default: all, cmrc2018 1000)"
    )
    args = p.parse_args(argv)
    model = real_model(args.embed_model, args.cache)
    reports = []
    table = Table(["dataset", "vector", "bm25", *(f"{m.split('_')[0]} w={w}" for m in MODES for w in args.weights)])
    print(table.header())
    for name in cli.csv()(args.datasets):
        dataset = data.load(
            name,
            root=args.data_root,
            max_queries=args.max_queries or DATASETS.get(name),
            queries_from=args.queries_from,
        )
        report = sweep(dataset, model, args.child_k, args.weights, not args.no_embed_title)
        reports.append(report)
        cells = [f"{report['vector']:.3f}", f"{report['bm25']:.3f}"] + [
            f"{value:.3f}" for value in report["fixed"].values()
        ]
        print(table.row(name, *cells), flush=True)
    args.out.write_text(json.dumps(reports, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
