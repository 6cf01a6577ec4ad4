"""Hostile and ordinary-but-awkward filter values on the real PostgreSQL store (issue 23).

Every value and key reaches SQL as a bound parameter: a value that looks like SQL
is only ever compared, the table is never changed by a query, and one tenant's
filter never returns another tenant's rows.
"""

from __future__ import annotations

import asyncio
from typing import List

import numpy as np
import pytest
from llama_index.core import VectorStoreIndex
from llama_index.core.schema import TextNode
from llama_index.core.vector_stores.types import (
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryMode,
)

from llama_index_ext_recursive import BackfillVectorRetriever, FilteredQueryBundle
from llama_index_ext_recursive.stores.pg_filters import PostgresFilterError
from llama_index_ext_recursive.stores.postgres import pgvector_store
from test_postgres import NoEmbedding, _dispose

DIM = 8

# values that are SQL, bind-parameter or LIKE syntax, or just awkward text; each is
# stored as one row's "category", so equality must find exactly that row
HOSTILE = [
    "children's books",
    "en' OR '1'='1",
    "x'; DELETE FROM {table}; SELECT 1 WHERE '1'='0",
    "x'); DROP TABLE {table}; --",
    "value :draft",
    ":1",
    "%s",
    "%(x)s",
    "50%_off",
    "C:\\docs\\new",
    "back\\'slash",
    '"double" quotes',
    "数据 ü ☃",
    "$$dollar$$",
    "-- comment",
    "a" * 100_000,
]


def _vector(i: int) -> List[float]:
    v = np.random.default_rng(i).normal(size=DIM)
    return (v / np.linalg.norm(v)).tolist()


@pytest.fixture(scope="module")
def tenant_table(pg_server):
    """Rows of two tenants; acme's categories are the hostile strings."""
    name = pg_server.table_name("tenants")
    table = f"data_{name}"
    nodes = [
        TextNode(
            id_=f"acme-{i}",
            text=f"acme row {i} about bees and honey",
            metadata={"tenant": "acme", "category": value.format(table=table), "year": 2000 + i,
                      "tags": ["public", value.format(table=table)], "draft": i % 2 == 0},
            embedding=_vector(i),
        )
        for i, value in enumerate(HOSTILE)
    ]
    nodes.append(TextNode(id_="globex-0", text="globex secret about bees", embedding=_vector(99),
                          metadata={"tenant": "globex", "category": "secret", "year": 2001,
                                    "tags": ["public"], "draft": False}))
    nodes.append(TextNode(id_="bumble's-dance", text="a waggle dance of bees", embedding=_vector(98),
                          metadata={"tenant": "acme", "category": "dance", "year": 1990, "tags": [],
                                    "draft": True, "doc_id": "bumble's-dance"}))
    store = pgvector_store(**pg_server.params(), table_name=name, embed_dim=DIM, hybrid_search=True)
    store.add(nodes)
    yield store, table, nodes
    _dispose(store)


def _count(pg_server, table: str) -> int:
    return pg_server.execute(f"SELECT count(*) FROM {table}")[0][0]


def _query(store, filters: MetadataFilters, mode=VectorStoreQueryMode.DEFAULT, query_str=None) -> List[str]:
    q = VectorStoreQuery(query_embedding=_vector(0), similarity_top_k=100, filters=filters, mode=mode,
                         query_str=query_str)
    sync = store.query(q)
    asynchronous = asyncio.run(store.aquery(q))
    assert sorted(sync.ids) == sorted(asynchronous.ids)
    return sorted(n.node_id for n in sync.nodes)


def _f(key, value, op=FilterOperator.EQ) -> MetadataFilter:
    return MetadataFilter(key=key, value=value, operator=op)


@pytest.mark.parametrize("position", range(len(HOSTILE)))
def test_equality_on_a_hostile_value_finds_exactly_its_row_and_changes_nothing(pg_server, tenant_table, position):
    store, table, nodes = tenant_table
    before = _count(pg_server, table)
    value = HOSTILE[position].format(table=table)
    assert _query(store, MetadataFilters(filters=[_f("category", value)])) == [f"acme-{position}"]
    # the other tenant is never returned: an injected OR would cancel the AND on tenant
    found = _query(store, MetadataFilters(filters=[_f("tenant", "globex"), _f("category", value)]))
    assert found == []
    for op, expected in [
        (FilterOperator.IN, [f"acme-{position}"]),
        (FilterOperator.CONTAINS, None),
        (FilterOperator.ANY, [f"acme-{position}"]),
        (FilterOperator.TEXT_MATCH, None),
    ]:
        if op == FilterOperator.CONTAINS:
            got = _query(store, MetadataFilters(filters=[_f("tags", value, op)]))
            assert got == [f"acme-{position}"], op
        elif op == FilterOperator.TEXT_MATCH:
            got = _query(store, MetadataFilters(filters=[_f("category", value, op)]))
            # a literal substring: every row holding it (the 100 kB row holds 'a' runs)
            assert f"acme-{position}" in got
            assert all(value in n.metadata["category"] for n in nodes if n.node_id in got)
        else:
            got = _query(store, MetadataFilters(filters=[_f("category" if op == FilterOperator.IN else "tags",
                                                            [value], op)]))
            assert got == expected, op
    assert _count(pg_server, table) == before


def test_not_in_and_not_equal_keep_every_other_row(pg_server, tenant_table):
    store, table, nodes = tenant_table
    value = HOSTILE[2].format(table=table)
    everyone = sorted(n.node_id for n in nodes)
    assert _query(store, MetadataFilters(filters=[_f("category", [value], FilterOperator.NIN)])) == sorted(
        set(everyone) - {"acme-2"}
    )
    assert _query(store, MetadataFilters(filters=[_f("category", value, FilterOperator.NE)])) == sorted(
        set(everyone) - {"acme-2"}
    )
    assert _count(pg_server, table) == len(nodes)


def test_numbers_bools_and_nested_conditions(tenant_table):
    store, _, nodes = tenant_table
    assert _query(store, MetadataFilters(filters=[_f("year", 2014, FilterOperator.GTE)])) == sorted(
        n.node_id for n in nodes if n.metadata["year"] >= 2014
    )
    assert _query(store, MetadataFilters(filters=[_f("year", [1990, 2003], FilterOperator.IN)])) == [
        "acme-3", "bumble's-dance"
    ]
    # a text value under a key compared as a number: no match, no cast error
    assert _query(store, MetadataFilters(filters=[_f("category", 5, FilterOperator.GT)])) == []
    nested = MetadataFilters(
        filters=[
            _f("tenant", "acme"),
            MetadataFilters(filters=[_f("year", 1990), _f("category", "en' OR '1'='1")],
                            condition=FilterCondition.OR),
        ]
    )
    assert _query(store, nested) == ["acme-1", "bumble's-dance"]
    negated = MetadataFilters(filters=[_f("tenant", "acme")], condition=FilterCondition.NOT)
    assert _query(store, negated) == ["globex-0"]
    assert _query(store, MetadataFilters(filters=[_f("category", [], FilterOperator.IN)])) == []


@pytest.mark.parametrize("key", ["tenant' OR '1'='1", "a'; DROP TABLE x; --", "k:draft", "clé"])
def test_hostile_keys_are_parameters(pg_server, tenant_table, key):
    store, table, nodes = tenant_table
    assert _query(store, MetadataFilters(filters=[_f(key, "acme")])) == []
    # through a retriever that lets unknown keys through with a warning
    index = VectorStoreIndex.from_vector_store(store, embed_model=NoEmbedding())
    retriever = BackfillVectorRetriever(index, 5, unknown_filter_key="warn")
    hits = retriever.retrieve(FilteredQueryBundle("bees", filters={key: "acme"}, embedding=_vector(0)))
    assert hits == []
    assert _count(pg_server, table) == len(nodes)


def test_a_nul_character_is_refused_by_name(tenant_table):
    store, _, _ = tenant_table
    with pytest.raises(PostgresFilterError, match="NUL"):
        _query(store, MetadataFilters(filters=[_f("category", "a\x00b")]))


@pytest.mark.parametrize("text", ["bees' OR 1=1", "bees & | ! ( ) : * \\ '", "waggle:* & !dance", "蜜蜂 bees"])
def test_text_search_with_tsquery_syntax_in_the_query(tenant_table, text):
    store, _, _ = tenant_table
    found = _query(store, MetadataFilters(filters=[_f("tenant", "acme")]),
                   mode=VectorStoreQueryMode.TEXT_SEARCH, query_str=text)
    assert found and "globex-0" not in found


def test_delete_and_get_nodes_with_hostile_values_touch_only_matching_rows(pg_server, pg_server_table_copy):
    store, table, nodes = pg_server_table_copy
    value = HOSTILE[2].format(table=table)
    assert [n.node_id for n in store.get_nodes(filters=MetadataFilters(filters=[_f("category", value)]))] == [
        "acme-2"
    ]
    assert [n.node_id for n in store.get_nodes(node_ids=["bumble's-dance"])] == ["bumble's-dance"]
    store.delete_nodes(filters=MetadataFilters(filters=[_f("category", "en' OR '1'='1")]))
    assert _count(pg_server, table) == len(nodes) - 1
    store.delete("bumble's-dance")  # ref_doc_id: none of the rows has one, nothing goes
    asyncio.run(store.adelete_nodes(node_ids=["bumble's-dance"]))
    assert _count(pg_server, table) == len(nodes) - 2


@pytest.fixture
def pg_server_table_copy(pg_server):
    """A table of its own for the deleting test."""
    name = pg_server.table_name("tenants_delete")
    table = f"data_{name}"
    nodes = [
        TextNode(id_=f"acme-{i}", text=f"row {i}", embedding=_vector(i),
                 metadata={"tenant": "acme", "category": value.format(table=table)})
        for i, value in enumerate(HOSTILE[:4])
    ]
    nodes.append(TextNode(id_="bumble's-dance", text="dance", embedding=_vector(9), metadata={"tenant": "acme"}))
    store = pgvector_store(**pg_server.params(), table_name=name, embed_dim=DIM)
    store.add(nodes)
    yield store, table, nodes
    _dispose(store)
