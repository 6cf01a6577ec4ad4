"""``llama-recursive``: demo, build, query, shell, serve and eval from the command line.

The only code of the package that prints; everything else logs. Split by
concern: :mod:`.checks` (argument checks, expected failures and their one
line), :mod:`.documents` (reading a folder for ``build``), :mod:`.filters`
(``--filter key=value`` typed from the index), :mod:`.commands` (one function
per command), :mod:`.serve` (``shell`` and ``serve``: an index loaded once,
many questions), :mod:`.output` (results as text or JSON); this module holds
the parser and :func:`main`.

Expected failures (bad arguments, unreadable or malformed input files, a
persisted index that is broken or not ours, a missing extra, a filter the index
cannot match) end with one ``error: ...`` line on stderr and exit status 1;
``-v`` adds the traceback. Anything else is a bug and keeps its traceback.
Arguments and paths are checked before the embedding model loads, so a typo
costs nothing.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import traceback
from collections.abc import Sequence
from typing import Any

from llama_index_ext_recursive.cli.checks import CliError, expected_message
from llama_index_ext_recursive.cli.commands import cmd_build, cmd_demo, cmd_eval, cmd_query
from llama_index_ext_recursive.cli.documents import read_documents
from llama_index_ext_recursive.cli.filters import split_filters, typed_filters
from llama_index_ext_recursive.cli.serve import cmd_serve, cmd_shell
from llama_index_ext_recursive.query import DEFAULT_TOP_K

__all__ = ["CliError", "build_parser", "main", "read_documents", "split_filters", "typed_filters"]

BUILD_HELP = """\
Index a folder, as LlamaIndex's SimpleDirectoryReader reads it: every file
holding UTF-8 text is one document, whatever its suffix (Markdown, source
code, CSV, HTML...; its id and its title are its path relative to DIRECTORY,
such as cli/__init__.py), every line of a .jsonl file is one document (a JSON
object with doc_id or _id, text, and optional title and metadata), and .pdf
and .docx files are read by LlamaIndex's file readers when installed (pip
install llama-index-readers-file pypdf docx2txt). Every file skipped is
reported and counted in the last line: hidden ones (names starting with '.')
are counted, files that are not UTF-8 are named with the fix (convert them,
e.g. with iconv), empty documents are named, and binary files, formats whose
reader is not installed and files their reader fails on are named in one
warning, with the install line.
--persist must be a new or empty folder, or an index written by this command
(its summaries are then reused): anything else is refused, never overwritten.
Embeddings are cached (see --embedding-cache), so rebuilding an unchanged
folder embeds nothing again (chunks, summaries and the pseudo-queries that fit
the fusion weights); the build prints the embedding model, why it was chosen, and
how many texts were embedded or taken from the cache, and how many
pseudo-queries (cut from the corpus, a bounded sample per level and script)
fitted the fusion weights, and the weights they chose.
"""

QUERY_HELP = """\
Query a persisted index. --filter values take the type the index's metadata
holds: zip=01234 stays text if zip holds text, year=2020 is a number if year
holds numbers (nan and inf are refused there); a key holding lists matches
when the list contains the value; unknown keys are refused with the closest one.
"""

SHELL_HELP = """\
Load a persisted index once (the embedding model too), then answer each line
of standard input as a question, as `query` prints it (--json: one JSON line
per question, with its hits and how many milliseconds it took). A question
after the first costs milliseconds, not a process start. Interactive: an
empty line or Ctrl-D ends; piped: the end of input does.
"""

SERVE_HELP = """\
Load a persisted index once, then answer HTTP requests on --host:--port
(default 127.0.0.1:8765, this machine only; there is no authentication):
  POST /retrieve  {"query": "...", "top_k": 5, "filters": {"year": 2020}}
                  -> {"ms": ..., "hits": [{node_id, score, text, explanation}, ...]}
  GET  /health    -> {"status": "ok", "documents": N}
A malformed request gets status 400 and {"error": "..."} naming the problem.
Stop it with Ctrl-C (or by its PID).
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="llama-recursive", description="Summary-routed retrieval for LlamaIndex, offline."
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="log progress details, and print tracebacks of errors"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="build over the bundled sample corpus and query it")
    demo.add_argument("--top-k", type=int, default=3)
    demo.set_defaults(func=cmd_demo)
    build = _described(
        sub,
        "build",
        "index a folder of documents (text, .jsonl rows, .pdf/.docx with LlamaIndex's readers)",
        BUILD_HELP,
    )
    build.add_argument("directory")
    build.add_argument(
        "--persist", required=True, help="new or empty folder (or an earlier index) to write the index to"
    )
    build.add_argument("--doc-id-key", default="doc_id")
    build.add_argument(
        "--storage",
        choices=("default", "columnar"),
        default="default",
        help="columnar: vectors, metadata, BM25 terms and text on disk, memory-mapped, for 100k+ "
        "documents; the build is checkpointed into --persist and the same command resumes it after "
        "a kill (--persist must then be new, empty, or such an interrupted build)",
    )
    caching = build.add_mutually_exclusive_group()
    caching.add_argument(
        "--embedding-cache",
        metavar="PATH",
        help="SQLite file of embeddings by model and text hash, so an unchanged text is never "
        "embedded twice (default: $XDG_CACHE_HOME or ~/.cache, then "
        "llama-index-ext-recursive/embeddings.sqlite); queries are not kept",
    )
    caching.add_argument("--no-embedding-cache", action="store_true", help="embed every text")
    build.set_defaults(func=cmd_build)
    query = _described(sub, "query", "query a persisted index", QUERY_HELP)
    query.add_argument("persist_dir")
    query.add_argument("question")
    _add_result_options(query, "repeatable, one per key; AND", "print results as JSON")
    query.add_argument(
        "--cache-url",
        default=os.environ.get("LLAMA_RECURSIVE_CACHE_URL"),
        metavar="URL",
        help="a Redis result cache shared with your app (redis://host:port/db; default "
        "$LLAMA_RECURSIVE_CACHE_URL): a question asked before, of the same index, is answered from it",
    )
    query.set_defaults(func=cmd_query)
    shell = _described(
        sub, "shell", "load an index once, then answer questions typed or piped one per line", SHELL_HELP
    )
    shell.add_argument("persist_dir")
    _add_result_options(shell, "for every question; repeatable, AND", "print one JSON line per question")
    shell.set_defaults(func=cmd_shell)
    serve = _described(sub, "serve", "load an index once and answer a JSON API on 127.0.0.1", SERVE_HELP)
    serve.add_argument("persist_dir")
    serve.add_argument("--port", type=int, default=8765, help="default 8765; 0: any free port (printed)")
    serve.add_argument("--host", default="127.0.0.1", help="default 127.0.0.1: this machine only")
    serve.set_defaults(func=cmd_serve)
    evaluate = sub.add_parser("eval", help="compare retrievers on a BEIR-layout dataset")
    evaluate.add_argument("--data", required=True, help="dataset directory (BEIR layout)")
    evaluate.add_argument(
        "--queries-from",
        metavar="DIR",
        help="take the query texts from this BEIR folder, matched by query id (e.g. the same "
        "questions in another language); corpus and qrels stay those of --data",
    )
    evaluate.add_argument(
        "--retrievers",
        default="upstream-vector,upstream-bm25,upstream-fusion,upstream-recursive,recursive",
        help="comma-separated names from the harness registry",
    )
    evaluate.add_argument("--top-k", type=int, default=10)
    evaluate.add_argument("--max-queries", type=int, default=None)
    evaluate.add_argument("--split", default="test", help="qrels/<split>.tsv (a name, not a path)")
    evaluate.add_argument("--concurrency", type=int, default=1, help=">1 runs aretrieve concurrently")
    evaluate.add_argument(
        "--cache",
        default=None,
        help="embedding cache file (default: build's, $XDG_CACHE_HOME or ~/.cache, then "
        "llama-index-ext-recursive/embeddings.sqlite)",
    )
    evaluate.add_argument("--out", help="write figures as JSON (the folder must exist)")
    evaluate.add_argument("--plot", help="write quality vs latency as PNG (the folder must exist)")
    evaluate.add_argument(
        "--no-embed-title",
        action="store_true",
        help="keep chunk titles in metadata but out of the embedded (and BM25-indexed) text; "
        "default: embedded, and prepended to the text of flat sets",
    )
    evaluate.add_argument(
        "--embed-model",
        choices=["auto", "minilm", "multilingual"],
        default="auto",
        help="auto: what the library uses with no model configured (the bundled model chosen by the "
        "corpus's scripts); minilm: the bundled all-MiniLM-L6-v2; multilingual: the bundled "
        "multilingual-e5-small (extra [multilingual])",
    )
    evaluate.set_defaults(func=cmd_eval)
    return parser


def _described(sub: Any, name: str, help: str, description: str) -> argparse.ArgumentParser:  # noqa: A002
    """A command whose ``--help`` shows its description as written (line breaks kept)."""
    parser: argparse.ArgumentParser = sub.add_parser(
        name, help=help, description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    return parser


def _add_result_options(command: argparse.ArgumentParser, filter_help: str, json_help: str) -> None:
    """``--top-k``, ``--filter`` and ``--json``: how ``query`` and ``shell`` ask and answer."""
    command.add_argument("--top-k", type=int, default=None, help=f"default: as built ({DEFAULT_TOP_K})")
    command.add_argument("--filter", action="append", metavar="KEY=VALUE", help=filter_help)
    command.add_argument("--json", action="store_true", help=json_help)


def main(argv: Sequence[str] | None = None) -> int:
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
        message = expected_message(exc)
        if message is None:
            raise
        if args.verbose:
            traceback.print_exc()
        print(f"error: {' '.join(message.split())}", file=sys.stderr)
        return 1
    return 0
