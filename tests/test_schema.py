"""schema.py: one reading of ``MetadataInfo.type``, shared by every reader (pure logic, no embeddings)."""

from __future__ import annotations

from datetime import date

import pytest
from llama_index.core.schema import TextNode
from llama_index.core.vector_stores.types import FilterOperator, MetadataInfo, VectorStoreInfo

from llama_index_ext_recursive.auto import RuleBasedSpecGenerator, SpecValidator
from llama_index_ext_recursive.auto.prompt import operators_text
from llama_index_ext_recursive.schema import (
    FieldType,
    field_type,
    holds_years,
    infer_vector_store_info,
    metadata_vocabulary,
)

Op = FilterOperator


@pytest.mark.parametrize(
    "declared, base, is_list",
    [
        ("int", "int", False),
        ("Integer", "int", False),
        ("int64", "int", False),
        ("float", "float", False),
        ("decimal", "float", False),
        ("numeric", "float", False),
        ("number", "float", False),
        ("str", "str", False),
        ("keyword", "str", False),
        ("bool", "bool", False),
        ("datetime", "date", False),
        ("Optional[int]", "int", False),
        ("int | None", "int", False),
        ("List[str]", "str", True),
        ("list of strings", "str", True),
        ("str[]", "str", True),
        ("list", "any", True),
        ("geo_point", "any", False),
    ],
)
def test_declared_types_are_read_once(declared, base, is_list):
    assert FieldType.parse(declared) == FieldType(base, is_list)


def info(name: str, type_: str, description: str = "") -> VectorStoreInfo:
    return VectorStoreInfo(
        content_info="test", metadata_info=[MetadataInfo(name=name, type=type_, description=description)]
    )


@pytest.mark.parametrize(
    "declared", ["int", "integer", "long", "float", "number", "double", "decimal", "numeric", "real"]
)
def test_a_numeric_type_is_numeric_for_the_validator_and_the_rules_alike(declared):
    """Upstream-style 'decimal' used to be numeric for the validator but text for the rules."""
    schema = info("price", declared)
    spec, _ = SpecValidator(schema).validate(
        {"query": "q", "filters": [{"key": "price", "value": "3", "operator": ">"}]}
    )
    assert [(f.key, f.operator, f.value) for f in spec.filters] == [("price", Op.GT, 3)]
    rules = RuleBasedSpecGenerator(schema, {}, today=date(2025, 6, 1)).generate("price > 3 tea")
    assert [(f.key, f.operator, f.value) for f in rules.filters] == [("price", Op.GT, 3)]
    assert rules.query == "tea"


def test_a_text_type_takes_no_range_for_either_reader():
    schema = info("colour", "keyword")
    assert RuleBasedSpecGenerator(schema, {}).generate("colour > 3 tea").filters == []
    spec, report = SpecValidator(schema).validate(
        {"query": "q", "filters": [{"key": "colour", "value": 3, "operator": ">"}]}
    )
    assert spec.filters == [] and report.kinds() == ["dropped_filter"]


def test_year_fields_are_recognised_by_one_rule():
    published = MetadataInfo(name="published", type="decimal", description="Year of publication")
    pages = MetadataInfo(name="pages", type="int", description="number of pages")
    assert holds_years(published) and not holds_years(pages)
    rules = RuleBasedSpecGenerator(
        VectorStoreInfo(content_info="t", metadata_info=[pages, published]), {}, today=date(2025, 6, 1)
    )
    assert rules.year_key == "published"
    assert [(f.key, f.operator, f.value) for f in rules.generate("tea since 2020").filters] == [
        ("published", Op.GTE, 2020.0)
    ]


def test_iso_date_strings_are_dates():
    assert field_type(MetadataInfo(name="published_date", type="str", description="")) == FieldType("date")
    described = MetadataInfo(name="when", type="str", description="publication date, yyyy-mm-dd")
    assert field_type(described) == FieldType("date")
    plain = MetadataInfo(name="when", type="str", description="")
    assert field_type(plain) == FieldType("str")
    assert field_type(plain, ["2023-05-01", "2024-01-31"]) == FieldType("date")


def test_the_prompt_lists_the_operators_of_the_declared_types():
    text = operators_text(info("tags", "List[str]"))
    assert set(text.split(", ")) == {op.value for op in FieldType("str", True).operators}


def test_metadata_vocabulary_counts_list_elements_and_skips_unknowable_keys():
    nodes = [
        TextNode(text="a", metadata={"tags": ["x", "y"], "year": 2020, "blob": {"k": 1}, "id": "1"}),
        TextNode(text="b", metadata={"tags": ["y"], "year": 2021, "id": "2"}),
    ]
    vocabulary = metadata_vocabulary(nodes, max_values=2)
    assert vocabulary == {"tags": {"x", "y"}, "year": {2020, 2021}, "id": {"1", "2"}}
    assert "year" not in metadata_vocabulary(nodes, max_values=1)


def test_infer_vector_store_info_reads_scalar_keys_and_their_kinds():
    nodes = [
        TextNode(text="a", metadata={"year": 2020, "score": 0.5, "lang": "en", "ok": True, "tags": ["x"]}),
        TextNode(text="b", metadata={"year": 2021, "score": 1, "lang": "zh", "ok": False, "mixed": 1}),
        TextNode(text="c", metadata={"mixed": "one"}),
    ]
    schema = infer_vector_store_info(nodes)
    assert {(m.name, m.type) for m in schema.metadata_info} == {
        ("year", "int"),
        ("score", "float"),
        ("lang", "str"),
        ("ok", "bool"),
    }
    assert infer_vector_store_info([TextNode(text="a")]) is None
