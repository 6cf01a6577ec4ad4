"""Auto-retriever rules on hostile input (issue 23): numbers read as written, long queries bounded."""

from __future__ import annotations

import pytest

from llama_index_ext_recursive.auto.numbers import in_range, parse_number
from llama_index_ext_recursive.auto.rules import MAX_RULE_CHARS
from test_auto_rules import GEN, RENT, filters_of


@pytest.mark.parametrize(
    "text,value",
    [
        ("3万", 30_000), ("1.5万", 15_000), ("2亿", 200_000_000), ("3千", 3_000), ("三万", 30_000),
        ("两百万", 2_000_000), ("5k", 5_000), ("5K", 5_000), ("2M", 2_000_000), ("2 million", 2_000_000),
        ("1,000,000", 1_000_000), ("1,500.5", 1500.5), ("1e3", 1_000), ("2.5E2", 250), ("-3", -3),
        ("30", 30), ("thirty", 30),
    ],
)
def test_numbers_are_read_with_their_magnitude_separators_decimals_and_exponents(text, value):
    assert parse_number(text) == value and in_range(parse_number(text))


@pytest.mark.parametrize("text", ["1e309", "9" * 400, "1e20"])
def test_a_number_no_filter_can_hold_exactly_is_out_of_range(text):
    assert not in_range(parse_number(text))


@pytest.mark.parametrize(
    "query,expected",
    [
        ("rent under 3万 yuan", {("monthly_rent", "<", 30_000)}),
        ("月租低于3万元", {("monthly_rent", "<", 30_000)}),
        ("月租1.5万以内", {("monthly_rent", "<=", 15_000)}),
        ("租金不超过三万元", {("monthly_rent", "<=", 30_000)}),
        ("rent under 5k yuan", {("monthly_rent", "<", 5_000)}),
        ("rent under 1,000,000 yuan", {("monthly_rent", "<", 1_000_000)}),
        ("rent under 1e3 yuan", {("monthly_rent", "<", 1_000)}),
        ("rent over 2 million yuan", {("monthly_rent", ">", 2_000_000)}),
        ("rent between 1.2万 and 2万 yuan", {("monthly_rent", ">=", 12_000), ("monthly_rent", "<=", 20_000)}),
        ("rent under 2.5 yuan", {("monthly_rent", "<", 2.5)}),  # an int key keeps a fractional bound
        ("monthly_rent < 3万", {("monthly_rent", "<", 30_000)}),
        ("monthly_rent >= 1,500", {("monthly_rent", ">=", 1_500)}),
    ],
)
def test_comparisons_read_the_whole_number(query, expected):
    assert filters_of(RENT, query) == expected


@pytest.mark.parametrize("query", ["rent under 1e309 yuan", "monthly_rent < 1e309", f"rent under {'9' * 30} yuan"])
def test_an_out_of_range_number_gives_no_filter_and_a_note(query):
    reading = RENT.read(query)
    assert reading.spec.filters == []
    assert any("too large to compare exactly" in note for note in reading.notes)


@pytest.mark.parametrize(
    "unit", ["2019 ", "not biology ", "biology or food or ", "生物 ", "between 1.5万 and 2万 yuan ", "1,000,"]
)
def test_a_crafted_long_query_is_read_up_to_the_bound_and_the_rest_is_kept_as_text(unit):
    query = (unit * (100_000 // len(unit) + 1))[:100_000]
    for generator in (GEN, RENT):
        reading = generator.read(query)
        assert any(f"filters and top_k are read from its first" in note for note in reading.notes)
        assert len(reading.spec.query) >= len(query) - MAX_RULE_CHARS  # nothing beyond the bound is dropped


def test_a_query_within_the_bound_gets_no_bound_note():
    assert not any("first" in note for note in GEN.read("biology articles from 2021").notes)
