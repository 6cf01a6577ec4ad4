"""``llama-recursive``: demo, build and query from the command line.

The only module that prints; everything else logs.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from llama_index.core.schema import Document, NodeWithScore

from llama_index_ext_recursive.filters import FilteredQueryBundle
from llama_index_ext_recursive.recursive import DEFAULT_TOP_K, RecursiveSummaryRetriever
from llama_index_ext_recursive.sample import load_sample_documents, load_sample_questions
from llama_index_ext_recursive.summarize import SummaryCache

DEMO_QUESTIONS = 4


def _parse_value(raw: str) -> Any:
    for cast in (int, float):
        try:
            return cast(raw)
        except ValueError:
            pass
    return raw


def parse_filters(items: Optional[Sequence[str]]) -> Optional[Dict[str, Any]]:
    """``["year=2024", "language=en"]`` -> ``{"year": 2024, "language": "en"}``."""
    if not items:
        return None
    filters: Dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"error: --filter expects key=value, got {item!r}")
        filters[key.strip()] = _parse_value(value.strip())
    return filters


def _print_results(question: str, results: List[NodeWithScore], width: int = 110) -> None:
    print(f"\nQ: {question}")
    routed: Dict[str, float] = {}
    for hit in results:
        info = getattr(hit, "explanation", None)
        if info is not None and info.doc_id not in routed:
            routed[info.doc_id] = info.summary_score or 0.0
    if routed:
        print("  routed documents: " + ", ".join(f"{d} ({s:.3f})" for d, s in routed.items()))
    for rank, hit in enumerate(results, 1):
        info = getattr(hit, "explanation", None)
        text = " ".join(hit.node.get_content().split())
        text = text if len(text) <= width else text[: width - 3] + "..."
        where = f"{info.doc_id} chunk={info.chunk_score:.3f} " if info else ""
        print(f"  {rank:>2}. score={hit.score:.3f} {where}| {text}")


def read_documents(directory: Path, doc_id_key: str) -> List[Document]:
    """Documents from ``.jsonl`` (doc_id/title/text/metadata rows) and text files."""
    if not directory.is_dir():
        raise SystemExit(f"error: {directory} is not a directory")
    documents: List[Document] = []
    for path in sorted(directory.rglob("*")):
        if path.suffix == ".jsonl":
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                    doc_id = str(row.get("doc_id") or row["_id"])
                    metadata = {**row.get("metadata", {}), doc_id_key: doc_id}
                    if row.get("title"):
                        metadata["title"] = row["title"]
                    documents.append(Document(id_=doc_id, text=row["text"], metadata=metadata))
                except (json.JSONDecodeError, KeyError, TypeError) as exc:
                    raise SystemExit(
                        f"error: {path}:{number}: expected a JSON object with doc_id (or _id) "
                        f"and text ({exc!r})"
                    ) from exc
        elif path.suffix in {".txt", ".md"}:
            doc_id = str(path.relative_to(directory))
            documents.append(
                Document(
                    id_=doc_id,
                    text=path.read_text(encoding="utf-8"),
                    metadata={doc_id_key: doc_id, "title": path.stem, "file_name": path.name},
                )
            )
    if not documents:
        raise SystemExit(f"error: no .txt, .md or .jsonl documents under {directory}")
    return documents


def cmd_demo(args: argparse.Namespace) -> None:
    print("Building over the bundled sample corpus (12 documents, English and Chinese)...")
    started = time.perf_counter()
    documents = load_sample_documents()
    retriever = RecursiveSummaryRetriever.from_documents(
        documents, similarity_top_k=args.top_k, show_progress=True
    )
    chunks = sum(len(r.chunk_ids) for r in retriever.documents.values())
    print(f"Built {len(documents)} documents, {chunks} chunks in {time.perf_counter() - started:.1f}s")
    questions = load_sample_questions()
    english = [q for q in questions if not q["doc_id"].startswith("zh-")]
    chinese = [q for q in questions if q["doc_id"].startswith("zh-")]
    for q in english[::4][: DEMO_QUESTIONS // 2] + chinese[::2][: DEMO_QUESTIONS // 2]:
        _print_results(q["question"], retriever.retrieve(q["question"]))
    question, filters = "How should I store food?", {"language": "zh"}
    print(f"\nWith per-call filters {filters}:")
    _print_results(question, retriever.retrieve(FilteredQueryBundle(question, filters=filters)))


def cmd_build(args: argparse.Namespace) -> None:
    documents = read_documents(Path(args.directory), args.doc_id_key)
    started = time.perf_counter()
    # rebuilding over an earlier index reuses its summaries of unchanged documents
    cache = SummaryCache(Path(args.persist) / "summary_cache.json")
    retriever = RecursiveSummaryRetriever.from_documents(
        documents, doc_id_key=args.doc_id_key, show_progress=True, summary_cache=cache
    )
    retriever.persist(args.persist)
    if cache.hits:
        print(f"Reused {cache.hits} cached summaries")
    print(
        f"Indexed {len(documents)} documents in {time.perf_counter() - started:.1f}s; "
        f"persisted to {args.persist}"
    )


def cmd_query(args: argparse.Namespace) -> None:
    overrides = {"similarity_top_k": args.top_k} if args.top_k else {}
    retriever = RecursiveSummaryRetriever.from_persist_dir(args.persist_dir, **overrides)
    bundle = FilteredQueryBundle(args.question, filters=parse_filters(args.filter))
    results = retriever.retrieve(bundle)
    if args.json:
        print(
            json.dumps(
                [
                    {
                        "node_id": hit.node.node_id,
                        "score": hit.score,
                        "text": hit.node.get_content(),
                        "explanation": hit.explanation.model_dump() if hit.explanation else None,
                    }
                    for hit in results
                ],
                ensure_ascii=False,
                indent=1,
            )
        )
    else:
        _print_results(args.question, results)


def cmd_eval(args: argparse.Namespace) -> None:
    try:
        from llama_index_ext_recursive.eval import BeirDataset, compare, markdown_table, plot
        from llama_index_ext_recursive.eval.registry import parse_names
    except ImportError as exc:
        raise SystemExit(
            f"error: evaluation needs its extra ({exc.name} is missing): "
            "pip install 'llama-index-ext-recursive[eval]'"
        ) from exc
    try:
        names = parse_names(args.retrievers)
    except KeyError as exc:
        raise SystemExit(f"error: {exc.args[0]}") from exc
    dataset = BeirDataset.load(args.data, split=args.split, max_queries=args.max_queries)
    print(
        f"{dataset.name}: {len(dataset.corpus)} chunks, {len(dataset.queries)} queries"
        + (f" (capped at {args.max_queries})" if args.max_queries else "")
    )
    cache = Path(args.cache) if args.cache else Path(".cache") / "embeddings.sqlite"
    comparison = compare(
        dataset, names, cache_path=cache, k=args.top_k, concurrency=args.concurrency,
        show_progress=True,
    )
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="llama-recursive", description="Summary-routed retrieval for LlamaIndex, offline."
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress details")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="build over the bundled sample corpus and query it")
    demo.add_argument("--top-k", type=int, default=3)
    demo.set_defaults(func=cmd_demo)
    build = sub.add_parser("build", help="index a directory of .txt/.md/.jsonl documents")
    build.add_argument("directory")
    build.add_argument("--persist", required=True, help="directory to write the index to")
    build.add_argument("--doc-id-key", default="doc_id")
    build.set_defaults(func=cmd_build)
    query = sub.add_parser("query", help="query a persisted index")
    query.add_argument("persist_dir")
    query.add_argument("question")
    query.add_argument("--top-k", type=int, default=None, help=f"default: as built ({DEFAULT_TOP_K})")
    query.add_argument("--filter", action="append", metavar="KEY=VALUE", help="repeatable; AND")
    query.add_argument("--json", action="store_true", help="print results as JSON")
    query.set_defaults(func=cmd_query)
    evaluate = sub.add_parser("eval", help="compare retrievers on a BEIR-layout dataset")
    evaluate.add_argument("--data", required=True, help="dataset directory (BEIR layout)")
    evaluate.add_argument(
        "--retrievers", default="upstream-vector,upstream-bm25,upstream-fusion,upstream-recursive,recursive",
        help="comma-separated names from the harness registry",
    )
    evaluate.add_argument("--top-k", type=int, default=10)
    evaluate.add_argument("--max-queries", type=int, default=None)
    evaluate.add_argument("--split", default="test")
    evaluate.add_argument("--concurrency", type=int, default=1, help=">1 runs aretrieve concurrently")
    evaluate.add_argument("--cache", default=None, help="embedding cache file (default .cache/embeddings.sqlite)")
    evaluate.add_argument("--out", help="write figures as JSON")
    evaluate.add_argument("--plot", help="write quality vs latency as PNG")
    evaluate.set_defaults(func=cmd_eval)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    args.func(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
