"""The document records of a persisted columnar index, read from their rows when asked for.

A summary index keeps a record per document (title, content hash, chunk ids,
summary id, metadata keys). Reading and holding all of them made opening a
100k-document, 2M-chunk index decode 100k records with 2M chunk ids (about
5 s and several hundred MB, issue 25), though a query reads the records of
the few documents it routes to. :class:`StoredRecords` is the records of one
published generation of ``documents.rows.sqlite3``, each read when asked for,
plus the changes made since (in memory until a persist publishes them).

Each update makes a new one (:meth:`StoredRecords.with_changes`), as it makes
a new dict of records for other storage, so a reader keeps the state it
started with.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from llama_index_ext_recursive.columnar.rows import RowStore
from llama_index_ext_recursive.persist import PersistError
from llama_index_ext_recursive.recursive.build import DocumentRecord

DECODED_KEPT = 4096  # records a published generation keeps decoded (a few MB)


def document_record(doc_id: str | None, fields: Any, path: Path | str) -> DocumentRecord:
    """The record of ``doc_id`` from its stored ``fields``, checked field by field.

    Raises:
        PersistError: a malformed record (naming the document and ``path``, its file or table).
    """
    try:
        record = DocumentRecord(**fields)
        lists = (record.chunk_ids, record.metadata_keys, record.varying_keys)
        valid = (
            record.doc_id == doc_id
            and all(isinstance(v, str) for v in (record.title, record.content_hash))
            and isinstance(record.summary_node_id, str)
            and all(isinstance(v, list) and all(isinstance(i, str) for i in v) for v in lists)
        )
    except TypeError:
        valid = False
    if not valid or doc_id is None:  # None: the records were no dict
        raise PersistError(
            f"{path}: the record of document {doc_id!r} is malformed ({str(fields)[:200]}); persist the retriever again"
        )
    return record


class _Published:
    """One published generation of the records' rows, shared by the views over it."""

    def __init__(self, rows: RowStore, generation: int) -> None:
        self.rows = rows
        self.generation = generation
        self.count = rows.item_count(generation)
        self._varying: Counter[str] | None = None
        self._decoded: dict[str, DocumentRecord] = {}

    def record(self, doc_id: str) -> DocumentRecord | None:
        """The published record of ``doc_id`` (``None``: none), decoded once while it is asked
        for often (a query asks for its routed documents' records several times)."""
        decoded = self._decoded
        found = decoded.get(doc_id)  # one read: another query may clear it meanwhile
        if found is not None:
            return found
        fields = self.rows.item_value(self.generation, doc_id)
        if fields is None:
            return None
        record = document_record(doc_id, fields, self.rows.path)
        if len(decoded) >= DECODED_KEPT:
            decoded.clear()
        decoded[doc_id] = record
        return record

    def varying(self) -> Counter[str]:
        """How many published records list each varying key (counted by SQLite, read once)."""
        if self._varying is None:
            self._varying = self.rows.item_list_counts(self.generation, "varying_keys")
        return self._varying


class StoredRecords(Mapping[str, DocumentRecord]):
    """Document records by id: one published generation of the rows, read when asked for,
    plus :attr:`changes` since (a record, or ``None`` for a deleted document).

    Args:
        rows: the records' database (kept open).
        generation: the published generation to read.
    """

    def __init__(self, rows: RowStore, generation: int) -> None:
        self._published = _Published(rows, generation)
        self.changes: dict[str, DocumentRecord | None] = {}
        self._count = self._published.count

    def _derived(self, changes: Mapping[str, DocumentRecord | None]) -> StoredRecords:
        """These records with ``changes`` applied over the current ones."""
        derived = StoredRecords.__new__(StoredRecords)
        derived._published = self._published
        derived._count = self._count + sum(
            (record is not None) - (doc_id in self) for doc_id, record in changes.items()
        )
        derived.changes = {**self.changes, **changes}
        return derived

    def with_changes(self, removed: Iterable[str], added: Mapping[str, DocumentRecord]) -> StoredRecords:
        """These records with the documents of ``removed`` deleted and those of ``added`` put in."""
        changes: dict[str, DocumentRecord | None] = dict.fromkeys(removed)
        changes.update(added)
        return self._derived(changes)

    def __getitem__(self, doc_id: str) -> DocumentRecord:
        if doc_id in self.changes:
            record = self.changes[doc_id]
        else:
            record = self._published.record(doc_id)
        if record is None:
            raise KeyError(doc_id)
        return record

    def __contains__(self, doc_id: object) -> bool:
        if doc_id in self.changes:
            return self.changes[doc_id] is not None
        return isinstance(doc_id, str) and self._published.record(doc_id) is not None

    def __iter__(self) -> Iterator[str]:
        changes = self.changes
        published = self._published
        yield from (d for d in published.rows.item_keys(published.generation) if d not in changes)
        yield from (d for d, record in list(changes.items()) if record is not None)

    def __len__(self) -> int:
        return self._count

    def items(self) -> Iterator[tuple[str, DocumentRecord]]:  # type: ignore[override]
        """Every record, the published ones read in one pass (not one query per document)."""
        changes = self.changes
        published = self._published
        for doc_id, text in published.rows.items(published.generation):
            if doc_id not in changes:
                yield doc_id, document_record(doc_id, json.loads(text), published.rows.path)
        yield from ((d, record) for d, record in list(changes.items()) if record is not None)

    def values(self) -> Iterator[DocumentRecord]:  # type: ignore[override]
        return (record for _, record in self.items())

    def chunk_count(self) -> int:
        """The chunks the records list, counted by SQLite for the published ones."""
        published = self._published
        total = published.rows.item_list_length(published.generation, "chunk_ids")
        for doc_id, record in self.changes.items():
            before = published.record(doc_id)
            total += (len(record.chunk_ids) if record is not None else 0) - (
                len(before.chunk_ids) if before is not None else 0
            )
        return total

    def varying_keys(self) -> set[str]:
        """The metadata keys whose value differs between the chunks of some document."""
        counts = Counter(self._published.varying())
        for doc_id, record in self.changes.items():
            before = self._published.record(doc_id)
            if before is not None:
                counts.subtract(before.varying_keys)
            if record is not None:
                counts.update(record.varying_keys)
        return {key for key, count in counts.items() if count > 0}


def published_records(
    current: Mapping[str, DocumentRecord], rows: RowStore, generation: int, written: Mapping[str, DocumentRecord | None]
) -> StoredRecords:
    """The records ``current`` once ``generation`` of ``rows`` published ``written`` (the
    changes a persist wrote, ``None`` for a deleted document): the records changed meanwhile
    stay in memory, the others are read from the rows.

    Args:
        current: the index's records now: a :class:`StoredRecords`, or a dict of every record
            (an index persisted into rows for the first time).
    """
    if isinstance(current, StoredRecords):
        pending = current.changes
    else:  # every record, and the documents deleted since the write as deletions
        pending = {**dict.fromkeys(d for d in written if d not in current), **current}
    rest = {d: record for d, record in pending.items() if d not in written or written[d] is not record}
    fresh = StoredRecords(rows, generation)
    return fresh._derived(rest) if rest else fresh


class PostgresRecords(Mapping[str, DocumentRecord]):
    """Document records by id in a :class:`~llama_index_ext_recursive.stores.pg_index.PostgresIndexStore`,
    read when asked for: a query reads the records of the few documents it routes to.

    The view shows what the database holds now, plus :attr:`changes` not written
    (:meth:`with_changes` makes such a view, to check an update before it is
    made); an update writes its records in the transaction that changes the
    levels (:meth:`~llama_index_ext_recursive.stores.pg_index.PostgresIndexStore.write_records`).
    """

    def __init__(self, store: Any, changes: Mapping[str, DocumentRecord | None] | None = None) -> None:
        self.store = store
        self.changes: dict[str, DocumentRecord | None] = dict(changes or {})
        self._where = f"table {store.schema}.{store.name}_documents"
        # records read since this view was made (None: no such document). The index makes a new
        # view at each generation of the database, so what is kept is that generation's.
        self._read: dict[str, DocumentRecord | None] = {}

    def _stored(self, doc_id: str) -> DocumentRecord | None:
        if doc_id not in self._read:
            self.prefetch([doc_id])
        return self._read.get(doc_id)

    def prefetch(self, doc_ids: Iterable[str]) -> None:
        """Read the records of ``doc_ids`` in one query (a query's routed documents, before it
        reads them one by one)."""
        wanted = [d for d in dict.fromkeys(doc_ids) if isinstance(d, str) and d not in self._read]
        if not wanted:
            return
        found = self.store.records_fields(wanted)
        if len(self._read) + len(wanted) > DECODED_KEPT:
            self._read.clear()
        for doc_id in wanted:
            fields = found.get(doc_id)
            self._read[doc_id] = None if fields is None else document_record(doc_id, fields, self._where)

    def __getitem__(self, doc_id: str) -> DocumentRecord:
        record = (
            self.changes[doc_id]
            if doc_id in self.changes
            else self._stored(doc_id)
            if isinstance(doc_id, str)
            else None
        )
        if record is None:
            raise KeyError(doc_id)
        return record

    def __contains__(self, doc_id: object) -> bool:
        if doc_id in self.changes:
            return self.changes[doc_id] is not None
        return isinstance(doc_id, str) and self._stored(doc_id) is not None

    def __iter__(self) -> Iterator[str]:
        changes = self.changes
        stored = [d for d in self.store.record_ids() if d not in changes]
        return iter(stored + [d for d, record in changes.items() if record is not None])

    def __len__(self) -> int:
        count = int(self.store.record_count())
        for doc_id, record in self.changes.items():
            count += (record is not None) - (self._stored(doc_id) is not None)
        return count

    def items(self) -> Iterator[tuple[str, DocumentRecord]]:  # type: ignore[override]
        """Every record, the stored ones read in one query."""
        changes = self.changes
        stored = [
            (d, document_record(d, f, self._where)) for d, f in self.store.all_record_fields() if d not in changes
        ]
        return iter(stored + [(d, record) for d, record in changes.items() if record is not None])

    def values(self) -> Iterator[DocumentRecord]:  # type: ignore[override]
        return (record for _, record in self.items())

    def with_changes(self, removed: Iterable[str], added: Mapping[str, DocumentRecord]) -> PostgresRecords:
        """This view with the documents of ``removed`` deleted and ``added`` put in (nothing is
        written)."""
        changes: dict[str, DocumentRecord | None] = {**self.changes, **dict.fromkeys(removed)}
        changes.update(added)
        return PostgresRecords(self.store, changes)

    def _changed(self) -> list[tuple[DocumentRecord | None, DocumentRecord | None]]:
        return [(self._stored(d), record) for d, record in self.changes.items()]

    def chunk_count(self) -> int:
        """The chunks the records list, counted by the server for the stored ones."""
        total = int(self.store.listed_chunk_count())
        for before, after in self._changed():
            total += (len(after.chunk_ids) if after else 0) - (len(before.chunk_ids) if before else 0)
        return total

    def varying_keys(self) -> set[str]:
        """The metadata keys whose value differs between the chunks of some document."""
        keys = set(self.store.varying_keys())
        if self.changes:  # a key may leave with a changed record: counted over every record
            return {k for record in self.values() for k in record.varying_keys}
        return keys


# records read from their storage when asked for (not a dict of every record)
READ_WHEN_ASKED = (StoredRecords, PostgresRecords)
