"""The labelled auto-retriever query sets: ``wrong_polarity`` and the bundled files' form.

``benchmarks/auto_accuracy.py`` scores the rule-based spec generator on every
set in its ``LABELLED_SETS``; these tests check its pure polarity function on
synthetic filters and that each bundled set file (shipped in
``llama_index_ext_recursive/sample_data``) is well formed against its own
schema. No accuracy figure is asserted here.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from datetime import date
from importlib import resources
from pathlib import Path

import pytest
from llama_index.core.vector_stores.types import FilterOperator, MetadataFilter

from llama_index_ext_recursive.schema import FieldType

_SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "auto_accuracy.py"
_spec = importlib.util.spec_from_file_location("auto_accuracy", _SCRIPT)
auto_accuracy = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("auto_accuracy", auto_accuracy)  # dataclasses look their module up
_spec.loader.exec_module(auto_accuracy)
wrong_polarity = auto_accuracy.wrong_polarity

OPERATORS = {"==", "!=", ">", ">=", "<", "<=", "in", "nin"}
COMPARISONS = {">", ">=", "<", "<="}
HAN = re.compile(r"[\u4e00-\u9fff]")


def f(key, op, value):
    return {"key": key, "operator": op, "value": value}


# ------------------------------------------------------------------ wrong_polarity


def test_exclusion_read_as_equality():
    assert wrong_polarity([f("source", "!=", "blog")], [f("source", "==", "blog")]) == [("source", "!=", "==", "blog")]


def test_nin_read_as_in_reports_the_shared_values_only():
    got = wrong_polarity([f("cuisine", "nin", ["thai", "mexican"])], [f("cuisine", "in", ["mexican", "french"])])
    assert got == [("cuisine", "nin", "in", "mexican")]


@pytest.mark.parametrize("op,value", [("contains", "rust"), ("any", ["rust", "go"])])
def test_exclusion_read_as_list_assertion(op, value):
    assert wrong_polarity([f("tags", "!=", "rust")], [f("tags", op, value)]) == [("tags", "!=", op, "rust")]


def test_assertion_read_as_exclusion():
    assert wrong_polarity([f("year", "==", 2021)], [f("year", "!=", 2021)]) == [("year", "==", "!=", 2021)]
    assert wrong_polarity([f("genre", "in", ["drama", "horror"])], [f("genre", "nin", ["horror"])]) == [
        ("genre", "in", "nin", "horror")
    ]


def test_metadata_filter_objects_are_accepted():
    got = [MetadataFilter(key="language", operator=FilterOperator.EQ, value="en")]
    assert wrong_polarity([f("language", "!=", "en")], got) == [("language", "!=", "==", "en")]


@pytest.mark.parametrize(
    "expected,got",
    [
        ([f("source", "!=", "blog")], [f("source", "!=", "blog")]),  # right
        ([f("source", "!=", "blog")], [f("source", "==", "manual")]),  # wrong value, same polarity
        ([f("source", "!=", "blog")], [f("category", "==", "blog")]),  # another key
        ([f("source", "==", "blog")], [f("source", "in", ["blog", "x"])]),  # both assert
        ([f("source", "nin", ["a", "b"])], [f("source", "!=", "a")]),  # both exclude
        ([f("year", ">=", 2020)], [f("year", ">", 2019)]),  # same side
        ([f("year", ">=", 2020)], []),  # missing, not flipped
    ],
)
def test_not_a_flip(expected, got):
    assert wrong_polarity(expected, got) == []


def test_lower_bound_read_as_upper_bound_and_back():
    assert wrong_polarity([f("runtime", ">", 120)], [f("runtime", "<=", 120)]) == [("runtime", ">", "<=", 120)]
    assert wrong_polarity([f("year", "<", 2020)], [f("year", ">=", 2020)]) == [("year", "<", ">=", 2020)]


def test_bounds_on_another_key_do_not_count():
    assert wrong_polarity([f("year", ">", 2020)], [f("runtime", "<", 2020)]) == []


def test_only_one_sided_output_counts_as_flipped():
    # the label's lower bound is there, alongside a spurious upper bound: not a flip
    assert wrong_polarity([f("year", ">=", 2020)], [f("year", ">=", 2020), f("year", "<=", 2026)]) == []
    # a range read as one side only is a missing bound, not a flip
    assert wrong_polarity([f("year", ">=", 2019), f("year", "<=", 2021)], [f("year", "<=", 2021)]) == []


def test_several_flips_in_one_query():
    expected = [f("genre", "!=", "horror"), f("runtime", "<", 100)]
    got = [f("genre", "==", "horror"), f("runtime", ">", 100)]
    assert sorted(wrong_polarity(expected, got)) == [("genre", "!=", "==", "horror"), ("runtime", "<", ">", 100)]


# ------------------------------------------------------------------ bundled set files


def _problems(labelled) -> list:
    """Everything wrong with a loaded set, rows named by index (held-out queries stay unprinted)."""
    types = {m.name: FieldType.of(m) for m in labelled.info.metadata_info}
    problems = []
    for key in list(labelled.vocabulary) + list(labelled.synonyms):
        if key not in types:
            problems.append(f"vocabulary/synonyms key {key!r} is not in metadata_info")
    for key, phrases in labelled.synonyms.items():
        for phrase, value in phrases.items():
            if value not in labelled.vocabulary.get(key, set()):
                problems.append(f"synonym {phrase!r} -> {value!r} is not in {key}'s vocabulary")
    if labelled.today:
        date.fromisoformat(labelled.today)
    seen = set()
    for i, row in enumerate(labelled.rows):
        where = f"{labelled.name} query #{i}"
        if not isinstance(row.get("query"), str) or not row["query"].strip():
            problems.append(f"{where}: no query text")
            continue
        if row["query"] in seen:
            problems.append(f"{where}: duplicate query")
        seen.add(row["query"])
        if row.get("today"):
            date.fromisoformat(row["today"])
        if not all(isinstance(t, str) for t in row.get("tags", [])):
            problems.append(f"{where}: tags are not strings")
        expected = row["expected"]
        top_k = expected.get("top_k")
        if top_k is not None and not (isinstance(top_k, int) and top_k > 0):
            problems.append(f"{where}: top_k {top_k!r}")
        for flt in expected["filters"]:
            key, op, value = flt["key"], flt["operator"], flt["value"]
            if key not in types:
                problems.append(f"{where}: key {key!r} is not declared in metadata_info")
                continue
            if op not in OPERATORS:
                problems.append(f"{where}: operator {op!r}")
                continue
            if op in ("in", "nin") and not (isinstance(value, list) and value):
                problems.append(f"{where}: {op} value is not a non-empty list")
                continue
            if op not in ("in", "nin") and isinstance(value, list):
                problems.append(f"{where}: {op} value is a list")
                continue
            ftype = types[key]
            if op in COMPARISONS and not ftype.is_numeric:
                problems.append(f"{where}: {op} on non-numeric key {key!r}")
            for v in value if isinstance(value, list) else [value]:
                if ftype.is_numeric and (isinstance(v, bool) or not isinstance(v, (int, float))):
                    problems.append(f"{where}: {key} value {v!r} is not a number")
                if isinstance(v, str) and v not in labelled.vocabulary.get(key, set()):
                    problems.append(f"{where}: {key} value {v!r} is not in the vocabulary")
    return problems


@pytest.mark.parametrize(
    "name,filename,role", auto_accuracy.LABELLED_SETS, ids=[name for name, _, _ in auto_accuracy.LABELLED_SETS]
)
def test_bundled_set_is_well_formed(name, filename, role):
    labelled = auto_accuracy.load_set(name, filename, role)
    assert labelled is not None, f"{filename} is listed in LABELLED_SETS but not bundled"
    assert labelled.rows, f"{name}: no queries"
    assert _problems(labelled) == []
    if role in {auto_accuracy.HELD_OUT, auto_accuracy.TUNED_AFTER_BLIND}:
        zh = sum(bool(HAN.search(row["query"])) for row in labelled.rows)
        assert len(labelled.rows) >= 40, f"{name}: {len(labelled.rows)} queries, a held-out set needs 40"
        # bilingual: at least two queries in five Chinese (issue 30's sets were briefed 30 English / 20 Chinese)
        assert 5 * zh >= 2 * len(labelled.rows), f"{name}: {zh} of {len(labelled.rows)} queries are Chinese"


def test_every_bundled_set_file_is_listed():
    data = resources.files("llama_index_ext_recursive").joinpath("sample_data")
    bundled = {p.name for p in data.iterdir() if re.fullmatch(r"auto_queries.*\.jsonl?", p.name)}
    listed = {filename for _, filename, _ in auto_accuracy.LABELLED_SETS}
    assert bundled <= listed, f"set files missing from LABELLED_SETS: {sorted(bundled - listed)}"


def test_the_problem_check_catches_a_malformed_row():
    labelled = auto_accuracy.load_set("sample", "auto_queries.jsonl", auto_accuracy.TUNING)
    labelled.rows = [
        {"query": "a", "expected": {"filters": [f("colour", "==", "red")], "top_k": None}},
        {"query": "b", "expected": {"filters": [f("category", "~=", "food")], "top_k": None}},
        {"query": "c", "expected": {"filters": [f("category", "in", "food")], "top_k": None}},
        {"query": "d", "expected": {"filters": [f("category", "==", "fooood")], "top_k": None}},
        {"query": "e", "expected": {"filters": [f("year", ">=", "2020")], "top_k": None}},
        {"query": "f", "expected": {"filters": [f("category", ">", "food")], "top_k": 0}},
        {"query": "f", "expected": {"filters": [], "top_k": None}},
    ]
    problems = _problems(labelled)
    for needle in (
        "'colour' is not declared",
        "operator '~='",
        "in value is not a non-empty list",
        "'fooood' is not in the vocabulary",
        "'2020' is not a number",
        "non-numeric key",
        "top_k 0",
        "duplicate query",
    ):
        assert any(needle in p for p in problems), (needle, problems)
