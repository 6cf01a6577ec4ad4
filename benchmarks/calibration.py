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

import argparse
import importlib.util
import json
import logging
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

from llama_index.core.callbacks import CallbackManager
from llama_index.core.callbacks.base_handler import BaseCallbackHandler
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.schema import MetadataMode

from llama_index_ext_recursive.retrievers.calibrate import (
    DEFAULT_TOLERANCE,
    collect_child_results,
    embed_queries,
    fit_weights,
    pseudo_queries,
    relative_score_fusion,
)
from llama_index_ext_recursive.models import resolve_embed_model
from llama_index_ext_recursive.eval import BeirDataset
from llama_index_ext_recursive.embedding_cache import CachedEmbedding
from llama_index_ext_recursive.eval.runner import evaluate_retriever
from llama_index_ext_recursive.retrievers.fusion import HybridFusionRetriever

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared" / "data"
MAX_QUERIES = {"cmrc2018": 1000}
METRIC = "nDCG@10"


class BatchedCache(CachedEmbedding):
    """The harness cache, with query embeddings looked up and computed in batches."""

    def _get_query_embeddings(self, queries: List[str]) -> List[List[float]]:
        with self._lock:
            keys = [self._key("query", q) for q in queries]
            found = self._lookup(keys)
            todo = {k: q for k, q in zip(keys, queries) if k not in found}
            if todo:
                vectors = embed_queries(self._model, list(todo.values()))
                self.computed += len(todo)
                new = {k: [float(x) for x in v] for k, v in zip(todo, vectors)}
                self._store(new)
                found.update(self._lookup(list(new)))
            return [found[k] for k in keys]


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

    def start_trace(self, trace_id: Optional[str] = None) -> None:
        pass

    def end_trace(self, trace_id: Optional[str] = None, trace_map: Any = None) -> None:
        pass


def old_fusion_module(ref: str):
    source = subprocess.run(
        ["git", "show", f"{ref}:llama_index_ext_recursive/fusion.py"],
        cwd=ROOT, check=True, capture_output=True, text=True,
    ).stdout
    path = Path("/tmp") / f"old_fusion_{ref}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(f"old_fusion_{ref}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def ndcg(retriever, dataset, query_vectors) -> float:
    result, _ = evaluate_retriever(retriever, dataset, 10, query_vectors)
    return result.aggregate[METRIC]


def counted(fn, managers: List[CallbackManager]):
    """Run ``fn`` with an event handler on the root dispatcher and a callback
    handler on each of ``managers`` (the children's and the model's)."""
    events = Counter()
    root = get_dispatcher()
    root.add_event_handler(events)
    callbacks = CallbackCounter()
    for manager in managers:
        manager.add_handler(callbacks)
    try:
        started = time.perf_counter()
        value = fn()
        seconds = time.perf_counter() - started
    finally:
        root.event_handlers.remove(events)
        for manager in managers:
            manager.remove_handler(callbacks)
    return value, seconds, events.count + callbacks.count


def run(name: str, convention: str, model, old, tolerances: List[float], ref: str) -> Dict[str, Any]:
    dataset = BeirDataset.load(DATA / name, max_queries=MAX_QUERIES.get(name))
    nodes = dataset.nodes(title_in_text=not dataset.hierarchical)
    if convention == "excluded":
        for node in nodes:
            node.excluded_embed_metadata_keys = list(node.excluded_embed_metadata_keys) + ["title"]
    vectors = model.get_text_embedding_batch([n.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes])
    for node, vector in zip(nodes, vectors):
        node.embedding = vector
    qids = list(dataset.queries)
    query_vectors = dict(zip(qids, model._get_query_embeddings([dataset.queries[q] for q in qids])))

    base = HybridFusionRetriever.from_nodes(nodes, embed_model=model, calibrate=False)
    vector, bm25 = base._retrievers
    row: Dict[str, Any] = {"dataset": name, "convention": convention, "corpus": len(nodes),
                           "queries": len(qids)}
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

    new_hybrid = HybridFusionRetriever([vector, bm25], retriever_names=["vector", "bm25"],
                                       mode="relative_score", similarity_top_k=10)
    calibration, row["new_seconds"], row["new_events"] = counted(lambda: new_hybrid.calibrate(nodes), managers)
    row["calibration"] = calibration.to_dict()

    # every tolerance from the same collected results (the grid is re-fused only)
    pairs = {s.value: p for s, p in pseudo_queries(nodes).items() if len(p) >= 8}
    queries = [q for p in pairs.values() for _, q in p]
    results = collect_child_results([vector, bm25], queries, model)
    by_weights: Dict[str, float] = {}
    row["tolerances"] = {}
    for tolerance in tolerances:
        weights, offset = {}, 0
        for script, p in pairs.items():
            part = [child[offset : offset + len(p)] for child in results]
            offset += len(p)
            weights[script], _ = fit_weights(part, [t for t, _ in p], fuse=relative_score_fusion,
                                             tolerance=tolerance)
        key = json.dumps(weights, sort_keys=True)
        if key not in by_weights:
            hybrid = HybridFusionRetriever([vector, bm25], retriever_names=["vector", "bm25"],
                                           mode="relative_score", similarity_top_k=10,
                                           script_weights=weights)
            by_weights[key] = ndcg(hybrid, dataset, query_vectors)
        row["tolerances"][str(tolerance)] = {"weights": weights, METRIC: by_weights[key]}
    row["new"] = row["tolerances"].get(str(DEFAULT_TOLERANCE), {}).get(METRIC)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", default="xquad_en_fine,xquad_zh_fine,scifact,cmrc2018,legalbench_contractnli")
    parser.add_argument("--conventions", default="embedded,excluded")
    parser.add_argument("--tolerances", default="0,0.005,0.01,0.02,0.05")
    parser.add_argument("--old-ref", default="9b2d52e", help="commit whose fusion.py has the old switch")
    parser.add_argument("--cache", default=str(ROOT / ".cache" / "embeddings.sqlite"))
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "calibration.json"))
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("bm25s").setLevel(logging.ERROR)
    model = BatchedCache(resolve_embed_model(None), args.cache)
    old = old_fusion_module(args.old_ref)
    tolerances = [float(t) for t in args.tolerances.split(",")]
    out = Path(args.out)
    rows = json.loads(out.read_text()) if out.exists() else []
    for name in args.datasets.split(","):
        for convention in args.conventions.split(","):
            row = run(name, convention, model, old, tolerances, args.old_ref)
            rows = [r for r in rows if (r["dataset"], r["convention"]) != (name, convention)] + [row]
            out.write_text(json.dumps(rows, indent=1))
            best = max(row["vector"], row["bm25"])
            print(f"{name:24s} {convention:8s} vector {row['vector']:.3f} bm25 {row['bm25']:.3f} "
                  f"old {row['old']:.3f} ({row['old_seconds']:.1f} s, {row['old_events']} events) "
                  f"new {row['new']:.3f} ({row['new_seconds']:.1f} s, {row['new_events']} events) "
                  f"best child {best:.3f} | " + " ".join(
                      f"t={t}:{v[METRIC]:.3f}{v['weights']}" for t, v in row["tolerances"].items()),
                  flush=True)


if __name__ == "__main__":
    sys.exit(main())
