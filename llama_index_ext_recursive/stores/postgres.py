"""PostgreSQL + pgvector: a store whose filtered HNSW queries return k rows, that
survives a hung or restarted server and any event loop, and whose full-text
search a hybrid (vector + full-text) retriever fuses by rank.

Two upstream ``PGVectorStore`` behaviours make it return less than asked:

* HNSW + a metadata filter: pgvector fetches ``hnsw.ef_search`` (40)
  candidates and *then* applies the WHERE clause, so a filter matching 5% of
  the rows leaves about 2 of 10. pgvector 0.8 can keep scanning
  (``hnsw.iterative_scan``), but ``PGVectorStore`` has no option for it, and
  ``create_engine_kwargs`` go to both engines, whose drivers spell connection
  settings differently (psycopg2 ``options``, asyncpg ``server_settings``).
  :func:`pgvector_store` builds both engines itself.
* ``hybrid_search=True`` with ``vector_store_query_mode="hybrid"`` does not
  fuse: it lists the dense top-k, then the text-search rows not already
  there (up to 2k rows), cosine similarities and ``ts_rank`` values side by
  side. An exact keyword match that the embedding ranks low stays low.
  :func:`~llama_index_ext_recursive.retrievers.pg_hybrid.pg_hybrid_retriever`
  runs the two searches as separate children of
  :class:`~llama_index_ext_recursive.retrievers.fusion.HybridFusionRetriever` and fuses
  their ranks; it stands among the retrievers, and this module imports none
  (:func:`check_text_search_index` is the store's part of it).

Three more make it fragile in production; the store :func:`pgvector_store`
returns handles them:

* No client-side timeout: a hung server (stopped process, dead host behind a
  live TCP stack) blocks ``retrieve()`` for as long as it hangs. Every
  connection attempt is bounded by ``connect_timeout`` and every statement by
  ``statement_timeout`` (the server cancels it; a server that does not answer
  at all is given up on :data:`CLIENT_GRACE` seconds later), and both raise
  :class:`PostgresTimeoutError`.
* Pooled connections die with a server restart, and the first query after it
  fails. The sync engine checks a pooled connection before handing it out
  (SQLAlchemy's ``pool_pre_ping``); async queries are retried once on a new
  connection when theirs turns out dead.
* asyncpg connections belong to the event loop that opened them, and
  ``PGVectorStore`` holds one async engine, so ``aretrieve`` from a second
  ``asyncio.run`` (or from a loop in another thread, as Jupyter runs one)
  fails and breaks the pool for the first loop. The store keeps one async
  engine per event loop.

And some make it unsafe or wrong on hostile or merely unusual input:

* Upstream pastes metadata filter keys and values into SQL text, so a filter
  value can run SQL of its own or return other tenants' rows, and ordinary
  values (``children's books``, `` :draft``) break the query. The store
  builds its WHERE clauses with
  :func:`~llama_index_ext_recursive.stores.pg_filters.where_clause`, which
  binds every key and value (its docstring lists where its semantics differ
  from upstream's), and checks ids and query settings before they reach the
  driver; :func:`pgvector_store` refuses table, schema and text search
  configuration names that are not plain identifiers, or longer than
  PostgreSQL's 63 characters, since upstream writes them into DDL.
* Upstream ignores a query's ``node_ids`` and ``doc_ids``, so a retriever
  scoped to some documents got every document's rows; here they are bound
  ``IN`` clauses (an empty list limits nothing, as ``as_retriever`` needs).
  ``get_nodes`` and ``delete_nodes`` take an empty id list as no node
  (upstream: every node).
* Text search ORs the query's words in a chain that the server evaluates
  recursively, so ~20,000 words overflowed its stack; here they are a
  balanced tree (same rows, same ``ts_rank``).
* Async MMR queries on an HNSW store sent ``SET hnsw.ef_search = $1``, a
  syntax error; settings go through ``set_config`` with bound values.
* A NUL character or lone surrogate in a node failed ``add`` inside the
  driver; :class:`~llama_index_ext_recursive.stores.pg_filters.UnstorableNodeError`
  names the node, the field and the position.

One module of ~900 lines on purpose: the store's overrides run on the
engines :func:`pgvector_store` builds, and the timeouts and the loop-safe async
engine depend on them; the filter clause builder, which needs none of them, is
:mod:`~llama_index_ext_recursive.stores.pg_filters`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import math
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from llama_index.core import VectorStoreIndex
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.schema import BaseNode
from llama_index.core.vector_stores.types import (
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryMode,
    VectorStoreQueryResult,
)

from llama_index_ext_recursive.errors import LlamaIndexExtRecursiveError
from llama_index_ext_recursive.stores.pg_filters import (  # UnstorableNodeError: raised by add, caught from here
    UnstorableNodeError,  # noqa: F401
    check_storable,
    scoped_filters,
    shown,
    sql_ids,
    sql_text,
    where_clause,
)
from llama_index_ext_recursive.validation import check_count, check_real

try:
    import psycopg2
    import psycopg2.extensions
    from llama_index.vector_stores.postgres import PGVectorStore
    from sqlalchemy import create_engine, desc, event, func, select, type_coerce
    from sqlalchemy.engine import URL, Engine, ExceptionContext
    from sqlalchemy.exc import DBAPIError
    from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker, create_async_engine
    from sqlalchemy.orm import sessionmaker
    from sqlalchemy.types import UserDefinedType
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "llama_index_ext_recursive.stores.postgres needs llama-index-vector-stores-postgres: "
        "pip install 'llama-index-ext-recursive[postgres]'"
    ) from exc

logger = logging.getLogger(__name__)

# pgvector's own defaults (m=16, ef_construction=64, ef_search=40), cosine distance
# as PGVectorStore's queries use
DEFAULT_HNSW: dict[str, Any] = {
    "hnsw_m": 16,
    "hnsw_ef_construction": 64,
    "hnsw_ef_search": 40,
    "hnsw_dist_method": "vector_cosine_ops",
}
ITERATIVE_SCAN_MODES = ("off", "relaxed_order", "strict_order")
HNSW_DIST_METHODS = tuple(
    f"{kind}_{dist}_ops" for kind in ("vector", "halfvec") for dist in ("cosine", "l2", "ip", "l1")
)
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_MAX_NAME = 63  # PostgreSQL's NAMEDATALEN - 1
_QUALIFIED_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?")
DEFAULT_CONNECT_TIMEOUT = 10.0
# 256 words: 0.6 s of ts_rank on 20,000 rows (benchmarks/postgres_latency.py --case text);
# a typed question holds a few dozen
DEFAULT_MAX_TEXT_QUERY_WORDS = 256
DEFAULT_STATEMENT_TIMEOUT = 30.0
# seconds the client waits past statement_timeout for the server's own cancel
# (which keeps the connection usable) before it gives up on the connection
CLIENT_GRACE = 1.0
# the server's query_canceled SQLSTATE; statement_timeout is one of its causes
_QUERY_CANCELED = "57014"


class PostgresTimeoutError(LlamaIndexExtRecursiveError, TimeoutError):
    """PostgreSQL did not answer within ``connect_timeout`` or ``statement_timeout``.

    A ``TimeoutError`` (so also ``asyncio.TimeoutError``). Retryable: the
    connection concerned is discarded, and the next call opens a new one.

    Attributes:
        setting: ``"connect_timeout"`` or ``"statement_timeout"``.
        seconds: its value.
        address: ``host:port`` of the server.
    """

    def __init__(self, setting: str, seconds: float, address: str) -> None:
        self.setting, self.seconds, self.address = setting, seconds, address
        what = "accept a connection" if setting == "connect_timeout" else "finish a statement"
        super().__init__(
            f"PostgreSQL at {address} did not {what} within {setting}={seconds:g} s; "
            f"the server may be hung, unreachable or overloaded. The call can be retried; "
            f"to allow longer, pass pgvector_store(..., {setting}=<seconds>) (or the same to a PostgreSQL "
            "store's from_params)"
        )


@contextmanager
def driver_errors(engines: PostgresEngines, conn: Any) -> Iterator[None]:
    """Errors of a call made on the SQLAlchemy connection ``conn``'s driver connection itself
    (``COPY``, which SQLAlchemy has no call for) as SQLAlchemy's ``handle_error`` hook makes them:
    a timeout is a :class:`PostgresTimeoutError`, and a connection that timed out or broke is
    discarded by the pool."""
    try:
        yield
    except psycopg2.Error as error:
        if isinstance(error, psycopg2.OperationalError):  # cut by the watchdog, or lost
            conn.invalidate(error)
        if isinstance(error, _ClientTimeout) or (error.pgcode == _QUERY_CANCELED and "statement timeout" in str(error)):
            raise engines.timeouts.error("statement_timeout") from error
        raise


class TextQueryTooLongError(LlamaIndexExtRecursiveError, ValueError):
    """A text search query holds more distinct words than ``max_text_query_words``."""


@dataclass(frozen=True)
class _Timeouts:
    address: str
    connect: float
    statement: float

    def error(self, setting: str) -> PostgresTimeoutError:
        seconds = self.connect if setting == "connect_timeout" else self.statement
        return PostgresTimeoutError(setting, seconds, self.address)

    def on_error(self, ctx: ExceptionContext) -> None:
        """SQLAlchemy ``handle_error`` hook: timeouts become :class:`PostgresTimeoutError`.

        A client-side timeout leaves the connection mid-protocol, so it is
        marked as a disconnect and the pool replaces it; after the server's own
        cancel (SQLSTATE 57014 "statement timeout") the connection is fine.
        """
        error = ctx.original_exception
        if isinstance(error, _ClientTimeout):  # psycopg2: the watchdog cut the socket
            ctx.is_disconnect = True
            raise self.error("statement_timeout") from error
        if isinstance(error, TimeoutError):  # asyncpg's command_timeout
            ctx.is_disconnect = True
            driver = ctx.connection.connection.driver_connection if ctx.connection is not None else None
            if driver is not None:  # None: the pool has already let go of it
                # close it now: SQLAlchemy would first try a polite close, for
                # 2 s, on a connection that is not answering
                driver.terminate()
            raise self.error("statement_timeout") from error
        sqlstate = getattr(error, "pgcode", None) or getattr(error, "sqlstate", None)
        if sqlstate == _QUERY_CANCELED and "statement timeout" in str(error):
            raise self.error("statement_timeout") from error


# ------------------------------------------------------------------ psycopg2


class _ClientTimeout(psycopg2.OperationalError):
    """The watchdog cut a connection whose server did not reply in time."""


class _Watchdog:
    """One daemon thread that cuts the socket of psycopg2 calls past their deadline.

    libpq waits for a reply with no limit of its own, and a hung server never
    sends one (nor answers a cancel request); TCP keepalives do not help, since
    the server's kernel still acknowledges. Shutting the socket down makes
    libpq's wait return at once with "server closed the connection".
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._deadlines: dict[int, tuple[float, _WatchedConnection]] = {}
        self._tokens = itertools.count()
        self._thread: threading.Thread | None = None

    @contextmanager
    def watch(self, conn: _WatchedConnection) -> Iterator[None]:
        token = next(self._tokens)
        with self._cond:
            self._deadlines[token] = (time.monotonic() + conn.client_timeout, conn)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="pgvector-watchdog", daemon=True)
                self._thread.start()
            self._cond.notify()
        try:
            yield
        except psycopg2.Error as exc:
            if conn.timed_out:
                raise _ClientTimeout(f"no reply within {conn.client_timeout:g} s") from exc
            raise
        finally:
            with self._cond:
                self._deadlines.pop(token, None)

    def _run(self) -> None:
        with self._cond:
            while True:
                now = time.monotonic()
                for token in [t for t, (deadline, _) in self._deadlines.items() if deadline <= now]:
                    self._deadlines.pop(token)[1].cut()
                upcoming = min((deadline for deadline, _ in self._deadlines.values()), default=None)
                self._cond.wait(None if upcoming is None else upcoming - now)


_WATCHDOG = _Watchdog()
_NO_LIMIT = 7 * 24 * 3600.0  # seconds: "no limit" for the watchdog, which needs a finite deadline


@contextmanager
def unbounded_statements(conn: Any) -> Iterator[None]:
    """Let the statements of this block (in the SQLAlchemy connection ``conn``'s transaction) run as
    long as they need, as an index build over millions of rows does: the server's
    ``statement_timeout`` is lifted for the transaction (``SET LOCAL``) and this client's watchdog
    for the block. Every other statement keeps its bounds."""
    conn.exec_driver_sql("SET LOCAL statement_timeout = 0")
    raw = conn.connection.dbapi_connection
    bounded = isinstance(raw, _WatchedConnection)
    before = raw.client_timeout if bounded else None
    if bounded:
        raw.client_timeout = _NO_LIMIT
    try:
        yield
    finally:
        if bounded and before is not None:
            raw.client_timeout = before


class _WatchedConnection(psycopg2.extensions.connection):
    """A psycopg2 connection whose commits and rollbacks the watchdog bounds."""

    client_timeout: float  # set by the creator: statement_timeout + CLIENT_GRACE
    timed_out = False

    def cut(self) -> None:
        self.timed_out = True
        try:
            with socket.fromfd(self.fileno(), socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.shutdown(socket.SHUT_RDWR)
        except (OSError, psycopg2.Error) as exc:  # already closed
            logger.debug("could not shut down a timed-out connection's socket: %r", exc)

    def commit(self) -> None:
        with _WATCHDOG.watch(self):
            super().commit()

    def rollback(self) -> None:
        with _WATCHDOG.watch(self):
            super().rollback()


class _WatchedCursor(psycopg2.extensions.cursor):
    """A psycopg2 cursor whose statements (and the implicit BEGIN) the watchdog bounds."""

    def execute(self, query: Any, vars: Any = None) -> None:
        with _WATCHDOG.watch(self.connection):
            super().execute(query, vars)

    def executemany(self, query: Any, vars_list: Any) -> None:
        with _WATCHDOG.watch(self.connection):
            super().executemany(query, vars_list)

    def copy_expert(self, sql: Any, file: Any, size: int = 8192) -> None:
        with _WATCHDOG.watch(self.connection):
            super().copy_expert(sql, file, size)


def _psycopg2_creator(params: dict[str, Any], timeouts: _Timeouts) -> Callable[[], Any]:
    # libpq counts connect_timeout on a whole-second clock, so it gives up after between one
    # second less and the full value (a 2 s timeout fired after 1.9 s as this clock reads it)
    gives_up_after = float(params["connect_timeout"]) - 1.0

    def connect() -> _WatchedConnection:
        started = time.monotonic()
        try:
            conn = psycopg2.connect(connection_factory=_WatchedConnection, cursor_factory=_WatchedCursor, **params)
        except psycopg2.OperationalError as exc:
            # libpq's own message ("timeout expired") may be localised; the clock is not
            if time.monotonic() - started >= gives_up_after:
                raise timeouts.error("connect_timeout") from exc
            raise
        conn.client_timeout = timeouts.statement + CLIENT_GRACE
        return conn

    return connect


# ------------------------------------------------------------------- asyncpg


def _asyncpg_creator(params: dict[str, Any], timeouts: _Timeouts) -> Callable[[], Any]:
    import asyncpg

    async def connect() -> Any:
        try:
            return await asyncpg.connect(**params)
        except TimeoutError as exc:
            raise timeouts.error("connect_timeout") from exc

    return connect


class _LoopEngines:
    """One asyncpg ``AsyncEngine`` per event loop, made on the loop's first query.

    asyncpg connections are bound to the loop that opened them. A loop's
    pooled connections hold references to it, so a weak mapping would never
    let go; engines of closed loops are dropped instead on the next query
    from any loop (their connections cannot be closed politely any more, so
    the pool is released without I/O and the sockets close as they are
    collected). ``await store.close()`` in a loop disposes of its engine.
    """

    def __init__(self, make_engine: Callable[[], AsyncEngine]) -> None:
        self._make_engine = make_engine
        self._lock = threading.Lock()
        self._engines: dict[asyncio.AbstractEventLoop, tuple[AsyncEngine, async_sessionmaker]] = {}

    def __call__(self) -> AsyncSession:
        """A session on the running loop's engine (what ``PGVectorStore`` calls ``_async_session()``)."""
        loop = asyncio.get_running_loop()
        with self._lock:
            self._drop_closed()
            if loop not in self._engines:
                engine = self._make_engine()
                self._engines[loop] = (engine, async_sessionmaker(engine))
                logger.debug("new async engine for event loop %#x (%d loops)", id(loop), len(self._engines))
            _, make_session = self._engines[loop]
        return make_session()

    def _drop_closed(self) -> None:
        for loop in [loop for loop in self._engines if loop.is_closed()]:
            engine, _ = self._engines.pop(loop)
            engine.sync_engine.dispose(close=False)

    async def dispose(self) -> None:
        """Dispose of the running loop's engine; ask the other live loops to dispose of theirs."""
        current = asyncio.get_running_loop()
        with self._lock:
            self._drop_closed()
            engines, self._engines = self._engines, {}
        for loop, (engine, _) in engines.items():
            if loop is current:
                await engine.dispose()
            else:
                asyncio.run_coroutine_threadsafe(engine.dispose(), loop)


# --------------------------------------------------------------------- store


class _PGVectorStore(PGVectorStore):
    """``PGVectorStore`` on the engines :func:`pgvector_store` builds: one async
    engine per event loop, async queries retried once on a dead connection, and
    (with ``relaxed_order``) dense results re-sorted.

    ``hnsw.iterative_scan=relaxed_order`` may return rows slightly out of
    distance order (pgvector's documented trade-off for recall); ranks feed
    fusion and the recursive retriever's global top-k, so order matters.
    """

    _async_engines: _LoopEngines = PrivateAttr()
    _resort: bool = PrivateAttr(default=False)
    _max_text_query_words: int = PrivateAttr(default=0)

    def __init__(
        self,
        *,
        engine: Engine,
        async_engines: _LoopEngines,
        resort: bool,
        max_text_query_words: int,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self._engine = engine
        self._async_engines = async_engines
        self._resort = resort
        self._max_text_query_words = max_text_query_words

    @classmethod
    def class_name(cls) -> str:
        return "PGVectorStore"

    def _connect(self) -> None:
        # upstream creates the engines here when none were given; ours exist already.
        # Upstream types these as sessions but stores session factories in them itself.
        self._session = sessionmaker(self._engine)  # type: ignore[assignment]
        self._async_session = self._async_engines  # type: ignore[assignment]

    async def close(self) -> None:
        """Close the sync pool and the async engines (the running loop's at once)."""
        if self._engine is not None:  # set by __init__; upstream types it Optional
            self._engine.dispose()
        await self._async_engines.dispose()

    def _sorted(self, query: VectorStoreQuery, result: VectorStoreQueryResult) -> VectorStoreQueryResult:
        similarities = result.similarities
        if not self._resort or query.mode != VectorStoreQueryMode.DEFAULT or not similarities:
            return result
        order = sorted(range(len(similarities)), key=lambda i: -similarities[i])
        if order == list(range(len(order))):
            return result
        logger.debug("pgvector returned %d rows out of order; re-sorted", len(order))
        return VectorStoreQueryResult(
            nodes=[result.nodes[i] for i in order] if result.nodes is not None else None,
            similarities=[similarities[i] for i in order],
            ids=[result.ids[i] for i in order] if result.ids is not None else None,
        )

    def _build_filter_clause(self, filter_: MetadataFilter) -> Any:
        """One filter as SQL with its key and value bound (upstream pastes both into SQL text)."""
        return self._recursively_apply_filters(MetadataFilters(filters=[filter_]))

    # upstream annotates List[MetadataFilters] but passes (and reads) one MetadataFilters
    def _recursively_apply_filters(self, filters: MetadataFilters) -> Any:  # type: ignore[override]
        """The WHERE clause of every query, text search, ``get_nodes`` and ``delete_nodes``.

        Upstream's builder pastes keys and values into SQL text (SQL injection,
        and syntax errors on ordinary values such as ``children's``);
        :func:`~llama_index_ext_recursive.stores.pg_filters.where_clause` binds them.
        """
        return where_clause(self._table_class, filters, jsonb=self.use_jsonb)

    # List as PGVectorStore.add takes, which itself narrows the base class's Sequence
    def add(self, nodes: list[BaseNode], **add_kwargs: Any) -> list[str]:  # type: ignore[override]
        """Add ``nodes``; a node PostgreSQL cannot store is named (the driver named none).

        Checked only once the driver has refused the batch (one transaction,
        so nothing was added): a successful add costs nothing more.

        Args:
            nodes: the nodes, with their embeddings.
            **add_kwargs: passed to ``PGVectorStore.add``.

        Raises:
            UnstorableNodeError: a node's id, text, document id or metadata
                holds a NUL character or a lone surrogate; names which and where.
        """
        try:
            return super().add(nodes, **add_kwargs)
        except (ValueError, DBAPIError):  # psycopg2: ValueError on NUL, UnicodeEncodeError
            check_storable(nodes)
            raise

    # List as PGVectorStore.async_add takes (see add)
    async def async_add(self, nodes: list[BaseNode], **add_kwargs: Any) -> list[str]:  # type: ignore[override]
        """Add ``nodes``; a node PostgreSQL cannot store is named, as by :meth:`add`.

        Args:
            nodes: the nodes, with their embeddings.
            **add_kwargs: passed to ``PGVectorStore.async_add``.
        """
        try:
            return await super().async_add(nodes, **add_kwargs)
        except (ValueError, DBAPIError):
            check_storable(nodes)
            raise

    # Upstream binds ids already; a NUL, a lone surrogate or a non-string id
    # would still fail inside the driver, naming neither the id nor the fix.
    # An empty id list selects no node (upstream: every node, since it tests
    # the list's truth; delete_nodes([], filters) deleted by the filters alone).

    def delete(self, ref_doc_id: str, **delete_kwargs: Any) -> None:
        super().delete(sql_text("document id", ref_doc_id), **delete_kwargs)

    async def adelete(self, ref_doc_id: str, **delete_kwargs: Any) -> None:
        await super().adelete(sql_text("document id", ref_doc_id), **delete_kwargs)

    def delete_nodes(
        self, node_ids: list[str] | None = None, filters: MetadataFilters | None = None, **delete_kwargs: Any
    ) -> None:
        ids = None if node_ids is None else sql_ids("node id", node_ids)
        if ids != []:
            super().delete_nodes(ids, filters, **delete_kwargs)

    async def adelete_nodes(
        self, node_ids: list[str] | None = None, filters: MetadataFilters | None = None, **delete_kwargs: Any
    ) -> None:
        ids = None if node_ids is None else sql_ids("node id", node_ids)
        if ids != []:
            await super().adelete_nodes(ids, filters, **delete_kwargs)

    def get_nodes(self, node_ids: list[str] | None = None, filters: MetadataFilters | None = None) -> list[BaseNode]:
        ids = None if node_ids is None else sql_ids("node id", node_ids)
        return [] if ids == [] else super().get_nodes(ids, filters)

    async def aget_nodes(
        self, node_ids: list[str] | None = None, filters: MetadataFilters | None = None
    ) -> list[BaseNode]:
        ids = None if node_ids is None else sql_ids("node id", node_ids)
        return [] if ids == [] else await super().aget_nodes(ids, filters)

    def _get_query_session_settings(self, **kwargs: Any) -> list[tuple[str, dict[str, Any]]]:
        """Upstream's index settings for MMR queries, with values bound through ``set_config``.

        Upstream sends ``SET hnsw.ef_search = :value``; PostgreSQL cannot take a
        parameter in ``SET``, so with asyncpg (which binds on the server) every
        async MMR query on an HNSW store failed with a syntax error.

        Args:
            **kwargs: the query's keyword arguments (``ivfflat_probes``, ``hnsw_ef_search``).
        """
        settings: list[tuple[str, dict[str, Any]]] = []
        probes = check_count("ivfflat_probes", kwargs.get("ivfflat_probes"), allow_none=True)
        if probes:
            settings.append(("SELECT set_config('ivfflat.probes', :value, false)", {"value": str(probes)}))
        if self.hnsw_kwargs:
            ef_search = kwargs.get("hnsw_ef_search") or self.hnsw_kwargs["hnsw_ef_search"]
            settings.append(("SELECT set_config('hnsw.ef_search', :value, false)", {"value": str(ef_search)}))
        if settings:
            settings.append(("SET LOCAL enable_bitmapscan = off", {}))
        return settings

    def _build_sparse_query(
        self,
        query_str: str | None,
        limit: int,
        metadata_filters: MetadataFilters | None = None,
        **kwargs: Any,
    ) -> Any:
        """Upstream's text search (``ts_rank``, words OR'ed) with the words as a balanced tree.

        Upstream ORs the words in a chain, which the server evaluates
        recursively: a query of ~20,000 words (a pasted document, or a hostile
        one) failed with "stack depth limit exceeded". The tree groups them
        pairwise (depth log2 of the number of words) and drops repeated words;
        ``ts_rank`` and the matching rows are the same, since PostgreSQL
        counts each distinct word once whatever the grouping. The query text
        is a bound parameter, and every character that means something in a
        ``tsquery`` is removed first, as upstream does.

        Each word costs a lookup in every row that matches any of them (1,000
        words took 4.3 s on 20,000 rows, upstream's chain 4.7 s:
        ``benchmarks/postgres_latency.py --case text``), so a query of more than
        ``max_text_query_words`` distinct words is refused rather than left to
        hold a connection until ``statement_timeout``.
        """
        if query_str is None:
            raise ValueError("query_str must be specified for a sparse vector query.")
        words = _ts_words(query_str)
        if len(words) > self._max_text_query_words:
            raise TextQueryTooLongError(
                f"the text search query has {len(words):,} distinct words ({shown(query_str)}); "
                f"at most {self._max_text_query_words} are searched, since each costs a lookup in "
                f"every matching row: shorten the query, or raise "
                f"pgvector_store(..., max_text_query_words=...)"
            )
        table = self._table_class
        ts_query = func.to_tsquery(type_coerce(self.text_search_config, _RegConfig), _or_tree(words))
        stmt = (
            select(
                table.id,
                table.node_id,
                table.text,
                table.metadata_,
                func.ts_rank(table.text_search_tsv, ts_query).label("rank"),
            )
            .where(table.text_search_tsv.op("@@")(ts_query))
            .order_by(desc("rank"))
        )
        if self._customize_query_fn is not None:
            # called as upstream calls it; its annotation lists three positional arguments
            stmt = self._customize_query_fn(stmt, table, **kwargs)  # type: ignore[call-arg,misc]
        return self._apply_filters_and_limit(stmt, limit, metadata_filters)

    def _checked(self, query: VectorStoreQuery, kwargs: dict[str, Any]) -> VectorStoreQuery:
        """``query`` with its ``node_ids`` and ``doc_ids`` in its filters, its counts checked.

        Upstream ignores ``node_ids`` and ``doc_ids`` (a retriever scoped to
        some documents got every document's rows), writes ``hnsw_ef_search``
        into a SET statement as text in async queries (and ``ivfflat_probes``
        into one the server refuses for anything but a count), and sends a
        negative ``top_k`` to the server as a LIMIT it refuses.
        """
        for setting in ("hnsw_ef_search", "ivfflat_probes"):
            check_count(setting, kwargs.get(setting), allow_none=True)
        check_count("similarity_top_k", query.similarity_top_k, minimum=0, allow_none=True)
        check_count("sparse_top_k", query.sparse_top_k, minimum=0, allow_none=True)
        filters = scoped_filters(query.filters, query.node_ids, query.doc_ids)
        return query if filters is query.filters else dataclasses.replace(query, filters=filters)

    def query(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        query = self._checked(query, kwargs)
        return self._sorted(query, super().query(query, **kwargs))

    async def aquery(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        """Query; retried once if the pooled connection turns out dead (a server restart).

        asyncpg's pre-ping costs three round trips per checkout; a retry costs
        nothing until a connection dies. SQLAlchemy then discards every
        connection the pool opened before, so the retry gets a new one. Only
        reads are retried: a write may have happened before the connection died.
        """
        query = self._checked(query, kwargs)
        try:
            result = await super().aquery(query, **kwargs)
        except DBAPIError as exc:
            if not exc.connection_invalidated:
                raise
            logger.warning("PostgreSQL connection lost (%s); retrying the query on a new connection", exc.orig)
            result = await super().aquery(query, **kwargs)
        return self._sorted(query, result)


class _RegConfig(UserDefinedType):
    """PostgreSQL's ``regconfig``: the text search configuration, as upstream passes it."""

    cache_ok = True

    def get_col_spec(self, **kw: Any) -> str:
        return "regconfig"


# upstream's reading of a text search query: runs of anything but word
# characters (a period inside a word excepted) separate words; this drops every
# tsquery operator (& | ! <-> : * ( ) and quotes)
_TS_SEPARATORS = re.compile(r"(?!\b\.\b)\W+")


def _ts_words(query_str: str) -> list[str]:
    """The distinct words of a text search query, in order, as upstream reads them."""
    return list(dict.fromkeys(_TS_SEPARATORS.sub(" ", query_str).split()))


def _or_tree(words: list[str]) -> str:
    """``words`` OR'ed as a balanced ``tsquery`` (``(a|b)|(c|d)``)."""
    while len(words) > 1:
        pairs = [f"({words[i]}|{words[i + 1]})" for i in range(0, len(words) - 1, 2)]
        words = pairs + words[len(pairs) * 2 :]
    return words[0] if words else ""


def identifier(name: str, value: Any, pattern: re.Pattern[str] = _IDENTIFIER) -> str:
    """``value`` if it is a plain SQL identifier; PGVectorStore writes it into DDL unquoted."""
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise ValueError(
            f"{name} must be a plain SQL identifier (ASCII letters, digits and _, not starting "
            f"with a digit), got {value!r}: PGVectorStore writes it into CREATE TABLE and "
            f"CREATE INDEX statements unquoted"
        )
    return value


def _names_fit(table_name: str, hnsw: bool, indexed_metadata_keys: Any) -> None:
    """Refuse a table or index name longer than PostgreSQL's 63 characters.

    ``PGVectorStore`` derives them from ``table_name`` and the
    ``indexed_metadata_keys``; SQLAlchemy refuses a longer one when the table
    is created, which upstream only logs, so every later call failed with
    "relation does not exist".
    """
    base = table_name.lower()  # as PGVectorStore names the table
    names = [f"data_{base}", f"{base}_idx_1"] + ([f"data_{base}_embedding_idx"] if hnsw else [])
    for key, pg_type in indexed_metadata_keys or ():
        suffix = "gin" if pg_type == "text[]" else str(pg_type).replace(" ", "_")
        names.append(f"{base}_idx_{key}_{suffix}")
    for name in names:
        if len(name) > _MAX_NAME:
            raise ValueError(
                f"table_name {table_name!r} and indexed_metadata_keys make the name {name!r}, "
                f"{len(name)} characters; PostgreSQL names hold at most {_MAX_NAME}: use a shorter "
                f"table_name (or metadata key)"
            )


def _hnsw_kwargs(hnsw: bool | dict[str, Any] | None) -> dict[str, Any] | None:
    if hnsw is None or hnsw is False:
        return None
    if hnsw is True:
        return dict(DEFAULT_HNSW)
    if isinstance(hnsw, dict):
        unknown = set(hnsw) - set(DEFAULT_HNSW)
        if unknown:
            raise ValueError(f"unknown hnsw keys {sorted(unknown)}; known: {sorted(DEFAULT_HNSW)}")
        # a copy: PGVectorStore pops keys from the dict it is given
        settings = {**DEFAULT_HNSW, **hnsw}
        # PGVectorStore writes these into CREATE INDEX and SET statements as text
        for key in ("hnsw_m", "hnsw_ef_construction", "hnsw_ef_search"):
            check_count(key, settings[key])
        if settings["hnsw_dist_method"] not in HNSW_DIST_METHODS:
            raise ValueError(
                f"hnsw_dist_method must be one of {HNSW_DIST_METHODS}, got {settings['hnsw_dist_method']!r}"
            )
        return settings
    raise TypeError(f"hnsw must be a bool or a dict of HNSW settings, got {type(hnsw).__name__}")


@dataclass(frozen=True)
class PostgresEngines:
    """The connections to one server: a sync engine and an async engine per event loop,
    every connection with the same settings and bounded waits (see :func:`postgres_engines`)."""

    engine: Engine
    async_engines: _LoopEngines
    sync_url: URL
    async_url: URL
    timeouts: _Timeouts


def postgres_engines(
    host: str,
    port: int | str,
    database: str,
    user: str,
    password: str,
    *,
    iterative_scan: str | None = "relaxed_order",
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    statement_timeout: float = DEFAULT_STATEMENT_TIMEOUT,
    create_engine_kwargs: dict[str, Any] | None = None,
) -> PostgresEngines:
    """The sync (psycopg2) and async (asyncpg) SQLAlchemy engines of every PostgreSQL
    component of the package: each connection sets ``hnsw.iterative_scan`` and
    ``statement_timeout``, opening one waits at most ``connect_timeout``, pooled sync
    connections are checked before use, and async engines are one per event loop.
    Arguments as :func:`pgvector_store`'s.
    """
    if iterative_scan is not None and iterative_scan not in ITERATIVE_SCAN_MODES:
        raise ValueError(f"iterative_scan must be one of {ITERATIVE_SCAN_MODES} or None, got {iterative_scan!r}")
    timeouts = _Timeouts(
        address=f"{host}:{port}",
        connect=check_real("connect_timeout", connect_timeout, low=0.001),
        statement=check_real("statement_timeout", statement_timeout, low=0.001),
    )

    def url(driver: str) -> URL:
        return URL.create(
            f"postgresql+{driver}",
            username=user,
            password=password,
            host=host,
            port=int(port),
            database=database,
        )

    engine_kwargs = dict(create_engine_kwargs or {})
    driver_args = dict(engine_kwargs.pop("connect_args", None) or {})
    settings = {"statement_timeout": str(max(1, round(timeouts.statement * 1000)))}  # milliseconds
    if iterative_scan is not None:
        settings["hnsw.iterative_scan"] = iterative_scan
    # psycopg2 takes libpq's keywords and startup options; asyncpg its own names and server_settings
    options = " ".join([driver_args.pop("options", ""), *(f"-c {k}={v}" for k, v in settings.items())])
    sync_params = {
        **driver_args,
        "host": host,
        "port": int(port),
        "user": user,
        "password": password,
        "dbname": database,
        "connect_timeout": max(2, math.ceil(timeouts.connect)),
        "options": options.strip(),
    }
    async_params = {
        **driver_args,
        "host": host,
        "port": int(port),
        "user": user,
        "password": password,
        "database": database,
        "timeout": timeouts.connect,
        "command_timeout": timeouts.statement + CLIENT_GRACE,
        "server_settings": {**driver_args.get("server_settings", {}), **settings},
    }
    sync_url, async_url = url("psycopg2"), url("asyncpg")
    # check pooled connections before use (one SELECT 1), so the first query
    # after a server restart does not fail; the async engine retries instead
    engine = create_engine(
        sync_url,
        creator=_psycopg2_creator(sync_params, timeouts),
        **{"pool_pre_ping": True, **engine_kwargs},
    )
    event.listen(engine, "handle_error", timeouts.on_error)

    def make_async_engine() -> AsyncEngine:
        async_engine = create_async_engine(
            async_url, async_creator=_asyncpg_creator(async_params, timeouts), **engine_kwargs
        )
        event.listen(async_engine.sync_engine, "handle_error", timeouts.on_error)
        return async_engine

    return PostgresEngines(engine, _LoopEngines(make_async_engine), sync_url, async_url, timeouts)


def pgvector_store(
    host: str,
    port: int | str,
    database: str,
    user: str,
    password: str,
    table_name: str,
    embed_dim: int,
    *,
    hnsw: bool | dict[str, Any] = True,
    hybrid_search: bool = False,
    text_search_config: str = "english",
    iterative_scan: str | None = "relaxed_order",
    schema_name: str = "public",
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    statement_timeout: float = DEFAULT_STATEMENT_TIMEOUT,
    create_engine_kwargs: dict[str, Any] | None = None,
    max_text_query_words: int = DEFAULT_MAX_TEXT_QUERY_WORDS,
    **kwargs: Any,
) -> PGVectorStore:
    """A ``PGVectorStore`` whose HNSW queries with metadata filters return k rows,
    with bounded waits, reconnection after a server restart, and async calls
    from any event loop.

    Builds the sync (psycopg2) and async (asyncpg) SQLAlchemy engines itself so
    that every connection sets ``hnsw.iterative_scan`` (pgvector >= 0.8): the
    HNSW scan continues until enough rows pass the filter instead of stopping
    after ``ef_search`` candidates. With ``relaxed_order`` dense results are
    re-sorted by similarity before they are returned.

    Both engines bound every wait: opening a connection by ``connect_timeout``,
    each statement by ``statement_timeout`` (set on the server, which cancels
    the statement; a server that does not answer at all, e.g. a hung host, is
    given up on :data:`CLIENT_GRACE` seconds later). Either raises
    :class:`PostgresTimeoutError` naming the setting. A call that must first
    replace a dead pooled connection can take up to both bounds. The first
    query after a server restart succeeds: sync pooled connections are checked
    before use (``pool_pre_ping``), async queries are retried once on a new
    connection when theirs died. Async calls use one engine per
    event loop, so ``asyncio.run`` twice, or a loop in another thread (as
    Jupyter runs), each get connections of their own.

    Args:
        host: server host.
        port: server port.
        database: database name.
        user: user name.
        password: password ("" for trust authentication).
        table_name: table name (PGVectorStore lowercases it and prefixes ``data_``).
        embed_dim: embedding dimension.
        hnsw: ``True`` for an HNSW cosine index with pgvector's defaults
            (m=16, ef_construction=64, ef_search=40), a dict to override some
            of them (keys as in ``PGVectorStore``'s ``hnsw_kwargs``: ``hnsw_m``,
            ``hnsw_ef_construction``, ``hnsw_ef_search``, ``hnsw_dist_method``),
            ``False`` for exact scans.
        hybrid_search: add the ``tsvector`` column full-text search needs
            (required by :func:`~llama_index_ext_recursive.retrievers.pg_hybrid.pg_hybrid_retriever`).
        text_search_config: PostgreSQL text search configuration, e.g. "english", "simple".
        iterative_scan: ``"relaxed_order"`` (default), ``"strict_order"``,
            ``"off"``, or ``None`` to leave the server's setting alone.
        schema_name: schema holding the table.
        connect_timeout: seconds to wait for a new connection (default 10;
            psycopg2 rounds it up to whole seconds, at least 2).
        statement_timeout: seconds one statement may run (default 30). Raise
            it for exact scans of large tables or large batches of ``add``.
        create_engine_kwargs: extra keyword arguments for both engines (pool
            size, echo, ``pool_pre_ping``, ...); ``connect_args`` go to both
            drivers (the timeouts above take precedence over theirs).
        max_text_query_words: most distinct words a text search query
            (``text_search`` / ``hybrid`` mode,
            :func:`~llama_index_ext_recursive.retrievers.pg_hybrid.pg_hybrid_retriever`)
            may hold (default 256); each costs a lookup in every matching
            row, so a pasted document would hold a connection for seconds to
            minutes. More raise :class:`TextQueryTooLongError`.
        **kwargs: passed to ``PGVectorStore`` (``use_jsonb``, ``indexed_metadata_keys``, ...).

    Raises:
        ValueError: an unknown ``iterative_scan`` or ``hnsw`` key or distance
            method, a timeout that is not positive and finite, or a
            ``table_name``, ``schema_name`` or ``text_search_config`` that is
            not a plain SQL identifier (``PGVectorStore`` writes them into DDL
            unquoted), or a table or index name from ``table_name`` and
            ``indexed_metadata_keys`` beyond PostgreSQL's 63 characters.
        TypeError: an HNSW setting that is not a positive integer.
    """
    _names_fit(identifier("table_name", table_name), bool(hnsw), kwargs.get("indexed_metadata_keys"))
    engines = postgres_engines(
        host,
        port,
        database,
        user,
        password,
        iterative_scan=iterative_scan,
        connect_timeout=connect_timeout,
        statement_timeout=statement_timeout,
        create_engine_kwargs=create_engine_kwargs,
    )
    timeouts = engines.timeouts
    logger.debug(
        "pgvector_store %s:%s/%s table=%s hnsw=%s iterative_scan=%s hybrid_search=%s "
        "connect_timeout=%s statement_timeout=%s",
        host,
        port,
        database,
        table_name,
        bool(hnsw),
        iterative_scan,
        hybrid_search,
        timeouts.connect,
        timeouts.statement,
    )
    return _PGVectorStore(
        engine=engines.engine,
        async_engines=engines.async_engines,
        resort=iterative_scan == "relaxed_order",
        max_text_query_words=check_count("max_text_query_words", max_text_query_words),
        # kept for display only: the engines above are what connects (password hidden)
        connection_string=engines.sync_url.render_as_string(hide_password=True),
        async_connection_string=engines.async_url.render_as_string(hide_password=True),
        table_name=identifier("table_name", table_name),
        schema_name=identifier("schema_name", schema_name),
        hybrid_search=hybrid_search,
        text_search_config=identifier("text_search_config", text_search_config, _QUALIFIED_IDENTIFIER),
        embed_dim=embed_dim,
        hnsw_kwargs=_hnsw_kwargs(hnsw),
        **kwargs,
    )


def check_text_search_index(index: VectorStoreIndex) -> None:
    """Refuse an index that :func:`~llama_index_ext_recursive.retrievers.pg_hybrid.pg_hybrid_retriever`
    cannot search by text: not over a ``PGVectorStore``, or over one without the
    ``tsvector`` column (``hybrid_search=True``). A ``PGVectorStore`` that
    :func:`pgvector_store` did not build is searched, with a logged warning
    saying what it lacks.

    Raises:
        TypeError: the index is not over a ``PGVectorStore``.
        ValueError: the store was built without ``hybrid_search=True``.
    """
    store = getattr(index, "vector_store", None)
    if not isinstance(store, PGVectorStore):
        raise TypeError(f"pg_hybrid_retriever needs an index over a PGVectorStore, got {type(store).__name__}")
    if not store.hybrid_search:
        raise ValueError(
            "the PGVectorStore was built without hybrid_search=True, so its table has no "
            "tsvector column to search; rebuild it with hybrid_search=True"
        )
    if not isinstance(store, _PGVectorStore):
        logger.warning(
            "pg_hybrid_retriever: this PGVectorStore was not built by pgvector_store, so it has no "
            "client-side timeout (a hung server blocks retrieve), fails the first query after a "
            "server restart, and its async calls work from one event loop only; build it with "
            "llama_index_ext_recursive.stores.postgres.pgvector_store(...)"
        )
