"""The one-shot commands: ``demo``, ``build``, ``query`` and ``eval``, each ``cmd_*(args)``
(the long-lived ``shell`` and ``serve`` are in :mod:`.serve`)."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from llama_index_ext_recursive.cache import RetrievalCache
from llama_index_ext_recursive.cli.checks import (
    CliError,
    check_build_target,
    check_creatable,
    check_output,
    check_question,
    count,
)
from llama_index_ext_recursive.cli.documents import check_directory, read_documents
from llama_index_ext_recursive.cli.filters import split_filters, typed_filters
from llama_index_ext_recursive.cli.output import hit_to_json, print_results
from llama_index_ext_recursive.embedding_cache import CachedEmbedding, check_cache_path, default_cache_path
from llama_index_ext_recursive.models import bundled_embed_model, bundled_multilingual_model
from llama_index_ext_recursive.query import FilteredQueryBundle
from llama_index_ext_recursive.recursive.persist import load_summary_cache
from llama_index_ext_recursive.recursive.retriever import RecursiveSummaryRetriever
from llama_index_ext_recursive.sample import load_sample_documents, load_sample_questions
from llama_index_ext_recursive.stores.columnar_store import ColumnarVectorStore
from llama_index_ext_recursive.tokenizer import MultilingualTokenizer

DEMO_QUESTIONS = 4


def cmd_demo(args: argparse.Namespace) -> None:
    top_k = count("--top-k", args.top_k)
    print("Building over the bundled sample corpus (12 documents, English and Chinese)...")
    started = time.perf_counter()
    documents = load_sample_documents()
    cache_path = default_cache_path()
    check_cache_path(cache_path)
    # the build's cache, as `build` uses it: a second demo embeds nothing
    retriever = RecursiveSummaryRetriever.from_documents(
        documents, similarity_top_k=top_k, show_progress=True, embedding_cache=cache_path
    )
    chunks = sum(len(r.chunk_ids) for r in retriever.documents.values())
    print(f"Built {len(documents)} documents, {chunks} chunks in {time.perf_counter() - started:.1f}s")
    _print_embedding(retriever, cache_path)
    questions = load_sample_questions()
    english = [q for q in questions if not q["doc_id"].startswith("zh-")]
    chinese = [q for q in questions if q["doc_id"].startswith("zh-")]
    for q in english[::4][: DEMO_QUESTIONS // 2] + chinese[::2][: DEMO_QUESTIONS // 2]:
        print_results(q["question"], retriever.retrieve(q["question"]))
    question, filters = "How should I store food?", {"language": "zh"}
    print(f"\nWith per-call filters {filters}:")
    print_results(question, retriever.retrieve(FilteredQueryBundle(question, filters=filters)))


def _embedding_cache(args: argparse.Namespace) -> Path | None:
    """The cache file of ``build`` (``None``: off), checked before any work."""
    if args.no_embedding_cache:
        return None
    if args.embedding_cache is None:
        path = default_cache_path()
    else:
        path = Path(args.embedding_cache).expanduser()
        check_creatable("--embedding-cache", path)
    check_cache_path(path)
    return path


def _print_embedding(retriever: RecursiveSummaryRetriever, cache_path: Path | None) -> None:
    choice = retriever.index.embedding_choice
    print(f"Embedding model: {choice['name']} ({choice['source']}: {choice['reason']})")
    model = retriever.index.embed_model
    if not isinstance(model, CachedEmbedding):
        print("Embedding cache: off (every text embedded)")
        return
    where = model.path if model.path is not None else f"none: {cache_path} failed, see the warning above"
    print(f"Embedded {model.computed} texts, {model.reused} taken from the cache ({where})")


def _print_calibration(retriever: RecursiveSummaryRetriever) -> None:
    """What fitting the fusion weights cost (pseudo-queries cut from the corpus, a bounded
    sample per level and script) and the (dense, BM25) weights it chose."""
    parts = []
    for level, found in sorted(retriever.calibration.items()):
        for script, entry in sorted(found["scripts"].items()):
            if not entry["samples"]:  # no text in that script: nothing was measured
                continue
            weights = entry["weights"]
            chose = "too few: equal weights" if weights is None else f"dense {weights[0]:.2f}, BM25 {weights[1]:.2f}"
            parts.append(f"{level} ({script}) {entry['samples']} pseudo-queries -> {chose}")
    if parts:
        print("Fusion weights fitted on " + "; ".join(parts))


def cmd_build(args: argparse.Namespace) -> None:
    directory, target = Path(args.directory), Path(args.persist)
    if not args.doc_id_key.strip():
        raise CliError("--doc-id-key is empty; pass a metadata key such as doc_id")
    check_directory(directory)
    check_build_target(target, directory)
    cache_path = _embedding_cache(args)
    corpus = read_documents(directory, args.doc_id_key)
    started = time.perf_counter()
    # rebuilding over an earlier index reuses its summaries of unchanged documents
    cache = load_summary_cache(target)
    options = dict(doc_id_key=args.doc_id_key, show_progress=True, summary_cache=cache, embedding_cache=cache_path)
    if args.storage == "columnar":  # built into the folder, checkpointed; run again, it resumes
        retriever = RecursiveSummaryRetriever.from_documents(
            corpus,
            persist_dir=target,
            chunk_vector_store=ColumnarVectorStore(tokenizer=MultilingualTokenizer()),
            summary_vector_store=ColumnarVectorStore(tokenizer=MultilingualTokenizer()),
            **options,
        )
    else:
        retriever = RecursiveSummaryRetriever.from_documents(corpus, **options)
        retriever.persist(target)
    _print_embedding(retriever, cache_path)
    _print_calibration(retriever)
    if cache.hits:
        print(f"Reused {cache.hits} cached summaries")
    skipped = [f"{n} {why}" for why, n in corpus.skipped_counts().items()]
    print(
        f"Indexed {corpus.count} documents in {time.perf_counter() - started:.1f}s; "
        f"persisted to {target}" + (f" (skipped {', '.join(skipped)})" if skipped else "")
    )


def cmd_query(args: argparse.Namespace) -> None:
    question = check_question(args.question)
    top_k = count("--top-k", args.top_k, allow_none=True)
    pairs = split_filters(args.filter)
    cache = _result_cache(args.cache_url)
    retriever = RecursiveSummaryRetriever.from_persist_dir(args.persist_dir, cache=cache)
    # per-call options: --top-k None keeps the k the index was built with
    bundle = FilteredQueryBundle(question, filters=typed_filters(pairs, retriever), top_k=top_k)
    results = retriever.retrieve(bundle)
    if args.json:
        print(json.dumps([hit_to_json(hit) for hit in results], ensure_ascii=False, indent=1))
    else:
        print_results(question, results)
        if cache is not None and cache.stats().hits["results"]:
            print(f"  (answered from the cache at {args.cache_url})")


def _result_cache(url: str | None) -> RetrievalCache | None:
    if not url:
        return None
    try:
        return RetrievalCache.from_url(url)
    except ValueError as exc:
        raise CliError(f"--cache-url: {exc}") from None


def _check_plot_format(path: str | None) -> None:
    if path is None or not Path(path).suffix:
        return
    from matplotlib.backend_bases import FigureCanvasBase

    formats = FigureCanvasBase.get_supported_filetypes()
    if Path(path).suffix[1:].lower() not in formats:
        raise CliError(
            f"--plot {path}: matplotlib cannot write {Path(path).suffix!r} files; "
            f"use one of {', '.join('.' + f for f in sorted(formats))} (e.g. .png)"
        )


def cmd_eval(args: argparse.Namespace) -> None:
    from llama_index_ext_recursive.eval import BeirDataset, compare, markdown_table, plot
    from llama_index_ext_recursive.eval.data import check_split
    from llama_index_ext_recursive.eval.registry import parse_names

    top_k = count("--top-k", args.top_k)
    max_queries = count("--max-queries", args.max_queries, allow_none=True)
    concurrency = count("--concurrency", args.concurrency)
    try:
        check_split(args.split)
        names = parse_names(args.retrievers)
    except (KeyError, ValueError) as exc:
        raise CliError(exc.args[0]) from None
    check_output("--out", args.out, "results.json")
    check_output("--plot", args.plot, "results.png")
    _check_plot_format(args.plot)
    if args.out and args.plot and Path(args.out).resolve() == Path(args.plot).resolve():
        raise CliError(f"--out and --plot are the same file ({args.out}); pass two paths")
    cache = Path(args.cache) if args.cache else default_cache_path()  # one cache for build and eval
    if cache.is_dir():
        raise CliError(f"--cache {cache} is a directory; pass a file such as {cache / 'embeddings.sqlite'}")
    check_creatable("--cache", cache)
    dataset = BeirDataset.load(args.data, split=args.split, max_queries=max_queries, queries_from=args.queries_from)
    print(
        f"{dataset.name}: {len(dataset.corpus)} chunks, {len(dataset.queries)} queries"
        + (f" (capped at {max_queries})" if max_queries else "")
    )
    try:
        embed_model = {
            "auto": lambda: None,
            "minilm": bundled_embed_model,
            "multilingual": bundled_multilingual_model,
        }[args.embed_model]()
    except ImportError as exc:
        raise CliError(str(exc)) from None
    comparison = compare(
        dataset,
        names,
        cache_path=cache,
        k=top_k,
        concurrency=concurrency,
        show_progress=True,
        embed_title=not args.no_embed_title,
        embed_model=embed_model,
    )
    print(f"chunk titles: {comparison.title_convention}")
    print(f"embedding model: {comparison.embedding['name']} ({comparison.embedding['reason']})")
    print(
        f"\nEmbedded {comparison.texts_embedded} new chunk and query texts in "
        f"{comparison.embedding_seconds:.1f}s, {comparison.texts_embedded_in_builds} more while "
        f"building (summaries; within build s) (cache: {cache})\n"
    )
    print(markdown_table(comparison))
    if args.out:
        Path(args.out).write_text(json.dumps(comparison.to_dict(per_query=True), indent=1), encoding="utf-8")
        print(f"\nwrote {args.out}")
    if args.plot:
        plot(comparison, args.plot)
        print(f"wrote {args.plot}")
