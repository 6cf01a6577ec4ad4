"""Hostile and ordinary-but-awkward filter input on the PostgreSQL store, on a real server.

Every filter key and value, document id and text-search query below reaches
the store; each test checks the exact rows returned (against a Python
reading of the same filter), that the tables still hold every row, that the
other tenant is never returned, and that no key or value appears in the SQL
text sent to the server (only in its bound parameters).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
from conftest import topic_nodes
from llama_index.core import MockEmbedding, VectorStoreIndex
from llama_index.core.schema import NodeRelationship, RelatedNodeInfo, TextNode
from llama_index.core.vector_stores.types import (
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryMode,
)
from llama_index.vector_stores.postgres import PGVectorStore
from sqlalchemy import event

from llama_index_ext_recursive import FilteredQueryBundle
from llama_index_ext_recursive.filters import FilterError
from llama_index_ext_recursive.recursive.retriever import RecursiveSummaryRetriever
from llama_index_ext_recursive.stores.pgserver import PgServer
from llama_index_ext_recursive.stores.postgres import TextQueryTooLongError, UnstorableNodeError, pgvector_store

DIM = 4
OP = FilterOperator

# the values a hostile (or just unlucky) user passes; each is some row's label and document id
HOSTILE = [
    "children's books",
    "bumble's-dance",
    "' OR '1'='1",
    "en' OR '1'='1",
    "x'; DELETE FROM {table}; SELECT 1 WHERE '1'='0",
    "x'); DROP TABLE {table}; --",
    "draft :draft",
    ":1",
    "%s",
    "%(x)s",
    "$1 ? ?| @>",
    "back\\slash\\' \\\\",
    '"double" quotes',
    "50% off_sale",
    "ünïcödé 日本語 🐝",
    "-- comment /* open",
    "a" * 50_000 + "'" + "b" * 50_000,  # 100 kB
]


def _doc_id(value: str) -> str:
    # the store's btree index on ref_doc_id holds at most ~2.7 kB per entry
    return value if len(value) < 1000 else "long-value-doc"


def _nodes(table: str) -> list[TextNode]:
    """One row per hostile value in tenant acme, a decoy per value in tenant globex."""
    nodes = []
    for i, raw in enumerate(HOSTILE):
        value = raw.format(table=table)
        for tenant, label in (("acme", value), ("globex", f"globex {i}")):
            node = TextNode(
                id_=f"{tenant}-{i}",
                text=f"{'Worker bees make honey' if i % 2 else 'Solar panels make electricity'} ({tenant} {i})",
                metadata={
                    "tenant": tenant,
                    "label": label,
                    "n": i,
                    "tags": [label, "common", i],
                    # a key whose values are numbers in some rows and text in others
                    "mixed": i if i % 3 else f"text {i}",
                    "it's": "quoted key" if i < 3 else "other",
                    **({"note": ""} if i == 4 else {}),
                    **({"note": []} if i == 5 else {}),
                    **({"note": "kept"} if i == 6 else {}),
                },
                embedding=[1.0, float(i), 0.5, -1.0 if tenant == "acme" else 1.0],
            )
            node.relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id=_doc_id(label))
            nodes.append(node)
    return nodes


@pytest.fixture(scope="module")
def table(pg_server: PgServer):
    name = pg_server.table_name("hostile")
    store = pgvector_store(**pg_server.params(), table_name=name, embed_dim=DIM, hybrid_search=True)
    nodes = _nodes(store.table_name)
    store.add(nodes)
    store.client.dispose()
    return name, nodes


@pytest.fixture
def store(pg_server: PgServer, table):
    store = pgvector_store(**pg_server.params(), table_name=table[0], embed_dim=DIM, hybrid_search=True)
    yield store
    if store.client is not None:  # connected
        store.client.dispose()


@pytest.fixture(scope="module")
def jsonb_store(pg_server: PgServer, table):
    """The same rows in a table whose metadata column is JSONB (``use_jsonb=True``)."""
    store = pgvector_store(
        **pg_server.params(), table_name=pg_server.table_name("hostile_jsonb"), embed_dim=DIM, use_jsonb=True
    )
    store.add(_nodes(store.table_name))
    yield store
    store.client.dispose()


@pytest.fixture
def sql_sent(store) -> list[str]:
    """The SQL text of every statement the store sends (parameters excluded)."""
    statements: list[str] = []

    def capture(conn, cursor, statement, parameters, context, executemany):
        statements.append(statement)

    store._initialize()
    event.listen(store.client, "before_cursor_execute", capture)
    yield statements
    event.remove(store.client, "before_cursor_execute", capture)


def _rows(pg_server: PgServer, store) -> int:
    return pg_server.execute(f"SELECT count(*) FROM data_{store.table_name}")[0][0]


def _query(filters: MetadataFilters, top_k: int = 1000) -> VectorStoreQuery:
    return VectorStoreQuery(query_embedding=[1.0, 0.0, 0.0, 0.0], similarity_top_k=top_k, filters=filters)


def _expected(nodes: list[TextNode], keep: Callable[[dict[str, Any]], bool]) -> list[str]:
    return sorted(n.node_id for n in nodes if keep(n.metadata))


def _leaf(key: str, value: Any, op: FilterOperator = OP.EQ) -> MetadataFilter:
    return MetadataFilter(key=key, value=value, operator=op)


def _ascii_upper(text: str) -> str:
    return "".join(c.upper() if c.isascii() else c for c in text)


# operator -> (filter value for a hostile value v, Python reading of the filter on one row)
LABEL_CASES: dict[str, Callable[[str], tuple]] = {
    "eq": lambda v: (_leaf("label", v), lambda m: m["label"] == v),
    "ne": lambda v: (_leaf("label", v, OP.NE), lambda m: m["label"] != v),
    "in": lambda v: (_leaf("label", [v, "absent"], OP.IN), lambda m: m["label"] in (v, "absent")),
    "nin": lambda v: (_leaf("label", [v, "absent"], OP.NIN), lambda m: m["label"] not in (v, "absent")),
    "text_match": lambda v: (_leaf("label", v[2:-2], OP.TEXT_MATCH), lambda m: v[2:-2] in m["label"]),
    # ASCII case only: how ILIKE folds other letters depends on the database's locale
    "text_match_insensitive": lambda v: (
        _leaf("label", _ascii_upper(v), OP.TEXT_MATCH_INSENSITIVE),
        lambda m: _ascii_upper(v) == _ascii_upper(m["label"]) or v in m["label"],
    ),
    "contains": lambda v: (_leaf("tags", v, OP.CONTAINS), lambda m: v in m["tags"]),
    "any": lambda v: (_leaf("tags", [v, "absent"], OP.ANY), lambda m: v in m["tags"]),
    "all": lambda v: (_leaf("tags", [v, "common"], OP.ALL), lambda m: v in m["tags"]),
    # >= v AND <= v is v itself in any collation, so the expected rows need no collation
    "range": lambda v: (
        MetadataFilters(filters=[_leaf("label", v, OP.GTE), _leaf("label", v, OP.LTE)]),
        lambda m: m["label"] == v,
    ),
}


def _label_case(case: str, index: int, table_name: str):
    value = HOSTILE[index].format(table=table_name)
    leaf, keep = LABEL_CASES[case](value)
    return value, leaf, keep


@pytest.mark.parametrize("case", list(LABEL_CASES))
@pytest.mark.parametrize("index", range(len(HOSTILE)))
def test_hostile_value_selects_exactly_its_rows_and_changes_nothing(pg_server, table, store, sql_sent, case, index):
    _, nodes = table
    value, leaf, keep = _label_case(case, index, store.table_name)
    before = _rows(pg_server, store)
    acme = _leaf("tenant", "acme")
    # alone, and ANDed with a tenant that an injected OR would cancel
    for filters, wanted in (
        (MetadataFilters(filters=[leaf]), keep),
        (MetadataFilters(filters=[acme, leaf]), lambda m, keep=keep: m["tenant"] == "acme" and keep(m)),
    ):
        got = store.query(_query(filters))
        assert sorted(got.ids) == _expected(nodes, wanted)
        assert sorted(n.node_id for n in store.get_nodes(filters=filters)) == _expected(nodes, wanted)
    assert _rows(pg_server, store) == before == len(nodes)
    assert all(n.metadata["tenant"] == "acme" for n in got.nodes)
    # the value reached the server as a parameter, never as SQL text
    assert sql_sent and not [s for s in sql_sent if value in s]


async def test_async_filters_return_what_sync_filters_return(pg_server, table, store):
    _, nodes = table
    try:
        for case in LABEL_CASES:
            for index in range(len(HOSTILE)):
                _, leaf, keep = _label_case(case, index, store.table_name)
                filters = MetadataFilters(filters=[_leaf("tenant", "acme"), leaf])
                got = await store.aquery(_query(filters))
                assert sorted(got.ids) == sorted(store.query(_query(filters)).ids), (case, index)
                assert sorted(got.ids) == _expected(nodes, lambda m, keep=keep: m["tenant"] == "acme" and keep(m))
                fetched = await store.aget_nodes(filters=filters)
                assert sorted(n.node_id for n in fetched) == sorted(got.ids)
    finally:
        await store.close()
    assert _rows(pg_server, store) == len(nodes)


def _tree(condition: str, *items) -> MetadataFilters:
    return MetadataFilters(filters=list(items), condition=FilterCondition(condition))


INJECT = HOSTILE[4]
TREE_CASES = {
    "numeric comparisons": (
        _tree("and", _leaf("n", 3, OP.GT), _leaf("n", 9.5, OP.LTE)),
        lambda m: 3 < m["n"] <= 9.5,
    ),
    "gte and lt": (_tree("and", _leaf("n", 15, OP.GTE), _leaf("n", 100, OP.LT)), lambda m: 15 <= m["n"] < 100),
    "numbers in and nin": (
        _tree("and", _leaf("n", [1, 2, 3, 4], OP.IN), _leaf("n", [2], OP.NIN)),
        lambda m: m["n"] in (1, 3, 4),
    ),
    "or across keys": (
        _tree("or", _leaf("label", HOSTILE[2]), _leaf("n", 1)),
        lambda m: m["label"] == HOSTILE[2] or m["n"] == 1,
    ),
    "injected or inside and inside or": (
        _tree("or", _tree("and", _leaf("tenant", "globex"), _leaf("label", "en' OR '1'='1")), _leaf("n", 0)),
        lambda m: m["n"] == 0,
    ),
    "not": (
        _tree("not", _leaf("tenant", "acme"), _leaf("n", 5, OP.LT)),
        lambda m: not (m["tenant"] == "acme" or m["n"] < 5),
    ),
    # a number compared on a key holding text in other rows (upstream: cast error)
    "number on a mixed key": (
        _tree("and", _leaf("mixed", 4, OP.GT)),
        lambda m: isinstance(m["mixed"], int) and m["mixed"] > 4,
    ),
    "text on a mixed key": (_tree("and", _leaf("mixed", "text 3")), lambda m: m["mixed"] == "text 3"),
    # a string that parses as a number is compared as text (upstream: a numeric cast of
    # every row, which fails on the rows holding text)
    "numeric-looking string": (_tree("and", _leaf("mixed", "4")), lambda m: str(m["mixed"]) == "4"),
    "ne keeps rows without the key": (_tree("and", _leaf("note", "kept", OP.NE)), lambda m: m.get("note") != "kept"),
    "is_empty": (
        _tree("and", _leaf("note", None, OP.IS_EMPTY)),
        lambda m: m.get("note") in (None, "", []),
    ),
    "quoted key": (_tree("and", _leaf("it's", "quoted key")), lambda m: m["it's"] == "quoted key"),
    "hostile key": (_tree("and", _leaf("label' OR '1'='1", "x")), lambda m: False),
    "hostile key ne": (_tree("and", _leaf("x'; DELETE FROM {table}; --", "x", OP.NE)), lambda m: True),
    "like wildcards are literal": (
        _tree("and", _leaf("label", "%", OP.TEXT_MATCH), _leaf("tenant", "acme")),
        lambda m: "%" in m["label"] and m["tenant"] == "acme",
    ),
    "routed document ids": (
        _tree("and", _leaf("ref_doc_id", [HOSTILE[1], INJECT.format(table="t")], OP.IN)),
        lambda m: m["label"] == HOSTILE[1],
    ),
    "empty tree": (MetadataFilters(filters=[]), lambda m: True),
}


def _formatted(filters: MetadataFilters, table_name: str) -> MetadataFilters:
    """``filters`` with ``{table}`` in keys and values replaced by the real table name."""
    items = []
    for item in filters.filters:
        if isinstance(item, MetadataFilters):
            items.append(_formatted(item, table_name))
        else:
            value = item.value.format(table=table_name) if isinstance(item.value, str) else item.value
            items.append(MetadataFilter(key=item.key.format(table=table_name), value=value, operator=item.operator))
    return MetadataFilters(filters=items, condition=filters.condition)


@pytest.mark.parametrize("case", list(TREE_CASES))
@pytest.mark.parametrize("column", ["json", "jsonb"])
async def test_operators_and_nested_trees_match_python_sync_and_async(pg_server, request, column, case):
    store = request.getfixturevalue("store" if column == "json" else "jsonb_store")
    nodes = _nodes(store.table_name)
    filters, keep = TREE_CASES[case]
    filters = _formatted(filters, store.table_name)
    expected = _expected(nodes, keep)
    try:
        assert sorted(store.query(_query(filters)).ids) == expected
        assert sorted((await store.aquery(_query(filters))).ids) == expected
    finally:
        await store.close()
    assert _rows(pg_server, store) == len(nodes)


BAD_FILTERS = {
    "nul in value": (_leaf("label", "bad\x00value"), r"filter 'label' value 'bad\\x00value' contains a NUL"),
    "nul in list value": (_leaf("label", ["ok", "x\x00"], OP.IN), "contains a NUL character"),
    "nul in key": (_leaf("la\x00bel", "x"), r"filter key 'la\\x00bel' contains a NUL"),
    "lone surrogate": (_leaf("label", "bee\ud800"), "lone surrogate at position 3"),
    "nul after 100 kB": (
        _leaf("label", "a" * 100_000 + "\x00"),
        r"'aaa.*\.\.\..*a\\x00' contains a NUL character \(\\x00\) at position 100000",
    ),
    "none": (_leaf("label", None), "use the operator 'is_empty'"),
    "nan": (_leaf("n", float("nan"), OP.GT), "pass a finite number"),
    "in without a list": (_leaf("label", "x", OP.IN), r"takes a list of values, e.g. \['x'\]"),
    "text match on a number": (_leaf("label", 5, OP.TEXT_MATCH), "its value must be a string"),
}


@pytest.mark.parametrize("case", list(BAD_FILTERS))
async def test_values_postgres_cannot_hold_are_a_clear_filter_error(pg_server, table, store, case):
    leaf, message = BAD_FILTERS[case]
    filters = MetadataFilters(filters=[_leaf("tenant", "acme"), leaf])
    for call in (
        lambda: store.query(_query(filters)),
        lambda: store.get_nodes(filters=filters),
        lambda: store.delete_nodes(filters=filters),
    ):
        with pytest.raises(FilterError, match=message) as caught:
            call()
        assert len(str(caught.value)) < 500  # a long value is shown by its ends
    with pytest.raises(FilterError, match=message):
        await store.aquery(_query(filters))
    await store.close()
    assert _rows(pg_server, store) == len(table[1])


def test_bad_ids_are_a_clear_error_naming_them(store):
    with pytest.raises(FilterError, match=r"node id 'a\\x00b' contains a NUL"):
        store.get_nodes(node_ids=["ok", "a\x00b"])
    with pytest.raises(FilterError, match=r"node id 'a\\x00b' contains a NUL"):
        store.delete_nodes(node_ids=["a\x00b"])
    with pytest.raises(FilterError, match="document id 5 must be a string, got int"):
        store.delete(5)


TS_QUERIES = [
    "honey's & bees",
    "honey | !bees",
    "(honey) <-> bees:*",
    "honey\\ 'bees' \"x\"",
    "honey: %s %(x)s :1",
    "honey'; DELETE FROM t; --",
    "honey \x00 bees",
    "honey \ud800 bees",
    "honey ünïcödé 🐝",
]


@pytest.mark.parametrize("query_str", TS_QUERIES)
async def test_text_search_takes_any_query_text(pg_server, table, store, query_str):
    _, nodes = table
    query = VectorStoreQuery(
        query_str=query_str,
        similarity_top_k=100,
        mode=VectorStoreQueryMode.TEXT_SEARCH,
        filters=MetadataFilters(filters=[_leaf("tenant", "acme"), _leaf("label", HOSTILE[3], OP.NE)]),
    )
    # the honey rows of acme (odd positions) but the one labelled with the injected OR
    expected = _expected(nodes, lambda m: m["n"] % 2 == 1 and m["tenant"] == "acme" and m["label"] != HOSTILE[3])
    try:
        assert sorted(store.query(query).ids) == expected
        assert sorted((await store.aquery(query)).ids) == expected
    finally:
        await store.close()
    assert _rows(pg_server, store) == len(nodes)


@pytest.mark.parametrize("index", [0, 1, 3, 4, 11, 16])
def test_delete_by_hostile_document_id_or_filter_removes_exactly_its_rows(pg_server, index):
    name = pg_server.table_name("hostile_delete")
    store = pgvector_store(**pg_server.params(), table_name=name, embed_dim=DIM)
    nodes = _nodes(store.table_name)
    store.add(nodes)
    value = HOSTILE[index].format(table=store.table_name)
    try:
        store.delete(_doc_id(value))
        assert _rows(pg_server, store) == len(nodes) - 1
        store.delete_nodes(filters=MetadataFilters(filters=[_leaf("label", f"globex {index}")]))
        store.delete_nodes(node_ids=[value, f"acme-{index}"])  # one hostile id, one deleted already
        remaining = sorted(n.node_id for n in store.get_nodes(filters=MetadataFilters(filters=[])))
        assert remaining == sorted(n.node_id for n in nodes if n.metadata["n"] != index)
    finally:
        store.client.dispose()


HOSTILE_TOPICS = {
    "bumble's-dance": (
        "Honeybees",
        "biology",
        2019,
        [
            "The queen bee lays eggs in the hive all summer.",
            "Worker bees collect nectar and pollen from flowers.",
        ],
    ),
    "x'; DELETE FROM {table}; SELECT 1 WHERE '1'='0": (
        "Solar panels",
        "energy's",
        2023,
        [
            "Solar panels convert sunlight into electricity with photovoltaic cells.",
            "An inverter turns direct current from panels into alternating current.",
        ],
    ),
    "en' OR '1'='1 :draft": (
        "Sourdough",
        "food",
        2021,
        [
            "A sourdough starter is flour and water fermented by wild yeast.",
            "Bake the bread in a hot covered pot to trap steam.",
        ],
    ),
}


async def test_recursive_retriever_routes_hostile_document_ids_as_the_in_memory_one(pg_server, lexical):
    chunks, summaries = (
        pgvector_store(**pg_server.params(), table_name=pg_server.table_name(name), embed_dim=64)
        for name in ("hostile_chunks", "hostile_summaries")
    )
    topics = {key.format(table=f"data_{chunks.table_name}"): value for key, value in HOSTILE_TOPICS.items()}
    # 'warn': a filter key the index does not hold still reaches the store
    reference = RecursiveSummaryRetriever.from_nodes(
        topic_nodes(topics), embed_model=lexical, unknown_filter_key="warn"
    )
    on_pg = RecursiveSummaryRetriever.from_nodes(
        topic_nodes(topics),
        embed_model=lexical,
        chunk_vector_store=chunks,
        summary_vector_store=summaries,
        unknown_filter_key="warn",
    )
    try:
        for query in (
            "the queen bee lays eggs",
            "inverter direct current",
            FilteredQueryBundle("panels electricity", filters={"category": "energy's"}),
            FilteredQueryBundle("bread", filters={"doc_id": "en' OR '1'='1 :draft"}),
            FilteredQueryBundle("bees", filters={"x' OR '1'='1": "y", "category": {"op": "!=", "value": "x'--"}}),
        ):
            expected = reference.retrieve(query)
            # nothing holds the hostile key: no rows, where an injected OR would return all
            assert bool(expected) == ("x' OR '1'='1" not in str(getattr(query, "filters", "")))
            got = on_pg.retrieve(query)
            assert [h.node.node_id for h in got] == [h.node.node_id for h in expected]
            assert [h.node.node_id for h in await on_pg.aretrieve(query)] == [h.node.node_id for h in got]
    finally:
        await chunks.close()
        await summaries.close()
    assert _rows(pg_server, chunks) == 6


@pytest.mark.parametrize(
    "setting, value, error, message",
    [
        ("table_name", "t; DROP TABLE x", ValueError, "table_name must be a plain SQL identifier"),
        ("table_name", "chunks'", ValueError, "table_name must be a plain SQL identifier"),
        ("schema_name", "public.x", ValueError, "schema_name must be a plain SQL identifier"),
        ("text_search_config", "english') --", ValueError, "text_search_config must be a plain SQL"),
        ("hnsw", {"hnsw_dist_method": "vector_cosine_ops); DROP TABLE x; --"}, ValueError, "hnsw_dist_method"),
        ("hnsw", {"hnsw_m": "16) WITH (x"}, TypeError, "hnsw_m must be an integer"),
        ("hnsw", {"hnsw_ef_search": 0}, ValueError, "hnsw_ef_search must be >= 1, got 0"),
        # upstream logged the failed CREATE TABLE, then every call failed: "relation does not exist"
        ("table_name", "t" * 45, ValueError, f"make the name 'data_{'t' * 45}_embedding_idx', 64 characters"),
        ("indexed_metadata_keys", {("k" * 60, "text")}, ValueError, "PostgreSQL names hold at most 63"),
        ("max_text_query_words", 0, ValueError, "max_text_query_words must be >= 1, got 0"),
    ],
)
def test_names_and_settings_written_into_ddl_are_checked(pg_server, setting, value, error, message):
    kwargs = {"table_name": "ok", setting: value}
    with pytest.raises(error, match=message):
        pgvector_store(**pg_server.params(), embed_dim=DIM, **kwargs)


def test_query_time_ef_search_is_checked(store):
    query = _query(MetadataFilters(filters=[]))
    with pytest.raises(TypeError, match="hnsw_ef_search must be an integer"):
        store.query(query, hnsw_ef_search="40; DROP TABLE x")
    with pytest.raises(TypeError, match="ivfflat_probes must be an integer"):
        store.query(query, ivfflat_probes="1'; DROP TABLE x; --")
    assert store.query(query, hnsw_ef_search=80).ids


# ------------------------------------------------------- node_ids and doc_ids

SCOPES = {
    # hostile document ids: only acme's rows carry them (globex's documents are "globex i")
    "doc ids": (dict(doc_ids=[HOSTILE[1], HOSTILE[3], "absent"]), lambda n: n.metadata["label"] in HOSTILE[1:4:2]),
    "node ids": (dict(node_ids=["globex-2", "acme-5", "' OR '1'='1"]), lambda n: n.node_id in ("globex-2", "acme-5")),
    "both": (dict(doc_ids=[HOSTILE[1]], node_ids=["acme-1", "acme-2"]), lambda n: n.node_id == "acme-1"),
    # as_retriever passes node_ids=[] for a store holding the text, meaning every node
    "empty lists": (dict(doc_ids=[], node_ids=[]), lambda n: True),
}
MODES = {
    "default": dict(query_embedding=[1.0, 0.0, 0.0, 0.0]),
    "text_search": dict(query_str="honey electricity", mode=VectorStoreQueryMode.TEXT_SEARCH),
    "hybrid": dict(
        query_str="honey electricity", query_embedding=[1.0, 0.0, 0.0, 0.0], mode=VectorStoreQueryMode.HYBRID
    ),
    "mmr": dict(query_embedding=[1.0, 0.0, 0.0, 0.0], mode=VectorStoreQueryMode.MMR),
}


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("scope", list(SCOPES))
async def test_query_keeps_to_its_node_ids_and_doc_ids_sync_and_async(pg_server, table, store, sql_sent, scope, mode):
    """Upstream ignored both, so a retriever scoped to some documents got every tenant's rows."""
    _, nodes = table
    ids, keep = SCOPES[scope]
    query = VectorStoreQuery(similarity_top_k=100, **ids, **MODES[mode])
    expected = sorted(n.node_id for n in nodes if keep(n))
    try:
        assert sorted(store.query(query).ids) == expected
        assert sorted((await store.aquery(query)).ids) == expected
        # with filters too: the scope and the filters both hold
        acme = dataclasses.replace(query, filters=MetadataFilters(filters=[_leaf("tenant", "acme")]))
        assert sorted(store.query(acme).ids) == [i for i in expected if i.startswith("acme")]
    finally:
        await store.close()
    assert _rows(pg_server, store) == len(nodes)
    assert not [s for s in sql_sent if "OR '1'='1" in s or "bumble" in s]


async def test_retriever_scoped_to_documents_returns_only_theirs(table, store):
    index = VectorStoreIndex.from_vector_store(store, embed_model=MockEmbedding(embed_dim=DIM))
    retriever = index.as_retriever(similarity_top_k=100, doc_ids=[HOSTILE[0], HOSTILE[1]])
    expected = ["acme-0", "acme-1"]
    try:
        assert sorted(h.node.node_id for h in retriever.retrieve("anything")) == expected
        assert sorted(h.node.node_id for h in await retriever.aretrieve("anything")) == expected
        assert len(index.as_retriever(similarity_top_k=100).retrieve("anything")) == len(table[1])
    finally:
        await store.close()


async def test_an_empty_id_list_is_no_node_and_a_string_is_refused(pg_server, table, store):
    _, nodes = table
    acme = MetadataFilters(filters=[_leaf("tenant", "acme")])
    try:
        assert store.get_nodes(node_ids=[]) == [] == await store.aget_nodes(node_ids=[], filters=acme)
        store.delete_nodes(node_ids=[], filters=acme)  # upstream: deleted every acme row
        await store.adelete_nodes(node_ids=[], filters=acme)
        assert _rows(pg_server, store) == len(nodes)
        for call in (
            lambda: store.delete_nodes(node_ids="acme-1"),
            lambda: store.get_nodes(node_ids="acme-1"),
            lambda: store.query(VectorStoreQuery(query_embedding=[1.0, 0, 0, 0], node_ids="acme-1")),
        ):
            with pytest.raises(
                FilterError, match=r"node ids must be a list of ids, got the string 'acme-1': pass \['acme-1'\]"
            ):
                call()
        with pytest.raises(FilterError, match=r"document id 7 must be a string, got int"):
            store.query(VectorStoreQuery(query_embedding=[1.0, 0, 0, 0], doc_ids=["ok", 7]))
    finally:
        await store.close()
    assert _rows(pg_server, store) == len(nodes)


@pytest.mark.parametrize("top_k, error", [(-1, ValueError), (1.5, TypeError), ("5", TypeError)])
def test_a_top_k_the_server_would_refuse_is_a_clear_error(store, top_k, error):
    with pytest.raises(error, match="similarity_top_k must be"):
        store.query(VectorStoreQuery(query_embedding=[1.0, 0, 0, 0], similarity_top_k=top_k))
    with pytest.raises(error, match="sparse_top_k must be"):
        store.query(VectorStoreQuery(query_str="honey", mode=VectorStoreQueryMode.TEXT_SEARCH, sparse_top_k=top_k))
    assert store.query(VectorStoreQuery(query_embedding=[1.0, 0, 0, 0], similarity_top_k=0)).ids == []


# ---------------------------------------------------------- long text queries

LONG_QUERIES = {
    # ~100 kB each; upstream chained the words and the server's stack overflowed
    "one word repeated": "honey " * 17_000,
    "distinct words": "honey " + " ".join(f"w{i}x" for i in range(17_000)),
    "operators between words": "honey " + " & ".join(f"!w{i}:*" for i in range(12_000)),
}


@pytest.mark.parametrize("case", list(LONG_QUERIES))
async def test_a_100_kb_text_query_ranks_as_its_distinct_words_do(pg_server, table, store, case):
    """The balanced tree: no stack overflow at any length, once the word limit allows it."""
    unlimited = pgvector_store(
        **pg_server.params(), table_name=table[0], embed_dim=DIM, hybrid_search=True, max_text_query_words=20_000
    )
    short = VectorStoreQuery(query_str="honey", similarity_top_k=100, mode=VectorStoreQueryMode.TEXT_SEARCH)
    long = dataclasses.replace(short, query_str=LONG_QUERIES[case])
    assert len(long.query_str) > 90_000
    expected = store.query(short)
    assert sorted(expected.ids) == sorted(n.node_id for n in table[1] if n.metadata["n"] % 2)
    try:
        for got in (unlimited.query(long), await unlimited.aquery(long)):
            assert sorted(got.ids) == sorted(expected.ids)
            if case == "one word repeated":  # the same tsquery, so the same ts_rank
                # (asyncpg reads a real at full float32 precision, psycopg2 its shortest text form)
                assert got.similarities == pytest.approx(expected.similarities, rel=1e-6)
    finally:
        await unlimited.close()


@pytest.mark.parametrize("mode", [VectorStoreQueryMode.TEXT_SEARCH, VectorStoreQueryMode.HYBRID])
async def test_a_text_query_of_more_distinct_words_than_the_limit_is_refused(table, store, mode):
    """Each word costs a lookup in every matching row: 16,000 of them held a connection past 30 s."""

    def query(text: str) -> VectorStoreQuery:
        return VectorStoreQuery(query_str=text, query_embedding=[1.0, 0, 0, 0], similarity_top_k=100, mode=mode)

    at_limit = query("honey " + " ".join(f"w{i}x" for i in range(255)) + " honey")
    over = query(LONG_QUERIES["distinct words"])
    message = r"the text search query has 17,001 distinct words \('honey w0x.*'\); at most 256 are searched"
    try:
        assert "acme-1" in store.query(at_limit).ids
        assert "acme-1" in (await store.aquery(at_limit)).ids
        assert "acme-1" in store.query(query(LONG_QUERIES["one word repeated"])).ids  # one distinct word
        with pytest.raises(TextQueryTooLongError, match=message):
            store.query(over)
        with pytest.raises(TextQueryTooLongError, match="max_text_query_words"):
            await store.aquery(over)
    finally:
        await store.close()


def test_text_search_ranks_as_upstream_does(pg_server, table, store):
    """The balanced OR tree ranks exactly as upstream's chain of the same words."""
    plain = PGVectorStore.from_params(**pg_server.params(), table_name=table[0], embed_dim=DIM, hybrid_search=True)
    try:
        for text in ("worker bees honey", "solar panels make honey electricity acme globex", "bees bees make"):
            query = VectorStoreQuery(query_str=text, similarity_top_k=100, mode=VectorStoreQueryMode.TEXT_SEARCH)
            ours, theirs = store.query(query), plain.query(query)
            assert ours.ids and sorted(zip(ours.ids, ours.similarities)) == sorted(zip(theirs.ids, theirs.similarities))
    finally:
        plain.client.dispose()


# ------------------------------------------------------------ adding nodes


def _bad_node(**fields) -> TextNode:
    node = TextNode(id_=fields.pop("id_", "bad"), text=fields.pop("text", "fine"), embedding=[1.0, 0.0, 0.0, 0.0])
    node.metadata = fields.pop("metadata", {})
    if "doc" in fields:
        node.relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id=fields.pop("doc"))
    return node


UNSTORABLE = {
    "nul in text": (
        _bad_node(text="bee\x00hive"),
        r"node 'bad': text 'bee\\x00hive' contains a NUL character \(\\x00\) at position 3",
    ),
    "nul in id": (_bad_node(id_="b\x00d"), r"node 'b\\x00d': id 'b\\x00d' contains a NUL"),
    "nul in document id": (_bad_node(doc="doc\x00"), r"node 'bad': document id 'doc\\x00' contains a NUL"),
    "nul in metadata value": (
        _bad_node(metadata={"k": "v\x00"}),
        r"node 'bad': metadata\['k'\] 'v\\x00' contains a NUL",
    ),
    "nul in metadata key": (_bad_node(metadata={"k\x00": 1}), r"node 'bad': metadata key 'k\\x00' contains a NUL"),
    "nul in a nested list": (
        _bad_node(metadata={"tags": ["ok", {"deep": "x\x00"}]}),
        r"node 'bad': metadata\['tags'\]\[1\]\['deep'\] 'x\\x00' contains a NUL",
    ),
    "surrogate in text": (
        _bad_node(text="bee\ud800"),
        r"node 'bad': text 'bee\\ud800' is not valid Unicode \(a lone surrogate at position 3\)",
    ),
    "surrogate in metadata": (
        _bad_node(metadata={"k": "\udcff"}),
        r"node 'bad': metadata\['k'\] .* lone surrogate at position 0",
    ),
}


@pytest.mark.parametrize("case", list(UNSTORABLE))
async def test_a_node_postgres_cannot_store_is_named_and_nothing_is_added(pg_server, table, store, case):
    bad, message = UNSTORABLE[case]
    good = _bad_node(id_="good-before-bad")
    with pytest.raises(UnstorableNodeError, match=message):
        store.add([good, bad])
    try:
        with pytest.raises(UnstorableNodeError, match=message):
            await store.async_add([good, bad])
    finally:
        await store.close()
    assert _rows(pg_server, store) == len(table[1])  # the batch is one transaction


def test_hostile_indexed_metadata_keys_are_quoted_in_ddl(pg_server):
    """PGVectorStore writes indexed keys into CREATE INDEX; SQLAlchemy quotes them as literals."""
    pg_server.execute("CREATE TABLE IF NOT EXISTS victim (i int)")
    keys = ["it's %s :x", "x')); DROP TABLE victim; --"]
    store = pgvector_store(
        **pg_server.params(),
        table_name=pg_server.table_name("ddl"),
        embed_dim=DIM,
        indexed_metadata_keys={(k, "text") for k in keys} | {(keys[1], "text[]")},
    )
    try:
        store.add([_bad_node(id_="n", metadata={keys[0]: "a'b", keys[1]: ["v"]})])
        for key, value, op in ((keys[0], "a'b", OP.EQ), (keys[1], "v", OP.CONTAINS)):
            filters = MetadataFilters(filters=[_leaf(key, value, op)])
            assert store.query(_query(filters)).ids == ["n"]
        indexes = pg_server.execute(f"SELECT indexname FROM pg_indexes WHERE tablename = 'data_{store.table_name}'")
        assert sorted(sum(key in row[0] for row in indexes) for key in keys) == [1, 2]
        assert _rows(pg_server, store) == 1
        assert pg_server.execute("SELECT count(*) FROM victim") == [(0,)]
    finally:
        store.client.dispose()
