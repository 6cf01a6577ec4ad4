"""Filter evaluation, merging and relaxation (pure logic)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from llama_index.core.vector_stores.types import (
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
)

from llama_index_ext_recursive.filters import (
    FilterPolicy,
    apply_policy,
    merge_filters,
    metadata_matches,
    relax_to_keys,
    to_filters,
)

F = MetadataFilter
OR, AND, NOT = FilterCondition.OR, FilterCondition.AND, FilterCondition.NOT


def test_mapping_shorthand():
    filters = to_filters({"year": 2024, "lang": ["en", "zh"]})
    assert [(f.key, f.operator, f.value) for f in filters.filters] == [
        ("year", FilterOperator.EQ, 2024),
        ("lang", FilterOperator.IN, ["en", "zh"]),
    ]


def test_nested_evaluation():
    tree = MetadataFilters(
        filters=[
            F(key="year", value=2020, operator=FilterOperator.GTE),
            MetadataFilters(condition=OR, filters=[F(key="lang", value="en"), F(key="lang", value="zh")]),
            MetadataFilters(condition=NOT, filters=[F(key="draft", value=1)]),
        ]
    )
    assert metadata_matches(tree, {"year": 2021, "lang": "zh"})
    assert not metadata_matches(tree, {"year": 2021, "lang": "fr"})
    assert not metadata_matches(tree, {"year": 2019, "lang": "en"})
    assert not metadata_matches(tree, {"year": 2021, "lang": "en", "draft": 1})


def test_merge_and_policy():
    a = to_filters({"x": 1})
    b = MetadataFilters(condition=OR, filters=[F(key="y", value=1), F(key="y", value=2)])
    merged = merge_filters(a, None, b)
    assert merged.condition == AND and merged.filters[0].key == "x" and merged.filters[1] is b
    assert apply_policy(a, b, FilterPolicy.REPLACE) is b
    assert apply_policy(a, None, FilterPolicy.REPLACE) is a
    assert merge_filters(None, MetadataFilters(filters=[])) is None


def test_relaxation_keeps_document_keys_only():
    tree = MetadataFilters(filters=[F(key="cat", value="a"), F(key="section", value="s")])
    assert [f.key for f in relax_to_keys(tree, {"cat"}).filters] == ["cat"]
    mixed_or = MetadataFilters(condition=OR, filters=[F(key="cat", value="a"), F(key="section", value="s")])
    assert relax_to_keys(mixed_or, {"cat"}) is None
    mixed_not = MetadataFilters(condition=NOT, filters=[F(key="section", value="s")])
    assert relax_to_keys(mixed_not, {"cat"}) is None


values = st.sampled_from(["a", "b", "c"])
leaves = st.builds(lambda k, v: F(key=k, value=v), st.sampled_from(["cat", "section"]), values)
trees = st.recursive(
    st.builds(
        lambda fs, c: MetadataFilters(filters=fs, condition=c),
        st.lists(leaves, min_size=1, max_size=3),
        st.sampled_from([AND, OR, NOT]),
    ),
    lambda inner: st.builds(
        lambda fs, c: MetadataFilters(filters=fs, condition=c),
        st.lists(st.one_of(leaves, inner), min_size=1, max_size=3),
        st.sampled_from([AND, OR, NOT]),
    ),
    max_leaves=6,
)


@given(trees, values, values)
def test_relaxation_never_excludes_a_match(tree, cat, section):
    """Summaries are pre-filtered with the relaxation: it must admit every true match."""
    metadata = {"cat": cat, "section": section}
    if metadata_matches(tree, metadata):
        assert metadata_matches(relax_to_keys(tree, {"cat"}), {"cat": cat})
