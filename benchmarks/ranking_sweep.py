"""Recursive ranking variants against the flat retrievers, on every shared dataset, in one run.

For each dataset this embeds the chunks and queries once (the shared embedding
cache), builds the upstream flat retrievers, our hybrid and the routing oracle
from ``llama_index_ext_recursive.eval``'s registry, then builds the recursive
retriever once per ``--contexts`` value (``chunk_context=``, a build setting)
and runs every query once per ``--document-weights`` value (a query-time
setting, changed on the built retriever). It is the measurement behind the
recursive retriever's ranking defaults (docs/BENCHMARKS.md, "Ranking: never
below flat search (issue 28)"); per-query nDCG@10 of every run is kept in the
JSON so a per-query rule can be studied offline.

    .venv/bin/python benchmarks/ranking_sweep.py --no-embed-title --out benchmarks/results/ranking/no_embed_title.json
    .venv/bin/python benchmarks/ranking_sweep.py --out benchmarks/results/ranking/embed_title.json
"""

from __future__ import annotations

import json
import time
from typing import Any

from harness import RESULTS, cli, data
from harness.models import DEFAULT_CACHE
from harness.report import table
from harness.versions import head, package_dir
from run_eval import DATASETS

BASELINES = "upstream-vector,upstream-bm25,upstream-fusion,upstream-fusion-relative,hybrid,oracle-routing"
K = 10
NDCG = f"nDCG@{K}"


def run_dataset(name: str, args: Any) -> dict[str, Any]:
    from llama_index.core.schema import MetadataMode

    from llama_index_ext_recursive.embedding_cache import CachedEmbedding
    from llama_index_ext_recursive.eval.registry import BuildContext, build_retriever
    from llama_index_ext_recursive.eval.runner import evaluate_retriever
    from llama_index_ext_recursive.models import choose_embed_model, corpus_sample
    from llama_index_ext_recursive.recursive.retriever import RecursiveSummaryRetriever

    dataset = data.load(name, root=args.data_root, max_queries=args.max_queries or DATASETS.get(name))
    embed_title = not args.no_embed_title
    nodes = dataset.nodes(title_in_text=embed_title and not dataset.hierarchical, embed_title=embed_title)
    choice = choose_embed_model(None, texts=corpus_sample(nodes))
    model = CachedEmbedding(choice.model, args.cache)
    vectors = model.get_text_embedding_batch([n.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes])
    for node, vector in zip(nodes, vectors):
        node.embedding = vector
    queries = data.query_vectors(dataset, model)
    context = BuildContext(nodes=list(nodes), embed_model=model, top_k=K, gold_docs=dataset.gold_documents())
    runs: dict[str, dict[str, Any]] = {}

    def measure(label: str, retriever: Any, built_s: float) -> None:
        started = time.perf_counter()
        result, _ = evaluate_retriever(retriever, dataset, K, queries)
        runs[label] = {
            "metrics": result.aggregate,
            "build_s": round(built_s, 1),
            "run_s": round(time.perf_counter() - started, 1),
            "per_query": {q: m.get(NDCG, 0.0) for q, m in result.per_query.items()},
        }
        print(f"{name:30s} {label:40s} {NDCG}={result.aggregate[NDCG]:.4f}", flush=True)

    with context.resources:
        for baseline in cli.csv()(args.baselines):
            started = time.perf_counter()
            measure(baseline, build_retriever(baseline, context), time.perf_counter() - started)
    for chunk_context in args.contexts:
        started = time.perf_counter()
        options = {} if chunk_context == "default" else {"chunk_context": chunk_context}
        retriever = RecursiveSummaryRetriever.from_nodes(
            [node.model_copy(update={"embedding": None}) for node in nodes],
            doc_id_key="doc_id",
            embed_model=model,
            similarity_top_k=K,
            **options,
        )
        built_s = time.perf_counter() - started
        for weight in args.document_weights or [None]:
            if weight is None:  # the retriever's own default
                measure(f"recursive context={chunk_context}", retriever, built_s)
                continue
            retriever.document_weight = weight
            measure(f"recursive context={chunk_context} document_weight={weight}", retriever, built_s)
    return {
        "dataset": dataset.name,
        "queries": len(dataset.queries),
        "embed_title": embed_title,
        "embedding_model": choice.to_dict(),
        "runs": runs,
    }


def main(argv: list[str] | None = None) -> None:
    p = cli.parser(__doc__)
    cli.add_data_root(p)
    cli.add_datasets(p, ",".join(DATASETS))
    cli.add_max_queries(p)
    cli.add_cache(p)
    p.add_argument("--no-embed-title", action="store_true", help="titles stay out of the chunks' embedded text")
    p.add_argument("--baselines", default=BASELINES, help="registered retrievers to compare with")
    p.add_argument(
        "--contexts",
        type=cli.csv(),
        default=["none", "title"],
        help="chunk_context values to build; 'default' passes none (also for a checkout from before the setting)",
    )
    p.add_argument(
        "--document-weights", type=cli.csv(float), default=[], help="document_weight values to run (default: its own)"
    )
    cli.add_out(p, RESULTS / "ranking" / "sweep.json")
    args = p.parse_args(argv)
    args.cache = args.cache or str(DEFAULT_CACHE)
    results = [run_dataset(name, args) for name in cli.csv()(args.datasets)]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    measured = {"package": str(package_dir()), "head": head()}  # a PYTHONPATH copy measures older code
    args.out.write_text(json.dumps({"command": cli.command(argv), **measured, "datasets": results}, indent=1))
    labels = list(dict.fromkeys(label for r in results for label in r["runs"]))
    rows = [
        [label, *(f"{r['runs'][label]['metrics'][NDCG]:.4f}" if label in r["runs"] else "-" for r in results)]
        for label in labels
    ]
    markdown = f"Command: `{cli.command(argv)}` (package: {measured['package']}, checkout {measured['head']})\n\n{NDCG}\n\n{table(['run', *(r['dataset'] for r in results)], rows)}\n"
    args.out.with_suffix(".md").write_text(markdown)
    print(markdown)


if __name__ == "__main__":
    main()
