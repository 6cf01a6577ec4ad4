"""Compare named retrievers on one dataset in one run, on shared embeddings."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import MetadataMode

from llama_index_ext_recursive.embedding_cache import CachedEmbedding
from llama_index_ext_recursive.eval.data import BeirDataset
from llama_index_ext_recursive.eval.registry import REGISTRY, BuildContext, build_retriever
from llama_index_ext_recursive.eval.runner import evaluate_retriever, measure_build
from llama_index_ext_recursive.models import choose_embed_model, corpus_sample
from llama_index_ext_recursive.validation import check_count

logger = logging.getLogger(__name__)


@dataclass
class RetrieverReport:
    """One retriever's figures: metrics by ir-measures name, latency, build cost."""

    name: str
    metrics: dict[str, float]
    latency_p50_ms: float
    latency_p95_ms: float
    build_seconds: float
    peak_memory_mb: float
    per_query: dict[str, dict[str, float]] = field(default_factory=dict, repr=False)

    def to_dict(self, per_query: bool = False) -> dict[str, Any]:
        data = asdict(self)
        if not per_query:
            data.pop("per_query")
        return data


@dataclass
class Comparison:
    """All reports of one run plus how the shared embeddings were obtained."""

    dataset: str
    queries: int
    corpus: int
    k: int
    embedding_seconds: float
    texts_embedded: int
    reports: list[RetrieverReport]
    texts_embedded_in_builds: int = 0
    embed_title: bool = True
    title_in_text: bool = False
    embedding: dict[str, str] = field(default_factory=dict)

    @property
    def title_convention(self) -> str:
        """How chunk titles were presented: ``in-text``, ``embedded-metadata`` or ``metadata-not-embedded``."""
        if self.title_in_text:
            return "in-text"
        return "embedded-metadata" if self.embed_title else "metadata-not-embedded"

    def to_dict(self, per_query: bool = False) -> dict[str, Any]:
        return {
            "dataset": self.dataset,
            "queries": self.queries,
            "corpus": self.corpus,
            "k": self.k,
            "embedding_seconds": self.embedding_seconds,
            "texts_embedded": self.texts_embedded,
            "texts_embedded_in_builds": self.texts_embedded_in_builds,
            "metadata_convention": {
                "title": self.title_convention,
                "embed_title": self.embed_title,
                "title_in_text": self.title_in_text,
            },
            "embedding_model": self.embedding,
            "retrievers": {r.name: r.to_dict(per_query) for r in self.reports},
        }


def compare(
    dataset: BeirDataset,
    names: Sequence[str],
    embed_model: BaseEmbedding | None = None,
    cache_path: str | Path | None = None,
    k: int = 10,
    concurrency: int = 1,
    show_progress: bool = False,
    embed_title: bool = True,
) -> Comparison:
    """Build every named retriever over the same nodes and embeddings and score it.

    Texts and queries are embedded once (through :class:`CachedEmbedding`, on
    disk when ``cache_path`` is given); latency is measured with query
    embeddings precomputed. Every argument is checked before the embedding
    model is resolved, so a typo costs nothing.

    Each chunk keeps its document's ``title`` in metadata; ``embed_title``
    says whether it is embedded with the chunk (LlamaIndex's default) or not.
    Flat sets (no document-level qrels) follow BEIR and prepend the title to
    the text, unless ``embed_title=False``, which keeps every title out of the
    embedded text. ``oracle-routing`` gets each query's gold documents from
    the dataset; no other retriever sees them.

    Args:
        dataset: the loaded dataset.
        names: registered retriever names, each at most once.
        embed_model: the model (default: ``Settings.embed_model``, else the bundled model
            the library chooses for the corpus, :func:`~llama_index_ext_recursive.models.choose_embed_model`).
        cache_path: SQLite embedding cache file (``None``: in memory).
        k: the cut-off of every metric and each retriever's ``similarity_top_k``.
        concurrency: queries in flight (``> 1`` uses ``aretrieve``).
        show_progress: show progress bars.
        embed_title: embed chunk titles (``False``: titles stay in metadata only).
    """
    k = check_count("k", k)
    concurrency = check_count("concurrency", concurrency)
    if isinstance(names, str):
        raise TypeError(
            f"names must be a list of retriever names, got the string {names!r}; "
            "use parse_names() for a comma-separated string"
        )
    if not names:
        raise ValueError(f"names is empty; pass at least one of: {', '.join(sorted(REGISTRY))}")
    for name in names:  # fail before any embedding work
        if name not in REGISTRY:
            raise KeyError(f"unknown retriever {name!r}; known: {', '.join(sorted(REGISTRY))}")
    repeated = sorted({n for n in names if list(names).count(n) > 1})
    if repeated:
        raise ValueError(f"retriever(s) {repeated} named more than once; name each once")
    if cache_path is not None and Path(cache_path).is_dir():
        raise ValueError(
            f"cache_path {str(cache_path)!r} is a directory; pass a file such as "
            f"{str(Path(cache_path) / 'embeddings.sqlite')!r}"
        )
    if not isinstance(embed_title, bool):
        raise TypeError(f"embed_title must be True or False, got {embed_title!r}")
    title_in_text = embed_title and not dataset.hierarchical
    nodes = dataset.nodes(title_in_text=title_in_text, embed_title=embed_title)
    # no model given: the one the library would choose for this corpus
    choice = choose_embed_model(embed_model, texts=corpus_sample(nodes))
    model = embed_model if isinstance(embed_model, CachedEmbedding) else CachedEmbedding(choice.model, cache_path)
    before = model.computed
    started = time.perf_counter()
    vectors = model.get_text_embedding_batch(
        [n.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes], show_progress=show_progress
    )
    for node, vector in zip(nodes, vectors):
        node.embedding = vector
    qids = list(dataset.queries)
    query_vectors = dict(zip(qids, model._get_query_embeddings([dataset.queries[q] for q in qids])))
    embedding_seconds = time.perf_counter() - started
    upfront = model.computed - before
    # list(): BuildContext takes a List[BaseNode] (the same TextNodes, not copies)
    context = BuildContext(nodes=list(nodes), embed_model=model, top_k=k, gold_docs=dataset.gold_documents())
    reports = []
    with context.resources:  # servers a factory started stop here
        for name in names:
            logger.info("building %s over %d nodes", name, len(nodes))
            retriever, build_seconds, peak_mb = measure_build(partial(build_retriever, name, context))
            result, run = evaluate_retriever(retriever, dataset, k, query_vectors, concurrency, show_progress)
            reports.append(
                RetrieverReport(
                    name=name,
                    metrics=result.aggregate,
                    latency_p50_ms=run.percentile(50),
                    latency_p95_ms=run.percentile(95),
                    build_seconds=build_seconds,
                    peak_memory_mb=peak_mb,
                    per_query=result.per_query,
                )
            )
    return Comparison(
        dataset=dataset.name,
        queries=len(dataset.queries),
        corpus=len(nodes),
        k=k,
        embedding_seconds=embedding_seconds,
        texts_embedded=upfront,
        texts_embedded_in_builds=model.computed - before - upfront,
        reports=reports,
        embed_title=embed_title,
        title_in_text=title_in_text,
        embedding=choice.to_dict(),
    )


def markdown_table(comparison: Comparison) -> str:
    """One row per retriever: quality, latency, build cost."""
    k = comparison.k
    metrics = [f"nDCG@{k}", f"RR@{k}", f"R@{k}", "Success@1"]
    if any(f"doc:Success@{k}" in r.metrics for r in comparison.reports):
        metrics.append(f"doc:Success@{k}")
    header = ["retriever", *metrics, "p50 ms", "p95 ms", "build s", "peak MB"]
    rows = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|",
    ]
    for r in comparison.reports:
        cells = [r.name] + [f"{r.metrics.get(m, float('nan')):.4f}" for m in metrics]
        cells += [
            f"{r.latency_p50_ms:.2f}",
            f"{r.latency_p95_ms:.2f}",
            f"{r.build_seconds:.2f}",
            f"{r.peak_memory_mb:.0f}",
        ]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def plot(comparison: Comparison, path: str | Path) -> None:
    """Quality (nDCG@k) against p50 latency, one point per retriever, as PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metric = f"nDCG@{comparison.k}"
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    for r in comparison.reports:
        ax.scatter(r.latency_p50_ms, r.metrics.get(metric, 0.0), label=r.name, s=40)
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.margins(x=0.25, y=0.15)
    ax.legend(fontsize=8, loc="best")
    ax.set_xlabel("p50 retrieval latency, ms (log scale; query embeddings precomputed)")
    ax.set_ylabel(metric)
    ax.set_title(f"{comparison.dataset}: {comparison.queries} queries, {comparison.corpus} chunks")
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
