"""``PostgresLevelStore``: one level of a recursive index (its chunks, or its document
summaries) as rows of PostgreSQL, searched densely by pgvector and lexically by BM25 in SQL.

The database holds the level whole, so any number of app processes share it and the client
keeps nothing per row: a query sends the query vector or the query's terms and receives ids
and scores (the recursive search's many intermediate searches), and nodes are read for the
final top-k alone. It answers what the recursive search asks of the embedded
:class:`~llama_index_ext_recursive.stores.columnar_store.ColumnarVectorStore` (dense and
``TEXT_SEARCH`` queries, :meth:`query_ids`, :meth:`ref_doc_ids`, :meth:`nodes_by_id`, ...)
with the same results: the same ids in the same order, scores equal within float precision.

Tables, for a level named ``name`` (a plain identifier) in ``schema``:

* ``name``: a row per node: ``doc_id`` (its ``ref_doc_id``), ``node_id``, ``seq`` (the
  order rows were added: equal scores go to the earlier row, as in the embedded store),
  ``node`` (the node's JSON without its vector), ``metadata`` (``jsonb``: what filters see,
  ``ref_doc_id`` included), ``embedding`` (unit length: scores are inner products, which
  are cosine similarities; an HNSW graph over them in half precision finds candidates,
  ranked in full), ``length`` (its BM25 token count) and ``link`` (an
  ``IndexNode``'s ``index_id``). The primary key is ``(doc_id, node_id)``, so the table
  can be distributed by document (Citus) with a document's rows together; ``seq`` is
  indexed too, to turn BM25's best rows into ids. Vectors are kept in the row (storage
  ``MAIN``), the node's JSON goes to TOAST, so exact scans read the rows alone.
* ``name_postings``: the BM25 terms of each row (``doc_id``, ``node_id``, ``term``, ``tf``,
  with the row's ``length`` and ``seq`` repeated), keyed by ``(doc_id, term, node_id)`` (a
  search routed to some documents reads theirs) and indexed by ``(term, seq)`` with ``tf`` and
  ``length`` included (the rows added since the last segment, by term).
* ``name_segments``: the postings packed by term, which a BM25 search of the whole level reads
  and scores in the client (:mod:`~llama_index_ext_recursive.stores.pg_segments`).
* ``name_terms``: each term's document frequency among live rows.
* ``name_keys``: each metadata key's kinds of value and their counts (the filter
  vocabulary, read without scanning the rows).
* ``name_state``: one row: the format version, the configuration (dimension, tokenizer,
  BM25 parameters), the generation (bumped by every write), the live row count, the
  total token count, and the segments' bookkeeping.

Every write is one transaction that first locks the state row, so writers from any
process take turns and no count is lost; readers never wait and see a write whole or not
at all. BM25 scores are computed at query time from the live statistics in bm25s' arithmetic
(method ``lucene``, ``k1`` 1.5, ``b`` 0.75: the embedded store's), in double precision
where the embedded store sums float32. Every value a user gives is a bound parameter, and
table names are checked plain identifiers, quoted.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import math
import os
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from collections.abc import Sequence as Seq
from concurrent.futures import Executor, ThreadPoolExecutor
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.schema import BaseNode, IndexNode
from llama_index.core.storage.docstore.utils import json_to_doc
from llama_index.core.vector_stores.types import (
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryMode,
    VectorStoreQueryResult,
)

from llama_index_ext_recursive.columnar.rows import node_json
from llama_index_ext_recursive.errors import LlamaIndexExtRecursiveError
from llama_index_ext_recursive.filters import FilterVocabulary, filterable_metadata, value_kind
from llama_index_ext_recursive.stores.pg_filters import (
    check_storable,
    scoped_filters,
    sql_ids,
    where_clause,
)
from llama_index_ext_recursive.stores.postgres import (
    PostgresEngines,
    driver_errors,
    identifier,
    postgres_engines,
    unbounded_statements,
)
from llama_index_ext_recursive.stores.protocol import REF_KEY, LevelStore
from llama_index_ext_recursive.tokenizer import MultilingualTokenizer
from llama_index_ext_recursive.validation import check_count

try:
    from pgvector.sqlalchemy import HALFVEC, Vector
    from sqlalchemy import (
        JSON,
        BigInteger,
        Column,
        Float,
        Integer,
        MetaData,
        PrimaryKeyConstraint,
        Sequence,
        Table,
        Text,
        bindparam,
        cast,
        delete,
        func,
        literal,
        select,
        true,
        tuple_,
        update,
    )
    from sqlalchemy.dialects.postgresql import ARRAY, JSONB
    from sqlalchemy.engine import Connection

    from llama_index_ext_recursive.stores.pg_segments import (
        Segments,
        best_first,
        bm25_by_row,
        read_found,
        segments_table,
    )
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "PostgresLevelStore needs the postgres extra: pip install 'llama-index-ext-recursive[postgres]'"
    ) from exc

__all__ = [
    "FORMAT_VERSION",
    "PostgresLevelError",
    "PostgresLevelStore",
    "concurrent_reads",
    "creation_lock",
    "joined_transaction",
    "read_only",
]

logger = logging.getLogger(__name__)

# the tables' layout (4: postings packed by term in segments; 3: postings keyed by (term, seq)
# and (doc_id, term, node_id)); 2 and 3 are upgraded in place on request, another refused
FORMAT_VERSION = 4
# bm25s' defaults for method "lucene": the scores the embedded BM25 gives
K1, B = 1.5, 0.75
BM25 = {"method": "lucene", "k1": K1, "b": B}
# a BM25 search sums the postings of the query's terms by row in a hash table of one entry per
# row matched: about 70 bytes each, so PostgreSQL's default work_mem (4 MB, twice that for
# hashing) spilled it to disk from about 100k rows matched (2M chunks, 8 words: 186k rows, 5
# batches, 291 of 326 ms). A transaction's own setting, so a pooler's sessions keep theirs.
BM25_WORK_MEM_MB = 64
_BM25_MEMORY = f"SET LOCAL work_mem = '{BM25_WORK_MEM_MB}MB'; "
# hits of a BM25 search of the whole level looked up at first (more, in growing batches, while
# deleted rows or filters leave fewer than k)
FIRST_HITS = 64
# candidates a search of a halfvec graph re-ranks in full precision, per row asked for
HALFVEC_CANDIDATES = 4
_HIT_REFS_KEPT = 65_536  # hits whose doc_id a store keeps for ref_doc_ids (a few MB)


class PostgresLevelError(LlamaIndexExtRecursiveError, ValueError):
    """The tables hold another layout or another configuration than the one asked for."""


class PostgresLevelStore(LevelStore):
    """One level of a recursive index in PostgreSQL + pgvector (see the module docstring).

    Args:
        engines: the connections (:func:`~.postgres.postgres_engines`); or use
            :meth:`from_params`.
        name: the level's table name (a plain identifier of at most 50 characters: the
            other tables add a suffix).
        schema: the schema holding the tables.
        dimension: the vector width. The tables are created when missing (``None``: they
            must exist); existing tables are checked against it.
        tokenizer: the BM25 tokenizer (``None``: no BM25, or the one the tables were
            created with). A different one than the tables' is refused.
        hnsw: create an HNSW index (inner product) on the vectors; ``False``: exact scans.
        halfvec: that index over the vectors in half precision (pgvector's ``halfvec``; the
            rows keep full precision), its :data:`HALFVEC_CANDIDATES` times k best re-ranked
            exactly: at 200k chunks the same recall@10 as a full-precision graph (0.790 against
            0.788), 57% of its size, 2.5 against 4.1 ms a search. ``hnsw`` and ``halfvec``
            shape a level being created; an existing level keeps its own index.
        upgrade: upgrade a level of an older layout in place (it rebuilds an index of the
            postings: minutes at millions of rows; processes of the older release then refuse
            it); ``False``: such a level is refused with the version and this fix.

    Raises:
        PostgresLevelError: the tables exist with another format version, dimension or
            tokenizer, or are missing and ``dimension`` is ``None``.
    """

    name: str
    schema_name: str

    _engines: PostgresEngines = PrivateAttr()
    _tables: _Tables = PrivateAttr()
    _dimension: int = PrivateAttr()
    _tokenizer: MultilingualTokenizer | None = PrivateAttr(default=None)
    _hit_refs: dict[str, str | None] = PrivateAttr(default_factory=dict)
    counts_in_process: ClassVar[bool] = False  # node_count reads the state row
    _shapes: dict[Any, _Compiled] = PrivateAttr(default_factory=dict)
    _index_store: Any = PrivateAttr(default=None)
    _bulk_loading: bool = PrivateAttr(default=False)  # segments are made once at the end
    _halfvec: bool = PrivateAttr(default=False)  # its HNSW graph is over halfvec

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
        if len(identifier("name", name)) > 50:
            raise ValueError(f"name {name!r} is longer than 50 characters; the tables add suffixes to it")
        super().__init__(stores_text=True, name=name, schema_name=identifier("schema", schema))
        if tokenizer is not None and not isinstance(tokenizer, MultilingualTokenizer):
            raise TypeError(f"tokenizer must be a MultilingualTokenizer, got {type(tokenizer).__name__}")
        self._engines = engines
        with engines.engine.begin() as conn:
            creation_lock(conn, f"{self.schema_name}.{name}")  # two processes creating it take turns
            config = _read_config(conn, self.schema_name, name, upgrade)
            if config is None:
                if dimension is None:
                    raise PostgresLevelError(
                        f"no level {schema}.{name} in this database; pass dimension= (and tokenizer=) to create it"
                    )
                config = {
                    "dimension": check_count("dimension", dimension),
                    "tokenizer": None if tokenizer is None else tokenizer.to_dict(),
                    "bm25": BM25,
                    "hnsw": ("halfvec" if halfvec else "vector") if hnsw else None,
                }
                _create(conn, self.schema_name, name, config)
            _check_config(config, f"{schema}.{name}", dimension, tokenizer)
        self._dimension = int(config["dimension"])
        self._tokenizer = None if config["tokenizer"] is None else MultilingualTokenizer.from_dict(config["tokenizer"])
        self._tables = _Tables(self.schema_name, name, self._dimension)
        self._halfvec = config.get("hnsw") == "halfvec"  # levels made before the key have full precision

    @classmethod
    def from_params(
        cls,
        host: str,
        port: int | str,
        database: str,
        user: str,
        password: str,
        name: str,
        **kwargs: Any,
    ) -> PostgresLevelStore:
        """A store on a new set of engines (timeouts and ``create_engine_kwargs`` as
        :func:`~.postgres.postgres_engines` takes them; the rest as the constructor)."""
        engine_keys = ("iterative_scan", "connect_timeout", "statement_timeout", "create_engine_kwargs")
        engine_args = {key: kwargs.pop(key) for key in engine_keys if key in kwargs}
        return cls(postgres_engines(host, port, database, user, password, **engine_args), name, **kwargs)

    @classmethod
    def class_name(cls) -> str:
        return "PostgresLevelStore"

    @property
    def client(self) -> Any:
        """The sync SQLAlchemy engine."""
        return self._engines.engine

    def close(self) -> None:
        """Close the pooled connections (a query after it opens new ones)."""
        self._engines.engine.dispose()

    @property
    def index_store(self) -> Any:
        """The :class:`~.pg_index.PostgresIndexStore` this level belongs to (``None``: a level
        of its own), whose changes span both levels and the records in one transaction."""
        return self._index_store

    @index_store.setter
    def index_store(self, store: Any) -> None:
        self._index_store = store

    @property
    def tokenizer(self) -> MultilingualTokenizer | None:
        """The tokenizer of the BM25 terms (``None``: the level keeps none)."""
        return self._tokenizer

    @property
    def dimension(self) -> int:
        return self._dimension

    @property
    def node_count(self) -> int:
        """Live rows (not ``__len__``, as for the embedded store)."""
        return int(self._state()["live_rows"])

    @property
    def generation(self) -> int:
        """Bumped by every write, by any process: what the level holds now."""
        return int(self._state()["generation"])

    def _state(self) -> dict[str, Any]:
        state = self._tables.state
        with read_only(self._engines) as conn:
            row = conn.execute(select(state.c.generation, state.c.live_rows, state.c.total_length)).one()
        return dict(row._mapping)

    # ---------------------------------------------------------------- writes
    def add(
        self,
        nodes: Seq[BaseNode],
        lexical_texts: Seq[str] | None = None,
        lexical_tokens: Seq[Seq[str]] | None = None,
        **add_kwargs: Any,
    ) -> list[str]:
        """Add ``nodes`` as rows in one transaction; an id already stored is replaced.

        Args:
            nodes: embedded nodes.
            lexical_texts: what BM25 indexes for each node (default: its text with the
                metadata it is embedded with); only for a level with a tokenizer.
            lexical_tokens: instead, those texts already split by :attr:`tokenizer`.
        """
        if not nodes:
            return []
        ids = sql_ids("node id", [n.node_id for n in nodes])
        if len(set(ids)) != len(ids):
            raise ValueError("node ids must be unique within one add")
        check_storable(nodes)
        vectors = self._unit_vectors(nodes)
        tokens = self.lexical_terms(nodes, lexical_texts, lexical_tokens) or [[] for _ in nodes]
        rows = []
        for node, vector, terms in zip(nodes, vectors, tokens, strict=True):
            metadata = dict(filterable_metadata(node))
            rows.append(
                _Row(
                    doc_id=node.ref_doc_id or "",
                    node_id=node.node_id,
                    node=node_json(node),
                    metadata=metadata,
                    vector=vector,
                    terms=Counter(terms),
                    length=len(terms),
                    link=node.index_id if isinstance(node, IndexNode) else None,
                )
            )
        with self._writing() as conn:
            self._delete_where(conn, self._tables.level.c.node_id.in_(ids))
            self._insert(conn, rows)
        return ids

    def delete(self, ref_doc_id: str, **delete_kwargs: Any) -> None:
        """Delete every row of document ``ref_doc_id``."""
        (doc_id,) = sql_ids("document id", [ref_doc_id])
        with self._writing() as conn:
            self._delete_where(conn, self._tables.level.c.doc_id == doc_id)

    def delete_nodes(
        self, node_ids: list[str] | None = None, filters: MetadataFilters | None = None, **delete_kwargs: Any
    ) -> None:
        """Delete the rows of ``node_ids`` that ``filters`` match (an empty list: none)."""
        if node_ids is not None and not node_ids:
            return
        clause = self._where(node_ids, filters)
        with self._writing() as conn:
            self._delete_where(conn, clause)

    def clear(self) -> None:
        """Delete every row (the tables stay)."""
        t = self._tables
        with self._writing() as conn:
            names = ", ".join(t.qualified(part) for part in ("level", "postings", "segments", "terms", "keys"))
            conn.exec_driver_sql(f"TRUNCATE {names}")
            conn.execute(update(t.state).values(live_rows=0, total_length=0, segments=[], dead_rows=0))

    def compact(self) -> None:
        """Pack every posting into one segment now, dropping what deleted rows left in the
        segments (writes do this once those rows pass a quarter of the live ones; minutes at
        millions of rows). Searches answer the same before and after."""
        if self._tokenizer is None:
            return
        with self._writing() as conn, unbounded_statements(conn):
            self._tables.packed.rebuild(conn)

    @contextmanager
    def bulk_load(self) -> Iterator[None]:
        """A build into an empty level: its HNSW index and its BM25 segments are made once at the
        end of the block, over every row, which is several times faster than growing the graph
        row by row and merging segments as they come (queries meanwhile scan exactly and read
        the postings table). A level that holds rows keeps both up to date as it goes."""
        t = self._tables
        index = f"{self.name}_embedding"
        with read_only(self._engines) as conn:
            has_index = _exists(conn, self.schema_name, index)
            empty = conn.execute(select(t.state.c.live_rows)).scalar_one() == 0
        if not empty:
            yield
            return
        if has_index:
            with self._engines.engine.begin() as conn:
                conn.exec_driver_sql(f'DROP INDEX "{self.schema_name}"."{index}"')
        self._bulk_loading = True
        try:
            yield
        finally:
            self._bulk_loading = False
            if self._tokenizer is not None:
                with self._writing() as conn, unbounded_statements(conn):
                    logger.info("packing the BM25 postings of %s into one segment", self.name)
                    t.packed.rebuild(conn)
            with self._engines.engine.begin() as conn, unbounded_statements(conn):  # minutes at millions of rows
                if has_index:
                    rows = conn.execute(select(t.state.c.live_rows)).scalar_one()
                    memory = hnsw_build_memory_mb(rows, self._dimension, 2 if self._halfvec else 4)
                    logger.info("building the HNSW index of %s over %d rows with %d MB", self.name, rows, memory)
                    conn.exec_driver_sql(f"SET LOCAL maintenance_work_mem = '{memory}MB'")
                    _create_hnsw(conn, t, self._halfvec)
                # planner statistics now, not when autovacuum gets to it: without them BM25 read every
                # posting (252 ms at 20k chunks, 9.8 ms after ANALYZE; benchmarks/scale_postgres.py)
                conn.exec_driver_sql(
                    f"ANALYZE {t.qualified('level')}, {t.qualified('postings')}, {t.qualified('segments')}, "
                    f"{t.qualified('terms')}"
                )

    @contextmanager
    def _writing(self) -> Iterator[Connection]:
        """A transaction that holds the state row: writers of every process take turns. Inside
        a change of the whole index (:meth:`~.pg_index.PostgresIndexStore.transaction`) it is
        that change's transaction, committed or rolled back with it."""
        with joined_transaction(self._engines) as (conn, _):
            conn.execute(select(self._tables.state.c.generation).with_for_update())
            yield conn
            if self._tokenizer is not None and not self._bulk_loading:
                self._tables.packed.upkeep(conn)
            conn.execute(update(self._tables.state).values(generation=self._tables.state.c.generation + 1))
        self._hit_refs = {}

    def _delete_where(self, conn: Connection, clause: Any) -> None:
        """Delete the level's rows matching ``clause`` with their postings, and update the
        statistics, the document frequencies and the key counts."""
        t = self._tables
        gone = conn.execute(
            delete(t.level)
            .where(clause)
            .returning(t.level.c.doc_id, t.level.c.node_id, t.level.c.length, t.level.c.metadata_, t.level.c.seq)
        ).all()
        if not gone:
            return
        if self._tokenizer is not None:
            t.packed.deleted(conn, [row.seq for row in gone])
        keys: Counter[tuple[str, str]] = Counter()
        for row in gone:
            keys.update(_kinds(row.metadata_))
        for start in range(0, len(gone), 10_000):
            pairs = [(row.doc_id, row.node_id) for row in gone[start : start + 10_000]]
            terms = conn.execute(
                delete(t.postings)
                .where(tuple_(t.postings.c.doc_id, t.postings.c.node_id).in_(pairs))
                .returning(t.postings.c.term)
            ).scalars()
            counted = Counter(terms)
            if counted:
                _add_counts(conn, t.terms, "term", "df", {term: -n for term, n in counted.items()})
        _add_counts(conn, t.keys, ("key", "kind"), "rows", {k: -n for k, n in keys.items()})
        conn.execute(
            update(t.state).values(
                live_rows=t.state.c.live_rows - len(gone),
                total_length=t.state.c.total_length - sum(row.length for row in gone),
            )
        )

    def _insert(self, conn: Connection, rows: list[_Row]) -> None:
        """Append ``rows`` (with COPY: a large add moves millions of postings)."""
        t = self._tables
        # ascending numbers, one per row: the order rows were added (ties go to the earlier row)
        seqs = sorted(
            conn.execute(select(t.sequence.next_value()).select_from(func.generate_series(1, len(rows)))).scalars()
        )
        _copy(
            conn,
            t.qualified("level"),
            ("doc_id", "node_id", "seq", "node", "metadata", "embedding", "length", "link"),
            (
                (
                    r.doc_id,
                    r.node_id,
                    seq,
                    r.node,
                    json.dumps(r.metadata),
                    _vector_text(r.vector),
                    r.length,
                    r.link,
                )
                for r, seq in zip(rows, seqs, strict=True)
            ),
            nullable=("link",),
        )
        if self._tokenizer is not None:
            _copy(
                conn,
                t.qualified("postings"),
                ("doc_id", "node_id", "term", "tf", "length", "seq"),
                (
                    (r.doc_id, r.node_id, term, tf, r.length, seq)
                    for r, seq in zip(rows, seqs, strict=True)
                    for term, tf in r.terms.items()
                ),
            )
            df: Counter[str] = Counter()
            for r in rows:
                df.update(r.terms.keys())
            _add_counts(conn, t.terms, "term", "df", dict(df))
        keys: Counter[tuple[str, str]] = Counter()
        examples: dict[tuple[str, str], Any] = {}
        for r in rows:
            for key_kind, value in _kinds_with_values(r.metadata):
                keys[key_kind] += 1
                examples.setdefault(key_kind, value)
        _add_counts(conn, t.keys, ("key", "kind"), "rows", dict(keys), examples)
        conn.execute(
            update(t.state).values(
                live_rows=t.state.c.live_rows + len(rows),
                total_length=t.state.c.total_length + sum(r.length for r in rows),
            )
        )

    def _unit_vectors(self, nodes: Seq[BaseNode]) -> np.ndarray:
        missing = [n.node_id for n in nodes if n.embedding is None]
        if missing:
            raise ValueError(f"{len(missing)} node(s) have no embedding (first: {missing[0]!r}); embed them first")
        matrix = np.asarray([n.embedding for n in nodes], dtype=np.float32).reshape(len(nodes), -1)
        if matrix.shape[1] != self._dimension:
            raise ValueError(
                f"the nodes' vectors have {matrix.shape[1]} dimensions; this level holds {self._dimension}"
            )
        norms = np.linalg.norm(matrix, axis=1)
        bad = np.flatnonzero(~np.isfinite(norms) | (norms == 0))
        if len(bad):
            raise ValueError(f"node {nodes[int(bad[0])].node_id!r} has a zero or non-finite vector")
        return matrix / norms[:, None]

    # ---------------------------------------------------------------- reads
    def _where(self, node_ids: Seq[str] | None, filters: MetadataFilters | None, doc_ids: Any = None) -> Any:
        scoped = scoped_filters(filters, node_ids or None, doc_ids or None)
        return true() if scoped is None else where_clause(self._tables.level.c, scoped, jsonb=True)

    def query(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        """The ``similarity_top_k`` best live rows the query's restrictions allow, as nodes."""
        ids, scores = self.query_ids(query)
        nodes = self.nodes_by_id(ids)
        kept = [(node, score) for node, score in zip(nodes, scores, strict=True) if node is not None]
        return VectorStoreQueryResult(
            nodes=[n for n, _ in kept], similarities=[s for _, s in kept], ids=[n.node_id for n, _ in kept]
        )

    def query_ids(self, query: VectorStoreQuery) -> tuple[list[str], list[float]]:
        """Ids and scores, best first, without reading a node (one round trip)."""
        k = query.similarity_top_k
        if k is not None:
            check_count("similarity_top_k", k, minimum=0)
        if query.mode == VectorStoreQueryMode.TEXT_SEARCH:
            found = self._lexical(query)
        elif query.mode == VectorStoreQueryMode.DEFAULT:
            found = self._dense(query)
        else:
            raise NotImplementedError(
                f"PostgresLevelStore answers the default (dense) and text_search (BM25) query modes, not "
                f"{VectorStoreQueryMode(query.mode).value!r}; fuse the two (e.g. HybridFusionRetriever)"
            )
        refs = self._hit_refs
        if len(refs) > _HIT_REFS_KEPT:
            refs.clear()
        refs.update((node_id, doc_id or None) for node_id, doc_id, _, _ in found)
        return [row[0] for row in found], [float(row[2]) for row in found]

    def _dense(self, query: VectorStoreQuery) -> list[tuple[str, str, float, int]]:
        if query.query_embedding is None:
            raise ValueError("the query has no embedding: embed it first (VectorStoreIndex retrievers do)")
        vector = np.asarray(query.query_embedding, dtype=np.float32)
        if vector.shape != (self._dimension,):
            raise ValueError(f"the query vector has {vector.size} dimensions; this level holds {self._dimension}")
        norm = float(np.linalg.norm(vector))
        if not math.isfinite(norm) or norm == 0:
            raise ValueError("the query vector is zero or not finite")
        level = self._tables.level
        documents, rest = _routed(query.filters, query.doc_ids)
        params: dict[str, Any] = {"vector": (vector / norm).tolist(), "k": query.similarity_top_k or None}
        if documents is not None:
            params["documents"] = sorted(documents)

        half = self._halfvec and documents is None
        if half:
            params["candidates"] = None if params["k"] is None else params["k"] * HALFVEC_CANDIDATES

        def build() -> Any:
            queried = bindparam("vector", type_=Vector(self._dimension))
            distance = level.c.embedding.max_inner_product(queried)
            stmt = select(level.c.node_id, level.c.doc_id, (-distance).label("score"), level.c.seq).where(
                self._where(query.node_ids, rest)
            )
            if documents is not None:
                # a search routed to some documents reads their rows by the primary key and ranks them
                # all (exactly: "+ 0" keeps the HNSW index out, whose scan would wade through other documents)
                stmt = stmt.where(level.c.doc_id == func.any(bindparam("documents", type_=ARRAY(Text))))
                stmt = stmt.order_by(distance + 0)
            elif half:  # the graph's best candidates in half precision, ranked in full
                halfvec = HALFVEC(self._dimension)
                approximate = cast(level.c.embedding, halfvec).max_inner_product(cast(queried, halfvec))
                candidates = stmt.order_by(approximate).limit(bindparam("candidates", type_=Integer)).subquery()
                stmt = select(candidates).order_by(candidates.c.score.desc(), candidates.c.seq)
            else:
                stmt = stmt.order_by(distance)
            return stmt.limit(bindparam("k", type_=Integer))

        rows = self._fetch(_shape("dense", documents is not None, query.node_ids, rest), build, params)
        # relaxed_order iterative scans return rows nearly sorted: sort them, ties to the earlier row
        return sorted(((r.node_id, r.doc_id, float(r.score), r.seq) for r in rows), key=lambda r: (-r[2], r[3]))

    def _lexical(self, query: VectorStoreQuery) -> list[tuple[str, str, float, int]]:
        tokenizer = self._tokenizer
        if tokenizer is None:
            raise ValueError(
                "this PostgresLevelStore keeps no BM25 terms, so it cannot answer text_search queries: "
                "create it with tokenizer=MultilingualTokenizer()"
            )
        if query.query_str is None:
            raise ValueError("a text_search query needs query_str: the words to look for")
        counts = Counter(tokenizer(query.query_str))
        if not counts:
            return []
        documents, rest = _routed(query.filters, query.doc_ids)
        k = query.similarity_top_k or None
        if documents is None and not query.node_ids:
            return self._bm25_whole_level(counts, k, rest)
        params: dict[str, Any] = {"terms": list(counts), "counts": list(counts.values()), "k": k}
        if documents is not None:
            params["documents"] = sorted(documents)
        routed = documents is not None
        rows = self._fetch(
            _shape("lexical", routed, query.node_ids, rest),
            lambda: self._lexical_statement(routed, query.node_ids, rest),
            params,
            _BM25_MEMORY,
        )
        return [(r.node_id, r.doc_id, float(r.score), r.seq) for r in rows]

    def _bm25_whole_level(
        self, counts: Counter[str], k: int | None, rest: MetadataFilters | None
    ) -> list[tuple[str, str, float, int]]:
        """BM25 over every row: the query terms' packed postings (:mod:`.pg_segments`) scored
        here, then the best rows looked up, with the filters ``rest``, in growing batches until
        ``k`` pass (a row deleted since its postings were packed, or one the filters refuse, is
        passed over). Both statements read one snapshot."""
        t = self._tables
        level = t.level
        with read_only(self._engines, snapshot=True) as conn:
            search = self._compiled(("bm25 segments",), t.packed.search, conn.dialect)
            with driver_errors(self._engines, conn):
                found = read_found(
                    conn, search.sql, search.parameters({"terms": list(counts), "counts": list(counts.values())})
                )
            seqs, scores = bm25_by_row(found, K1, B)
            hits: list[tuple[str, str, float, int]] = []
            looked, batch = 0, max(FIRST_HITS, 2 * (k or 0))
            while looked < len(seqs) and (k is None or len(hits) < k):
                order = best_first(seqs, scores, len(seqs) if k is None else looked + batch)[looked:]
                wanted = seqs[order]
                rows = self._fetch_on(
                    conn,
                    _shape("bm25 hits", False, None, rest),
                    lambda: select(level.c.node_id, level.c.doc_id, level.c.seq).where(
                        level.c.seq == func.any(bindparam("seqs", type_=ARRAY(BigInteger))), self._where(None, rest)
                    ),
                    {"seqs": wanted.tolist()},
                )
                by_seq = {row.seq: row for row in rows}
                for seq, score in zip(wanted.tolist(), scores[order].tolist(), strict=True):
                    row = by_seq.get(seq)
                    if row is not None:
                        hits.append((row.node_id, row.doc_id, score, seq))
                looked += len(order)
                batch *= 8
        return hits if k is None else hits[:k]

    def _lexical_statement(self, routed: bool, node_ids: Seq[str] | None, rest: MetadataFilters | None) -> Any:
        """BM25 of the query's ``terms`` (with their ``counts``) in SQL: the best ``k`` rows (of the
        routed ``documents``; those ``node_ids`` and ``rest`` allow)."""
        t = self._tables
        p, level = t.postings, t.level
        asked = (
            func.unnest(bindparam("terms", type_=ARRAY(Text)), bindparam("counts", type_=ARRAY(Integer)))
            .table_valued("term", "n")
            .render_derived(name="asked")
        )
        # the level's statistics as scalar subqueries (one row whatever the planner's statistics
        # say: a new level's state table has none, and a join guessed hundreds of rows)
        live = select(t.state.c.live_rows.cast(Float)).scalar_subquery()
        average = select(
            t.state.c.total_length.cast(Float) / func.nullif(t.state.c.live_rows, 0).cast(Float)
        ).scalar_subquery()
        # per term, once (MATERIALIZED: inlined, the planner computed the idf per posting):
        # idf and the two constants of the length norm, all in double precision
        weights = (
            select(
                asked.c.term,
                (asked.c.n * func.ln(1.0 + (live - t.terms.c.df + 0.5) / (t.terms.c.df.cast(Float) + 0.5))).label(
                    "idf"
                ),
                literal(K1 * (1 - B), Float).label("fixed"),
                (literal(K1 * B, Float) / average).label("per_token"),
            )
            .select_from(asked.join(t.terms, t.terms.c.term == asked.c.term))
            .where(t.terms.c.df > 0)
            .cte("weights")
            .prefix_with("MATERIALIZED")
        )
        # each term's postings read by their own index scan (index-only: term, tf, length, seq);
        # a plain join let the planner misjudge the postings per term and sort them by text ids,
        # or hash every posting of a small level. OFFSET 0 keeps the lateral subquery a
        # subquery (PostgreSQL flattens a plain one into the join)
        matched = select(p.c.seq, p.c.tf, p.c.length).where(p.c.term == weights.c.term).offset(0)
        if routed:
            matched = matched.where(p.c.doc_id == func.any(bindparam("documents", type_=ARRAY(Text))))
        matched_rows = matched.lateral("matched")
        tf = matched_rows.c.tf.cast(Float)
        score = func.sum(
            weights.c.idf * tf / (tf + weights.c.fixed + weights.c.per_token * matched_rows.c.length)
        ).label("score")
        k = bindparam("k", type_=Integer)
        scored = select(matched_rows.c.seq, score).select_from(weights.join(matched_rows, true()))
        scored = scored.group_by(matched_rows.c.seq)
        scored = scored.order_by(score.desc(), matched_rows.c.seq)
        if rest is None and not node_ids:  # the top k by score alone, then their ids
            best = scored.limit(k).subquery("scored")
            stmt = select(level.c.node_id, level.c.doc_id, best.c.score, best.c.seq).join_from(
                best, level, level.c.seq == best.c.seq
            )
            return stmt.order_by(best.c.score.desc(), best.c.seq).limit(k)
        # filtered: the rows in score order, each looked up and tested until k pass (a join let
        # the planner look up and test all of them: 16,656 rows, 100 of 128 ms at 200k chunks)
        best = scored.offset(0).subquery("scored")
        allowed = (
            select(level.c.node_id, level.c.doc_id)
            .where(level.c.seq == best.c.seq, self._where(node_ids, rest))
            .offset(0)
            .lateral("allowed")
        )
        stmt = select(allowed.c.node_id, allowed.c.doc_id, best.c.score, best.c.seq)
        return stmt.select_from(best.join(allowed, true())).order_by(best.c.score.desc(), best.c.seq).limit(k)

    def _fetch(self, shape: Any, build: Callable[[], Any], params: dict[str, Any], setup: str = "") -> list[Any]:
        """The rows of ``build()``'s statement with ``params`` (its named parameters).

        ``shape`` names the statement's SQL (:func:`_shape`; ``None``: built for this call
        alone): compiled once per shape and run as SQL text, because SQLAlchemy built, keyed
        and compiled it afresh for every search, 2.7 of the 4.1 ms a BM25 search of a small
        level took. Up to 256 shapes are kept (an app asks a few filters over and over).
        ``setup`` (SQL without parameters) runs first in the same round trip."""
        with read_only(self._engines) as conn:
            return self._fetch_on(conn, shape, build, params, setup)

    def _fetch_on(
        self, conn: Connection, shape: Any, build: Callable[[], Any], params: dict[str, Any], setup: str = ""
    ) -> list[Any]:
        """:meth:`_fetch` on the connection ``conn``."""
        if shape is None:
            if setup:
                conn.exec_driver_sql(setup)
            return list(conn.execute(build(), params).all())
        compiled = self._compiled(shape, build, conn.dialect, setup)
        return list(conn.exec_driver_sql(compiled.sql, compiled.parameters(params)).all())

    def _compiled(self, shape: Any, build: Callable[[], Any], dialect: Any, setup: str = "") -> _Compiled:
        """The statement of ``shape`` (:func:`_shape`), built and compiled on first use."""
        shapes = self._shapes
        compiled = shapes.get(shape)
        if compiled is None:
            compiled = _Compiled.of(build(), dialect, setup)
            if len(shapes) >= _SHAPES_KEPT:
                shapes.clear()  # one step (searches of one query run in several threads)
            shapes[shape] = compiled
        return compiled

    def get_nodes(
        self, node_ids: list[str] | None = None, filters: MetadataFilters | None = None, **kwargs: Any
    ) -> list[BaseNode]:
        """The stored nodes of ``node_ids`` that ``filters`` match (in the order added), each
        with its stored (unit) vector."""
        level = self._tables.level
        stmt = select(level.c.node, level.c.embedding).where(self._where(node_ids, filters)).order_by(level.c.seq)
        with read_only(self._engines) as conn:
            rows = conn.execute(stmt).all()
        nodes = []
        for row in rows:
            node = json_to_doc(row.node)
            node.embedding = [float(x) for x in row.embedding]
            nodes.append(node)
        return nodes

    def nodes_by_id(self, node_ids: Seq[str]) -> list[BaseNode | None]:
        """The stored node of each id in the order given (``None``: not stored), without its vector."""
        wanted = sql_ids("node id", node_ids)
        if not wanted:
            return []
        level = self._tables.level
        ids = bindparam("ids", type_=ARRAY(Text))
        rows = self._fetch(
            "nodes",
            lambda: select(level.c.node_id, level.c.node).where(level.c.node_id == func.any(ids)),
            {"ids": wanted},
        )
        found = {row.node_id: row.node for row in rows}
        return [json_to_doc(found[i]) if i in found else None for i in wanted]

    def ref_doc_ids(self, node_ids: Seq[str]) -> list[str | None]:
        """The ``ref_doc_id`` of each node id (``None``: not stored, or stored without one);
        the hits of this process's latest searches are answered without a round trip."""
        refs = self._hit_refs
        missing = [i for i in node_ids if i not in refs]
        if missing:
            level = self._tables.level
            ids = bindparam("ids", type_=ARRAY(Text))
            rows = self._fetch(
                "documents of nodes",
                lambda: select(level.c.node_id, level.c.doc_id).where(level.c.node_id == func.any(ids)),
                {"ids": sql_ids("node id", missing)},
            )
            found = {row.node_id: row.doc_id or None for row in rows}
            return [refs[i] if i in refs else found.get(i) for i in node_ids]
        return [refs[i] for i in node_ids]

    def link_targets(self) -> dict[str, str]:
        """``node id -> index_id`` of every stored ``IndexNode``."""
        level = self._tables.level
        with read_only(self._engines) as conn:
            rows = conn.execute(select(level.c.node_id, level.c.link).where(level.c.link.is_not(None))).all()
        return {row.node_id: row.link for row in rows}

    def sample_nodes(self, count: int, seed: int = 0) -> list[BaseNode]:
        """About ``count`` stored nodes picked at random (``TABLESAMPLE SYSTEM``: whole pages,
        ``REPEATABLE(seed)``, so the same rows for the same seed and contents), in the order
        added; all of them when the level holds fewer. It reads a few pages, not the level."""
        count = check_count("count", count)
        level = self._tables.level
        with read_only(self._engines) as conn:
            rows = conn.execute(select(self._tables.state.c.live_rows)).scalar_one()
            if rows <= count:
                stmt = select(level.c.node).order_by(level.c.seq)
            else:
                percent = min(100.0, 100.0 * 2 * count / rows)  # twice as many, as pages vary
                sampled = level.tablesample(
                    func.system(bindparam("percent", percent, type_=Float)),
                    name="sampled",
                    seed=bindparam("seed", seed, type_=Integer),
                )
                picked = select(sampled.c.node, sampled.c.seq).order_by(func.md5(sampled.c.node_id)).limit(count)
                inner = picked.subquery()
                stmt = select(inner.c.node).order_by(inner.c.seq)
            return [json_to_doc(node) for node in conn.execute(stmt).scalars()]

    def live_node_ids(self) -> list[str]:
        """The id of every stored node, in the order they were added."""
        level = self._tables.level
        with read_only(self._engines) as conn:
            return list(conn.execute(select(level.c.node_id).order_by(level.c.seq)).scalars())

    def metadata_keys(self) -> set[str]:
        """The metadata keys some stored node holds (``ref_doc_id`` included)."""
        return set(self.filter_vocabulary().keys)

    def filter_vocabulary(self) -> FilterVocabulary:
        """The keys filters may name and the kinds of value each holds, from the key counts."""
        keys = self._tables.keys
        with read_only(self._engines) as conn:
            rows = conn.execute(select(keys.c.key, keys.c.example).where(keys.c.rows > 0)).all()
        vocabulary = FilterVocabulary()
        for row in rows:
            vocabulary.add_metadata({row.key: row.example})
        return vocabulary


# the change in progress in this context: the connection of each engines' open transaction
_CHANGE: ContextVar[dict[int, Connection] | None] = ContextVar("postgres_change", default=None)


@contextmanager
def joined_transaction(engines: PostgresEngines) -> Iterator[tuple[Connection, bool]]:
    """The transaction of the change in progress on ``engines`` in this context (``False``:
    joined), else a new one (``True``: this block is the outermost, and commits it)."""
    current = _CHANGE.get()
    if current is not None and id(engines) in current:
        yield current[id(engines)], False
        return
    with engines.engine.begin() as conn:
        token = _CHANGE.set({**(current or {}), id(engines): conn})
        try:
            yield conn, True
        finally:
            _CHANGE.reset(token)


class _Threads:
    """A thread pool made on first use and forgotten in a forked child (which has none of its
    parent's threads)."""

    def __init__(self, threads: int, prefix: str) -> None:
        self.threads, self.prefix = threads, prefix
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        os.register_at_fork(after_in_child=self._forget)

    def _forget(self) -> None:
        self._pool, self._lock = None, threading.Lock()

    def pool(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix=self.prefix)
            return self._pool


READER_THREADS = 8  # per process: independent reads of concurrent queries at once
_READERS = _Threads(READER_THREADS, "llama-recursive-postgres")


def concurrent_reads() -> Executor | None:
    """Threads that run independent reads at once, each on its own pooled connection (a
    query's dense and BM25 searches of both levels, which wait on the server); ``None`` inside
    a change in progress, whose one connection reads for it a statement at a time."""
    if _CHANGE.get():
        return None
    return _READERS.pool()


@contextmanager
def read_only(engines: PostgresEngines, snapshot: bool = False) -> Iterator[Connection]:
    """A connection to read with: the change in progress's (which sees its own writes, and which
    no other writer of its levels changes meanwhile), else a pooled one; ``snapshot``: whose
    statements all see the database as the first did (repeatable read)."""
    current = _CHANGE.get()
    if current is not None and id(engines) in current:
        yield current[id(engines)]
        return
    with engines.engine.connect() as conn:
        if snapshot:
            conn = conn.execution_options(isolation_level="REPEATABLE READ")
        yield conn


_SHAPES_KEPT = 256  # compiled statements a level keeps


def _shape(kind: str, routed: bool, node_ids: Seq[str] | None, rest: MetadataFilters | None) -> Any:
    """What a search's SQL depends on besides its named parameters: the kind of search, whether
    it is routed, and the metadata filters whole (their values are in the SQL; the same filters
    asked again reuse it). ``None`` when node ids restrict it (built per call)."""
    if node_ids:
        return None
    return (kind, routed, None if rest is None else json.dumps(rest.model_dump(mode="json"), sort_keys=True))


@dataclass(frozen=True)
class _Compiled:
    """A statement compiled once: its SQL text for the driver, the values of its constants, and
    how each named parameter's value is sent (a vector as pgvector's text, ...)."""

    sql: str
    constants: dict[str, Any]
    processors: dict[str, Callable[[Any], Any]]

    @classmethod
    def of(cls, statement: Any, dialect: Any, setup: str = "") -> _Compiled:
        """``statement`` compiled, after ``setup`` (statements without parameters, sent in
        the same round trip)."""
        compiled = statement.compile(dialect=dialect)
        processors = {}
        for bind in compiled.binds.values():
            processor = bind.type.bind_processor(dialect)
            if processor is not None:
                processors[bind.key] = processor
        return cls(f"{setup}{compiled}", dict(compiled.params), processors)

    def parameters(self, values: dict[str, Any]) -> dict[str, Any]:
        unknown = set(values) - set(self.constants)
        if unknown:
            raise ValueError(f"the compiled statement has no parameter(s) {sorted(unknown)}")
        out = {**self.constants, **values}
        for name, processor in self.processors.items():
            if out.get(name) is not None:
                out[name] = processor(out[name])
        return out


@dataclass(frozen=True)
class _Row:
    """One node as the level stores it."""

    doc_id: str
    node_id: str
    node: str
    metadata: dict[str, Any]
    vector: np.ndarray
    terms: Counter[str]
    length: int
    link: str | None


class _Tables:
    """The SQLAlchemy tables of one level (names checked before they get here)."""

    def __init__(self, schema: str, name: str, dimension: int) -> None:
        meta = MetaData(schema=schema)
        self.schema, self.name, self.dimension = schema, name, dimension
        self.level = Table(
            name,
            meta,
            Column("doc_id", Text, primary_key=True),
            Column("node_id", Text, primary_key=True),
            Column("seq", BigInteger, nullable=False),
            Column("node", JSON, nullable=False),
            Column("metadata", JSONB, nullable=False, key="metadata_"),
            Column("embedding", Vector(dimension), nullable=False),
            Column("length", Integer, nullable=False),
            Column("link", Text),
        )
        self.postings = Table(
            f"{name}_postings",
            meta,
            Column("doc_id", Text),
            Column("node_id", Text),
            Column("term", Text),
            Column("tf", Integer, nullable=False),
            Column("length", Integer, nullable=False),
            Column("seq", BigInteger, nullable=False),
            # a routed BM25 search reads each (routed document, query term) alone
            PrimaryKeyConstraint("doc_id", "term", "node_id", name=f"{name}_postings_pkey"),
        )
        self.terms = Table(
            f"{name}_terms", meta, Column("term", Text, primary_key=True), Column("df", BigInteger, nullable=False)
        )
        self.keys = Table(
            f"{name}_keys",
            meta,
            Column("key", Text, primary_key=True),
            Column("kind", Text, primary_key=True),
            Column("rows", BigInteger, nullable=False),
            Column("example", JSONB),
        )
        self.state = Table(
            f"{name}_state",
            meta,
            Column("format", Integer, nullable=False),
            Column("config", JSONB, nullable=False),
            Column("generation", BigInteger, nullable=False),
            Column("live_rows", BigInteger, nullable=False),
            Column("total_length", BigInteger, nullable=False),
            # the segments' bookkeeping (pg_segments): rows up to compacted_seq are packed
            Column("compacted_seq", BigInteger, nullable=False),
            Column("segments", JSONB, nullable=False),
            Column("dead_rows", BigInteger, nullable=False),
        )
        self.segments = segments_table(meta, name)
        self.packed = Segments(self.level, self.postings, self.terms, self.state, self.segments)
        self.sequence = Sequence(f"{name}_seq", schema=schema, metadata=meta)
        self.metadata = meta

    def qualified(self, part: str) -> str:
        table = self.level if part == "level" else getattr(self, part)
        return f'"{self.schema}"."{table.name}"'


def _routed(
    filters: MetadataFilters | None, doc_ids: Seq[str] | None
) -> tuple[list[str] | None, MetadataFilters | None]:
    """The documents a query is limited to (its ``doc_ids``, and ``ref_doc_id`` equal / in
    filters ANDed at the top of its filters: a routed search's), and the other filters.

    Rows are kept by document in the ``doc_id`` column, the primary key's first part, so a
    search routed to ten documents reads their rows instead of testing every row's metadata."""
    documents: set[str] | None = set(sql_ids("document id", doc_ids)) if doc_ids else None

    def walk(item: MetadataFilters | MetadataFilter) -> MetadataFilters | MetadataFilter | None:
        nonlocal documents
        if isinstance(item, MetadataFilters):
            if item.condition not in (None, FilterCondition.AND):
                return item
            kept = [k for k in (walk(f) for f in item.filters) if k is not None]
            return MetadataFilters(filters=kept, condition=item.condition) if kept else None
        values = [item.value] if item.operator == FilterOperator.EQ else item.value
        if (
            item.key != REF_KEY
            or item.operator not in (FilterOperator.EQ, FilterOperator.IN)
            or not isinstance(values, list)
            or not all(isinstance(v, str) for v in values)
        ):
            return item
        found = set(sql_ids("document id", values))
        documents = found if documents is None else documents & found
        return None

    rest = None if filters is None else walk(filters)
    if isinstance(rest, MetadataFilter):
        rest = MetadataFilters(filters=[rest])
    return (None if documents is None else sorted(documents)), rest


def creation_lock(conn: Connection, name: str) -> None:
    """Hold a lock on ``name`` until the transaction ends, so processes creating the same tables
    at once take turns (the second finds them made)."""
    conn.execute(select(func.pg_advisory_xact_lock(func.hashtext(bindparam("lock_name", name)))))


def _read_config(conn: Connection, schema: str, name: str, upgrade: bool = False) -> dict[str, Any] | None:
    """The level's configuration (``None``: no such level); an older format is upgraded when
    ``upgrade`` (in the caller's transaction), else it and any other format are refused."""
    exists = conn.execute(
        select(func.to_regclass(bindparam("state", f'"{schema}"."{name}_state"')).is_not(None))
    ).scalar_one()
    if not exists:
        return None
    state = _Tables(schema, name, 1).state
    row = conn.execute(select(state.c.format, state.c.config)).one_or_none()
    if row is None:
        raise PostgresLevelError(f"{schema}.{name}_state holds no row: the level's tables are damaged")
    if row.format in _UPGRADES and upgrade:
        for version in range(row.format, FORMAT_VERSION):
            logger.info("upgrading %s.%s from layout version %d to %d", schema, name, version, version + 1)
            _UPGRADES[version](conn, _Tables(schema, name, 1))
        conn.execute(update(state).values(format=FORMAT_VERSION))
    elif row.format != FORMAT_VERSION:
        fix = (
            "pass upgrade=True to upgrade it in place (minutes at millions of rows; processes of the older "
            "release then refuse it), "
            if row.format in _UPGRADES
            else ""
        )
        raise PostgresLevelError(
            f"{schema}.{name} holds layout version {row.format}; this release reads version {FORMAT_VERSION}: "
            f"{fix}open it with the release that wrote it, or rebuild the level under a new name"
        )
    return dict(row.config)


def _postings_by_term(conn: Connection, tables: _Tables) -> None:
    """The postings index by term and then ``seq``: a BM25 search reads the rows added since the
    last segment by it (layout 3; 2 keyed by term alone)."""
    conn.exec_driver_sql(
        f'CREATE INDEX "{tables.name}_postings_term" ON {tables.qualified("postings")} (term, seq) INCLUDE (tf, length)'
    )


def _upgrade_2_to_3(conn: Connection, tables: _Tables) -> None:
    """Layout 3 keys the postings by ``(term, seq)`` (BM25 in parts) and by ``(doc_id, term,
    node_id)`` (routed BM25; 2 had ``(doc_id, node_id, term)``, which read every posting of a
    routed document for each query term)."""
    postings = tables.qualified("postings")
    with unbounded_statements(conn):
        conn.exec_driver_sql("SET LOCAL maintenance_work_mem = '1GB'")
        conn.exec_driver_sql(f'DROP INDEX "{tables.schema}"."{tables.name}_postings_term"')
        _postings_by_term(conn, tables)
        conn.exec_driver_sql(f'ALTER TABLE {postings} DROP CONSTRAINT "{tables.name}_postings_pkey"')
        conn.exec_driver_sql(
            f'ALTER TABLE {postings} ADD CONSTRAINT "{tables.name}_postings_pkey" PRIMARY KEY (doc_id, term, node_id)'
        )


def _upgrade_3_to_4(conn: Connection, tables: _Tables) -> None:
    """Layout 4 packs the postings by term in segments, which a BM25 search of the whole level
    reads (3 summed every posting of the query's terms in SQL: 140 ms at 2M chunks)."""
    conn.exec_driver_sql(
        f"ALTER TABLE {tables.qualified('state')} ADD COLUMN compacted_seq bigint NOT NULL DEFAULT 0, "
        "ADD COLUMN segments jsonb NOT NULL DEFAULT '[]', ADD COLUMN dead_rows bigint NOT NULL DEFAULT 0"
    )
    tables.segments.create(conn)
    _segments_storage(conn, tables)
    with unbounded_statements(conn):
        tables.packed.rebuild(conn)


# from version n to n + 1
_UPGRADES: dict[int, Callable[[Connection, _Tables], None]] = {2: _upgrade_2_to_3, 3: _upgrade_3_to_4}


def _check_config(
    config: dict[str, Any], where: str, dimension: int | None, tokenizer: MultilingualTokenizer | None
) -> None:
    if dimension is not None and int(config["dimension"]) != dimension:
        raise PostgresLevelError(f"{where} holds {config['dimension']}-dimensional vectors, not {dimension}")
    if tokenizer is not None and config["tokenizer"] != tokenizer.to_dict():
        raise PostgresLevelError(
            f"{where} was created with the tokenizer {config['tokenizer']}, not {tokenizer.to_dict()}: "
            "open it without tokenizer= (its own is used)"
        )


def _create(conn: Connection, schema: str, name: str, config: dict[str, Any]) -> None:
    """Create the level's tables, indexes and state row (in the caller's transaction)."""
    conn.exec_driver_sql("CREATE EXTENSION IF NOT EXISTS vector")
    tables = _Tables(schema, name, int(config["dimension"]))
    conn.exec_driver_sql(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
    tables.metadata.create_all(conn)
    q = tables.qualified
    # vectors in the row (pgvector's default, EXTERNAL, moves them to TOAST once a row passes 2 kB,
    # so an exact scan of a routed document's rows read 6 pages a row); the node's JSON goes instead
    conn.exec_driver_sql(f"ALTER TABLE {q('level')} ALTER COLUMN embedding SET STORAGE MAIN")
    conn.exec_driver_sql(f'CREATE INDEX "{name}_node_id" ON {q("level")} (node_id)')
    conn.exec_driver_sql(f'CREATE INDEX "{name}_by_seq" ON {q("level")} (seq)')  # BM25 hits: seq -> ids
    # the IndexNode rows alone (every update checks the links: a scan read all 200k rows, 0.1 s)
    conn.exec_driver_sql(f'CREATE INDEX "{name}_links" ON {q("level")} (node_id) INCLUDE (link) WHERE link IS NOT NULL')
    _postings_by_term(conn, tables)
    _segments_storage(conn, tables)
    if config["hnsw"] is not None:
        _create_hnsw(conn, tables, config["hnsw"] == "halfvec")
    conn.execute(
        tables.state.insert().values(
            format=FORMAT_VERSION,
            config=config,
            generation=0,
            live_rows=0,
            total_length=0,
            compacted_seq=0,
            segments=[],
            dead_rows=0,
        )
    )


def _segments_storage(conn: Connection, tables: _Tables) -> None:
    """Packed postings stored out of line uncompressed (a search reads megabytes of them:
    decompressing would cost it more than the disk they save), and found by segment to merge."""
    segments = tables.qualified("segments")
    conn.exec_driver_sql(f"ALTER TABLE {segments} ALTER COLUMN postings SET STORAGE EXTERNAL")
    conn.exec_driver_sql(f'CREATE INDEX "{tables.name}_segments_number" ON {segments} (segment)')


HNSW_BUILD_MEMORY_MB = (512, 4096)  # the least and the most a bulk load's HNSW build asks for


def hnsw_build_memory_mb(rows: int, dimension: int, value_bytes: int = 4) -> int:
    """``maintenance_work_mem`` for building the HNSW graph of ``rows`` vectors (of ``value_bytes``
    a value: 2 for ``halfvec``) at once: enough to hold it (the vectors and about 256 bytes of
    neighbours a row, a fifth more for slack), within
    :data:`HNSW_BUILD_MEMORY_MB`. A graph that outgrows it is built far more slowly (pgvector's
    notice): at 500k 384-d rows with 512 MB the build took about 10 minutes where 200k took under one."""
    needed = math.ceil(rows * (value_bytes * dimension + 256) * 1.2 / 2**20)
    least, most = HNSW_BUILD_MEMORY_MB
    return max(least, min(most, needed))


def _create_hnsw(conn: Connection, tables: _Tables, halfvec: bool) -> None:
    graph = f"(embedding::halfvec({tables.dimension})) halfvec_ip_ops" if halfvec else "embedding vector_ip_ops"
    conn.exec_driver_sql(f'CREATE INDEX "{tables.name}_embedding" ON {tables.qualified("level")} USING hnsw ({graph})')


def _exists(conn: Connection, schema: str, relation: str) -> bool:
    found = conn.execute(select(func.to_regclass(bindparam("relation", f'"{schema}"."{relation}"')))).scalar()
    return found is not None


def _add_counts(
    conn: Connection,
    table: Table,
    key: str | tuple[str, ...],
    column: str,
    changes: dict[Any, int],
    examples: dict[Any, Any] | None = None,
) -> None:
    """Add ``changes`` (key -> delta) to ``column`` of ``table``, inserting missing keys."""
    from sqlalchemy.dialects.postgresql import insert

    if not changes:
        return
    names = (key,) if isinstance(key, str) else key
    rows = []
    for k, delta in changes.items():
        values = dict(zip(names, (k,) if isinstance(key, str) else k, strict=True))
        values[column] = delta
        if examples is not None:
            values["example"] = examples.get(k)
        rows.append(values)
    for start in range(0, len(rows), 5_000):
        stmt = insert(table).values(rows[start : start + 5_000])
        stmt = stmt.on_conflict_do_update(
            index_elements=list(names), set_={column: table.c[column] + stmt.excluded[column]}
        )
        conn.execute(stmt)


def _kinds(metadata: dict[str, Any]) -> Iterable[tuple[str, str]]:
    return (key_kind for key_kind, _ in _kinds_with_values(metadata))


def _kinds_with_values(metadata: dict[str, Any]) -> Iterator[tuple[tuple[str, str], Any]]:
    for key, value in metadata.items():
        kind = value_kind(value)
        if kind is not None:
            yield (key, kind), value


def _vector_text(vector: np.ndarray) -> str:
    """pgvector's text form, exact (``repr`` of each float; from ``tolist``, not numpy scalars,
    which were most of a build's client time)."""
    return "[" + ",".join(map(repr, vector.tolist())) + "]"


def _copy(conn: Connection, table: str, columns: Seq[str], rows: Iterable[Seq[Any]], nullable: Seq[str] = ()) -> None:
    """``COPY table (columns) FROM STDIN`` of ``rows`` as CSV, in the connection's transaction.

    Every field is quoted, so an empty string stays one; in the ``nullable`` columns an
    empty field (``None``) is NULL."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n", quoting=csv.QUOTE_ALL)
    cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    force_null = f", FORCE_NULL ({', '.join(nullable)})" if nullable else ""
    sql = f"COPY {table} ({', '.join(columns)}) FROM STDIN WITH (FORMAT csv{force_null})"

    def flush() -> None:
        buffer.seek(0)
        cursor.copy_expert(sql, buffer)
        buffer.seek(0)
        buffer.truncate()

    for count, row in enumerate(rows, start=1):
        writer.writerow(row)
        if count % 50_000 == 0:
            flush()
    if buffer.tell():
        flush()
