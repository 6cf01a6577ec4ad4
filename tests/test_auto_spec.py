"""Auto-retriever spec validation and repair (pure logic, no LLM, no embeddings).

Each upstream ``VectorIndexAutoRetriever`` failure (upstream notes, section E;
repro r05) has a test here showing what the raw spec does under the store's
own filter semantics and what the validated spec does instead.
"""

from __future__ import annotations

import copy
import json
import re
from datetime import date

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from llama_index.core.bridge.pydantic import ValidationError
from llama_index.core.schema import TextNode
from llama_index.core.vector_stores.types import (
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
    MetadataInfo,
    VectorStoreInfo,
    VectorStoreQuerySpec,
)

from llama_index_ext_recursive.auto import (
    FieldType,
    PartialDate,
    SpecError,
    SpecValidator,
    metadata_vocabulary,
    parse_date,
    parse_operator,
    resolve_top_k,
)
from llama_index_ext_recursive.filters import merge_filters, metadata_matches
from llama_index_ext_recursive.query import FilteredQueryBundle, resolve_call
from llama_index_ext_recursive.sample import load_sample_documents

Op = FilterOperator
F = MetadataFilter

# The bundled sample corpus's document metadata (category, year, language, source, title).
DOCS = load_sample_documents()
CORPUS = {doc.doc_id: doc.metadata for doc in DOCS}
VOCABULARY = metadata_vocabulary(DOCS)

INFO = VectorStoreInfo(
    content_info="Short documents on everyday topics, in English and Chinese",
    metadata_info=[
        MetadataInfo(name="category", type="str", description="topic of the document"),
        MetadataInfo(name="year", type="int", description="publication year"),
        MetadataInfo(name="language", type="str", description="ISO language code"),
        MetadataInfo(name="source", type="str", description="kind of publication"),
        MetadataInfo(name="title", type="str", description="document title"),
    ],
)
TYPES = {"category": "str", "year": "int", "language": "str", "source": "str", "title": "str"}


def matching(filters) -> set:
    """Doc ids whose metadata passes ``filters`` under upstream's leaf semantics."""
    tree = filters if isinstance(filters, MetadataFilters) or filters is None else MetadataFilters(filters=filters)
    return {doc_id for doc_id, md in CORPUS.items() if metadata_matches(tree, md)}


def docs_where(predicate) -> set:
    return {doc_id for doc_id, md in CORPUS.items() if predicate(md)}


def validator(**kwargs) -> SpecValidator:
    kwargs.setdefault("vocabulary", VOCABULARY)
    return SpecValidator(INFO, **kwargs)


def as_tuples(spec):
    return [(f.key, f.operator, f.value) for f in spec.filters]


# --------------------------------------------------------------------------- E1: invented keys


def test_invented_key_is_dropped_not_silently_empty():
    raw = [F(key="first_author", value="Smith"), F(key="category", value="food")]
    assert matching(raw) == set()  # upstream: the store silently returns []

    spec, report = validator().validate(
        {
            "query": "bread",
            "filters": [
                {"key": "first_author", "value": "Smith", "operator": "=="},
                {"key": "category", "value": "food", "operator": "=="},
            ],
        }
    )
    assert as_tuples(spec) == [("category", Op.EQ, "food")]
    assert matching(spec.filters) == {"sourdough-baking", "zh-tea"}
    (dropped,) = [r for r in report.repairs if r.kind == "dropped_key"]
    assert dropped.key == "first_author" and dropped.after is None
    assert dropped.before == {"key": "first_author", "operator": "==", "value": "Smith"}


@pytest.mark.parametrize(
    "invented, suggestion",
    [
        ("categories", "category"),
        ("publication_year", "year"),
        ("langauge", "language"),
    ],
)
def test_dropped_key_names_the_closest_declared_key(invented, suggestion):
    _, report = validator().validate({"query": "q", "filters": [{"key": invented, "value": "x"}]})
    (dropped,) = report.repairs
    assert dropped.kind == "dropped_key"
    assert f"did you mean {suggestion!r}" in dropped.message


def test_suggestion_on_the_upstream_repro_schema():
    info = VectorStoreInfo(
        content_info="papers",
        metadata_info=[
            MetadataInfo(name="year", type="int", description="publication year"),
            MetadataInfo(name="author", type="str", description="first author surname"),
        ],
    )
    assert SpecValidator(info).suggest_key("first_author") == "author"


@pytest.mark.parametrize("variant", ["Category", " category ", "CATEGORY", "Category\t"])
def test_key_differing_in_case_or_spacing_is_renamed(variant):
    spec, report = validator().validate({"query": "q", "filters": [{"key": variant, "value": "food"}]})
    assert as_tuples(spec) == [("category", Op.EQ, "food")]
    assert report.kinds() == ["renamed_key"]


def test_key_with_dash_instead_of_underscore_is_renamed():
    info = VectorStoreInfo(
        content_info="x", metadata_info=[MetadataInfo(name="page_count", type="int", description="pages")]
    )
    spec, report = SpecValidator(info).validate(
        {"query": "q", "filters": [{"key": "Page-Count", "value": "12", "operator": ">="}]}
    )
    assert as_tuples(spec) == [("page_count", Op.GTE, 12)]
    assert report.kinds() == ["renamed_key", "coerced_value"]


# --------------------------------------------------------------------------- E2: value types


def test_string_year_under_gt_is_coerced_instead_of_type_error():
    from llama_index.core.vector_stores.utils import build_metadata_filter_fn

    as_written = MetadataFilters(filters=[F(key="year", value="2021", operator=Op.GT)])
    with pytest.raises(TypeError):  # upstream: '>' not supported between 'int' and 'str'
        build_metadata_filter_fn(CORPUS.get, as_written)(next(iter(CORPUS)))
    assert matching(as_written) == set()  # ours: no int row matches a string, so the value is coerced

    spec, report = validator().validate({"query": "q", "filters": [{"key": "year", "value": "2021", "operator": ">"}]})
    assert as_tuples(spec) == [("year", Op.GT, 2021)]
    assert matching(spec.filters) == docs_where(lambda md: md["year"] > 2021)
    assert report.kinds() == ["coerced_value"]
    assert (report.repairs[0].before, report.repairs[0].after) == ("2021", 2021)


def test_string_year_under_eq_is_coerced_instead_of_matching_nothing():
    assert matching([F(key="year", value="2023")]) == set()  # upstream: silently []
    spec, _ = validator().validate({"query": "q", "filters": [{"key": "year", "value": "2023", "operator": "=="}]})
    assert as_tuples(spec) == [("year", Op.EQ, 2023)]
    assert matching(spec.filters) == {"home-solar", "zh-high-speed-rail"}


@pytest.mark.parametrize(
    "key, value, expected",
    [
        ("year", "2023.0", 2023),
        ("year", 2023.0, 2023),
        ("year", " 2023 ", 2023),
        ("title", 2023, "2023"),
        ("title", 2023.0, "2023"),
    ],
)
def test_values_are_coerced_to_the_declared_type(key, value, expected):
    spec, _ = validator(vocabulary=None).validate({"query": "q", "filters": [{"key": key, "value": value}]})
    (f,) = spec.filters
    assert f.value == expected and type(f.value) is type(expected)


@pytest.mark.parametrize(
    "operator, value, expected",
    [
        (">", 2020.5, (Op.GT, 2020)),
        (">=", 2020.5, (Op.GTE, 2021)),
        ("<", 2020.5, (Op.LT, 2021)),
        ("<=", 2020.5, (Op.LTE, 2020)),
    ],
)
def test_fractional_bound_on_an_int_field_keeps_the_same_matches(operator, value, expected):
    spec, _ = validator().validate({"query": "q", "filters": [{"key": "year", "value": value, "operator": operator}]})
    assert (spec.filters[0].operator, spec.filters[0].value) == expected
    compare = {
        ">": lambda y: y > value,
        ">=": lambda y: y >= value,
        "<": lambda y: y < value,
        "<=": lambda y: y <= value,
    }[operator]
    assert matching(spec.filters) == docs_where(lambda md: compare(md["year"]))


@pytest.mark.parametrize(
    "filter_",
    [
        {"key": "year", "value": "recently", "operator": ">"},
        {"key": "year", "value": 2020.5, "operator": "=="},
        {"key": "year", "value": {"from": 2020}},
        {"key": "year", "value": None},
        {"key": "year", "operator": "=="},
    ],
)
def test_value_that_cannot_be_coerced_drops_only_that_filter(filter_):
    spec, report = validator().validate(
        {"query": "q", "filters": [filter_, {"key": "language", "value": "zh"}], "top_k": 4}
    )
    assert as_tuples(spec) == [("language", Op.EQ, "zh")] and spec.top_k == 4
    assert [kind for kind in report.kinds() if kind.startswith("dropped")] == ["dropped_filter"]


def test_uncoercible_values_in_a_list_are_dropped_one_by_one():
    spec, report = validator().validate(
        {"query": "q", "filters": [{"key": "year", "value": ["2019", "someday", 2020], "operator": "in"}]}
    )
    assert as_tuples(spec) == [("year", Op.IN, [2019, 2020])]
    assert [r.before for r in report.repairs if r.kind == "dropped_value"] == ["someday"]


# --------------------------------------------------------------------------- operators


@pytest.mark.parametrize(
    "spelling, expected",
    [
        ("equals", Op.EQ),
        ("=", Op.EQ),
        ("==", Op.EQ),
        ("eq", Op.EQ),
        ("$eq", Op.EQ),
        ("gte", Op.GTE),
        (">=", Op.GTE),
        ("GTE", Op.GTE),
        ("=>", Op.GTE),
        ("at least", Op.GTE),
        ("in", Op.IN),
        ("IN", Op.IN),
        ("one of", Op.IN),
        ("not in", Op.NIN),
        ("$nin", Op.NIN),
        ("!=", Op.NE),
        ("<>", Op.NE),
        ("less than", Op.LT),
        ("$lte", Op.LTE),
        ("greater_than", Op.GT),
        ("like", Op.TEXT_MATCH),
        ("TEXT_MATCH", Op.TEXT_MATCH),
        (Op.ANY, Op.ANY),
        (None, Op.EQ),
    ],
)
def test_operator_spellings(spelling, expected):
    assert parse_operator(spelling) == expected


@pytest.mark.parametrize("junk", ["=~", "~~", "between", "", "≈", 3, ["=="]])
def test_junk_operators_are_not_guessed(junk):
    assert parse_operator(junk) is None


def test_unknown_operator_drops_one_filter_and_keeps_the_rest_of_the_spec():
    llm_json = {
        "query": "bread",
        "top_k": 3,
        "filters": [
            {"key": "title", "value": "Bread", "operator": "=~"},
            {"key": "category", "value": "food", "operator": "=="},
            {"key": "year", "value": 2020, "operator": "gte"},
        ],
    }
    with pytest.raises(ValidationError):  # upstream parses this into nothing: whole spec discarded
        VectorStoreQuerySpec.model_validate(llm_json)

    spec, report = validator().validate(llm_json)
    assert spec.query == "bread" and spec.top_k == 3
    assert as_tuples(spec) == [("category", Op.EQ, "food"), ("year", Op.GTE, 2020)]
    assert report.kinds() == ["dropped_filter", "mapped_operator"]
    assert "'=~'" in report.repairs[0].message and report.repairs[0].key == "title"


@pytest.mark.parametrize(
    "filter_, expected",
    [
        ({"key": "language", "value": ["en", "zh"], "operator": "=="}, ("language", Op.IN, ["en", "zh"])),
        ({"key": "language", "value": ["zh"], "operator": "!="}, ("language", Op.NIN, ["zh"])),
        ({"key": "language", "value": "zh", "operator": "in"}, ("language", Op.IN, ["zh"])),
        ({"key": "language", "value": "zh", "operator": "nin"}, ("language", Op.NIN, ["zh"])),
        ({"key": "title", "value": "Coral", "operator": "contains"}, ("title", Op.TEXT_MATCH, "Coral")),
        ({"key": "year", "value": 2020, "operator": "contains"}, ("year", Op.EQ, 2020)),
        ({"key": "year", "value": "2020", "operator": "text_match"}, ("year", Op.EQ, 2020)),
        ({"key": "year", "value": [2019, 2020], "operator": "any"}, ("year", Op.IN, [2019, 2020])),
        ({"key": "year", "value": [2020], "operator": ">"}, ("year", Op.GT, 2020)),
    ],
)
def test_operator_is_fitted_to_the_type_and_value_shape(filter_, expected):
    spec, report = validator().validate({"query": "q", "filters": [filter_]})
    assert as_tuples(spec) == [expected]
    assert report.ok


@pytest.mark.parametrize(
    "filter_",
    [
        {"key": "category", "value": "food", "operator": ">"},  # no order on plain strings
        {"key": "year", "value": [2019, 2020], "operator": "<"},  # one bound only
        {"key": "year", "value": [2019, 2020], "operator": "all"},  # one value cannot equal two
    ],
)
def test_operator_meaningless_for_the_type_drops_that_filter(filter_):
    spec, report = validator().validate({"query": "q", "filters": [filter_]})
    assert spec.filters == [] and report.kinds()[-1] == "dropped_filter"


# --------------------------------------------------------------------------- dates

TODAY = date(2025, 6, 15)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("2023", PartialDate(2023)),
        ("2023-05-01", PartialDate(2023, 5, 1)),
        ("2023/5/1", PartialDate(2023, 5, 1)),
        ("2023.05", PartialDate(2023, 5)),
        ("2023-05-01T10:30:00Z", PartialDate(2023, 5, 1)),
        ("May 2023", PartialDate(2023, 5)),
        ("Sept. 2023", PartialDate(2023, 9)),
        ("May 1st, 2023", PartialDate(2023, 5, 1)),
        ("1 May 2023", PartialDate(2023, 5, 1)),
        ("2023 May", PartialDate(2023, 5)),
        ("05/2023", PartialDate(2023, 5)),
        ("2023年", PartialDate(2023)),
        ("2023年5月", PartialDate(2023, 5)),
        ("2023年5月1日", PartialDate(2023, 5, 1)),
        (date(2023, 5, 1), PartialDate(2023, 5, 1)),
        (2023, PartialDate(2023)),
        ("last year", PartialDate(2024)),
        ("去年", PartialDate(2024)),
        ("this month", PartialDate(2025, 6)),
        ("3 years ago", PartialDate(2022)),
        ("05/01/2023", None),  # ambiguous day/month: not guessed
        ("2023-13-01", None),
        ("soon", None),
        ("", None),
        (True, None),
    ],
)
def test_parse_date(text, expected):
    assert parse_date(text, today=TODAY) == expected


def test_partial_date_iso_bounds():
    assert PartialDate(2023).iso() == "2023" and PartialDate(2023).next_iso() == "2024"
    assert PartialDate(2023, 12).next_iso() == "2024-01"
    assert PartialDate(2023, 5).next_iso() == "2023-06"
    assert PartialDate(2024, 2, 29).next_iso() == "2024-03-01"


@pytest.mark.parametrize(
    "value, operator, expected",
    [
        ("2023-05-01", "==", (Op.EQ, 2023)),
        ("May 2023", "==", (Op.EQ, 2023)),
        ("2023年5月", "==", (Op.EQ, 2023)),
        ("May 2023", ">", (Op.GTE, 2023)),  # later months of 2023 are after May 2023
        ("2023年5月", "<", (Op.LTE, 2023)),
        ("2023", ">", (Op.GT, 2023)),  # a whole year stays exact
        ("last year", ">=", (Op.GTE, 2024)),
    ],
)
def test_dates_as_text_for_a_year_field(value, operator, expected):
    spec, _ = validator(today=TODAY).validate(
        {"query": "q", "filters": [{"key": "year", "value": value, "operator": operator}]}
    )
    assert (spec.filters[0].operator, spec.filters[0].value) == expected


def test_part_of_a_year_cannot_be_excluded_from_a_year_field():
    spec, report = validator().validate(
        {"query": "q", "filters": [{"key": "year", "value": "May 2023", "operator": "!="}]}
    )
    assert spec.filters == [] and report.kinds() == ["dropped_filter"]


DATED = VectorStoreInfo(
    content_info="posts",
    metadata_info=[
        MetadataInfo(name="published", type="str", description="publication date (ISO)"),
        MetadataInfo(name="updated", type="date", description="last edit"),
    ],
)
POSTS = {"a": "2023-04-30", "b": "2023-05-17", "c": "2023-06-01", "d": "2024-01-02"}


def posts_matching(filters) -> set:
    tree = MetadataFilters(filters=filters)
    return {k for k, v in POSTS.items() if metadata_matches(tree, {"published": v, "updated": v})}


@pytest.mark.parametrize(
    "key, value, operator, expected, docs",
    [
        ("published", "May 2023", ">=", (Op.GTE, "2023-05"), {"b", "c", "d"}),
        ("published", "May 2023", ">", (Op.GTE, "2023-06"), {"c", "d"}),
        ("published", "May 2023", "<", (Op.LT, "2023-05"), {"a"}),
        ("published", "2023年5月", "<=", (Op.LT, "2023-06"), {"a", "b"}),
        ("updated", "2023", "<=", (Op.LT, "2024"), {"a", "b", "c"}),
        ("updated", "2023-5-17", "==", (Op.EQ, "2023-05-17"), {"b"}),
        ("updated", "May 2023", "==", (Op.TEXT_MATCH, "2023-05"), {"b"}),
    ],
)
def test_dates_as_text_for_iso_string_date_fields(key, value, operator, expected, docs):
    spec, _ = SpecValidator(DATED).validate(
        {"query": "q", "filters": [{"key": key, "value": value, "operator": operator}]}
    )
    assert (spec.filters[0].operator, spec.filters[0].value) == expected
    assert posts_matching(spec.filters) == docs


def test_date_equality_uses_the_vocabulary():
    vocabulary = {"published": set(POSTS.values())}
    v = SpecValidator(DATED, vocabulary=vocabulary)
    spec, _ = v.validate({"query": "q", "filters": [{"key": "published", "value": "2023-05-17"}]})
    assert as_tuples(spec) == [("published", Op.EQ, "2023-05-17")]
    spec, report = v.validate({"query": "q", "filters": [{"key": "published", "value": "May 2022"}]})
    assert spec.filters == [] and report.kinds() == ["coerced_value", "dropped_filter"]


def test_str_field_is_a_date_field_only_on_clear_evidence():
    info = VectorStoreInfo(
        content_info="x",
        metadata_info=[
            MetadataInfo(name="note", type="str", description="kept up to date by editors"),
            MetadataInfo(name="release_date", type="str", description="when released"),
        ],
    )
    spec, _ = SpecValidator(info).validate(
        {"query": "q", "filters": [{"key": "note", "value": "draft"}, {"key": "release_date", "value": "2023年5月1日"}]}
    )
    assert as_tuples(spec) == [("note", Op.EQ, "draft"), ("release_date", Op.EQ, "2023-05-01")]


def test_str_field_becomes_a_date_field_when_its_values_are_iso_dates():
    info = VectorStoreInfo(
        content_info="x", metadata_info=[MetadataInfo(name="when", type="string", description="when it happened")]
    )
    v = SpecValidator(info, vocabulary={"when": set(POSTS.values())})
    spec, _ = v.validate({"query": "q", "filters": [{"key": "when", "value": "June 2023", "operator": ">="}]})
    assert as_tuples(spec) == [("when", Op.GTE, "2023-06")]


# --------------------------------------------------------------------------- vocabulary


def test_metadata_vocabulary():
    nodes = [
        TextNode(text="a", metadata={"tags": ["x", "y"], "n": 1, "blob": {"a": 1}, "none": None}),
        TextNode(text="b", metadata={"tags": ["y", "z"], "n": 2, "blob": {"b": 2}}),
    ]
    vocabulary = metadata_vocabulary(nodes)
    assert vocabulary == {"tags": {"x", "y", "z"}, "n": {1, 2}}  # blob unhashable: unknown
    assert "tags" not in metadata_vocabulary(nodes, max_values=2)
    assert VOCABULARY["category"] == {
        "food",
        "biology",
        "energy",
        "history",
        "sports",
        "software",
        "policy",
        "environment",
        "transport",
        "gardening",
    }
    assert VOCABULARY["year"] == set(range(2018, 2026))


@pytest.mark.parametrize(
    "filter_, expected",
    [
        ({"key": "category", "value": "Biology "}, ("category", Op.EQ, "biology")),
        ({"key": "language", "value": "EN"}, ("language", Op.EQ, "en")),
        ({"key": "title", "value": "coral reef  ecology"}, ("title", Op.EQ, "Coral Reef Ecology")),
        ({"key": "source", "value": ["Blog", "MANUAL"], "operator": "in"}, ("source", Op.IN, ["blog", "manual"])),
    ],
)
def test_case_and_whitespace_repaired_against_the_vocabulary(filter_, expected):
    raw = F(key=filter_["key"], value=filter_["value"], operator=Op.IN if isinstance(filter_["value"], list) else Op.EQ)
    assert matching([raw]) == set()  # as written, it matches nothing
    spec, report = validator().validate({"query": "q", "filters": [filter_]})
    assert as_tuples(spec) == [expected]
    assert "repaired_value" in report.kinds()
    assert matching(spec.filters)


def test_values_absent_from_the_vocabulary_are_dropped():
    spec, report = validator().validate(
        {
            "query": "q",
            "filters": [
                {"key": "category", "value": ["Food", "chemistry"], "operator": "in"},
                {"key": "category", "value": "chemistry"},
                {"key": "year", "value": 2030},
                {"key": "source", "value": "podcast", "operator": "!="},
            ],
        }
    )
    assert as_tuples(spec) == [("category", Op.IN, ["food"])]
    kinds = [(r.kind, r.key, r.before) for r in report.repairs if r.kind.startswith("dropped")]
    assert kinds[0] == ("dropped_value", "category", "chemistry")
    assert [k[0] for k in kinds[1:]] == ["dropped_filter"] * 3
    assert "excludes nothing" in report.repairs[-1].message


def test_without_vocabulary_values_are_not_checked():
    spec, _ = validator(vocabulary=None).validate(
        {"query": "q", "filters": [{"key": "category", "value": "Chemistry"}]}
    )
    assert as_tuples(spec) == [("category", Op.EQ, "Chemistry")]


def test_vocabulary_with_values_of_another_type_is_ignored(caplog):
    v = validator(vocabulary={"year": {"2019", "2020"}})  # the declared type says int
    assert "do not all have the declared type" in caplog.text
    spec, _ = v.validate({"query": "q", "filters": [{"key": "year", "value": 2031}]})
    assert as_tuples(spec) == [("year", Op.EQ, 2031)]


# --------------------------------------------------------------------------- E3: top_k


@pytest.mark.parametrize(
    "args, expected, upstream",
    [
        ((8, 2, 10, "q", 10), 8, 2),  # the spec may raise k
        ((3, 10, 10, "q", 10), 3, 3),  # ... and lower it
        ((20, 15, 10, "q", 10), 10, 10),  # never above max_top_k
        ((None, 15, 10, "q", 10), 10, 15),  # similarity_top_k itself is clamped
        ((None, 5, 10, "q", 10), 5, 5),
        ((None, 5, 10, "", 3), 3, 3),  # blank query: empty_query_top_k
        ((None, 5, 10, "   ", 3), 3, 5),  # whitespace is blank too
        ((None, 5, 10, "", None), 5, 5),
        ((None, 5, 10, "", 50), 10, 50),  # empty_query_top_k is clamped as well
        ((4, 5, 10, "", 3), 4, 3),  # the spec's k wins over empty_query_top_k
        ((0, 5, 10, "q", 10), 1, 0),
        ((-3, 5, 10, "q", 10), 1, -3),
    ],
)
def test_resolve_top_k(args, expected, upstream):
    spec_top_k, similarity_top_k, max_top_k, query, empty_query_top_k = args
    assert resolve_top_k(*args) == expected
    # upstream's rule (auto_retriever.py), for contrast
    k = similarity_top_k if (query or empty_query_top_k is None) else empty_query_top_k
    if spec_top_k is not None:
        k = min(spec_top_k, max_top_k, k)
    assert k == upstream


def test_top_k_clamps_are_reported():
    spec, report = validator(similarity_top_k=15).validate({"query": "q", "filters": []})
    assert spec.top_k == 10
    (clamp,) = report.repairs
    assert (clamp.kind, clamp.key, clamp.before, clamp.after) == ("clamped_top_k", "top_k", 15, 10)
    spec, report = validator().validate({"query": "q", "filters": [], "top_k": 50})
    assert spec.top_k == 10 and report.kinds() == ["clamped_top_k"]
    spec, report = validator(similarity_top_k=2).validate({"query": "q", "filters": [], "top_k": 8})
    assert spec.top_k == 8 and report.repairs == []


@pytest.mark.parametrize(
    "top_k, expected, kinds",
    [
        ("5", 5, ["coerced_top_k"]),
        (6.0, 6, ["coerced_top_k"]),
        ("many", 2, ["dropped_top_k"]),
        (True, 2, ["dropped_top_k"]),
        (None, 2, []),
    ],
)
def test_top_k_from_llm_json(top_k, expected, kinds):
    spec, report = validator(similarity_top_k=2).validate({"query": "q", "filters": [], "top_k": top_k})
    assert spec.top_k == expected and report.kinds() == kinds


# --------------------------------------------------------------------------- E4: OR filters


def combined(generated, extra=None, per_call=None, policy="merge"):
    """What ValidatedAutoRetriever searches with: the spec's filters AND the call's resolved filters."""
    call = resolve_call(FilteredQueryBundle("q", filters=per_call), filters=extra, filter_policy=policy, top_k=10)
    return merge_filters(MetadataFilters(filters=list(generated)) if generated else None, call.filters)


def test_or_extra_filters_are_nested_not_refused():
    spec, _ = validator().validate({"query": "q", "filters": [{"key": "year", "value": 2020, "operator": ">="}]})
    extra = MetadataFilters(
        condition=FilterCondition.OR, filters=[F(key="language", value="zh"), F(key="source", value="blog")]
    )
    tree = combined(spec.filters, extra, per_call={"category": "food"})

    assert tree.condition == FilterCondition.AND
    nested = [f for f in tree.filters if isinstance(f, MetadataFilters)]
    assert len(nested) == 1 and nested[0].condition == FilterCondition.OR
    assert matching(tree) == {"sourdough-baking", "zh-tea"}
    assert matching(tree) == docs_where(
        lambda md: (
            md["year"] >= 2020 and (md["language"] == "zh" or md["source"] == "blog") and md["category"] == "food"
        )
    )


def test_generated_and_resolved_filters_under_both_policies_and_empty_parts():
    generated = [F(key="language", value="en")]
    extra = MetadataFilters(condition=FilterCondition.NOT, filters=[F(key="category", value="biology")])
    merged = combined(generated, extra)
    assert matching(merged) == docs_where(lambda md: md["language"] == "en" and md["category"] != "biology")
    replaced = combined(generated, extra, per_call={"year": 2020}, policy="replace")
    assert matching(replaced) == docs_where(lambda md: md["language"] == "en" and md["year"] == 2020)
    assert combined([], None, None) is None
    assert matching(combined(None, extra)) == docs_where(lambda md: md["category"] != "biology")


def test_or_group_inside_a_spec_is_reported_not_silently_anded():
    spec, report = validator().validate(
        {
            "query": "q",
            "filters": [
                {
                    "condition": "or",
                    "filters": [{"key": "language", "value": "zh"}, {"key": "source", "value": "blog"}],
                },
                {"key": "year", "value": 2020},
            ],
        }
    )
    assert as_tuples(spec) == [("year", Op.EQ, 2020)]
    assert report.kinds() == ["dropped_filter"] and "extra or per-call" in report.repairs[0].message


# --------------------------------------------------------------------------- input shapes


def test_spec_object_filter_shapes_and_json_text():
    spec_obj = VectorStoreQuerySpec(query="q", filters=[F(key="year", value=2020, operator=Op.GTE)], top_k=3)
    spec, report = validator().validate(spec_obj)
    assert as_tuples(spec) == [("year", Op.GTE, 2020)] and spec.top_k == 3 and report.repairs == []

    spec, _ = validator().validate({"query": "q", "filters": {"category": "food", "year": [2020, 2021]}})
    assert as_tuples(spec) == [("category", Op.EQ, "food"), ("year", Op.IN, [2020, 2021])]

    spec, _ = validator().validate(
        {"query": "q", "filters": [["year", ">", "2020"], {"field": "language", "op": "eq", "value": "zh"}]}
    )
    assert as_tuples(spec) == [("year", Op.GT, 2020), ("language", Op.EQ, "zh")]

    text = 'Here you go:\n```json\n{"query": "tea", "filters": [{"key": "language", "value": "zh", "operator": "=="}], "top_k": 2}\n```'
    spec, _ = validator().validate(text)
    assert (spec.query, as_tuples(spec), spec.top_k) == ("tea", [("language", Op.EQ, "zh")], 2)


def test_not_a_spec():
    with pytest.raises(SpecError) as info:
        validator().validate("Sorry, I cannot help with that.")
    assert info.value.report.errors[0].kind == "unparseable_spec"
    with pytest.raises(TypeError):
        validator().validate(42)
    spec, report = validator().validate({"query": "q", "filters": [7, "year", None]})
    assert spec.filters == [] and report.kinds() == ["dropped_filter"] * 3


def test_input_is_not_mutated():
    llm_json = {
        "query": "q",
        "top_k": "50",
        "filters": [
            {"key": "Year", "value": ["2019", "2020"], "operator": "=="},
            {"key": "category", "value": "Biology ", "operator": "equals"},
            {"key": "first_author", "value": "Smith"},
        ],
    }
    before = copy.deepcopy(llm_json)
    validator().validate(llm_json)
    assert llm_json == before

    original = F(key="Year", value=2023.0, operator=Op.GT)
    spec_obj = VectorStoreQuerySpec(query="q", filters=[original], top_k=50)
    dumped = spec_obj.model_dump()
    spec, _ = validator().validate(spec_obj)
    assert spec_obj.model_dump() == dumped
    assert spec is not spec_obj and spec.filters[0] is not original
    assert as_tuples(spec) == [("year", Op.GT, 2023)] and spec.top_k == 10


# --------------------------------------------------------------------------- reject policy and the report


def test_reject_policy_names_every_problem():
    with pytest.raises(SpecError) as info:
        validator(key_policy="reject").validate(
            {
                "query": "q",
                "top_k": "lots",
                "filters": [
                    {"key": "categories", "value": "food"},
                    {"key": "year", "value": "soon", "operator": ">"},
                    {"key": "source", "value": "blog", "operator": "~~"},
                    {"key": "language", "value": "fr"},
                    {"key": "Language", "value": "EN"},  # repairable: not a problem
                ],
            }
        )
    error = info.value
    assert isinstance(error, ValueError)
    assert [e.kind for e in error.problems] == [
        "dropped_key",
        "dropped_filter",
        "dropped_filter",
        "dropped_filter",
        "dropped_top_k",
    ]
    message = str(error)
    assert message.startswith("5 problem(s)")
    for fragment in ["'categories'", "did you mean 'category'", "'soon'", "'~~'", "'fr'", "'lots'"]:
        assert fragment in message
    assert not error.report.ok
    assert "renamed_key" in error.report.kinds()  # the repairs made are reported too


def test_reject_policy_accepts_repairable_specs():
    spec, report = validator(key_policy="reject").validate(
        {
            "query": "q",
            "top_k": 40,
            "filters": [{"key": "Language", "value": "EN"}, {"key": "year", "value": "2020", "operator": ">="}],
        }
    )
    assert as_tuples(spec) == [("language", Op.EQ, "en"), ("year", Op.GTE, 2020)]
    assert report.ok and spec.top_k == 10
    assert report.kinds() == ["renamed_key", "repaired_value", "coerced_value", "clamped_top_k"]


def test_report_content():
    _, report = validator().validate(
        {
            "query": "q",
            "filters": [
                {"key": "first_author", "value": "Smith"},
                {"key": "year", "value": "May 2021", "operator": ">"},
            ],
        }
    )
    data = report.to_dict()
    assert json.loads(json.dumps(data)) == data
    assert data["ok"] is True and data["errors"] == []
    assert [r["kind"] for r in data["repairs"]] == ["dropped_key", "coerced_value", "changed_operator"]
    coerced, changed = data["repairs"][1:]
    assert (coerced["key"], coerced["before"], coerced["after"]) == ("year", "May 2021", 2021)
    assert (changed["before"], changed["after"]) == (">", ">=")
    assert all(set(r) == {"kind", "key", "before", "after", "message"} and r["message"] for r in data["repairs"])


def test_constructor_arguments_are_checked():
    with pytest.raises(ValueError):
        validator(key_policy="ignore")
    with pytest.raises(ValueError):
        validator(max_top_k=0)


# --------------------------------------------------------------------------- declared types


@pytest.mark.parametrize(
    "text, expected",
    [
        ("int", FieldType("int")),
        ("integer", FieldType("int")),
        ("Integer", FieldType("int")),
        ("float", FieldType("float")),
        ("number", FieldType("float")),
        ("str", FieldType("str")),
        ("string", FieldType("str")),
        ("bool", FieldType("bool")),
        ("boolean", FieldType("bool")),
        ("date", FieldType("date")),
        ("datetime", FieldType("date")),
        ("List[str]", FieldType("str", True)),
        ("list[int]", FieldType("int", True)),
        ("list of strings", FieldType("str", True)),
        ("string[]", FieldType("str", True)),
        ("Optional[int]", FieldType("int")),
        ("str | None", FieldType("str")),
        ("list", FieldType("any", True)),
        ("geo point", FieldType("any")),
    ],
)
def test_field_type_parse(text, expected):
    assert FieldType.parse(text) == expected


EXTENDED = VectorStoreInfo(
    content_info="papers",
    metadata_info=[
        MetadataInfo(name="rating", type="number", description="average rating"),
        MetadataInfo(name="pages", type="integer", description="page count"),
        MetadataInfo(name="published", type="date", description="publication date"),
        MetadataInfo(name="tags", type="List[str]", description="subject tags"),
        MetadataInfo(name="open_access", type="boolean", description="free to read"),
        MetadataInfo(name="lang", type="string", description="language"),
        MetadataInfo(name="extra", type="geo point", description="unrecognised type"),
    ],
)
PAPERS = [
    {
        "rating": 4.5,
        "pages": 12,
        "published": "2023-05-17",
        "tags": ["bees", "biology"],
        "open_access": True,
        "lang": "en",
    },
    {"rating": 3.0, "pages": 30, "published": "2021-01-02", "tags": ["solar"], "open_access": False, "lang": "zh"},
    {"rating": 5, "pages": 7, "published": "2024-11-30", "tags": ["bees", "food"], "open_access": True, "lang": "en"},
]
PAPER_VOCABULARY = metadata_vocabulary(TextNode(text="p", metadata=md) for md in PAPERS)


@pytest.mark.parametrize(
    "filter_, expected",
    [
        ({"key": "rating", "value": "4.5", "operator": ">="}, ("rating", Op.GTE, 4.5)),
        ({"key": "rating", "value": 4, "operator": ">"}, ("rating", Op.GT, 4.0)),
        ({"key": "pages", "value": "1,000", "operator": "<"}, ("pages", Op.LT, 1000)),
        ({"key": "tags", "value": "Bees"}, ("tags", Op.CONTAINS, "bees")),
        ({"key": "tags", "value": ["bees", "solar"], "operator": "in"}, ("tags", Op.ANY, ["bees", "solar"])),
        ({"key": "tags", "value": ["bees", "food"]}, ("tags", Op.ALL, ["bees", "food"])),
        ({"key": "open_access", "value": "yes"}, ("open_access", Op.EQ, 1)),
        ({"key": "open_access", "value": False}, ("open_access", Op.EQ, 0)),
    ],
)
def test_other_declared_types(filter_, expected):
    spec, _ = SpecValidator(EXTENDED, vocabulary=PAPER_VOCABULARY).validate({"query": "q", "filters": [filter_]})
    assert as_tuples(spec) == [expected]
    assert any(metadata_matches(MetadataFilters(filters=spec.filters), md) for md in PAPERS)


@pytest.mark.parametrize("operator", ["!=", "nin", ">", "text_match"])
def test_operators_that_misbehave_on_list_fields_are_dropped(operator):
    spec, report = SpecValidator(EXTENDED).validate(
        {"query": "q", "filters": [{"key": "tags", "value": "bees", "operator": operator}]}
    )
    assert spec.filters == [] and report.kinds()[-1] == "dropped_filter"


# --------------------------------------------------------------------------- properties

EXPECTED_OPERATORS = {
    "int": {Op.EQ, Op.NE, Op.GT, Op.GTE, Op.LT, Op.LTE, Op.IN, Op.NIN, Op.IS_EMPTY},
    "float": {Op.EQ, Op.NE, Op.GT, Op.GTE, Op.LT, Op.LTE, Op.IN, Op.NIN, Op.IS_EMPTY},
    "date": {Op.EQ, Op.NE, Op.GT, Op.GTE, Op.LT, Op.LTE, Op.IN, Op.NIN, Op.IS_EMPTY, Op.TEXT_MATCH},
    "str": {Op.EQ, Op.NE, Op.IN, Op.NIN, Op.TEXT_MATCH, Op.TEXT_MATCH_INSENSITIVE, Op.IS_EMPTY},
    "bool": {Op.EQ, Op.NE, Op.IN, Op.NIN, Op.IS_EMPTY},
    "list": {Op.CONTAINS, Op.ANY, Op.ALL, Op.IS_EMPTY},
    "any": set(Op),
}
ISO = re.compile(r"\d{4}(-\d{2}(-\d{2})?)?")


def has_type(value, base) -> bool:
    if base == "int":
        return type(value) is int
    if base == "float":
        return type(value) is float
    if base == "str":
        return type(value) is str
    if base == "date":
        return type(value) is str and ISO.fullmatch(value) is not None
    if base == "bool":
        return type(value) is int and value in (0, 1)
    return type(value) in (int, float, str)


def assert_trustworthy(spec, info, max_top_k, metadata_rows):
    types = {m.name: FieldType.parse(m.type) for m in info.metadata_info}
    for f in spec.filters:
        assert isinstance(f, MetadataFilter)
        assert f.key in types, f
        ftype = types[f.key]
        base = ftype.base
        assert f.operator in EXPECTED_OPERATORS["list" if ftype.is_list else base], f
        if f.operator == Op.IS_EMPTY:
            assert f.value is None
        elif f.operator in (Op.IN, Op.NIN, Op.ANY, Op.ALL):
            assert isinstance(f.value, list) and f.value, f
            assert all(has_type(v, base) for v in f.value), f
        else:
            assert has_type(f.value, base), f
    assert 1 <= spec.top_k <= max_top_k
    tree = MetadataFilters(filters=spec.filters)
    for md in metadata_rows:  # the store's own leaf semantics never raise on the result
        metadata_matches(tree, md)


JUNK_OPERATORS = ["equals", "=", "gte", ">=", "in", "IN", "not in", "=~", "~~", "between", "", "like", "$lt"]
SAMPLE_VALUES = [
    "2023",
    "2023.0",
    "2021-05-01",
    "May 2023",
    "2023年5月",
    "last year",
    "Biology ",
    "EN",
    "food",
    "blog",
    "Coral Reef Ecology",
    "true",
    "n/a",
    "1,000",
    "bees",
]


def spec_strategy(keys):
    scalars = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-3000, 3000),
        st.integers(),
        st.floats(),
        st.text(max_size=12),
        st.sampled_from(SAMPLE_VALUES),
        st.dates(),
    )
    values = scalars | st.lists(scalars, max_size=4)
    operators = st.one_of(
        st.sampled_from(list(Op)),
        st.sampled_from([op.value for op in Op]),
        st.sampled_from(JUNK_OPERATORS),
        st.text(max_size=5),
        st.none(),
        st.integers(),
    )
    key = st.one_of(st.sampled_from(keys), st.sampled_from(keys), st.text(max_size=10))
    item = st.one_of(
        st.fixed_dictionaries({"key": key, "value": values, "operator": operators}),
        st.fixed_dictionaries({"key": key, "value": values}),
        st.tuples(key, operators, values),
        st.integers(),
        st.none(),
        st.text(max_size=4),
    )
    filters = st.one_of(st.lists(item, max_size=5), st.none(), st.dictionaries(key, values, max_size=3))
    top_k = st.one_of(st.none(), st.integers(-5, 60), st.text(max_size=3), st.floats(), st.booleans())
    return st.fixed_dictionaries(
        {"query": st.one_of(st.text(max_size=8), st.none()), "filters": filters, "top_k": top_k}
    )


SAMPLE_KEYS = list(TYPES) + ["first_author", "topic", "publication_year", "Category", " YEAR ", "lang-uage", "doc_id"]
EXTENDED_KEYS = [m.name for m in EXTENDED.metadata_info] + ["Tags", "open-access", "pub_date", "rating_avg"]
PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(
    spec=spec_strategy(SAMPLE_KEYS),
    use_vocabulary=st.booleans(),
    similarity_top_k=st.integers(1, 30),
    max_top_k=st.integers(1, 20),
)
def test_property_sample_schema(spec, use_vocabulary, similarity_top_k, max_top_k):
    v = SpecValidator(
        INFO,
        vocabulary=VOCABULARY if use_vocabulary else None,
        today=TODAY,
        similarity_top_k=similarity_top_k,
        max_top_k=max_top_k,
    )
    before = copy.deepcopy(spec)
    result, report = v.validate(spec)
    assert spec == before
    assert report.ok
    assert_trustworthy(result, INFO, max_top_k, CORPUS.values())
    if use_vocabulary:  # equality values all occur in the corpus
        for f in result.filters:
            if f.operator in (Op.EQ, Op.NE, Op.IN, Op.NIN):
                assert set(f.value if isinstance(f.value, list) else [f.value]) <= VOCABULARY[f.key]


@PROPERTY
@given(spec=spec_strategy(EXTENDED_KEYS), use_vocabulary=st.booleans())
def test_property_other_types(spec, use_vocabulary):
    v = SpecValidator(EXTENDED, vocabulary=PAPER_VOCABULARY if use_vocabulary else None, today=TODAY)
    result, report = v.validate(spec)
    assert report.ok
    assert_trustworthy(result, EXTENDED, 10, PAPERS)


@PROPERTY
@given(spec=spec_strategy(SAMPLE_KEYS))
def test_property_reject_policy_raises_or_drops_nothing(spec):
    v = SpecValidator(INFO, vocabulary=VOCABULARY, key_policy="reject", today=TODAY)
    try:
        result, report = v.validate(spec)
    except SpecError as error:
        assert error.problems and str(error).count("\n- ") == len(error.problems)
        assert all(p.message for p in error.problems)
        return
    assert not any(kind.startswith("dropped") for kind in report.kinds())
    assert_trustworthy(result, INFO, 10, CORPUS.values())
