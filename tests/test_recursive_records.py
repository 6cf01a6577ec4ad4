"""The document records of a persisted columnar index (recursive/records.py): read from their
rows when asked for, with the changes since in memory, answering as a dict of the records would."""

import json

import pytest

from llama_index_ext_recursive.columnar.rows import RowStore
from llama_index_ext_recursive.persist import PersistError
from llama_index_ext_recursive.recursive.build import DocumentRecord
from llama_index_ext_recursive.recursive.records import StoredRecords, published_records


def _record(doc_id, chunks=2, varying=()):
    return DocumentRecord(
        doc_id=doc_id,
        title=f"title of {doc_id}",
        content_hash=f"hash-{doc_id}-{chunks}",
        chunk_ids=[f"{doc_id}-{i}" for i in range(chunks)],
        summary_node_id=f"summary-{doc_id}",
        metadata_keys=["year", *varying],
        varying_keys=list(varying),
    )


def _publish(rows, generation, records):
    rows.write_items(generation, {d: None if r is None else json.dumps(r.to_dict()) for d, r in records.items()})


@pytest.fixture
def rows(tmp_path):
    with RowStore(tmp_path / "documents.rows.sqlite3") as store:
        yield store


def _as_dict(records):
    return {doc_id: records[doc_id] for doc_id in records}


def test_stored_records_answer_as_the_dict_of_their_generation_and_changes(rows):
    published = {"a": _record("a"), "b": _record("b", 3, ["page"]), "it's": _record("it's", 1)}
    _publish(rows, 1, published)
    _publish(rows, 2, {"b": None, "c": _record("c")})  # a later generation this view does not see
    records = StoredRecords(rows, 1)
    assert _as_dict(records) == published and dict(records.items()) == published
    assert len(records) == 3 and "b" in records and "c" not in records and records.get("c") is None
    assert records.chunk_count() == 6 and records.varying_keys() == {"page"}
    changed = records.with_changes(["b", "a"], {"a": _record("a", 5), "d": _record("d", 1, ["section"])})
    expected = {"it's": published["it's"], "a": _record("a", 5), "d": _record("d", 1, ["section"])}
    assert _as_dict(changed) == expected and dict(changed.items()) == expected
    assert list(changed) == ["it's", "a", "d"] and len(changed) == 3 and "b" not in changed
    assert changed.chunk_count() == 7 and changed.varying_keys() == {"section"}
    assert _as_dict(records) == published  # a reader of the earlier records keeps them
    with pytest.raises(KeyError):
        changed["b"]


def test_published_records_keep_in_memory_only_what_changed_after_the_write(rows):
    _publish(rows, 1, {"a": _record("a"), "b": _record("b")})
    records = StoredRecords(rows, 1).with_changes(["b"], {"c": _record("c")})
    written = dict(records.changes)
    _publish(rows, 2, written)
    later = records.with_changes([], {"d": _record("d")})  # an update while the persist wrote
    after = published_records(later, rows, 2, written)
    assert after.changes == {"d": _record("d")}
    assert _as_dict(after) == {"a": _record("a"), "c": _record("c"), "d": _record("d")} and len(after) == 3
    # an index persisted into rows the first time holds a dict: what it wrote is read back
    first = {"a": _record("a"), "c": _record("c")}
    assert published_records(first, rows, 2, {**first, "b": None}).changes == {}


def test_a_malformed_record_is_refused_by_name(rows):
    rows.write_items(1, {"bad": json.dumps({"doc_id": "bad", "title": 5}), "odd": "{not json", "nil": "null"})
    records = StoredRecords(rows, 1)
    with pytest.raises(PersistError, match="record of document 'bad' is malformed"):
        records["bad"]
    with pytest.raises(PersistError, match="malformed row"):
        records["odd"]
    with pytest.raises(PersistError, match="null row for 'nil'"):
        records["nil"]
