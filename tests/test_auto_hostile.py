"""Auto-retriever rules on hostile input (issue 23): numbers read as written, long queries read in linear time."""

from __future__ import annotations

import pytest
from test_auto_rules import GEN, RENT, filters_of

from llama_index_ext_recursive.auto.numbers import in_range, parse_number
from llama_index_ext_recursive.auto.rules import MAX_RULE_CHARS
from llama_index_ext_recursive.auto.spans import Spans


@pytest.mark.parametrize(
    "text,value",
    [
        ("3万", 30_000),
        ("1.5万", 15_000),
        ("2亿", 200_000_000),
        ("3千", 3_000),
        ("三万", 30_000),
        ("两百万", 2_000_000),
        ("5k", 5_000),
        ("5K", 5_000),
        ("2M", 2_000_000),
        ("2 million", 2_000_000),
        ("1,000,000", 1_000_000),
        ("1,500.5", 1500.5),
        ("1e3", 1_000),
        ("2.5E2", 250),
        ("-3", -3),
        ("30", 30),
        ("thirty", 30),
        ("1.5k", 1_500),
        ("three thousand", 3_000),
        ("-5k", -5_000),
        ("2万5", 25_000),
        ("2万5千", 25_000),
        ("两万五", 25_000),
        ("3千5", 3_500),
        ("-2万5", -25_000),
    ],
)
def test_numbers_are_read_with_their_magnitude_separators_decimals_and_exponents(text, value):
    assert parse_number(text) == value and in_range(parse_number(text))


@pytest.mark.parametrize("text", ["1e309", "9" * 400, "1e20", "9007199254740993", "inf", "-inf", "nan"])
def test_a_number_no_filter_can_hold_exactly_is_out_of_range(text):
    assert not in_range(parse_number(text))


@pytest.mark.parametrize("text", ["1,2", "12,50", "1,0000", "2万5百", "1e"])
def test_a_comma_that_separates_no_thousands_is_no_number(text):
    assert parse_number(text) is None


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
        ("rent under three thousand yuan", {("monthly_rent", "<", 3_000)}),
        ("租金低于2万5", {("monthly_rent", "<", 25_000)}),
        ("月租两万五千元以内", {("monthly_rent", "<=", 25_000)}),
        ("月租3千5以内", {("monthly_rent", "<=", 3_500)}),
        ("monthly_rent < -5k", {("monthly_rent", "<", -5_000)}),
        ("monthly_rent >= 2万5", {("monthly_rent", ">=", 25_000)}),
        # a list or a decimal comma: no filter rather than "< 1" or "< 12"
        ("rent under 1,5 yuan", set()),
        ("rent under 12,50 yuan", set()),
    ],
)
def test_comparisons_read_the_whole_number(query, expected):
    assert filters_of(RENT, query) == expected


@pytest.mark.parametrize(
    "query",
    [
        "rent under 1e309 yuan",
        "monthly_rent < 1e309",
        f"rent under {'9' * 30} yuan",
        "rent under 9007199254740993 yuan",
        "monthly_rent < inf",
        "monthly_rent < nan",
        "monthly_rent >= -inf",
    ],
)
def test_an_out_of_range_number_gives_no_filter_and_a_note(query):
    reading = RENT.read(query)
    assert reading.spec.filters == []
    assert any("no filter can compare exactly" in note for note in reading.notes)


def _repeat(unit: str, size: int) -> str:
    return (unit * (size // len(unit) + 1))[:size]


@pytest.mark.parametrize(
    "generator,unit,expected",
    [
        # each of these cost the square of the query's length (seconds to hang at 10 kB);
        # within the bound the whole query is read, and read right
        (GEN, "not biology ", {("category", "!=", "biology")}),
        (GEN, "2019 ", {("year", "==", 2019)}),
        (GEN, "biology or food or ", {("category", "in", ("biology", "food"))}),
        (GEN, "生物 ", {("category", "==", "biology")}),
        (RENT, "rent between 1.5万 and 2万 yuan ", {("monthly_rent", ">=", 15_000), ("monthly_rent", "<=", 20_000)}),
    ],
)
def test_a_crafted_query_within_the_bound_is_read_whole(generator, unit, expected):
    reading = generator.read(_repeat(unit, MAX_RULE_CHARS // 2))
    assert {
        (f.key, f.operator.value, tuple(f.value) if isinstance(f.value, list) else f.value)
        for f in reading.spec.filters
    } == expected
    assert not any("read from its first" in note for note in reading.notes)


@pytest.mark.parametrize("run", [" ", " - ", "the "])
def test_a_long_run_of_spaces_or_filler_inside_a_phrase_is_read(run):
    # two \s* with only optional text between backtracked over every split of the run
    query = (
        "rent under" + _repeat(run, 9_000) + " 3万 yuan" if run == " " else "rent under 3万 yuan " + _repeat(run, 9_000)
    )
    assert filters_of(RENT, query) == {("monthly_rent", "<", 30_000)}


@pytest.mark.parametrize(
    "generator,unit",
    [(GEN, "2019 "), (GEN, "not biology "), (GEN, "生物 "), (RENT, "between 1.5万 and 2万 yuan "), (RENT, "1,000,")],
)
def test_a_crafted_long_query_is_read_up_to_the_bound_and_the_rest_is_kept_as_text(generator, unit):
    query = _repeat(unit, 100_000)
    reading = generator.read(query)
    assert any("filters and top_k are read from its first" in note for note in reading.notes)
    assert len(reading.spec.query) >= len(query) - MAX_RULE_CHARS  # nothing beyond the bound is dropped


@pytest.mark.parametrize(
    "spans,probe,overlaps",
    [
        ([(0, 5)], (5, 9), False),  # touching is not overlapping
        ([(0, 5)], (4, 9), True),
        ([(10, 20), (0, 5)], (6, 9), False),  # any order
        ([(10, 20), (0, 5)], (6, 11), True),
        ([(0, 5), (3, 12)], (11, 13), True),  # merged into (0, 12)
        ([(0, 5), (30, 40), (10, 20)], (21, 29), False),
        ([(0, 5), (30, 40), (10, 20)], (0, 100), True),
        ([], (0, 100), False),
    ],
)
def test_spans_answer_overlap_like_a_scan_of_every_span(spans, probe, overlaps):
    claimed = Spans(spans)
    assert claimed.overlaps(*probe) is overlaps
    assert overlaps == any(s < probe[1] and probe[0] < e for s, e in spans)


def test_a_query_within_the_bound_gets_no_bound_note():
    assert not any("first" in note for note in GEN.read("biology articles from 2021").notes)
