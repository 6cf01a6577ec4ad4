"""NumpyVectorStore answers exactly as upstream SimpleVectorStore does."""

from __future__ import annotations

import copy
import json
import os
import pickle
import stat
import threading
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from llama_index.core.schema import NodeRelationship, RelatedNodeInfo, TextNode
from llama_index.core.vector_stores.simple import SimpleVectorStore
from llama_index.core.vector_stores.types import (
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryMode,
)

from llama_index_ext_recursive import NumpyVectorStore, PersistError
from llama_index_ext_recursive.filters import metadata_matches

CATEGORIES = ["food", "biology", "energy", "history"]
TITLES = ["Alpha beta", "GAMMA delta", "alpha Omega", "", "Beta-carotene"]
MAYBE = [None, "", [], "x", 0, ["y"]]


def random_nodes(count=400, dim=16, seed=0, prefix="n"):
    rng = np.random.default_rng(seed)
    nodes = []
    for i in range(count):
        metadata = {
            "category": CATEGORIES[i % 4],
            "year": 2015 + i % 10,
            "tags": ["a", "b", "c"][: i % 4],
            "title": TITLES[i % 5],
            "score": None if i % 7 == 0 else round(float(rng.uniform(-1, 1)), 3),
            "flag": bool(i % 2),
        }
        if i % 6 != 5:  # some nodes lack the key: a filter sees None
            metadata["maybe"] = MAYBE[i % 6]
        node = TextNode(
            id_=f"{prefix}{i}", text=f"text {i}", embedding=list(rng.standard_normal(dim)), metadata=metadata
        )
        node.relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id=f"doc{i % 20}")
        nodes.append(node)
    return nodes


def leaf(key, value, operator=FilterOperator.EQ):
    return MetadataFilter(key=key, value=value, operator=operator)


def flat(*filters, condition=FilterCondition.AND):
    return MetadataFilters(filters=list(filters), condition=condition)


# every operator SimpleVectorStore supports, on ints, floats, strings, lists, bools and None
FILTERS = [
    None,
    flat(),
    flat(leaf("category", "food")),
    flat(leaf("ref_doc_id", "doc3")),
    flat(leaf("category", ["food", "energy"], FilterOperator.IN), leaf("year", 2019, FilterOperator.GTE)),
    flat(leaf("category", "history"), leaf("year", 2016, FilterOperator.LT), condition=FilterCondition.OR),
    flat(leaf("category", "food"), condition=FilterCondition.NOT),
    flat(leaf("tags", "b", FilterOperator.CONTAINS)),
    flat(leaf("category", "nothing")),
    flat(leaf("category", "food", FilterOperator.NE)),
    flat(leaf("year", 2018, FilterOperator.GT)),
    flat(leaf("year", 2018.5, FilterOperator.LTE)),
    flat(leaf("score", 0.25, FilterOperator.GT)),  # None for some nodes
    flat(leaf("score", 0, FilterOperator.LT), leaf("flag", 1)),
    flat(leaf("title", "alpha", FilterOperator.GTE)),  # strings compare too
    flat(leaf("year", [2015, 2017, 2024], FilterOperator.IN)),
    flat(leaf("year", [2015, 2017, 2024], FilterOperator.NIN)),
    flat(leaf("category", ["food", "energy"], FilterOperator.NIN)),
    flat(leaf("category", "foodbiology", FilterOperator.IN)),  # a string: substring test, as upstream
    flat(leaf("maybe", ["x", ""], FilterOperator.IN)),  # lists among the values
    flat(leaf("maybe", [0, 5], FilterOperator.IN)),
    flat(leaf("maybe", ["x"], FilterOperator.NIN)),
    flat(leaf("maybe", None, FilterOperator.IS_EMPTY)),
    flat(leaf("maybe", "x", FilterOperator.NE)),
    flat(leaf("maybe", 0)),
    flat(leaf("maybe", None)),
    flat(leaf("flag", 1)),  # True == 1
    flat(leaf("year", 2017.0)),  # 2017 == 2017.0
    flat(leaf("title", "alpha", FilterOperator.TEXT_MATCH)),
    flat(leaf("title", "ALPHA", FilterOperator.TEXT_MATCH_INSENSITIVE)),
    flat(leaf("tags", ["a", "c"], FilterOperator.ANY)),
    flat(leaf("tags", ["a", "b"], FilterOperator.ALL)),
    flat(leaf("tags", None, FilterOperator.IS_EMPTY), leaf("year", 2020, FilterOperator.NE)),
    flat(
        leaf("category", ["food"], FilterOperator.NIN),
        leaf("title", "", FilterOperator.IS_EMPTY),
        condition=FilterCondition.OR,
    ),
    flat(leaf("missing_key", 1, FilterOperator.NE)),
]


def assert_same(ours, upstream, query):
    """Same ids in the same order, same scores (NaN where upstream has NaN), or the same error."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # upstream divides 0 by 0
            expected = upstream.query(query)
    except Exception as exc:  # noqa: BLE001 - the same failure is the expected behaviour
        with pytest.raises(type(exc)):
            ours.query(query)
        return None
    got = ours.query(query)
    assert got.ids == expected.ids
    np.testing.assert_allclose(
        np.asarray(got.similarities, dtype=float),
        np.asarray(expected.similarities, dtype=float),
        atol=1e-6,
        rtol=0,
    )
    return got


def both(nodes):
    ours, upstream = NumpyVectorStore(), SimpleVectorStore()
    ours.add(nodes)
    upstream.add(nodes)
    return ours, upstream


@pytest.mark.parametrize("filters", FILTERS)
@pytest.mark.parametrize("top_k", [1, 10, 1000])
def test_same_top_k_and_scores_as_simple_vector_store(filters, top_k):
    ours, upstream = both(random_nodes())
    rng = np.random.default_rng(1)
    for _ in range(5):
        query = VectorStoreQuery(query_embedding=list(rng.standard_normal(16)), similarity_top_k=top_k, filters=filters)
        assert_same(ours, upstream, query)


def test_query_ids_are_the_ids_and_scores_of_query():
    """The recursive search asks for ids and scores alone (ScoredIdSearch); they are query's, in its order."""
    from llama_index_ext_recursive.stores.protocol import ScoredIdSearch

    ours, upstream = both(random_nodes())
    assert isinstance(ours, ScoredIdSearch) and not isinstance(upstream, ScoredIdSearch)
    query = VectorStoreQuery(query_embedding=[0.5] * 16, similarity_top_k=7, filters=FILTERS[2])
    found = ours.query(query)
    ids, scores = ours.query_ids(query)
    assert ids == found.ids and len(ids) == 7 and scores == [float(v) for v in found.similarities]


def test_filters_select_some_but_not_all_nodes():
    """Guard for the table above: a filter matching nothing (or everything) would test little."""
    nodes = random_nodes()
    ours, _ = both(nodes)
    on_purpose = {0: "none", 1: "empty", 8: "no such category", 25: "EQ None", 34: "NE on a missing key"}
    assert FILTERS[8] == flat(leaf("category", "nothing")) and FILTERS[25] == flat(leaf("maybe", None))
    for i, filters in enumerate(FILTERS):
        if i in on_purpose:
            continue
        query = VectorStoreQuery(query_embedding=[1.0] * 16, similarity_top_k=1000, filters=filters)
        assert 0 < len(ours.query(query).ids) < len(nodes), filters


@pytest.mark.parametrize("top_k", [None, 0, 1, 7, 400])
def test_top_k_none_or_zero_returns_everything_as_upstream(top_k):
    ours, upstream = both(random_nodes(60))
    query = VectorStoreQuery(query_embedding=[0.3] * 16, similarity_top_k=top_k)
    got = assert_same(ours, upstream, query)
    assert len(got.ids) == (60 if not top_k else min(top_k, 60))


def test_k_larger_than_the_matches():
    nodes = random_nodes()
    ours, upstream = both(nodes)
    filters = flat(leaf("ref_doc_id", "doc3"), leaf("score", 0.0, FilterOperator.GT))
    matching = [n for n in nodes if n.ref_doc_id == "doc3" and (n.metadata["score"] or 0) > 0]
    got = assert_same(
        ours, upstream, VectorStoreQuery(query_embedding=[1.0] * 16, similarity_top_k=50, filters=filters)
    )
    assert len(got.ids) == len(matching) and 0 < len(matching) < 20


def test_big_store_uses_the_float32_screen_and_stays_exact():
    """4000 x 32: the float32 screen plus float64 rescoring, over all rows, over a
    gathered subset (800 rows) and over a large subset (2000 rows), with duplicates."""
    nodes = random_nodes(4000, dim=32, seed=3)
    for i in range(0, 4000, 50):  # exact duplicates: ties found after the screen
        nodes[i].embedding = list(nodes[i + 1].embedding)
    ours, upstream = both(nodes)
    rng = np.random.default_rng(4)
    filters = [
        None,
        flat(leaf("year", [2016, 2019], FilterOperator.IN)),
        flat(leaf("category", ["food", "energy"], FilterOperator.IN)),
        flat(leaf("score", -0.5, FilterOperator.GT), leaf("year", 2017, FilterOperator.NE)),
    ]
    for f in filters:
        for top_k in (1, 10, 100):
            for q in [rng.standard_normal(32) for _ in range(5)] + [np.asarray(nodes[101].embedding) * 3]:
                assert_same(
                    ours, upstream, VectorStoreQuery(query_embedding=q.tolist(), similarity_top_k=top_k, filters=f)
                )
    # the query equal to a stored vector: top score 1 (to rounding), its twin next
    got = ours.query(VectorStoreQuery(query_embedding=nodes[17].embedding, similarity_top_k=1))
    assert got.ids == ["n17"] and got.similarities[0] == pytest.approx(1.0, abs=1e-12)
    got = assert_same(ours, upstream, VectorStoreQuery(query_embedding=nodes[51].embedding, similarity_top_k=2))
    assert set(got.ids) == {"n50", "n51"}


# ------------------------------------------------------------------ ties


def tied_nodes(seed=0, dim=8):
    """Duplicated vectors (and exact x2 / x0.5 multiples) under shuffled ids.

    Upstream breaks ties through its heap of (score, node_id) tuples, so both
    the kept set and the order of equal scores depend on ids and insertion order.
    """
    rng = np.random.default_rng(seed)
    base = rng.standard_normal((12, dim))
    nodes = []
    for i in range(90):
        vector = base[i % 12] * [1.0, 2.0, 0.5, 3.0, 0.1][i % 5]
        node_id = f"t{rng.integers(10**6):06d}-{i}"
        nodes.append(
            TextNode(id_=node_id, text="x", embedding=vector.tolist(), metadata={"group": i % 12, "year": 2000 + i % 5})
        )
    rng.shuffle(nodes)
    return nodes, base


@pytest.mark.parametrize("top_k", [1, 2, 3, 5, 8, 20, 89, 90, 200])
def test_ties_keep_upstreams_ids_and_order(top_k):
    nodes, base = tied_nodes()
    ours, upstream = both(nodes)
    rng = np.random.default_rng(5)
    queries = [base[3], base[7] * 3, rng.standard_normal(8), np.ones(8)]
    for q in queries:
        for filters in (
            None,
            flat(leaf("year", 2002, FilterOperator.GTE)),
            flat(leaf("group", [3, 4], FilterOperator.IN)),
        ):
            assert_same(
                ours, upstream, VectorStoreQuery(query_embedding=q.tolist(), similarity_top_k=top_k, filters=filters)
            )


def test_integer_one_hot_vectors_tie_everywhere():
    nodes = [
        TextNode(id_=f"h{(i * 37) % 101:03d}", text="x", embedding=[float(i % 3 == j) for j in range(3)])
        for i in range(60)
    ]
    ours, upstream = both(nodes)
    for q in ([1.0, 0.0, 0.0], [1.0, 1.0, 0.0], [1.0, 1.0, 1.0], [0.0, 0.0, 2.0]):
        for top_k in (1, 5, 20, 21, 40, 60):
            assert_same(ours, upstream, VectorStoreQuery(query_embedding=q, similarity_top_k=top_k))


# ---------------------------------------------------------- zero vectors


def test_zero_vectors_score_nan_like_upstream():
    nodes = random_nodes(50)
    for i in (3, 17, 40):
        nodes[i].embedding = [0.0] * 16
    ours, upstream = both(nodes)
    for top_k in (1, 5, 50):
        for filters in (None, flat(leaf("category", "biology"))):
            got = assert_same(
                ours, upstream, VectorStoreQuery(query_embedding=[0.5] * 16, similarity_top_k=top_k, filters=filters)
            )
            assert len(got.ids) == min(top_k, 50 if filters is None else 13)
    # a filter excluding the zero vectors takes the fast path again
    got = assert_same(
        ours,
        upstream,
        VectorStoreQuery(query_embedding=[0.5] * 16, similarity_top_k=5, node_ids=["n1", "n2", "n4", "n5", "n6", "n7"]),
    )
    assert not np.isnan(got.similarities).any()


def test_zero_query_vector_like_upstream():
    ours, upstream = both(random_nodes(30))
    for top_k in (1, 4, 30):
        got = assert_same(ours, upstream, VectorStoreQuery(query_embedding=[0.0] * 16, similarity_top_k=top_k))
        assert np.isnan(got.similarities).all()


# ------------------------------------------------------- node_ids restriction


def test_node_ids_restriction_matches_upstream():
    nodes = random_nodes(200)
    ours, upstream = both(nodes)
    rng = np.random.default_rng(6)
    every = [n.node_id for n in nodes]
    cases = [
        ["n1", "n7", "n9", "n30"],
        [],
        ["n1", "n1", "unknown", "n150"],
        list(rng.choice(every, size=120, replace=False)),
        every,
        every + ["unknown"],
        list(reversed(every)),
    ]
    for node_ids in cases:
        for filters in (
            None,
            flat(leaf("category", ["food", "history"], FilterOperator.IN)),
            flat(leaf("year", 2020, FilterOperator.GT)),
        ):
            for top_k in (3, 10, 300):
                assert_same(
                    ours,
                    upstream,
                    VectorStoreQuery(
                        query_embedding=list(rng.standard_normal(16)),
                        similarity_top_k=top_k,
                        node_ids=node_ids,
                        filters=filters,
                    ),
                )


def test_a_reused_node_ids_list_is_read_again_each_query():
    nodes = random_nodes(50)
    ours, upstream = both(nodes)
    node_ids = [n.node_id for n in nodes]
    query = VectorStoreQuery(query_embedding=nodes[10].embedding, similarity_top_k=3, node_ids=node_ids)
    assert assert_same(ours, upstream, query).ids[0] == "n10"
    node_ids.remove("n10")  # the same list object, mutated in place
    assert "n10" not in assert_same(ours, upstream, query).ids
    node_ids[0] = "n10"
    assert assert_same(ours, upstream, query).ids[0] == "n10"


# ------------------------------------------------------------ nested filters


def test_nested_filters_are_supported():
    nodes = random_nodes(300)
    store = NumpyVectorStore()
    store.add(nodes)
    nested = [
        MetadataFilters(
            filters=[
                leaf("ref_doc_id", "doc1"),
                flat(leaf("year", 2016), leaf("year", 2021), condition=FilterCondition.OR),
            ]
        ),
        MetadataFilters(
            condition=FilterCondition.OR,
            filters=[
                flat(leaf("category", "food"), leaf("score", 0.5, FilterOperator.GT)),
                flat(leaf("tags", "c", FilterOperator.CONTAINS), condition=FilterCondition.NOT),
            ],
        ),
        MetadataFilters(
            condition=FilterCondition.NOT,
            filters=[
                flat(leaf("title", "beta", FilterOperator.TEXT_MATCH_INSENSITIVE), leaf("flag", 0)),
                leaf("year", [2015, 2016], FilterOperator.IN),
            ],
        ),
        MetadataFilters(filters=[flat(), leaf("category", "energy")]),
    ]
    metadata = store.data.metadata_dict
    for filters in nested:
        result = store.query(VectorStoreQuery(query_embedding=[1.0] * 16, similarity_top_k=1000, filters=filters))
        expected = {n.node_id for n in nodes if metadata_matches(filters, metadata[n.node_id])}
        assert set(result.ids) == expected and expected
        # and the same ranking upstream gives over exactly those nodes
        upstream = SimpleVectorStore()
        upstream.add([n for n in nodes if n.node_id in expected])
        filtered = store.query(VectorStoreQuery(query_embedding=[1.0] * 16, similarity_top_k=7, filters=filters))
        assert filtered.ids == upstream.query(VectorStoreQuery(query_embedding=[1.0] * 16, similarity_top_k=7)).ids


# ---------------------------------------------------------------- updates


def test_updates_are_seen_by_the_next_query():
    store = NumpyVectorStore()
    nodes = random_nodes(30)
    store.add(nodes[:20])
    query = VectorStoreQuery(query_embedding=nodes[25].embedding, similarity_top_k=1)
    assert store.query(query).ids != ["n25"]
    store.add(nodes[20:])
    assert store.query(query).ids == ["n25"]
    store.delete_nodes(["n25"])
    assert store.query(query).ids != ["n25"]
    store.delete("doc5")
    assert all(
        int(i[1:]) % 20 != 5
        for i in store.query(VectorStoreQuery(query_embedding=[1.0] * 16, similarity_top_k=100)).ids
    )
    store.clear()
    assert store.query(query).ids == []


def test_random_adds_overwrites_and_deletes_track_upstream():
    """Interleaved updates, each followed by queries: the matrix is updated, never stale.

    Covers appends, re-adding an id with a new vector and metadata (the dict
    keeps its position), deleting and re-adding (it moves to the end),
    delete by document, by ids and by filter, compaction, and clear.
    """
    rng = np.random.default_rng(7)
    pool = random_nodes(600, seed=8)
    ours, upstream = NumpyVectorStore(), SimpleVectorStore()
    filters = [
        None,
        flat(leaf("category", "food")),
        flat(leaf("year", 2019, FilterOperator.GT)),
        flat(leaf("tags", ["a"], FilterOperator.ANY)),
    ]

    def check():
        for _ in range(3):
            q = list(rng.standard_normal(16))
            for f in filters:
                for top_k in (1, 10, 700):
                    assert_same(ours, upstream, VectorStoreQuery(query_embedding=q, similarity_top_k=top_k, filters=f))
        assert list(ours.data.embedding_dict) == list(upstream.data.embedding_dict)

    for step in range(40):
        action = rng.integers(6) if step > 2 else 0
        if action == 0:  # add a batch (with an id repeated inside it)
            batch = [pool[i] for i in rng.choice(len(pool), size=int(rng.integers(1, 60)), replace=False)]
            batch = batch + batch[:1]
        elif action == 1:  # re-add existing ids with new vectors and metadata
            batch = []
            for node_id in rng.choice(list(upstream.data.embedding_dict) or ["n0"], size=5):
                i = int(node_id[1:])
                node = TextNode(
                    id_=node_id,
                    text="new",
                    embedding=list(rng.standard_normal(16)),
                    metadata={"category": "food", "year": 2030, "tags": ["a"]},
                )
                node.relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id=f"doc{i % 20}")
                batch.append(node)
        else:
            batch = None
        if batch is not None:
            ours.add(batch)
            upstream.add(batch)
        elif action == 2:
            doc = f"doc{rng.integers(20)}"
            ours.delete(doc)
            upstream.delete(doc)
        elif action == 3:
            ids = list(rng.choice(list(upstream.data.embedding_dict) or ["x"], size=8)) + ["unknown"]
            ours.delete_nodes(ids)
            upstream.delete_nodes(ids)
        elif action == 4:
            f = flat(leaf("year", int(rng.integers(2015, 2025))))
            ours.delete_nodes(filters=f)
            upstream.delete_nodes(filters=f)
        elif step % 13 == 0:
            ours.clear()
            upstream.clear()
        check()


def test_a_deleted_id_added_again_goes_to_the_end_as_upstream():
    nodes, base = tied_nodes()
    ours, upstream = both(nodes)
    moved = nodes[:10]
    ours.delete_nodes([n.node_id for n in moved])
    upstream.delete_nodes([n.node_id for n in moved])
    ours.add(moved)
    upstream.add(moved)
    for top_k in (1, 3, 8, 90):
        assert_same(
            ours,
            upstream,
            VectorStoreQuery(query_embedding=base[moved[0].metadata["group"]].tolist(), similarity_top_k=top_k),
        )


def test_store_built_from_data_directly_and_data_replaced():
    nodes = random_nodes(40)
    upstream = SimpleVectorStore()
    upstream.add(nodes)
    ours = NumpyVectorStore(data=copy.deepcopy(upstream.data))
    query = VectorStoreQuery(query_embedding=[0.1] * 16, similarity_top_k=5)
    assert_same(ours, upstream, query)
    ours.data = copy.deepcopy(upstream.data)  # replaced wholesale: rebuilt on the next query
    upstream.delete("doc1")
    ours.data.embedding_dict.clear()
    ours.data = copy.deepcopy(upstream.data)
    assert_same(ours, upstream, query)


# ------------------------------------------------------------- persistence


def test_persistence_format_is_simple_vector_stores(tmp_path):
    nodes = random_nodes(40)
    ours, upstream = both(nodes)
    ours.persist(str(tmp_path / "ours.json"))
    upstream.persist(str(tmp_path / "upstream.json"))
    assert (tmp_path / "ours.json").read_bytes() == (tmp_path / "upstream.json").read_bytes()
    assert json.loads((tmp_path / "ours.json").read_text()).keys() == {
        "embedding_dict",
        "text_id_to_ref_doc_id",
        "metadata_dict",
    }
    query = VectorStoreQuery(
        query_embedding=[0.5] * 16, similarity_top_k=7, filters=flat(leaf("year", 2017, FilterOperator.GT))
    )
    for path in ("ours.json", "upstream.json"):  # each loads in either class
        loaded_upstream = SimpleVectorStore.from_persist_path(str(tmp_path / path))
        loaded_ours = NumpyVectorStore.from_persist_path(str(tmp_path / path))
        assert isinstance(loaded_ours, NumpyVectorStore)
        got = assert_same(loaded_ours, loaded_upstream, query)
        assert got.ids == ours.query(query).ids == upstream.query(query).ids
        # a loaded store takes updates like a fresh one
        more = random_nodes(10, seed=9, prefix="m")
        loaded_ours.add(more)
        loaded_upstream.add(more)
        assert_same(loaded_ours, loaded_upstream, query)


def test_persist_dir_round_trip(tmp_path):
    ours, upstream = both(random_nodes(30))
    ours.delete("doc2")  # tombstones are not persisted
    upstream.delete("doc2")
    ours.persist(str(tmp_path / "default__vector_store.json"))
    loaded = NumpyVectorStore.from_persist_dir(str(tmp_path))
    assert loaded.data.to_dict() == upstream.data.to_dict()
    assert_same(loaded, upstream, VectorStoreQuery(query_embedding=[1.0] * 16, similarity_top_k=30))


@pytest.mark.parametrize(
    "content, problem",
    [
        ('{"embedding_dict": {"n1": [0.1, ', "is corrupted"),  # truncated
        ("{}", "has no embedding_dict"),
        ("[]", "holds a JSON list, not an object"),
        ('{"embedding_dict": {"a": 1}}', "the embedding of 'a' is not a list"),
        ('{"embedding_dict": {"a": [1.0], "b": [1.0, 2.0]}}', "different dimensions"),
        ('{"embedding_dict": {"a": [1.0]}, "metadata_dict": {"ghost": {}}}', "names 'ghost', which has no embedding"),
    ],
)
def test_a_damaged_store_file_raises_persist_error_naming_it(tmp_path, content, problem):
    path = tmp_path / "default__vector_store.json"
    path.write_text(content)
    for load in (
        lambda: NumpyVectorStore.from_persist_path(str(path)),
        lambda: NumpyVectorStore.from_persist_dir(str(tmp_path)),
    ):
        with pytest.raises(PersistError, match=rf"{path}.*{problem}"):
            load()
    with pytest.raises(PersistError, match=rf"{tmp_path / 'missing.json'} is missing"):
        NumpyVectorStore.from_persist_path(str(tmp_path / "missing.json"))


def test_store_persist_is_atomic_and_refuses_other_files(tmp_path, monkeypatch):
    ours, _ = both(random_nodes(20))
    path = tmp_path / "store.json"
    ours.persist(str(path))
    before = path.read_bytes()
    more, _ = both(random_nodes(25, seed=3))

    def fail(*args):
        raise OSError("disk full")

    with monkeypatch.context() as patch:
        patch.setattr("os.replace", fail)
        with pytest.raises(OSError, match="disk full"):
            more.persist(str(path))
    assert path.read_bytes() == before  # the old file, whole
    assert [p.name for p in tmp_path.iterdir()] == ["store.json"]  # no temp file left
    more.persist(str(path))  # replacing a store file is fine
    assert NumpyVectorStore.from_persist_path(str(path)).data.to_dict() == more.data.to_dict()
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask  # not tempfile's 0600

    notes = tmp_path / "notes.txt"
    notes.write_text("my notes")
    (tmp_path / "folder").mkdir()
    for target in (notes, tmp_path / "folder"):
        with pytest.raises(PersistError, match=rf"refusing to replace {target}: it is not a vector store"):
            ours.persist(str(target))
    assert notes.read_text() == "my notes"


def test_filtering_a_store_without_metadata_fails_as_upstream():
    nodes = random_nodes(20)
    upstream = SimpleVectorStore()
    upstream.add(nodes)
    data = copy.deepcopy(upstream.data)
    data.metadata_dict = {}
    ours, bare = NumpyVectorStore(data=data), SimpleVectorStore(data=copy.deepcopy(data))
    query = VectorStoreQuery(query_embedding=[1.0] * 16, filters=flat(leaf("year", 2016)))
    assert_same(ours, bare, query)
    with pytest.raises(ValueError, match="persisted without metadata"):
        ours.query(query)
    assert_same(ours, bare, VectorStoreQuery(query_embedding=[1.0] * 16, similarity_top_k=3))
    # some nodes without metadata: upstream's lookup fails with KeyError, so does ours
    data = copy.deepcopy(upstream.data)
    del data.metadata_dict["n4"]
    ours, partial = NumpyVectorStore(data=data), SimpleVectorStore(data=copy.deepcopy(data))
    with pytest.raises(KeyError):
        partial.query(query)
    with pytest.raises(KeyError):
        ours.query(query)
    assert_same(ours, partial, VectorStoreQuery(query_embedding=[1.0] * 16, similarity_top_k=3))


# ------------------------------------------------------------------ other


def test_a_row_of_a_type_the_operator_cannot_take_does_not_match_where_upstream_raises():
    nodes = random_nodes(20)
    nodes[3].metadata["year"] = "2018"  # one string among ints
    ours, upstream = both(nodes)
    for f, expected in (
        (
            flat(leaf("year", 2016, FilterOperator.GT)),
            {n.node_id for n in nodes if n.metadata["year"] != "2018" and n.metadata["year"] > 2016},
        ),
        (flat(leaf("year", "201", FilterOperator.TEXT_MATCH)), {"n3"}),
    ):
        query = VectorStoreQuery(query_embedding=[1.0] * 16, similarity_top_k=20, filters=f)
        with pytest.raises(TypeError):
            upstream.query(query)
        assert set(ours.query(query).ids) == expected


def test_embeddings_of_different_lengths_fail_as_upstream():
    nodes = random_nodes(5)
    nodes[2].embedding = [1.0, 2.0]
    ours, upstream = both(nodes)
    query = VectorStoreQuery(query_embedding=[1.0] * 16)
    with pytest.raises(ValueError):
        upstream.query(query)
    with pytest.raises(ValueError):
        ours.query(query)


def test_other_query_modes_are_upstreams():
    ours, upstream = both(random_nodes(30))
    query = VectorStoreQuery(query_embedding=[1.0] * 16, similarity_top_k=4, mode=VectorStoreQueryMode.MMR)
    assert_same(ours, upstream, query)


def test_copies_and_pickles_answer_the_same():
    ours, upstream = both(random_nodes(50))
    query = VectorStoreQuery(query_embedding=[0.2] * 16, similarity_top_k=5, filters=flat(leaf("flag", 1)))
    for clone in (copy.deepcopy(ours), copy.copy(ours), pickle.loads(pickle.dumps(ours)), ours.model_copy(deep=True)):
        assert_same(clone, upstream, query)


def test_concurrent_queries_and_adds_are_consistent():
    nodes = random_nodes(400)
    ours, upstream = both(nodes[:200])
    rng = np.random.default_rng(10)
    queries = [
        VectorStoreQuery(
            query_embedding=list(rng.standard_normal(16)),
            similarity_top_k=5,
            filters=flat(leaf("year", 2018, FilterOperator.GTE)),
        )
        for _ in range(30)
    ]
    errors = []

    def reader():
        try:
            for q in queries:
                result = ours.query(q)
                assert len(result.ids) == 5 and len(set(result.ids)) == 5
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    for i in range(200, 400, 20):
        ours.add(nodes[i : i + 20])
    for t in threads:
        t.join()
    assert not errors
    upstream.add(nodes[200:])
    for q in queries:
        assert_same(ours, upstream, q)


def test_a_store_with_mismatched_lengths_recovers_when_the_odd_vector_goes():
    nodes = random_nodes(30)
    nodes[2].embedding = [1.0, 2.0]
    ours, upstream = both(nodes)
    query = VectorStoreQuery(query_embedding=[1.0] * 16, similarity_top_k=4)
    with pytest.raises(ValueError):
        ours.query(query)
    ours.delete_nodes(["n2"])
    upstream.delete_nodes(["n2"])
    assert_same(ours, upstream, query)
    assert ours._state.n == 29 and not ours._state.broken  # answered by the matrix again


# ------------------------------------------------------- property-based


METADATA_VALUES = st.sampled_from([None, 0, 1, 2, 1.5, -2.0, True, False, "a", "b", "ab", "", [], ["a"], ["a", "b"]])
FILTER_VALUES = st.one_of(
    st.sampled_from([None, 0, 1, 2, 1.5, -2.0, "a", "b", "ab", ""]),
    st.lists(st.sampled_from([0, 1, 2]), max_size=3),
    st.lists(st.sampled_from(["a", "b", "ab"]), max_size=3),
)
LEAVES = st.builds(leaf, st.sampled_from(["k1", "k2"]), FILTER_VALUES, st.sampled_from(list(FilterOperator)))


@st.composite
def stores_and_queries(draw):
    """Tiny stores with integer coordinates (ties and zero vectors galore), mixed-type metadata."""
    count = draw(st.integers(1, 30))
    coordinate = st.sampled_from([-1.0, 0.0, 0.0, 1.0, 2.0])
    ids = draw(st.lists(st.text("abcxyz", min_size=1, max_size=3), min_size=count, max_size=count, unique=True))
    nodes = []
    for node_id in ids:
        metadata = {key: draw(METADATA_VALUES) for key in ("k1", "k2") if draw(st.booleans())}
        nodes.append(
            TextNode(
                id_=node_id, text="", embedding=draw(st.lists(coordinate, min_size=3, max_size=3)), metadata=metadata
            )
        )
    queries = []
    for _ in range(3):
        filters = draw(
            st.one_of(
                st.none(),
                st.lists(LEAVES, min_size=1, max_size=3).map(lambda f: flat(*f)),
                st.builds(
                    lambda f, c: flat(*f, condition=c),
                    st.lists(LEAVES, min_size=1, max_size=3),
                    st.sampled_from([FilterCondition.OR, FilterCondition.NOT]),
                ),
            )
        )
        node_ids = draw(st.one_of(st.none(), st.lists(st.sampled_from(ids + ["zz"]), max_size=count)))
        queries.append(
            VectorStoreQuery(
                query_embedding=draw(st.lists(coordinate, min_size=3, max_size=3)),
                similarity_top_k=draw(st.sampled_from([None, 0, 1, 2, 3, 5, 40])),
                filters=filters,
                node_ids=node_ids,
            )
        )
    return nodes, queries


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stores_and_queries())
def test_random_stores_filters_and_ties_match_upstream(case):
    nodes, queries = case
    ours, upstream = both(nodes)
    for query in queries:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                expected = upstream.query(query)
        except TypeError:
            # upstream fails on a row whose value the operator cannot take; that row does not
            # match here: every hit passes the filter, and k come back when k rows pass
            got = ours.query(query)
            passing = {n.node_id for n in nodes if metadata_matches(query.filters, n.metadata)}
            if query.node_ids is not None:
                passing &= set(query.node_ids)
            assert set(got.ids) <= passing
            assert len(got.ids) == min(len(passing), query.similarity_top_k or len(passing))
            continue
        except ValueError as exc:
            # upstream tests every condition on every row; we may skip rows an
            # earlier condition excluded, so with several conditions we may not fail
            if query.filters is None or len(query.filters.filters) == 1:
                with pytest.raises(type(exc)):
                    ours.query(query)
            continue
        got = ours.query(query)
        assert got.ids == expected.ids
        np.testing.assert_allclose(
            np.asarray(got.similarities, dtype=float), np.asarray(expected.similarities, dtype=float), atol=1e-6, rtol=0
        )
