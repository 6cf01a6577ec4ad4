"""The rows' nodes (text, metadata, relationships) in SQLite, read only for the final top-k.

A query ranks rows with arrays (vectors, postings, metadata codes) and turns
only the few rows it returns into LlamaIndex nodes; those nodes, and the map
between node ids and row ids, live in one SQLite database (standard-library
``sqlite3``) in the index folder, e.g. ``<folder>/rows.sqlite3``. Each node is
stored as the JSON LlamaIndex's docstores write
(:func:`llama_index.core.storage.docstore.utils.doc_to_json`), never pickled.

How this relates to :mod:`.segments`: the array components are immutable
segment files plus a small state file replaced atomically; this database is
the one mutable, crash-safe part of an index. SQLite in WAL mode with
``synchronous=FULL`` makes each append, delete or compaction one durable
transaction, so a query (in another thread or process) sees a change whole or
not at all, and a one-document change writes kilobytes without any segment
being rewritten. The node id -> row id map is an SQLite index, so 2M ids cost
no Python memory. The file is opened where it lies: it is not copied by the
segment writer, and a persisted schema version other than
:data:`SCHEMA_VERSION` is refused with the version and the fix.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
from collections import Counter
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
from llama_index.core.schema import BaseNode
from llama_index.core.storage.docstore.utils import doc_to_json, json_to_doc

from llama_index_ext_recursive.errors import LlamaIndexExtRecursiveError
from llama_index_ext_recursive.persist import ROWS_DATABASE, PathLike, PersistError

__all__ = ["DATABASE_NAME", "SCHEMA_VERSION", "PublishedTexts", "RowNotFoundError", "RowStore", "node_json"]

logger = logging.getLogger(__name__)

SCHEMA_VERSION = 1
DATABASE_NAME = ROWS_DATABASE  # persist.py knows it as part of an index folder

# host parameters per statement: far below SQLite's limit (32766 since 3.32, 999 before)
_BATCH = 500

_INDEXES = (
    "CREATE UNIQUE INDEX IF NOT EXISTS rows_by_node_id ON rows (node_id) WHERE deleted IS NULL",
    "CREATE INDEX IF NOT EXISTS rows_by_ref_doc_id ON rows (ref_doc_id)",
    # every version of a node id, deleted ones included: a reader of an older generation
    # looks a node up among them (visible_rows_of), which the partial index above cannot answer
    "CREATE INDEX IF NOT EXISTS rows_by_node_version ON rows (node_id, added)",
)
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS settings (name TEXT PRIMARY KEY, value TEXT NOT NULL)",
    # added/deleted: the index generation that published the row / its deletion (see commit)
    "CREATE TABLE IF NOT EXISTS rows (row INTEGER PRIMARY KEY, node_id TEXT NOT NULL, ref_doc_id TEXT, "
    "node TEXT NOT NULL, added INTEGER NOT NULL DEFAULT 0, deleted INTEGER)",
    *_INDEXES,
)


# the columns _column_of_rows may name in its SELECT (identifiers are not bound parameters)
_ROW_COLUMNS = frozenset({"node_id", "ref_doc_id", "node"})


class RowNotFoundError(LlamaIndexExtRecursiveError, KeyError):
    """A row id that was never appended, or was deleted."""


def _batches(items: Sequence[Any]) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), _BATCH):
        yield items[start : start + _BATCH]


def _marks(count: int) -> str:
    return ",".join("?" * count)


def node_json(node: BaseNode) -> str:
    """``node`` as the JSON a docstore writes, without its embedding.

    The embedding lives in the vector column (384 floats as JSON text would be
    about 8 KB a row, more than the text); a hydrated node has ``embedding=None``,
    as nodes from upstream's docstores of a ``VectorStoreIndex`` do.
    """
    data = doc_to_json(node)
    data["__data__"]["embedding"] = None
    return json.dumps(data)


def _refuse_foreign(path: Path) -> None:
    """Raise unless ``path`` is missing, empty or a row database: checked read-only, so a
    database of something else is left byte for byte as it was (opening it in WAL mode
    would rewrite its header)."""
    if not path.is_file() or path.stat().st_size == 0:
        return
    connection = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        tables = {name for (name,) in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    finally:
        connection.close()
    if "settings" not in tables:
        raise PersistError(
            f"{path} is an SQLite database of something else (tables {sorted(tables)[:5]}); "
            "it was left untouched: give the index a folder of its own"
        )


class RowStore:
    """Node JSON per row id in SQLite (WAL), with node id <-> row id through an index.

    Row ids are ``0, 1, 2, ...`` in append order and never reused; a deleted
    row is gone from the database (its id stays unused) until :meth:`compact`
    renumbers the rows. Safe for threads: each thread reads through its own
    connection, writes are serialised by a lock, and every change is one
    transaction.

    Args:
        path: the database file (created with its folder if missing), by
            convention ``<index folder>/``:data:`DATABASE_NAME`.

    Raises:
        PersistError: the file is not a row database, or was written with
            another schema version (naming it and the fix).
    """

    def __init__(self, path: PathLike) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._registry = threading.Lock()
        self._write_lock = threading.Lock()
        try:
            _refuse_foreign(self.path)
            with self._writing() as connection:
                for statement in _SCHEMA:
                    connection.execute(statement)
                found = connection.execute("SELECT value FROM settings WHERE name = 'schema_version'").fetchone()
                if found is None:
                    connection.executemany(
                        "INSERT INTO settings (name, value) VALUES (?, ?)",
                        [("schema_version", str(SCHEMA_VERSION)), ("next_row", "0")],
                    )
        except PersistError:
            self.close()
            raise
        except sqlite3.DatabaseError as exc:
            self.close()
            raise PersistError(
                f"{self.path} is not a readable row database ({exc}); restore it or build the index again"
            ) from exc
        if found is not None and found[0] != str(SCHEMA_VERSION):
            self.close()
            newer = found[0].isdigit() and int(found[0]) > SCHEMA_VERSION
            fix = "upgrade llama-index-ext-recursive to read it" if newer else "rebuild the index with this version"
            raise PersistError(
                f"{self.path} was written with row schema version {found[0]}; this version reads version "
                f"{SCHEMA_VERSION}: {fix}"
            )

    # ------------------------------------------------------------------ connections
    def _connection(self) -> sqlite3.Connection:
        """This thread's connection (autocommit: transactions are explicit)."""
        connection: sqlite3.Connection | None = getattr(self._local, "connection", None)
        if connection is None:
            connection = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=30)
            connection.execute("PRAGMA journal_mode=WAL")
            connection.execute("PRAGMA synchronous=FULL")
            self._local.connection = connection
            with self._registry:
                self._connections.append(connection)
        return connection

    @contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        """One read transaction: every statement in it sees the same committed state."""
        connection = self._connection()
        connection.execute("BEGIN")
        try:
            yield connection
        finally:
            connection.execute("COMMIT")

    @contextmanager
    def _writing(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, committed whole or rolled back."""
        with self._write_lock:
            connection = self._connection()
            connection.execute("BEGIN IMMEDIATE")
            try:
                yield connection
            except BaseException:
                connection.execute("ROLLBACK")
                raise
            connection.execute("COMMIT")

    def close(self) -> None:
        """Close every thread's connection (the store cannot be used afterwards)."""
        with self._registry:
            for connection in self._connections:
                connection.close()
            self._connections.clear()
        self._local = threading.local()

    def __enter__(self) -> RowStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ reading
    def __len__(self) -> int:
        """Rows ever appended (deleted ones included, until :meth:`compact`)."""
        with self._reading() as connection:
            return self._next_row(connection)

    @staticmethod
    def _next_row(connection: sqlite3.Connection) -> int:
        return int(connection.execute("SELECT value FROM settings WHERE name = 'next_row'").fetchone()[0])

    def live_count(self) -> int:
        """Rows not deleted."""
        with self._reading() as connection:
            return int(connection.execute("SELECT COUNT(*) FROM rows WHERE deleted IS NULL").fetchone()[0])

    def _column_of_rows(self, rows: Sequence[int] | np.ndarray, *columns: str) -> list[Any]:
        """The value of ``columns`` (names of this module's schema, never a caller's text) for each
        of ``rows``, in order: one value per row for one column, a tuple for several."""
        unknown = set(columns) - _ROW_COLUMNS
        if unknown or not columns:
            raise ValueError(f"columns {sorted(unknown)} are not columns of the rows table {sorted(_ROW_COLUMNS)}")
        ids = [int(row) for row in np.asarray(rows, dtype=np.int64).reshape(-1)]
        found: dict[int, Any] = {}
        query = f"SELECT row, {', '.join(columns)} FROM rows WHERE row IN "  # names checked above
        with self._reading() as connection:
            for batch in _batches(sorted(set(ids))):
                for row, *values in connection.execute(query + f"({_marks(len(batch))})", batch):
                    found[row] = values[0] if len(values) == 1 else tuple(values)
        missing = [row for row in ids if row not in found]
        if missing:
            raise RowNotFoundError(
                f"rows {missing[:5]}{' ...' if len(missing) > 5 else ''} do not exist (never appended, or deleted); "
                "ask only for rows a search returned from the current index"
            )
        return [found[row] for row in ids]

    def nodes(self, rows: Sequence[int] | np.ndarray) -> list[BaseNode]:
        """The nodes of ``rows``, in the order asked (repeats allowed).

        Raises:
            RowNotFoundError: a row was never appended or was deleted (naming it).
        """
        return [json_to_doc(json.loads(text)) for text in self._column_of_rows(rows, "node")]

    def ref_doc_ids(self, rows: Sequence[int] | np.ndarray) -> list[str | None]:
        """The ``ref_doc_id`` of ``rows``, in order."""
        return self._column_of_rows(rows, "ref_doc_id")

    def ids_and_refs(self, rows: Sequence[int] | np.ndarray) -> list[tuple[str, str | None]]:
        """``(node id, ref_doc_id)`` of ``rows``, in order, read in one query."""
        return self._column_of_rows(rows, "node_id", "ref_doc_id")

    def node_ids(self, rows: Sequence[int] | np.ndarray) -> list[str]:
        """The node ids of ``rows``, in the order asked.

        Raises:
            RowNotFoundError: a row was never appended or was deleted (naming it).
        """
        return self._column_of_rows(rows, "node_id")

    def row_of(self, node_ids: Sequence[str]) -> np.ndarray:
        """The row id of each node id (``int64``; ``-1``: not stored)."""
        found: dict[str, int] = {}
        with self._reading() as connection:
            for batch in _batches(sorted(set(node_ids))):
                found.update(
                    connection.execute(
                        f"SELECT node_id, row FROM rows WHERE deleted IS NULL AND node_id IN ({_marks(len(batch))})",
                        batch,
                    )
                )
        return np.fromiter((found.get(node_id, -1) for node_id in node_ids), dtype=np.int64, count=len(node_ids))

    def rows_of_document(self, ref_doc_id: str) -> np.ndarray:
        """The rows whose node's ``ref_doc_id`` is ``ref_doc_id``, ascending (``int64``)."""
        with self._reading() as connection:
            found = connection.execute(
                "SELECT row FROM rows WHERE deleted IS NULL AND ref_doc_id = ? ORDER BY row", (ref_doc_id,)
            )
            return np.fromiter((row for (row,) in found), dtype=np.int64)

    # ------------------------------------------------------------------ changes
    def append(self, nodes: Sequence[BaseNode], replace: bool = False) -> np.ndarray:
        """Store ``nodes`` as new rows in one transaction; returns their row ids (``int64``).

        Args:
            nodes: the nodes, each stored as its docstore JSON.
            replace: delete the stored rows of these node ids first (in the
                same transaction); without it a stored node id is refused.

        Raises:
            ValueError: a node id is stored already or repeats within ``nodes``.
        """
        records = [(node.node_id, node.ref_doc_id, node_json(node)) for node in nodes]
        with self._writing() as connection:
            start = self._next_row(connection)
            if replace:
                self._delete_ids(connection, [node_id for node_id, _, _ in records])
            try:
                connection.executemany(
                    "INSERT INTO rows (row, node_id, ref_doc_id, node) VALUES (?, ?, ?, ?)",
                    ((start + offset, *record) for offset, record in enumerate(records)),
                )
            except sqlite3.IntegrityError:
                raise ValueError(
                    self._duplicate_message(connection, [node_id for node_id, _, _ in records], start)
                ) from None
            self._set_next_row(connection, start + len(records))
        return np.arange(start, start + len(records), dtype=np.int64)

    def commit(
        self,
        generation: int,
        rows: np.ndarray,
        records: Sequence[tuple[str, str | None, str]],
        deleted_rows: np.ndarray,
    ) -> None:
        """Publish one index generation's row changes in one transaction.

        An index whose arrays are persisted as generations (see
        :mod:`llama_index_ext_recursive.persist`) keeps its rows here, outside
        the generation folders; each row records the generation that added it
        and the one that deleted it, so the database can be brought back to
        any published generation (:meth:`settle`) when a persist was
        interrupted between this commit and publishing its manifest. Deleted
        rows stay readable (readers of an older generation may still hydrate
        them) until a compaction.

        Args:
            generation: the generation being published (greater than every earlier one).
            rows: the row id of each record (the arrays' numbering).
            records: ``(node_id, ref_doc_id, node JSON)`` per new row (see :func:`node_json`).
            deleted_rows: rows published earlier that this generation deletes.

        Raises:
            ValueError: a new row id is taken, or a node id would be live twice.
        """
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        if len(rows) != len(records):
            raise ValueError(f"{len(rows)} row ids for {len(records)} records: pass one row id per record")
        deleted = sorted({int(row) for row in np.asarray(deleted_rows, dtype=np.int64).reshape(-1)})
        with self._writing() as connection:
            for batch in _batches(deleted):
                connection.execute(
                    f"UPDATE rows SET deleted = ? WHERE deleted IS NULL AND row IN ({_marks(len(batch))})",
                    [generation, *batch],
                )
            try:
                connection.executemany(
                    "INSERT INTO rows (row, node_id, ref_doc_id, node, added) VALUES (?, ?, ?, ?, ?)",
                    ((int(row), *record, generation) for row, record in zip(rows, records, strict=True)),
                )
            except sqlite3.IntegrityError:
                first = int(rows.min()) if len(rows) else 0
                raise ValueError(
                    self._duplicate_message(connection, [node_id for node_id, _, _ in records], first)
                ) from None
            self._set_next_row(connection, max(self._next_row(connection), int(rows.max(initial=-1)) + 1))
            self._set_committed(connection, generation)

    def settle(self, generation: int) -> int:
        """Undo every change of generations after ``generation`` (a persist that never published).

        Call it only while holding the index folder's write lock, with the
        generation its manifest publishes.

        Returns:
            How many rows or deletions were undone.
        """
        with self._writing() as connection:
            committed = connection.execute("SELECT value FROM settings WHERE name = 'committed'").fetchone()
            if committed is not None and int(committed[0]) <= generation:
                return 0  # nothing after it was committed: no need to scan every row (2M at issue 25's scale)
            undone = connection.execute("DELETE FROM rows WHERE added > ?", (generation,)).rowcount
            undone += connection.execute("UPDATE rows SET deleted = NULL WHERE deleted > ?", (generation,)).rowcount
            last = connection.execute("SELECT MAX(row) FROM rows").fetchone()[0]
            self._set_next_row(connection, 0 if last is None else int(last) + 1)
            self._set_committed(connection, generation)
        if undone:
            logger.warning(
                "%s: undid %d row changes of a persist that did not finish; the index is as last published",
                self.path,
                undone,
            )
        return int(undone)

    def items(self, generation: int) -> list[tuple[str, str]]:
        """``(id, JSON)`` of every row generation ``generation`` publishes, in row order: the
        keyed items :meth:`write_items` stores (a row's ``node`` column holds any JSON)."""
        with self._reading() as connection:
            return connection.execute(
                "SELECT node_id, node FROM rows WHERE added <= ? AND (deleted IS NULL OR deleted > ?) ORDER BY row",
                (generation, generation),
            ).fetchall()

    def item(self, generation: int, key: str) -> str | None:
        """The JSON of item ``key`` as generation ``generation`` publishes it (``None``: not there).

        One statement, so no explicit transaction: SQLite reads it in one snapshot
        (a query reads a few dozen items, and BEGIN/COMMIT tripled their statements)."""
        found = (
            self._connection()
            .execute(
                "SELECT node FROM rows WHERE node_id = ? AND added <= ? AND (deleted IS NULL OR deleted > ?)",
                (key, generation, generation),
            )
            .fetchone()
        )
        return None if found is None else str(found[0])

    def item_value(self, generation: int, key: str) -> Any:
        """The decoded JSON of item ``key`` at generation ``generation`` (``None``: not there).

        Raises:
            PersistError: the stored JSON is malformed (naming the database).
        """
        stored = self.item(generation, key)
        if stored is None:
            return None
        try:
            value = json.loads(stored)
        except json.JSONDecodeError as exc:
            raise PersistError(f"{self.path} holds a malformed row ({exc}); build the index again") from exc
        if value is None:  # write_items deletes with None: a stored null is damage, not absence
            raise PersistError(f"{self.path} holds a null row for {key!r}; build the index again")
        return value

    def item_keys(self, generation: int) -> list[str]:
        """The ids of the items generation ``generation`` publishes, in row order."""
        with self._reading() as connection:
            return [
                key
                for (key,) in connection.execute(
                    "SELECT node_id FROM rows WHERE added <= ? AND (deleted IS NULL OR deleted > ?) ORDER BY row",
                    (generation, generation),
                )
            ]

    def item_count(self, generation: int) -> int:
        """How many items generation ``generation`` publishes."""
        with self._reading() as connection:
            return int(
                connection.execute(
                    "SELECT COUNT(*) FROM rows WHERE added <= ? AND (deleted IS NULL OR deleted > ?)",
                    (generation, generation),
                ).fetchone()[0]
            )

    def item_list_length(self, generation: int, field: str) -> int:
        """The summed length of the JSON list ``field`` of the items generation ``generation``
        publishes (SQLite reads the JSON: no item is decoded in Python)."""
        with self._reading() as connection:
            return int(
                connection.execute(
                    "SELECT COALESCE(SUM(json_array_length(node, ?)), 0) FROM rows "
                    "WHERE added <= ? AND (deleted IS NULL OR deleted > ?)",
                    (f"$.{field}", generation, generation),
                ).fetchone()[0]
            )

    def item_list_counts(self, generation: int, field: str) -> Counter[str]:
        """How many items generation ``generation`` publishes hold each value in their JSON
        list ``field`` (counted by SQLite)."""
        with self._reading() as connection:
            return Counter(
                {
                    str(value): int(count)
                    for value, count in connection.execute(
                        "SELECT item.value, COUNT(*) FROM rows, json_each(rows.node, ?) AS item "
                        "WHERE added <= ? AND (deleted IS NULL OR deleted > ?) GROUP BY item.value",
                        (f"$.{field}", generation, generation),
                    )
                }
            )

    def write_items(self, generation: int, items: Mapping[str, str | None]) -> None:
        """Publish one generation's changes of keyed JSON items (not nodes) in one transaction.

        What :meth:`commit` does for nodes, for records kept by id (a summary
        index's document records and summaries): a text stores the id's item,
        replacing a stored one; ``None`` deletes it. The replaced and deleted
        rows are marked with ``generation``, so :meth:`settle` brings the items
        back to any published generation, as it does the nodes.

        Args:
            generation: the generation being published (greater than every earlier one).
            items: id -> its JSON, or ``None`` to delete it.
        """
        ids = sorted(items)
        with self._writing() as connection:
            for batch in _batches(ids):
                connection.execute(
                    f"UPDATE rows SET deleted = ? WHERE deleted IS NULL AND node_id IN ({_marks(len(batch))})",
                    [generation, *batch],
                )
            start = self._next_row(connection)
            stored = [(key, text) for key in ids if (text := items[key]) is not None]
            connection.executemany(
                "INSERT INTO rows (row, node_id, ref_doc_id, node, added) VALUES (?, ?, NULL, ?, ?)",
                ((start + offset, key, text, generation) for offset, (key, text) in enumerate(stored)),
            )
            self._set_next_row(connection, start + len(stored))
            self._set_committed(connection, generation)

    def visible_rows_of(self, node_ids: Sequence[str], generation: int) -> np.ndarray:
        """The row of each node id as generation ``generation`` publishes it (``-1``: not there)."""
        found: dict[str, int] = {}
        with self._reading() as connection:
            for batch in _batches(sorted(set(node_ids))):
                found.update(
                    connection.execute(
                        f"SELECT node_id, row FROM rows WHERE node_id IN ({_marks(len(batch))}) "
                        "AND added <= ? AND (deleted IS NULL OR deleted > ?)",
                        [*batch, generation, generation],
                    )
                )
        return np.fromiter((found.get(node_id, -1) for node_id in node_ids), dtype=np.int64, count=len(node_ids))

    @staticmethod
    def _duplicate_message(connection: sqlite3.Connection, node_ids: list[str], start: int) -> str:
        """Why an insert of rows ``start ..`` failed (the rows it inserted before failing are not counted)."""
        seen: set[str] = set()
        repeated = next((node_id for node_id in node_ids if node_id in seen or seen.add(node_id)), None)  # type: ignore[func-returns-value]
        if repeated is not None:
            return f"node id {repeated!r} appears twice in one append; pass each node once"
        stored = next(
            node_id
            for node_id in node_ids
            if connection.execute(
                "SELECT 1 FROM rows WHERE node_id = ? AND row < ? AND deleted IS NULL", (node_id, start)
            ).fetchone()
            is not None
        )
        return f"node id {stored!r} is stored already; delete its row first or append with replace=True"

    @staticmethod
    def _set_committed(connection: sqlite3.Connection, generation: int) -> None:
        """Note the last generation whose changes are in the database, so :meth:`settle` knows
        without a scan when there is nothing to undo (a database without the note is scanned)."""
        connection.execute(
            "INSERT INTO settings (name, value) VALUES ('committed', ?) "
            "ON CONFLICT (name) DO UPDATE SET value = excluded.value",
            (str(generation),),
        )

    @staticmethod
    def _set_next_row(connection: sqlite3.Connection, next_row: int) -> None:
        connection.execute("UPDATE settings SET value = ? WHERE name = 'next_row'", (str(next_row),))

    @staticmethod
    def _delete_ids(connection: sqlite3.Connection, node_ids: Sequence[str]) -> None:
        for batch in _batches(list(node_ids)):
            connection.execute(f"DELETE FROM rows WHERE node_id IN ({_marks(len(batch))})", batch)

    def delete(self, rows: Sequence[int] | np.ndarray) -> None:
        """Delete ``rows`` in one transaction (deleted ones are skipped).

        Raises:
            IndexError: a row id was never appended.
        """
        ids = sorted({int(row) for row in np.asarray(rows, dtype=np.int64).reshape(-1)})
        with self._writing() as connection:
            count = self._next_row(connection)
            bad = next((row for row in ids if not 0 <= row < count), None)
            if bad is not None:
                raise IndexError(f"row {bad} does not exist: rows are 0 .. {count - 1}")
            for batch in _batches(ids):
                connection.execute(f"DELETE FROM rows WHERE row IN ({_marks(len(batch))})", batch)

    def compact(self, mapping: np.ndarray | None = None) -> np.ndarray:
        """Renumber the rows ``0 .. m-1`` in their order, in one transaction.

        Args:
            mapping: old row id -> new row id (``-1``: dropped), as another
                component's compaction returned it; ``None`` drops exactly the
                deleted rows. Kept rows must keep their order; a deleted row
                must be dropped.

        Returns:
            The mapping applied.

        Raises:
            ValueError: ``mapping`` does not fit these rows (the message says how).
        """
        with self._writing() as connection:
            count = self._next_row(connection)
            present = np.zeros(count, dtype=bool)
            present[np.fromiter((row for (row,) in connection.execute("SELECT row FROM rows")), dtype=np.int64)] = True
            if mapping is None:
                mapping = np.full(count, -1, dtype=np.int64)
                mapping[present] = np.arange(int(present.sum()), dtype=np.int64)
            mapping = np.asarray(mapping)
            if mapping.shape != (count,) or not np.issubdtype(mapping.dtype, np.integer):
                raise ValueError(
                    f"a compaction mapping holds one integer per row ({count}), got shape {mapping.shape} of "
                    f"{mapping.dtype}; pass the array another component's compact() returned"
                )
            kept = mapping[mapping >= 0]
            if not np.array_equal(kept, np.arange(len(kept))):
                raise ValueError(
                    "a compaction mapping numbers the kept rows 0 .. m-1 in their old order; this one does not"
                )
            resurrected = np.flatnonzero(~present & (mapping >= 0))
            if len(resurrected):
                raise ValueError(
                    f"the compaction mapping keeps deleted row {int(resurrected[0])}; "
                    "delete the same rows in every component before compacting"
                )
            connection.execute("CREATE TEMP TABLE renumber (old INTEGER PRIMARY KEY, new INTEGER NOT NULL)")
            old = np.flatnonzero(mapping >= 0)
            connection.executemany(
                "INSERT INTO renumber (old, new) VALUES (?, ?)", zip(old.tolist(), mapping[old].tolist(), strict=True)
            )
            connection.execute(
                "CREATE TABLE rows_compacted (row INTEGER PRIMARY KEY, node_id TEXT NOT NULL, ref_doc_id TEXT, "
                "node TEXT NOT NULL, added INTEGER NOT NULL DEFAULT 0, deleted INTEGER)"
            )
            connection.execute(
                "INSERT INTO rows_compacted SELECT renumber.new, rows.node_id, rows.ref_doc_id, rows.node, "
                "rows.added, rows.deleted FROM rows JOIN renumber ON renumber.old = rows.row ORDER BY renumber.new"
            )
            connection.execute("DROP TABLE rows")
            connection.execute("ALTER TABLE rows_compacted RENAME TO rows")
            for statement in _INDEXES:
                connection.execute(statement)
            connection.execute("DROP TABLE temp.renumber")
            self._set_next_row(connection, len(kept))
        return mapping.astype(np.int64)


class PublishedTexts(MutableMapping[str, str]):
    """Texts by key as one published generation of a :class:`RowStore` holds them (each stored
    as a JSON string by :meth:`RowStore.write_items`), read when asked for, plus the texts set
    since, in memory until a persist publishes them (:attr:`added`).

    A summary index's summary cache (a summary per document content, 100k of
    them at issue 25's scale) is kept so: opening the index reads none of it,
    and a build that resumes or an update asks for the few it needs. The
    cache only grows, so a text is never deleted.

    Args:
        rows: the item database (kept open: texts are read from it when asked for).
        generation: the published generation to read.
        added: texts set since that generation.
    """

    def __init__(self, rows: RowStore, generation: int, added: Mapping[str, str] | None = None) -> None:
        self._rows = rows
        self._generation = generation
        self.added: dict[str, str] = dict(added or {})

    def published(self, generation: int, written: Mapping[str, str]) -> PublishedTexts:
        """These texts once generation ``generation`` published ``written``: the texts added
        meanwhile stay in memory, the others are read from the rows."""
        rest = {key: text for key, text in self.added.items() if key not in written}
        return PublishedTexts(self._rows, generation, rest)

    def __getitem__(self, key: str) -> str:
        text = self.added.get(key)
        if text is not None:
            return text
        value = self._rows.item_value(self._generation, key)
        if value is None:
            raise KeyError(key)
        if not isinstance(value, str):
            raise PersistError(f"{self._rows.path} holds an item of key {key!r} that is no text; build the index again")
        return value

    def __setitem__(self, key: str, text: str) -> None:
        self.added[key] = text

    def __delitem__(self, key: str) -> None:
        raise TypeError(f"{type(self).__name__} only grows: {key!r} cannot be deleted")

    def __contains__(self, key: object) -> bool:
        return key in self.added or (isinstance(key, str) and self._rows.item(self._generation, key) is not None)

    def __iter__(self) -> Iterator[str]:
        stored = self._rows.item_keys(self._generation)
        known = set(stored)
        yield from stored
        yield from (key for key in list(self.added) if key not in known)

    def __len__(self) -> int:
        return sum(1 for _ in self)
