"""``PostgresIndexStore``: a whole recursive index in PostgreSQL, shared by any number of app processes.

It holds, under one name (a plain identifier):

* two :class:`~.pg_level.PostgresLevelStore` levels, ``name_chunks`` and ``name_summaries``;
* ``name_documents``: each document's record (title, content hash, chunk ids, summary id,
  metadata keys), read when a query asks for it (:class:`PostgresRecords`);
* ``name_index``: one row: the layout version, the index's configuration and the retriever's
  settings (what a process needs to open the index without building anything), and the
  index generation, bumped by every committed change.

An update (add, delete or replace documents) is one transaction over both levels and the
records, which first locks the index row: writers of every process take turns, and a writer
that dies mid-update leaves nothing of it (PostgreSQL rolls the transaction back). A reader
compares the generation before each query and drops what it derived from an older one.
All parts share one set of engines (:func:`~.postgres.postgres_engines`), so their writes can
join one transaction (:meth:`PostgresIndexStore.transaction`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import Executor
from contextlib import contextmanager
from typing import Any

from llama_index_ext_recursive.errors import LlamaIndexExtRecursiveError
from llama_index_ext_recursive.stores.pg_level import (
    PostgresLevelError,
    PostgresLevelStore,
    concurrent_reads,
    creation_lock,
    joined_transaction,
    read_only,
)
from llama_index_ext_recursive.stores.postgres import PostgresEngines, identifier, postgres_engines
from llama_index_ext_recursive.tokenizer import MultilingualTokenizer

try:
    from sqlalchemy import BigInteger, Column, Integer, MetaData, Table, Text, bindparam, delete, func, select, update
    from sqlalchemy.dialects.postgresql import JSONB, insert
    from sqlalchemy.engine import Connection
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "PostgresIndexStore needs the postgres extra: pip install 'llama-index-ext-recursive[postgres]'"
    ) from exc

__all__ = ["INDEX_FORMAT", "PostgresIndexError", "PostgresIndexStore"]

logger = logging.getLogger(__name__)

INDEX_FORMAT = 1  # the layout of the index row and the records; another is refused with the fix


class PostgresIndexError(LlamaIndexExtRecursiveError, ValueError):
    """The database holds no such index, another layout, or an index of other settings."""


class PostgresIndexStore:
    """A recursive index's storage in PostgreSQL (see the module docstring).

    Args:
        engines: the connections (:func:`~.postgres.postgres_engines`); or use :meth:`from_params`.
        name: the index name (a plain identifier of at most 40 characters).
        schema: the schema holding the tables.
        dimension: the vector width, to create the index's tables when missing
            (``None``: they must exist).
        tokenizer: the BM25 tokenizer of both levels (default: ``MultilingualTokenizer()``
            for a new index; an existing one keeps its own).
        hnsw: an HNSW index on each level's vectors (``False``: exact scans).
        halfvec: those indexes in half precision, candidates re-ranked in full
            (:class:`~.pg_level.PostgresLevelStore`'s ``halfvec``).
        upgrade: upgrade levels of an older layout in place (:class:`~.pg_level.PostgresLevelStore`'s
            ``upgrade``); ``False``: they are refused with the version and this fix.
    """

    def __init__(
        self,
        engines: PostgresEngines,
        name: str,
        *,
        schema: str = "public",
        dimension: int | None = None,
        tokenizer: MultilingualTokenizer | None = None,
        hnsw: bool = True,
        halfvec: bool = True,
        upgrade: bool = False,
    ) -> None:
        if len(identifier("name", name)) > 40:
            raise ValueError(f"name {name!r} is longer than 40 characters; the tables add suffixes to it")
        self.engines = engines
        self.name = name
        self.schema = identifier("schema", schema)
        self._tables = _IndexTables(self.schema, name)
        with engines.engine.begin() as conn:
            creation_lock(conn, f"{self.schema}.{name}")  # two processes creating it take turns
            exists = _exists(conn, self.schema, f"{name}_index")
            if not exists and dimension is None:
                raise PostgresIndexError(
                    f"no recursive index {schema}.{name} in this database; build one "
                    "(RecursiveSummaryRetriever.from_documents(..., postgres=store)) with dimension= given"
                )
            if not exists:
                conn.exec_driver_sql(f'CREATE SCHEMA IF NOT EXISTS "{self.schema}"')
                self._tables.metadata.create_all(conn)
                conn.execute(insert(self._tables.index).values(format=INDEX_FORMAT, config=None, generation=0))
            self._check_format(conn)
        if dimension is not None and tokenizer is None and not exists:
            tokenizer = MultilingualTokenizer()
        try:
            self.chunks, self.summaries = (
                PostgresLevelStore(
                    engines,
                    f"{name}_{part}",
                    schema=self.schema,
                    dimension=dimension,
                    tokenizer=tokenizer,
                    hnsw=hnsw,
                    halfvec=halfvec,
                    upgrade=upgrade,
                )
                for part in ("chunks", "summaries")
            )
        except PostgresLevelError as exc:
            raise PostgresIndexError(f"recursive index {schema}.{name}: {exc}") from exc
        self.chunks.index_store = self
        self.summaries.index_store = self

    @classmethod
    def from_params(
        cls, host: str, port: int | str, database: str, user: str, password: str, name: str, **kwargs: Any
    ) -> PostgresIndexStore:
        """A store on a new set of engines (timeouts and ``create_engine_kwargs`` as
        :func:`~.postgres.postgres_engines` takes them; the rest as the constructor)."""
        engine_keys = ("iterative_scan", "connect_timeout", "statement_timeout", "create_engine_kwargs")
        engine_args = {key: kwargs.pop(key) for key in engine_keys if key in kwargs}
        return cls(postgres_engines(host, port, database, user, password, **engine_args), name, **kwargs)

    def close(self) -> None:
        """Close the pooled connections (a query after it opens new ones)."""
        self.engines.engine.dispose()

    @property
    def identity(self) -> str:
        """Names this index among every database: server, database, schema and name."""
        url = self.engines.sync_url
        return f"postgres:{url.host}:{url.port}/{url.database}/{self.schema}.{self.name}"

    def concurrent_reads(self) -> Executor | None:
        """Threads to run a query's independent searches at once (``None`` inside a change in
        progress: its one connection reads for it): see :func:`~.pg_level.concurrent_reads`."""
        return concurrent_reads()

    # ------------------------------------------------------------ state
    def _check_format(self, conn: Connection) -> None:
        found = conn.execute(select(self._tables.index.c.format)).scalar_one_or_none()
        if found is None:
            raise PostgresIndexError(f"{self.schema}.{self.name}_index holds no row: the index's tables are damaged")
        if found != INDEX_FORMAT:
            raise PostgresIndexError(
                f"recursive index {self.schema}.{self.name} has layout version {found}; this release reads "
                f"version {INDEX_FORMAT}: open it with the release that wrote it, or build it again under a new name"
            )

    @property
    def generation(self) -> int:
        """Bumped by every committed change, by any process."""
        with read_only(self.engines) as conn:
            return int(conn.execute(select(self._tables.index.c.generation)).scalar_one())

    def read_config(self) -> dict[str, Any] | None:
        """The index's configuration and the retriever's settings (``None``: not written yet:
        no build has finished)."""
        with read_only(self.engines) as conn:
            config = conn.execute(select(self._tables.index.c.config)).scalar_one()
        return None if config is None else dict(config)

    def write_config(self, config: Mapping[str, Any]) -> None:
        """Store the configuration (JSON data) in the index row, in the current change or its own."""
        data = json.loads(json.dumps(dict(config)))  # plain JSON data, or a TypeError naming the value
        with self.transaction() as conn:
            conn.execute(update(self._tables.index).values(config=data))

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        """One change of the index: joins the change in progress in this thread, else opens one
        that locks the index row first (writers of every process take turns) and bumps the
        generation when it commits. An exception rolls all of it back."""
        with joined_transaction(self.engines) as (conn, outermost):
            if outermost:
                conn.execute(select(self._tables.index.c.generation).with_for_update())
            yield conn
            if outermost:
                conn.execute(update(self._tables.index).values(generation=self._tables.index.c.generation + 1))

    # ------------------------------------------------------------ document records (JSON)
    def record_fields(self, doc_id: str) -> dict[str, Any] | None:
        """The stored fields of ``doc_id``'s record (``None``: no such document)."""
        table = self._tables.documents
        with read_only(self.engines) as conn:
            fields = conn.execute(select(table.c.record).where(table.c.doc_id == doc_id)).scalar()
        return None if fields is None else dict(fields)

    def records_fields(self, doc_ids: list[str]) -> dict[str, dict[str, Any]]:
        """The stored fields of the records of ``doc_ids`` that exist, in one query."""
        table = self._tables.documents
        with read_only(self.engines) as conn:
            rows = conn.execute(select(table.c.doc_id, table.c.record).where(table.c.doc_id.in_(doc_ids))).all()
        return {row.doc_id: dict(row.record) for row in rows}

    def record_ids(self) -> list[str]:
        table = self._tables.documents
        with read_only(self.engines) as conn:
            return list(conn.execute(select(table.c.doc_id).order_by(table.c.doc_id)).scalars())

    def record_count(self) -> int:
        table = self._tables.documents
        with read_only(self.engines) as conn:
            return int(conn.execute(select(func.count()).select_from(table)).scalar_one())

    def all_record_fields(self) -> list[tuple[str, dict[str, Any]]]:
        table = self._tables.documents
        with read_only(self.engines) as conn:
            rows = conn.execute(select(table.c.doc_id, table.c.record).order_by(table.c.doc_id)).all()
        return [(row.doc_id, dict(row.record)) for row in rows]

    def write_records(self, removed: Iterable[str], added: Mapping[str, Mapping[str, Any]]) -> None:
        """Delete the records of ``removed``, write those of ``added`` (in the current change)."""
        table = self._tables.documents
        gone = list(removed)
        with self.transaction() as conn:
            if gone:
                conn.execute(delete(table).where(table.c.doc_id.in_(gone)))
            rows = [{"doc_id": doc_id, "record": dict(fields)} for doc_id, fields in added.items()]
            for start in range(0, len(rows), 5_000):
                stmt = insert(table).values(rows[start : start + 5_000])
                conn.execute(
                    stmt.on_conflict_do_update(index_elements=["doc_id"], set_={"record": stmt.excluded.record})
                )

    def listed_chunk_count(self) -> int:
        """The chunks the records list, counted by the server."""
        table = self._tables.documents
        with read_only(self.engines) as conn:
            total = conn.execute(
                select(func.coalesce(func.sum(func.jsonb_array_length(table.c.record["chunk_ids"])), 0))
            ).scalar_one()
        return int(total)

    def varying_keys(self) -> set[str]:
        """The metadata keys some record lists as varying between its chunks."""
        table = self._tables.documents
        with read_only(self.engines) as conn:
            return set(
                conn.execute(
                    select(func.jsonb_array_elements_text(table.c.record["varying_keys"])).distinct()
                ).scalars()
            )

    def drop(self) -> None:
        """Delete the index's tables (its data is gone for good): for tests and tutorials that
        made an index of their own; never called by the package."""
        with self.engines.engine.begin() as conn:
            names = [f"{self.name}_{suffix}" for suffix in ("index", "documents")]
            for level in (self.chunks, self.summaries):
                names += [level.name] + [f"{level.name}_{s}" for s in ("postings", "terms", "keys", "state")]
            conn.exec_driver_sql("DROP TABLE IF EXISTS " + ", ".join(f'"{self.schema}"."{n}"' for n in names))
            for level in (self.chunks, self.summaries):
                conn.exec_driver_sql(f'DROP SEQUENCE IF EXISTS "{self.schema}"."{level.name}_seq"')


class _IndexTables:
    def __init__(self, schema: str, name: str) -> None:
        meta = MetaData(schema=schema)
        self.index = Table(
            f"{name}_index",
            meta,
            Column("format", Integer, nullable=False),
            Column("config", JSONB),
            Column("generation", BigInteger, nullable=False),
        )
        self.documents = Table(
            f"{name}_documents", meta, Column("doc_id", Text, primary_key=True), Column("record", JSONB, nullable=False)
        )
        self.metadata = meta


def _exists(conn: Connection, schema: str, table: str) -> bool:
    return bool(
        conn.execute(select(func.to_regclass(bindparam("t", f'"{schema}"."{table}"')).is_not(None))).scalar_one()
    )
