"""The long-lived commands: ``shell`` and ``serve``, over an index loaded once.

A ``query`` process pays for Python, torch and the embedding model, and for
loading the index, before its one question (seconds); these two pay once, so a
question after the first costs its own search (milliseconds):

* ``shell``: questions typed or piped, one per line; each answered as ``query``
  prints it (or as one JSON line with ``--json``).
* ``serve``: a small JSON API, on 127.0.0.1 unless told otherwise:
  ``POST /retrieve`` with ``{"query": ..., "top_k": ..., "filters": {...}}``
  answers ``{"hits": [...]}`` (each hit as ``query --json`` prints it);
  ``GET /health`` answers ``{"status": "ok", "documents": N}``. A bad request
  gets status 400 and ``{"error": ...}`` naming the problem.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from ipaddress import ip_address
from typing import Any

from llama_index_ext_recursive.cli.checks import CliError, count, expected_message
from llama_index_ext_recursive.cli.filters import split_filters, typed_filters
from llama_index_ext_recursive.cli.output import hit_to_json, print_results
from llama_index_ext_recursive.query import FilteredQueryBundle
from llama_index_ext_recursive.recursive.retriever import RecursiveSummaryRetriever

MAX_REQUEST_BYTES = 1 << 20  # a question and its filters; anything larger is refused


def _loaded(persist_dir: str) -> RecursiveSummaryRetriever:
    started = time.perf_counter()
    retriever = RecursiveSummaryRetriever.from_persist_dir(persist_dir)
    retriever.retrieve("warm up")  # loads the embedding model and builds the search levels once
    print(
        f"Loaded {len(retriever.index.documents)} documents from {persist_dir} in {time.perf_counter() - started:.1f}s",
        file=sys.stderr,
        flush=True,
    )
    return retriever


def cmd_shell(args: argparse.Namespace) -> None:
    top_k = count("--top-k", args.top_k, allow_none=True)
    pairs = split_filters(args.filter)
    retriever = _loaded(args.persist_dir)
    filters = typed_filters(pairs, retriever)
    interactive = sys.stdin.isatty()
    if interactive:
        print("Type a question and press Enter; Ctrl-D (or an empty line) ends.", file=sys.stderr)
    while True:
        if interactive:
            print("? ", end="", file=sys.stderr, flush=True)
        line = sys.stdin.readline()
        question = line.strip()
        if not question:
            if not line or interactive:  # end of input, or an empty line typed
                return
            continue  # a blank line in piped input
        started = time.perf_counter()
        try:
            results = retriever.retrieve(FilteredQueryBundle(question, filters=filters, top_k=top_k))
        except Exception as exc:
            message = expected_message(exc)
            if message is None:
                raise
            print(f"error: {' '.join(message.split())}", file=sys.stderr, flush=True)
            continue
        elapsed_ms = (time.perf_counter() - started) * 1000
        if args.json:
            record = {"question": question, "ms": round(elapsed_ms, 2), "hits": [hit_to_json(h) for h in results]}
            print(json.dumps(record, ensure_ascii=False), flush=True)
        else:
            print_results(question, results)
            print(f"  ({elapsed_ms:.0f} ms)", flush=True)


class _BadRequest(ValueError):
    """A request this API cannot answer; its message goes back with status 400."""


def _request_bundle(body: Any) -> FilteredQueryBundle:
    """The question of a ``POST /retrieve`` body, checked: a JSON object with a non-empty
    ``query`` string, an optional positive ``top_k`` and optional ``filters``
    (``{"key": value}``: equality, AND)."""
    expected = 'send a JSON object such as {"query": "...", "top_k": 5, "filters": {"year": 2020}}'
    if not isinstance(body, Mapping):
        raise _BadRequest(f"the body must be a JSON object; {expected}")
    unknown = sorted(set(body) - {"query", "top_k", "filters"})
    if unknown:
        raise _BadRequest(f"unknown field(s) {unknown}; {expected}")
    query = body.get("query")
    if not isinstance(query, str) or not query.strip():
        raise _BadRequest(f"'query' must be a non-empty string; {expected}")
    top_k = body.get("top_k")
    if top_k is not None and (not isinstance(top_k, int) or isinstance(top_k, bool) or top_k < 1):
        raise _BadRequest(f"'top_k' must be a positive integer, got {top_k!r}")
    filters = body.get("filters")
    if filters is not None and not isinstance(filters, Mapping):
        raise _BadRequest(f"'filters' must be a JSON object of key: value, got {filters!r:.60}")
    return FilteredQueryBundle(query, filters=filters or None, top_k=top_k)


def _handler(retriever: RecursiveSummaryRetriever) -> type[BaseHTTPRequestHandler]:
    class RetrievalHandler(BaseHTTPRequestHandler):
        server_version = "llama-recursive"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (upstream's name)
            return  # one line per request on stderr would drown the answers; the app logs its own

        def _send(self, status: HTTPStatus, payload: Mapping[str, Any]) -> None:
            data = json.dumps(payload, ensure_ascii=False).encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            if self.path != "/health":
                self._send(
                    HTTPStatus.NOT_FOUND, {"error": f"no such path {self.path!r}; POST /retrieve or GET /health"}
                )
                return
            self._send(HTTPStatus.OK, {"status": "ok", "documents": len(retriever.index.documents)})

        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            if self.path != "/retrieve":
                self._send(HTTPStatus.NOT_FOUND, {"error": f"no such path {self.path!r}; POST /retrieve"})
                return
            try:
                length = int(self.headers.get("Content-Length") or 0)
                if not 0 < length <= MAX_REQUEST_BYTES:
                    raise _BadRequest(f"send a JSON body of 1 to {MAX_REQUEST_BYTES} bytes with its Content-Length")
                try:
                    body = json.loads(self.rfile.read(length))
                except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                    raise _BadRequest(f"the body is not JSON ({exc})") from None
                started = time.perf_counter()
                results = retriever.retrieve(_request_bundle(body))
            except _BadRequest as exc:
                self._send(HTTPStatus.BAD_REQUEST, {"error": str(exc)})
                return
            except Exception as exc:
                message = expected_message(exc)
                if message is None:
                    self._send(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": f"{type(exc).__name__}: {exc}"})
                    raise
                self._send(HTTPStatus.BAD_REQUEST, {"error": " ".join(message.split())})
                return
            elapsed_ms = (time.perf_counter() - started) * 1000
            self._send(HTTPStatus.OK, {"ms": round(elapsed_ms, 2), "hits": [hit_to_json(h) for h in results]})

    return RetrievalHandler


def _check_host(host: str) -> None:
    try:
        loopback = ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not loopback:
        print(
            f"warning: serving on {host}: anyone who can reach this machine can query the index "
            "(there is no authentication); the default, 127.0.0.1, serves this machine only",
            file=sys.stderr,
        )


def cmd_serve(args: argparse.Namespace) -> None:
    if not 0 <= args.port <= 65535:
        raise CliError(f"--port must be 0-65535 (0: any free port), got {args.port}")
    _check_host(args.host)
    try:  # the port is taken before the index loads, so a busy one fails at once
        server = ThreadingHTTPServer((args.host, args.port), BaseHTTPRequestHandler)
    except OSError as exc:
        raise CliError(f"cannot listen on {args.host}:{args.port} ({exc.strerror}); pass another --port") from None
    try:
        server.RequestHandlerClass = _handler(_loaded(args.persist_dir))
        server.daemon_threads = True
        host, bound = server.server_address[:2]
        print(f"Serving {args.persist_dir} on http://{host!s}:{bound} (POST /retrieve, GET /health)", flush=True)
        server.serve_forever()
    finally:
        server.server_close()
