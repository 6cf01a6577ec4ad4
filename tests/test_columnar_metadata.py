"""columnar.metadata: a filter's row mask equals the package's filter algebra applied to each row's
metadata (nested trees, every operator, missing keys, lists, mixed types), through deletes,
compaction and persistence; values that are not JSON data are refused by name."""

import json
from unittest.mock import patch

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from llama_index.core.vector_stores.types import FilterCondition, FilterOperator, MetadataFilter, MetadataFilters

from llama_index_ext_recursive.columnar import metadata as metadata_module
from llama_index_ext_recursive.columnar.metadata import MetadataColumns
from llama_index_ext_recursive.filters import metadata_matcher
from llama_index_ext_recursive.persist import PersistError

KEYS = ("kind", "year", "tags", "score")
scalars = st.one_of(
    st.sampled_from(["a", "b", "abc", "", "B"]),
    st.integers(-3, 2030),
    st.sampled_from([1.5, 2.0, -0.5]),
    st.booleans(),
)
filter_scalars = st.one_of(  # a filter's value cannot be a bool (upstream's MetadataFilter type)
    st.sampled_from(["a", "b", "abc", "", "B"]), st.integers(-3, 2030), st.sampled_from([1.5, 2.0, -0.5])
)
values = st.one_of(scalars, st.lists(st.sampled_from(["a", "b", "c", 1, 2]), max_size=3), st.none())
metadatas = st.lists(st.dictionaries(st.sampled_from(KEYS), values, max_size=4), min_size=1, max_size=25)

LIST_OPERATORS = (FilterOperator.IN, FilterOperator.NIN, FilterOperator.ALL, FilterOperator.ANY)
leaves = st.builds(
    lambda key, operator, scalar, listed: MetadataFilter(
        key=key, operator=operator, value=listed if operator in LIST_OPERATORS else scalar
    ),
    st.sampled_from(KEYS),
    st.sampled_from(list(FilterOperator)),
    filter_scalars,
    st.one_of(  # lists of one type (upstream's MetadataFilter type)
        st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=3),
        st.lists(st.integers(0, 2030), min_size=1, max_size=3),
    ),
)
trees = st.recursive(
    st.builds(
        lambda items, c: MetadataFilters(filters=items, condition=c),
        st.lists(leaves, min_size=1, max_size=3),
        st.sampled_from(list(FilterCondition)),
    ),
    lambda inner: st.builds(
        lambda items, c: MetadataFilters(filters=items, condition=c),
        st.lists(st.one_of(leaves, inner), min_size=1, max_size=3),
        st.sampled_from(list(FilterCondition)),
    ),
    max_leaves=6,
)


def _expected(rows, filters, dead=()):
    match = metadata_matcher(filters)
    return np.array([row not in dead and match(metadata) for row, metadata in enumerate(rows)], dtype=bool)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(metadatas, trees)
def test_masks_equal_the_filter_algebra_on_every_row(rows, filters):
    columns = MetadataColumns()
    half = len(rows) // 2
    assert columns.append(rows[:half]).tolist() == list(range(half))
    assert columns.append(rows[half:]).tolist() == list(range(half, len(rows)))
    assert columns.mask(filters).tolist() == _expected(rows, filters).tolist()


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(metadatas, trees, st.data())
def test_deletes_compaction_and_persistence_keep_the_masks_of_the_kept_rows(tmp_path_factory, rows, filters, data):
    columns = MetadataColumns()
    columns.append(rows)
    dead = set(data.draw(st.lists(st.integers(0, len(rows) - 1), max_size=len(rows))))
    columns.delete(sorted(dead))
    assert columns.mask(filters).tolist() == _expected(rows, filters, dead).tolist()
    assert columns.mask(None).tolist() == [row not in dead for row in range(len(rows))]

    folder = tmp_path_factory.mktemp("metadata")
    columns.write(folder)
    reopened = MetadataColumns.open(folder)
    assert reopened.mask(filters).tolist() == columns.mask(filters).tolist()
    assert all(isinstance(s.codes, np.memmap) or isinstance(s.codes.base, np.memmap) for s in reopened._segments)

    mapping = reopened.compact()
    kept = [metadata for row, metadata in enumerate(rows) if row not in dead]
    assert mapping.tolist() == [
        -1 if r in dead else sum(1 for x in range(r) if x not in dead) for r in range(len(rows))
    ]
    assert reopened.mask(filters).tolist() == _expected(kept, filters).tolist()


def test_the_filter_vocabulary_lists_distinct_values_per_key():
    columns = MetadataColumns()
    columns.append([{"kind": "a", "year": 2020}, {"kind": "b"}, {"kind": "a", "year": 2021, "tags": ["x", "y"]}])
    assert columns.keys() == ["kind", "tags", "year"]
    assert columns.values("kind") == ["a", "b"]
    assert columns.codes("year").tolist() == [0, -1, 1]
    assert columns.values("missing") == []


@pytest.mark.parametrize("value", [object(), {1, 2}, float("nan"), b"bytes"])
def test_a_value_that_is_not_json_data_is_refused_naming_the_key(value):
    columns = MetadataColumns()
    columns.append([{"kind": "a"}])
    with pytest.raises((ValueError, TypeError), match="odd"):
        columns.append([{"kind": "b"}, {"odd": value}])
    assert len(columns) == 1 and columns.values("kind") == ["a"]  # nothing of the refused batch was kept


def test_another_format_version_is_refused_naming_it(tmp_path):
    columns = MetadataColumns()
    columns.append([{"kind": "a"}])
    columns.write(tmp_path)
    state_file = next(tmp_path.glob("metadata*.state.json"))
    state = json.loads(state_file.read_text())
    state["version"] = 42
    state_file.write_text(json.dumps(state))
    with pytest.raises(PersistError, match="42"):
        MetadataColumns.open(tmp_path)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(metadatas, metadatas, st.lists(trees, min_size=1, max_size=4), st.data())
def test_cached_masks_follow_appends_deletes_and_compaction(first, more, filter_list, data):
    # masks are cached per filter: asking again after each change must see the change
    columns = MetadataColumns()
    columns.append(first)
    for filters in filter_list:
        assert columns.mask(filters).tolist() == _expected(first, filters).tolist()
    columns.append(more)
    rows = first + more
    for filters in filter_list:
        assert columns.mask(filters).tolist() == _expected(rows, filters).tolist()
    dead = set(data.draw(st.lists(st.integers(0, len(rows) - 1), max_size=len(rows))))
    columns.delete(sorted(dead))
    for filters in filter_list:
        assert columns.mask(filters).tolist() == _expected(rows, filters, dead).tolist()
    columns.compact()
    kept = [metadata for row, metadata in enumerate(rows) if row not in dead]
    for filters in filter_list:
        assert columns.mask(filters).tolist() == _expected(kept, filters).tolist()


def test_a_returned_mask_is_the_callers_to_change():
    columns = MetadataColumns()
    columns.append([{"kind": "a"}, {"kind": "b"}, {"kind": "a"}])
    filters = MetadataFilters(filters=[MetadataFilter(key="kind", value="a")])
    first = columns.mask(filters)
    first[:] = False
    assert columns.mask(filters).tolist() == [True, False, True]


def test_filters_differing_only_in_a_values_type_select_their_own_rows():
    columns = MetadataColumns()
    columns.append([{"v": 1}, {"v": "1"}, {"v": 1.5}, {}])
    number = MetadataFilters(filters=[MetadataFilter(key="v", value=1)])
    text = MetadataFilters(filters=[MetadataFilter(key="v", value="1")])
    listed = MetadataFilters(filters=[MetadataFilter(key="v", value=["1"], operator=FilterOperator.IN)])
    for _ in range(2):  # the second round answers from the cache
        assert columns.mask(number).tolist() == [True, False, False, False]
        assert columns.mask(text).tolist() == [False, True, False, False]
        assert columns.mask(listed).tolist() == [False, True, False, False]


many_values = st.lists(st.dictionaries(st.just("n"), st.integers(0, 39), max_size=1), min_size=1, max_size=80)
wide_leaves = st.builds(
    lambda operator, scalar, listed: MetadataFilter(
        key="n", operator=operator, value=listed if operator in LIST_OPERATORS else scalar
    ),
    st.sampled_from(list(FilterOperator)),
    st.integers(-1, 40),
    st.lists(st.integers(0, 39), min_size=1, max_size=30),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(many_values, wide_leaves)
def test_a_leaf_passing_many_or_few_of_many_distinct_values_matches_the_filter_algebra(rows, leaf):
    # up to 40 distinct values: a leaf passing or failing few of them compares codes, others gather
    columns = MetadataColumns()
    half = len(rows) // 2
    columns.append(rows[:half])
    columns.append(rows[half:])
    filters = MetadataFilters(filters=[leaf])
    assert columns.mask(filters).tolist() == _expected(rows, filters).tolist()


@pytest.mark.parametrize("share", [0.0, 1.0])  # equality leaves answered by a mask / by the rows sorted by code
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(first=metadatas, more=metadatas, filters=trees, data=st.data())
def test_rows_are_the_mask_rows_through_appends_deletes_and_compaction(share, first, more, filters, data):
    with patch.object(metadata_module, "_FEW_ROWS_SHARE", share):
        columns = MetadataColumns()
        columns.append(first)
        assert columns.rows(filters).rows.tolist() == np.flatnonzero(_expected(first, filters)).tolist()
        assert columns.rows(filters).rows.tolist() == np.flatnonzero(_expected(first, filters)).tolist()  # kept
        columns.append(more)
        rows = first + more
        assert columns.rows(filters).rows.tolist() == np.flatnonzero(_expected(rows, filters)).tolist()
        dead = set(data.draw(st.lists(st.integers(0, len(rows) - 1), max_size=len(rows))))
        columns.delete(sorted(dead))
        assert columns.rows(filters).rows.tolist() == np.flatnonzero(_expected(rows, filters, dead)).tolist()
        assert columns.rows(None).rows.tolist() == [row for row in range(len(rows)) if row not in dead]
        columns.compact()
        kept = [metadata for row, metadata in enumerate(rows) if row not in dead]
        assert columns.rows(filters).rows.tolist() == np.flatnonzero(_expected(kept, filters)).tolist()


def test_a_routed_filter_reads_the_rows_of_its_documents_not_a_mask_of_every_row():
    columns = MetadataColumns()
    columns.append([{"ref_doc_id": f"d{i // 4}", "year": 2000 + i % 3} for i in range(4000)])
    columns.append([{"ref_doc_id": "d0", "year": 2001}, {"year": 2002}])
    columns.delete([1])
    routed = MetadataFilters(
        filters=[
            MetadataFilter(key="ref_doc_id", value=["d0", "d7", "missing"], operator=FilterOperator.IN),
            MetadataFilter(key="year", value=2001, operator=FilterOperator.GTE),
        ]
    )
    assert columns.rows(routed).rows.tolist() == [2, 28, 29, 31, 4000]
    assert columns._code_indexes  # answered from the rows sorted by code
    assert len(columns._masks) == 1  # only the year leaf was a mask over every row
    assert columns.rows(MetadataFilters(filters=[MetadataFilter(key="ref_doc_id", value="d3")])).rows.tolist() == [
        12,
        13,
        14,
        15,
    ]


def test_a_repeated_filter_gets_the_same_row_set_until_the_rows_change():
    columns = MetadataColumns()
    columns.append([{"year": 2000 + i % 20} for i in range(100)])
    broad = MetadataFilters(filters=[MetadataFilter(key="year", value=2010, operator=FilterOperator.GTE)])
    first = columns.rows(broad)
    assert columns.rows(broad) is first  # the forms the searches make of it are made once
    assert not first.rows.flags.writeable and not first.mask.flags.writeable
    columns.delete([10, 11])
    after = columns.rows(broad)
    assert after is not first and 10 not in after.rows.tolist() and 11 not in after.rows.tolist()
    assert 10 in first.rows.tolist()  # a search holding the old set keeps what it selected


def test_writes_after_deletes_and_compaction_leave_only_the_files_the_columns_read(tmp_path):
    columns = MetadataColumns()
    folder, fresh = tmp_path / "written", tmp_path / "fresh"
    for batch in range(3):
        columns.append([{"kind": f"k{batch}", "year": 2000 + i} for i in range(5)])
        columns.write(folder)
    columns.delete([0, 6])
    columns.write(folder)
    columns.delete([7])
    columns.write(folder)
    columns.compact()
    columns.write(folder)
    columns.write(fresh)
    assert sorted(p.name for p in folder.iterdir()) == sorted(p.name for p in fresh.iterdir())
    every = MetadataFilters(filters=[MetadataFilter(key="year", value=2000, operator=FilterOperator.GTE)])
    assert MetadataColumns.open(folder).mask(every).tolist() == columns.mask(every).tolist()
