"""Hybrid calibration before/after: nDCG@10 of the hybrid against each child, time, events.

For each dataset and each metadata convention (``embedded``: titles embedded
with the chunk, the harness default; ``excluded``: ``title`` added to
``excluded_embed_metadata_keys``), this builds the vector and BM25 children
once, scores each child alone, the hybrid calibrated by the old switch (the
``fusion.py`` of ``--old-ref``) and the hybrid calibrated by
:mod:`llama_index_ext_recursive.retrievers.calibrate` at each ``--tolerances`` value,
with ir-measures through the eval runner. Calibration time and the number of
instrumentation events a counting handler saw are reported for both.

Embeddings go through the harness cache (``.cache/embeddings.sqlite``), with
query embeddings batched, so nothing is embedded twice.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/calibration.py \\
        --datasets xquad_en_fine,xquad_zh_fine,scifact,cmrc2018,legalbench_contractnli \\
        --tolerances 0,0.005,0.01,0.02,0.05 --out benchmarks/results/calibration.json
"""

from __future__ import annotations

import json
import logging
from typing import Any

from harness import RESULTS, cli, data, timing
from harness.models import real_model
from harness.versions import old_package
from llama_index.core.callbacks import CallbackManager
from llama_index.core.callbacks.base_handler import BaseCallbackHandler
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.event_handlers import BaseEventHandler

MAX_QUERIES = {"cmrc2018": 1000}
METRIC = "nDCG@10"


class Counter(BaseEventHandler):
    count: int = 0

    @classmethod
    def class_name(cls) -> str:
        return "Counter"

    def handle(self, event: Any, **kwargs: Any) -> None:
        self.count += 1


class CallbackCounter(BaseCallbackHandler):
    def __init__(self) -> None:
        super().__init__([], [])
        self.count = 0

    def on_event_start(self, *args: Any, **kwargs: Any) -> str:
        self.count += 1
        return ""

    def on_event_end(self, *args: Any, **kwargs: Any) -> None:
        self.count += 1

    def start_trace(self, trace_id: str | None = None) -> None:
        pass

    def end_trace(self, trace_id: str | None = None, trace_map: Any = None) -> None:
        pass


def ndcg(retriever, dataset, query_vectors) -> float:
    from llama_index_ext_recursive.eval.runner import evaluate_retriever

    result, _ = evaluate_retriever(retriever, dataset, 10, query_vectors)
    return result.aggregate[METRIC]


def counted(fn, managers: list[CallbackManager]):
    """Run ``fn`` with an event handler on the root dispatcher and a callback
    handler on each of ``managers`` (the children's and the model's)."""
    events = Counter()
    root = get_dispatcher()
    root.add_event_handler(events)
    callbacks = CallbackCounter()
    for manager in managers:
        manager.add_handler(callbacks)
    try:
        clock = timing.Stopwatch()
        value = fn()
        seconds = clock.seconds()
    finally:
        root.event_handlers.remove(events)
        for manager in managers:
            manager.remove_handler(callbacks)
    return value, seconds, events.count + callbacks.count


def run(
    name: str, convention: str, model, old, tolerances: list[float], root: str, max_queries: int | None
) -> dict[str, Any]:
    from llama_index_ext_recursive.retrievers.calibrate import (
        DEFAULT_TOLERANCE,
        collect_child_results,
        fit_weights,
        pseudo_queries,
        relative_score_fusion,
    )
    from llama_index_ext_recursive.retrievers.fusion import HybridFusionRetriever

    dataset = data.load(name, root=root, max_queries=max_queries or MAX_QUERIES.get(name))
    nodes = data.embed_nodes(dataset, model, embed_title=convention != "excluded")
    query_vectors = data.query_vectors(dataset, model)
    qids = list(query_vectors)

    base = HybridFusionRetriever.from_nodes(nodes, embed_model=model, calibrate=False)
    vector, bm25 = base._retrievers
    row: dict[str, Any] = {"dataset": name, "convention": convention, "corpus": len(nodes), "queries": len(qids)}
    row["vector"] = ndcg(vector, dataset, query_vectors)
    row["bm25"] = ndcg(bm25, dataset, query_vectors)

    # old switch: the fusion.py of `ref`, same children
    old_hybrid = old.HybridFusionRetriever(
        [vector, bm25], retriever_names=["vector", "bm25"], mode=old.HYBRID_MODE, similarity_top_k=10
    )
    managers = [vector.callback_manager, bm25.callback_manager, model.callback_manager]
    _, row["old_seconds"], row["old_events"] = counted(lambda: old_hybrid.calibrate(nodes), managers)
    row["old_weights"] = {s.value: w for s, w in old_hybrid.script_weights.items()}
    row["old"] = ndcg(old_hybrid, dataset, query_vectors)

    new_hybrid = HybridFusionRetriever(
        [vector, bm25], retriever_names=["vector", "bm25"], mode="relative_score", similarity_top_k=10
    )
    calibration, row["new_seconds"], row["new_events"] = counted(lambda: new_hybrid.calibrate(nodes), managers)
    row["calibration"] = calibration.to_dict()

    # every tolerance from the same collected results (the grid is re-fused only)
    pairs = {s.value: p for s, p in pseudo_queries(nodes).items() if len(p) >= 8}
    queries = [q for p in pairs.values() for _, q in p]
    results = collect_child_results([vector, bm25], queries, model)
    by_weights: dict[str, float] = {}
    row["tolerances"] = {}
    for tolerance in tolerances:
        weights, offset = {}, 0
        for script, p in pairs.items():
            part = [child[offset : offset + len(p)] for child in results]
            offset += len(p)
            weights[script], _ = fit_weights(part, [t for t, _ in p], fuse=relative_score_fusion, tolerance=tolerance)
        key = json.dumps(weights, sort_keys=True)
        if key not in by_weights:
            hybrid = HybridFusionRetriever(
                [vector, bm25],
                retriever_names=["vector", "bm25"],
                mode="relative_score",
                similarity_top_k=10,
                script_weights=weights,
            )
            by_weights[key] = ndcg(hybrid, dataset, query_vectors)
        row["tolerances"][str(tolerance)] = {"weights": weights, METRIC: by_weights[key]}
    row["new"] = row["tolerances"].get(str(DEFAULT_TOLERANCE), {}).get(METRIC)
    return row


def main(argv: list[str] | None = None) -> None:
    p = cli.parser(__doc__)
    cli.add_datasets(p, "xquad_en_fine,xquad_zh_fine,scifact,cmrc2018,legalbench_contractnli")
    cli.add_data_root(p)
    p.add_argument("--conventions", default="embedded,excluded")
    p.add_argument("--tolerances", type=cli.csv(float), default=[0.0, 0.005, 0.01, 0.02, 0.05])
    p.add_argument("--old-ref", default="9b2d52e", help="commit whose fusion.py has the old switch")
    cli.add_cache(p)
    cli.add_max_queries(p)
    cli.add_out(p, RESULTS / "calibration.json")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("bm25s").setLevel(logging.ERROR)
    model = real_model("minilm", args.cache)
    old = old_package(args.old_ref, "fusion")
    out = args.out
    rows = json.loads(out.read_text()) if out.exists() else []
    for name in cli.csv()(args.datasets):
        for convention in cli.csv()(args.conventions):
            row = run(name, convention, model, old, args.tolerances, args.data_root, args.max_queries)
            rows = [r for r in rows if (r["dataset"], r["convention"]) != (name, convention)] + [row]
            out.write_text(json.dumps(rows, indent=1))
            best = max(row["vector"], row["bm25"])
            print(
                f"{name:24s} {convention:8s} vector {row['vector']:.3f} bm25 {row['bm25']:.3f} "
                f"old {row['old']:.3f} ({row['old_seconds']:.1f} s, {row['old_events']} events) "
                f"new {row['new']:.3f} ({row['new_seconds']:.1f} s, {row['new_events']} events) "
                f"best child {best:.3f} | "
                + " ".join(f"t={t}:{v[METRIC]:.3f}{v['weights']}" for t, v in row["tolerances"].items()),
                flush=True,
            )


if __name__ == "__main__":
    main()
