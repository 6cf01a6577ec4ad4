"""columnar.rows: nodes round-trip exactly through SQLite by row id, node ids map to rows through an
index, appends are whole transactions, hostile strings are data, other schema versions are refused;
rows follow the published generation (the docstore over them is stores.columnar_docstore's)."""

import sqlite3
import threading

import numpy as np
import pytest
from llama_index.core.schema import IndexNode, NodeRelationship, RelatedNodeInfo, TextNode

from llama_index_ext_recursive.columnar.rows import (
    DATABASE_NAME,
    PublishedTexts,
    RowNotFoundError,
    RowStore,
    node_json,
)
from llama_index_ext_recursive.persist import PersistError

HOSTILE = "x'); DROP TABLE rows; --"


def _node(i, doc="d0", **extra):
    return TextNode(
        id_=f"n{i}",
        text=f"chunk {i} of {doc}",
        metadata={"doc": doc, "i": i, "tags": ["a", "b"]},
        excluded_embed_metadata_keys=["i"],
        excluded_llm_metadata_keys=["tags"],
        relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id=doc)},
        **extra,
    )


@pytest.fixture
def rows(tmp_path):
    with RowStore(tmp_path / DATABASE_NAME) as store:
        yield store


def test_nodes_round_trip_exactly_in_the_order_asked(rows):
    nodes = [_node(i) for i in range(5)] + [IndexNode(id_="idx", text="an index node", index_id="n1")]
    assert rows.append(nodes).tolist() == list(range(6))
    got = rows.nodes([5, 0, 3, 3])
    assert [n.node_id for n in got] == ["idx", "n0", "n3", "n3"]
    assert got[1] == nodes[0] and got[1].ref_doc_id == "d0"
    assert isinstance(got[0], IndexNode) and got[0].index_id == "n1"
    assert got[1].excluded_embed_metadata_keys == ["i"] and got[1].excluded_llm_metadata_keys == ["tags"]
    assert rows.node_ids([4, 1]) == ["n4", "n1"]
    assert rows.row_of(["n3", "unknown", "idx"]).tolist() == [3, -1, 5]
    assert rows.rows_of_document("d0").tolist() == [0, 1, 2, 3, 4]


def test_an_existing_id_is_refused_unless_replaced(rows):
    rows.append([_node(0), _node(1)])
    with pytest.raises(ValueError, match="'n1' is stored already.*replace=True"):
        rows.append([_node(2), _node(1)])
    assert len(rows) == 2 and rows.row_of(["n2"]).tolist() == [-1]  # the refused append left nothing
    with pytest.raises(ValueError, match="appears twice"):
        rows.append([_node(3), _node(3)])
    changed = TextNode(id_="n1", text="new text")
    assert rows.append([changed], replace=True).tolist() == [2]
    assert rows.row_of(["n1"]).tolist() == [2] and rows.nodes([2])[0].text == "new text"
    with pytest.raises(RowNotFoundError, match=r"\[1\]"):
        rows.nodes([1])


def test_delete_then_compact_renumbers_in_order(rows):
    rows.append([_node(i) for i in range(6)])
    rows.delete([1, 4])
    assert rows.live_count() == 4 and len(rows) == 6
    with pytest.raises(IndexError, match="row 9"):
        rows.delete([9])
    mapping = rows.compact()
    assert mapping.tolist() == [0, -1, 1, 2, -1, 3]
    assert rows.node_ids([0, 1, 2, 3]) == ["n0", "n2", "n3", "n5"]
    assert rows.append([_node(9)]).tolist() == [4]
    with pytest.raises(ValueError, match="order"):
        rows.compact(np.array([1, 0, 2, 3, 4]))


def test_hostile_strings_are_stored_as_data(rows, tmp_path):
    node = TextNode(id_=HOSTILE, text=HOSTILE, metadata={HOSTILE: HOSTILE})
    rows.append([node])
    assert rows.row_of([HOSTILE]).tolist() == [0]
    assert rows.nodes([0])[0] == node
    assert rows.rows_of_document(HOSTILE).tolist() == []
    reopened = RowStore(tmp_path / DATABASE_NAME)
    assert reopened.nodes([0])[0] == node
    reopened.close()


def test_a_reopened_store_reads_what_was_committed(tmp_path):
    path = tmp_path / DATABASE_NAME
    with RowStore(path) as first:
        first.append([_node(i) for i in range(3)])
        first.delete([1])
    with RowStore(path) as second:
        assert second.node_ids([0, 2]) == ["n0", "n2"] and second.live_count() == 2
        assert second.append([_node(7)]).tolist() == [3]


def test_another_schema_version_or_a_foreign_database_is_refused(tmp_path):
    path = tmp_path / DATABASE_NAME
    RowStore(path).close()
    connection = sqlite3.connect(path)
    connection.execute("UPDATE settings SET value = '7' WHERE name = 'schema_version'")
    connection.commit()
    connection.close()
    with pytest.raises(PersistError, match="version 7.*upgrade"):
        RowStore(path)
    (tmp_path / "junk.sqlite3").write_bytes(b"not a database at all, just bytes" * 10)
    with pytest.raises(PersistError, match="not a readable row database"):
        RowStore(tmp_path / "junk.sqlite3")


def test_a_reader_during_appends_sees_whole_appends(rows):
    rows.append([_node(0)])
    seen, stop = [], threading.Event()

    def read():
        while not stop.is_set():
            seen.append(rows.live_count())

    reader = threading.Thread(target=read)
    reader.start()
    for batch in range(20):
        rows.append([_node(1000 + batch * 10 + i) for i in range(10)])
    stop.set()
    reader.join()
    assert seen and all((count - 1) % 10 == 0 for count in seen)


def test_embeddings_are_not_stored_with_the_text(rows, tmp_path):
    node = _node(0, embedding=[0.5] * 384)
    rows.append([node])
    hydrated = rows.nodes([0])[0]
    assert hydrated.embedding is None and hydrated.text == node.text
    connection = sqlite3.connect(tmp_path / DATABASE_NAME)
    (stored,) = connection.execute("SELECT node FROM rows").fetchone()
    connection.close()
    assert "0.5" not in stored and len(stored) < 2000


def test_a_database_of_something_else_is_left_untouched(tmp_path):
    path = tmp_path / "theirs.sqlite3"
    connection = sqlite3.connect(path)
    connection.execute("CREATE TABLE customers (name TEXT)")
    connection.execute("INSERT INTO customers VALUES ('ada')")
    connection.commit()
    connection.close()
    before = path.read_bytes()
    with pytest.raises(PersistError, match=r"something else.*\['customers'\].*left untouched"):
        RowStore(path)
    assert path.read_bytes() == before


def _records(*ids):
    return [(node_id, "d0", node_json(TextNode(id_=node_id, text=f"text of {node_id}"))) for node_id in ids]


def test_generations_publish_rows_and_settle_undoes_an_unpublished_one(rows):
    rows.commit(1, np.array([0, 1, 2]), _records("a", "b", "c"), np.array([], dtype=np.int64))
    # generation 2 replaces b (row 1 -> row 3) and deletes c; then its persist "crashes"
    rows.commit(2, np.array([3]), _records("b"), np.array([1, 2]))
    assert rows.visible_rows_of(["a", "b", "c"], 2).tolist() == [0, 3, -1]
    assert rows.visible_rows_of(["a", "b", "c"], 1).tolist() == [0, 1, 2]  # a reader of generation 1
    assert rows.node_ids([1, 2]) == ["b", "c"]  # deleted rows stay readable for such readers
    assert rows.settle(1) == 3  # one row added, two deletions undone
    assert rows.visible_rows_of(["a", "b", "c"], 5).tolist() == [0, 1, 2]
    assert rows.settle(1) == 0
    rows.commit(2, np.array([3]), _records("d"), np.array([], dtype=np.int64))  # row 3 is free again
    with pytest.raises(ValueError, match="'a' is stored already"):
        rows.commit(3, np.array([4]), _records("a"), np.array([], dtype=np.int64))
    assert rows.visible_rows_of(["a", "d"], 3).tolist() == [0, 3]


def test_keyed_items_are_replaced_and_deleted_by_generation_and_settle_undoes_one(rows):
    rows.write_items(1, {"a": '{"v": 1}', "b": '{"v": 2}', "it's; DROP TABLE rows": '"x"'})
    rows.write_items(2, {"a": '{"v": 3}', "b": None})
    assert rows.items(1) == [("a", '{"v": 1}'), ("b", '{"v": 2}'), ("it's; DROP TABLE rows", '"x"')]
    assert rows.items(2) == [("it's; DROP TABLE rows", '"x"'), ("a", '{"v": 3}')]
    rows.write_items(3, {"c": '"new"', "it's; DROP TABLE rows": None})  # never published
    assert rows.settle(2) == 2  # c added, the other deleted: both undone
    assert rows.items(3) == rows.items(2)


def test_published_texts_read_their_generation_when_asked_and_keep_what_was_added_since(rows):
    rows.write_items(1, {"a": '"alpha"', HOSTILE: '"hostile"'})
    rows.write_items(2, {"b": '"beta"', "a": '"changed"', "bad": '{"not": "text"}'})
    texts = PublishedTexts(rows, 1)
    assert texts["a"] == "alpha" and texts[HOSTILE] == "hostile"  # generation 1, not 2
    assert "b" not in texts and "missing" not in texts and texts.get("b") is None
    texts["c"] = "gamma"
    assert texts.added == {"c": "gamma"} and "c" in texts
    assert list(texts) == ["a", HOSTILE, "c"] and len(texts) == 3
    with pytest.raises(TypeError, match="only grows"):
        del texts["a"]
    # generation 2 published "c" too; "d" was added while it was written
    texts["d"] = "delta"
    later = texts.published(2, {"c": "gamma"})
    assert later.added == {"d": "delta"}
    assert later["a"] == "changed" and later["b"] == "beta" and "c" not in later  # 2 never got "c"
    with pytest.raises(PersistError, match="key 'bad' that is no text"):
        later["bad"]


def test_a_column_name_outside_the_rows_schema_never_reaches_the_sql(rows):
    """Column names go into the SELECT as identifiers (not bound parameters): only the
    schema's are accepted."""
    rows.append([_node(0)])
    assert rows._column_of_rows([0], "node_id", "ref_doc_id") == [("n0", "d0")]
    for bad in (("node_id, deleted",), ("node; DROP TABLE rows",), ()):
        with pytest.raises(ValueError, match="not columns of the rows table"):
            rows._column_of_rows([0], *bad)
    assert rows.node_ids([0]) == ["n0"]
