"""RuleBasedSpecGenerator: auto-retriever specs from English and Chinese queries without an LLM."""

from __future__ import annotations

import asyncio
import json
import re
import socket
from collections.abc import Iterable
from datetime import date
from importlib import resources
from typing import Any

import pytest
from conftest import FixedEmbedding
from hypothesis import given, settings
from hypothesis import strategies as st
from llama_index.core import Settings
from llama_index.core.vector_stores.types import (
    FilterOperator,
    MetadataFilter,
    MetadataInfo,
    VectorStoreInfo,
    VectorStoreQuerySpec,
)

from llama_index_ext_recursive import load_sample_documents, text
from llama_index_ext_recursive.auto.meaning import PhraseMatcher
from llama_index_ext_recursive.auto.rules import Match, RuleBasedSpecGenerator, _is_cjk_term
from llama_index_ext_recursive.sample import sample_vector_store_info
from llama_index_ext_recursive.schema import metadata_vocabulary

TODAY = date(2025, 6, 1)
INFO = sample_vector_store_info()
KEYS = {m.name for m in INFO.metadata_info}


def _vocabulary() -> dict[str, set[Any]]:
    return {k: v for k, v in metadata_vocabulary(load_sample_documents()).items() if k in KEYS}


VOCAB = _vocabulary()
GEN = RuleBasedSpecGenerator(INFO, VOCAB, today=TODAY)

Triple = tuple[str, str, Any]


def schema_info(content: str, **keys: tuple[str, str]) -> VectorStoreInfo:
    """A ``VectorStoreInfo`` from ``key=(type, description)`` pairs."""
    return VectorStoreInfo(
        content_info=content,
        metadata_info=[MetadataInfo(name=k, type=t, description=d) for k, (t, d) in keys.items()],
    )


def triples(filters: Iterable[MetadataFilter]) -> frozenset[Triple]:
    return frozenset(
        (f.key, f.operator.value, tuple(sorted(f.value, key=str)) if isinstance(f.value, list) else f.value)
        for f in filters
    )


def spec_of(query: str, gen: RuleBasedSpecGenerator = GEN) -> VectorStoreQuerySpec:
    return gen.generate(query)


def got(query: str, gen: RuleBasedSpecGenerator = GEN) -> frozenset[Triple]:
    return triples(spec_of(query, gen).filters)


# -------------------- categorical values


@pytest.mark.parametrize(
    "query, expected",
    [
        ("food articles about fermentation", {("category", "==", "food")}),
        ("FOOD ARTICLES", {("category", "==", "food")}),
        ("biology", {("category", "==", "biology")}),
        ("sport articles", {("category", "==", "sports")}),  # singular of a plural value
        ("Manuals about Python", {("source", "==", "manual")}),  # plural of a singular value
        ("handbooks", {("source", "==", "handbook")}),
        ("encyclopedias on reefs", {("source", "==", "encyclopedia")}),
        ("a transportation article", {("category", "==", "transport")}),
    ],
)
def test_exact_values_word_boundary_case_and_number(query: str, expected: set[Triple]) -> None:
    assert got(query) == expected


def test_values_need_word_boundaries() -> None:
    assert got("seafood recipes") == frozenset()  # "food" inside a word
    assert got("blogging tips") == frozenset()
    assert got("en route to the lighthouse") == frozenset()  # raw code "en" is not a word match


@pytest.mark.parametrize(
    "query, expected",
    [
        ("articles in Chinese about tea", {("language", "==", "zh")}),
        ("中文资料", {("language", "==", "zh")}),
        ("Is there a Chinese version of the tea article?", {("language", "==", "zh")}),
        ("汉语文章", {("language", "==", "zh")}),
        ("English documents about waste sorting", {("language", "==", "en")}),
        ("英文文章", {("language", "==", "en")}),
        ("英语资料", {("language", "==", "en")}),
        ("blog posts about bread", {("source", "==", "blog")}),
        ("a blog post on bread", {("source", "==", "blog")}),
        ("博客", {("source", "==", "blog")}),
        ("encyclopedia entries on reefs", {("source", "==", "encyclopedia")}),
        ("百科文章", {("source", "==", "encyclopedia")}),
        ("Python packaging manual", {("source", "==", "manual")}),
        ("软件手册", {("category", "==", "software"), ("source", "==", "manual")}),
        ("使用手册", {("source", "==", "manual")}),
        ("employee handbook on expenses", {("source", "==", "handbook")}),
        ("员工手册里的规定", {("source", "==", "handbook")}),
        ("垃圾分类指南", {("source", "==", "handbook")}),
    ],
)
def test_builtin_language_and_source_synonyms(query: str, expected: set[Triple]) -> None:
    assert got(query) == expected


@pytest.mark.parametrize(
    "word, value",
    [
        ("美食", "food"),
        ("食物", "food"),
        ("生物", "biology"),
        ("生物学", "biology"),
        ("能源", "energy"),
        ("历史", "history"),
        ("体育", "sports"),
        ("运动", "sports"),
        ("软件", "software"),
        ("政策", "policy"),
        ("环境", "environment"),
        ("交通", "transport"),
        ("园艺", "gardening"),
    ],
)
def test_chinese_category_synonyms(word: str, value: str) -> None:
    assert got(f"关于{word}的文章") == {("category", "==", value)}
    assert got(f"{word}类的文章") == {("category", "==", value)}


@pytest.mark.parametrize(
    "query, values",
    [
        ("food or biology articles", ("biology", "food")),
        ("articles about sports or history", ("history", "sports")),
        ("体育或美食类的博客", ("food", "sports")),
        ("环境或交通方面的文章", ("environment", "transport")),
    ],
)
def test_several_values_of_one_key_become_in(query: str, values: tuple[str, ...]) -> None:
    assert ("category", "in", values) in got(query)


def test_in_keeps_query_order_and_int_values() -> None:
    spec = spec_of("documents from 2019 or 2020")
    assert [(f.key, f.operator, f.value) for f in spec.filters] == [("year", FilterOperator.IN, [2019, 2020])]


@pytest.mark.parametrize(
    "query",
    [
        "What is the history of lighthouses?",  # "X of Y" is a topic
        "the biology of coral reefs",
        "How much energy can a home solar array produce?",
        "How is Chinese tea brewed?",  # language word modifying a non-document noun
        "What are the rules in the travel policy?",  # compound noun
        "灯塔的历史",
        "中国高铁的历史",
        "高铁如何节约能源？",  # 能源 inside the word 节约能源
        "生物多样性",
        "运动员的饮食",  # 运动 inside 运动员
    ],
)
def test_value_words_used_as_topic_are_not_filters(query: str) -> None:
    spec = spec_of(query)
    assert spec.filters == []
    assert spec.query == query


# -------------------- years


@pytest.mark.parametrize(
    "query, expected",
    [
        ("documents from 2021", {("year", "==", 2021)}),
        ("published in 2023", {("year", "==", 2023)}),
        ("the 2022 marathon blog", {("year", "==", 2022), ("source", "==", "blog")}),
        ("2023年的文档", {("year", "==", 2023)}),
        ("articles published after 2022", {("year", ">", 2022)}),
        ("newer than 2022", {("year", ">", 2022)}),
        ("晚于2022年的文章", {("year", ">", 2022)}),
        ("anything since 2023", {("year", ">=", 2023)}),
        ("articles from 2023 or later", {("year", ">=", 2023)}),
        ("from 2021 onwards", {("year", ">=", 2021)}),
        ("no earlier than 2021", {("year", ">=", 2021)}),
        ("2024年以后的博客", {("year", ">=", 2024), ("source", "==", "blog")}),
        ("2024年之后", {("year", ">=", 2024)}),
        ("2022年以来", {("year", ">=", 2022)}),
        ("documents before 2020", {("year", "<", 2020)}),
        ("older than 2022", {("year", "<", 2022)}),
        ("2020年之前的资料", {("year", "<", 2020)}),
        ("2021年以前", {("year", "<", 2021)}),
        ("早于2021年的手册", {("year", "<", 2021), ("source", "==", "manual")}),
        ("sources until 2021", {("year", "<=", 2021)}),
        ("up to and including 2020", {("year", "<=", 2020)}),
        ("no later than 2020", {("year", "<=", 2020)}),
        ("2020 or earlier", {("year", "<=", 2020)}),
        ("截至2021年", {("year", "<=", 2021)}),
        ("2021年及以前", {("year", "<=", 2021)}),
        ("between 2019 and 2021", {("year", ">=", 2019), ("year", "<=", 2021)}),
        ("from 2018 through 2020", {("year", ">=", 2018), ("year", "<=", 2020)}),
        ("2021-2019", {("year", ">=", 2019), ("year", "<=", 2021)}),  # bounds sorted
        ("2019年到2021年之间", {("year", ">=", 2019), ("year", "<=", 2021)}),
        ("2018年至2020年的百科", {("year", ">=", 2018), ("year", "<=", 2020), ("source", "==", "encyclopedia")}),
        ("articles between 2019-2021 on bees", {("year", ">=", 2019), ("year", "<=", 2021)}),
        ("documents from 2020 to now", {("year", ">=", 2020)}),
        ("2020年至今的博客", {("year", ">=", 2020), ("source", "==", "blog")}),
        ("articles from the 2010s", {("year", ">=", 2010), ("year", "<=", 2019)}),
        ("2010年代的文章", {("year", ">=", 2010), ("year", "<=", 2019)}),
        ("pre-2020 encyclopedia articles", {("year", "<", 2020), ("source", "==", "encyclopedia")}),
        ("年份大于2020的文章", {("year", ">", 2020)}),
    ],
)
def test_years_and_comparisons(query: str, expected: set[Triple]) -> None:
    assert got(query) == expected


@pytest.mark.parametrize(
    "query, expected",
    [
        ("documents from the last three years", {("year", ">=", 2023)}),
        ("past 2 years", {("year", ">=", 2024)}),
        ("the previous 5 years", {("year", ">=", 2021)}),
        ("最近三年的文章", {("year", ">=", 2023)}),
        ("近五年", {("year", ">=", 2021)}),
        ("过去两年的百科条目", {("year", ">=", 2024), ("source", "==", "encyclopedia")}),
        ("this year's documents", {("year", "==", 2025)}),
        ("今年发布的文章", {("year", "==", 2025)}),
        ("documents from last year", {("year", "==", 2024)}),
        ("去年的文章", {("year", "==", 2024)}),
        ("the year before last", {("year", "==", 2023)}),
        ("前年的资料", {("year", "==", 2023)}),
        ("the last decade", {("year", ">=", 2016)}),
        ("近十年", {("year", ">=", 2016)}),
    ],
)
def test_relative_years_use_today(query: str, expected: set[Triple]) -> None:
    assert got(query) == expected


def test_relative_years_follow_the_given_today() -> None:
    later = RuleBasedSpecGenerator(INFO, VOCAB, today=date(2030, 1, 15))
    assert got("last three years", later) == {("year", ">=", 2028)}
    assert got("去年", later) == {("year", "==", 2029)}


def test_today_defaults_to_the_current_date() -> None:
    gen = RuleBasedSpecGenerator(INFO, VOCAB)
    assert got("this year", gen) == {("year", "==", date.today().year)}


@pytest.mark.parametrize(
    "query",
    [
        "Why did the Pharos matter to sailors before 1300?",
        "How did lighthouse keepers live in 1850?",
        "What's new in Python 3.12 packaging?",
        "a 1000 word summary",
    ],
)
def test_years_outside_the_corpus_range_and_other_numbers_are_topic(query: str) -> None:
    spec = spec_of(query)
    assert spec.filters == [] and spec.query == query


def test_year_key_found_from_description_or_values() -> None:
    assert GEN.year_key == "year"
    info = schema_info(
        "x",
        pages=("int", "page count"),
        published=("int", "publication date"),
    )
    gen = RuleBasedSpecGenerator(info, {"pages": {3, 40}, "published": {2019, 2021}}, today=TODAY)
    assert gen.year_key == "published"
    assert got("documents after 2020", gen) == {("published", ">", 2020)}
    no_year = RuleBasedSpecGenerator(
        VectorStoreInfo(content_info="x", metadata_info=[MetadataInfo(name="pages", type="int", description="")]),
        {"pages": {3, 40}},
        today=TODAY,
    )
    assert no_year.year_key is None
    assert no_year.generate("documents after 2020").filters == []


# -------------------- combinations, negation, explicit


@pytest.mark.parametrize(
    "query, expected",
    [
        (
            "software manuals published since 2022",
            {("category", "==", "software"), ("source", "==", "manual"), ("year", ">=", 2022)},
        ),
        (
            "energy documents before 2024 in English",
            {("category", "==", "energy"), ("year", "<", 2024), ("language", "==", "en")},
        ),
        ("去年的园艺博客", {("year", "==", 2024), ("category", "==", "gardening"), ("source", "==", "blog")}),
        ("2019年到2021年之间的生物学文章", {("year", ">=", 2019), ("year", "<=", 2021), ("category", "==", "biology")}),
        ("blog posts and manuals from 2021 onwards", {("source", "in", ("blog", "manual")), ("year", ">=", 2021)}),
    ],
)
def test_combinations(query: str, expected: set[Triple]) -> None:
    assert got(query) == expected


@pytest.mark.parametrize(
    "query, expected",
    [
        ("articles not in English", {("language", "!=", "en")}),
        ("non-English sources about bees", {("language", "!=", "en")}),
        ("documents except blogs and manuals", {("source", "nin", ("blog", "manual"))}),
        ("非中文文章", {("language", "!=", "zh")}),
        ("除了博客以外的文章", {("source", "!=", "blog")}),
        ("不包括手册的2020年资料", {("source", "!=", "manual"), ("year", "==", 2020)}),
    ],
)
def test_negated_values(query: str, expected: set[Triple]) -> None:
    assert got(query) == expected


@pytest.mark.parametrize(
    "query, expected",
    [
        ("language=zh", {("language", "==", "zh")}),
        ("source: Blog", {("source", "==", "blog")}),  # vocabulary casing restored
        ("source=博客", {("source", "==", "blog")}),  # synonym accepted as a value
        ("year >= 2021 bees", {("year", ">=", 2021)}),
        ("year at most 2020", {("year", "<=", 2020)}),
        ("sources not in English", {("language", "!=", "en")}),  # no "source != in"
    ],
)
def test_explicit_key_value_forms(query: str, expected: set[Triple]) -> None:
    assert got(query) == expected


def test_generic_numeric_key_comparisons() -> None:
    info = schema_info(
        "x",
        rating=("float", "stars"),
        page_count=("int", "pages"),
    )
    gen = RuleBasedSpecGenerator(info, {}, today=TODAY)
    assert got("reviews with rating above 4.5.", gen) == {("rating", ">", 4.5)}
    assert got("page count at least 10", gen) == {("page_count", ">=", 10)}
    assert got("page_count<=3", gen) == {("page_count", "<=", 3)}


def test_list_typed_keys_use_contains_and_any() -> None:
    info = VectorStoreInfo(
        content_info="x", metadata_info=[MetadataInfo(name="tags", type="list[str]", description="tags")]
    )
    gen = RuleBasedSpecGenerator(info, {"tags": {"solar", "roofing", "tea"}}, today=TODAY)
    assert got("solar articles", gen) == {("tags", "contains", "solar")}
    assert got("solar or roofing articles", gen) == {("tags", "any", ("roofing", "solar"))}


# -------------------- remaining query and top_k


@pytest.mark.parametrize(
    "query, rest",
    [
        ("food articles about fermentation", "fermentation"),
        ("What was published in 2023 about solar panels?", "solar panels"),
        ("Which sources from 2019 describe honeybee castes?", "honeybee castes"),
        (
            "How do worker bees survive the winter? Only English sources please",
            "How do worker bees survive the winter?",
        ),
        ("Northwind travel reimbursement rules, handbook only", "Northwind travel reimbursement rules"),
        ("Show me the top 5 results about solar panels", "solar panels"),
        ("food or biology articles", ""),
        ("documents from the last three years", ""),
        ("biology", ""),
        ("关于美食的文章", ""),
        ("中文博客中如何给番茄授粉", "如何给番茄授粉"),
        ("员工手册里关于差旅报销的规定", "差旅报销的规定"),
        ("前5个关于垃圾分类的结果", "垃圾分类"),
        ("英文资料中关于太阳能板的内容，返回10条", "太阳能板"),
        ("2025年的差旅报销政策", "差旅报销政策"),
        ("How do I keep a sourdough starter alive?", "How do I keep a sourdough starter alive?"),
    ],
)
def test_remaining_query(query: str, rest: str) -> None:
    assert spec_of(query).query == rest


@pytest.mark.parametrize(
    "query, top_k",
    [
        ("Show me the top 5 results about solar panels", 5),
        ("top 3 encyclopedia entries about reefs", 3),
        ("best 3 results for marathon taper", 3),
        ("first five results", 5),
        ("top-5 blog posts", 5),
        ("3 results about the waggle dance", 3),
        ("How do coral polyps build reefs? give me 4 results", 4),
        ("give me five blog posts about bread", 5),
        ("前5个关于垃圾分类的结果", 5),
        ("前三篇关于茶叶储存的文章", 3),
        ("给我3篇关于高铁的文章", 3),
        ("英文资料中关于太阳能板的内容，返回10条", 10),
        ("the top 10 mistakes beginner marathon runners make", None),
        ("first marathon", None),
        ("documents from the last 3 years", None),
        ("2021 articles", None),
        ("最近三年的文章", None),
    ],
)
def test_top_k_phrases(query: str, top_k: Any) -> None:
    assert spec_of(query).top_k == top_k


# -------------------- explain, async, no LLM, synonyms


def test_matches_explain_the_spec() -> None:
    query = "English blog posts between 2019 and 2021, top 3"
    spec, matches = GEN.generate_with_matches(query)
    assert all(isinstance(m, Match) and query[m.start : m.end] == m.text for m in matches)
    assert [m.text for m in matches] == [
        "English",
        "blog posts",
        "between 2019 and 2021",
        "between 2019 and 2021",
        "top 3",
    ]
    assert [(m.key, m.operator, m.value) for m in matches] == [
        ("language", FilterOperator.EQ, "en"),
        ("source", FilterOperator.EQ, "blog"),
        ("year", FilterOperator.GTE, 2019),
        ("year", FilterOperator.LTE, 2021),
        (None, None, 3),
    ]
    assert {m.rule for m in matches} == {
        "description",
        "synonym",
        "year-range",
        "top_k",
    }  # "en (English)" in the description
    assert spec.top_k == 3 and spec.query == ""
    assert GEN.generate(query) == spec


def _labelled() -> list[dict[str, Any]]:
    text = (
        resources.files("llama_index_ext_recursive")
        .joinpath("sample_data", "auto_queries.jsonl")
        .read_text(encoding="utf-8")
    )
    return [json.loads(line) for line in text.splitlines() if line.strip()]


async def test_agenerate_equals_generate() -> None:
    queries = [row["query"] for row in _labelled()]
    specs = await asyncio.gather(*(GEN.agenerate(q) for q in queries))
    assert specs == [GEN.generate(q) for q in queries]


def test_no_llm_and_no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_llm(self: Any) -> Any:
        raise AssertionError("Settings.llm was used")

    def no_network(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("network used")

    monkeypatch.setattr(type(Settings), "llm", property(no_llm))
    monkeypatch.setattr(socket.socket, "connect", no_network)
    gen = RuleBasedSpecGenerator(INFO, VOCAB, today=TODAY)
    assert got("英文的体育文章", gen) == {("language", "==", "en"), ("category", "==", "sports")}


def test_user_synonyms_extend_and_override() -> None:
    gen = RuleBasedSpecGenerator(
        INFO,
        VOCAB,
        today=TODAY,
        synonyms={
            "source": {"wiki": "encyclopedia", "手册": "handbook"},
            "category": {"bees": "biology", "烘焙": "food"},
        },
    )
    assert got("wiki pages about reefs", gen) == {("source", "==", "encyclopedia")}
    assert got("wikis", gen) == {("source", "==", "encyclopedia")}
    assert got("手册", gen) == {("source", "==", "handbook")}  # overrides the built-in manual
    assert got("烘焙博客", gen) == {("category", "==", "food"), ("source", "==", "blog")}
    _, matches = gen.generate_with_matches("wiki pages")
    assert matches[0].rule == "user-synonym"
    assert got("wiki pages about reefs") == frozenset()  # the default generator is unchanged


def test_user_synonyms_for_unknown_keys_are_rejected() -> None:
    with pytest.raises(ValueError, match="unknown keys"):
        RuleBasedSpecGenerator(INFO, VOCAB, synonyms={"author": {"me": "x"}})


def test_only_values_present_in_the_vocabulary_are_produced() -> None:
    vocab = {**VOCAB, "source": {"blog"}}
    gen = RuleBasedSpecGenerator(INFO, vocab, today=TODAY)
    assert got("manuals and blogs", gen) == {("source", "==", "blog")}
    assert got("百科文章", gen) == frozenset()


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab 12345 20年的中文博客 or food top前个,?-")), max_size=40))
def test_never_raises_and_stays_consistent(query: str) -> None:
    spec, matches = GEN.generate_with_matches(query)
    for m in matches:
        assert 0 <= m.start < m.end <= len(query) and query[m.start : m.end] == m.text
    for f in spec.filters:
        assert f.key in KEYS
        values = f.value if isinstance(f.value, list) else [f.value]
        if f.key != "year":
            assert set(values) <= VOCAB[f.key]
    assert spec.top_k is None or 1 <= spec.top_k <= 1000


# -------------------- quality on the labelled set


def test_labelled_set_is_well_formed() -> None:
    rows = _labelled()
    zh = [r for r in rows if re.search(r"[\u4e00-\u9fff]", r["query"])]
    assert len(rows) >= 70 and 0.25 <= len(zh) / len(rows) <= 0.45
    for row in rows:
        assert row["today"] == "2025-06-01"
        VectorStoreQuerySpec.model_validate(row["expected"])  # labels are valid specs
        for f in row["expected"]["filters"]:
            assert f["key"] in KEYS


def test_exact_filter_match_on_the_labelled_set_is_at_least_90_percent() -> None:
    rows = _labelled()
    hits = 0
    misses = []
    for row in rows:
        gen = RuleBasedSpecGenerator(INFO, VOCAB, today=date.fromisoformat(row["today"]))
        expected = triples(MetadataFilter.model_validate(f) for f in row["expected"]["filters"])
        if got(row["query"], gen) == expected:
            hits += 1
        else:
            misses.append(row["query"])
    assert hits / len(rows) >= 0.90, misses


def test_drives_upstream_auto_retriever_without_calling_its_llm(lexical: Any) -> None:
    """The generated spec replaces the LLM step of ``VectorIndexAutoRetriever``; filters reach the store."""
    from llama_index.core import VectorStoreIndex
    from llama_index.core.indices.vector_store.retrievers.auto_retriever.auto_retriever import (
        VectorIndexAutoRetriever,
    )
    from llama_index.core.llms import MockLLM

    class NoCallLLM(MockLLM):
        def predict(self, *args: Any, **kwargs: Any) -> str:
            raise AssertionError("the LLM was called")

        async def apredict(self, *args: Any, **kwargs: Any) -> str:
            raise AssertionError("the LLM was called")

    index = VectorStoreIndex.from_documents(load_sample_documents(), embed_model=lexical)
    # a filters-only query leaves spec.query == "": upstream then needs default_empty_query_vector
    retriever = VectorIndexAutoRetriever(
        index,
        vector_store_info=INFO,
        llm=NoCallLLM(),
        similarity_top_k=10,
        default_empty_query_vector=lexical.get_text_embedding(""),
    )
    retriever.generate_retrieval_spec = lambda bundle, **kw: GEN.generate(bundle.query_str)  # type: ignore

    hits = retriever.retrieve("Chinese encyclopedia articles about tea, top 2")
    assert hits and len(hits) <= 2
    assert {(h.node.metadata["language"], h.node.metadata["source"]) for h in hits} == {("zh", "encyclopedia")}
    hits = retriever.retrieve("food articles from 2021")
    assert hits and {h.node.metadata["doc_id"] for h in hits} == {"sourdough-baking"}


# -------------------- scripts: the one table of text.py


@pytest.mark.parametrize("low, high", text.HAN_RANGES + text.KANA_RANGES + text.HANGUL_RANGES)
def test_every_cjk_range_of_the_script_table_is_cjk_for_the_rules(low: int, high: int) -> None:
    """The rules once had their own Han table without 〇 or the extension planes."""
    for char in (chr(low), chr(high)):
        (token,) = RuleBasedSpecGenerator._tokenize(char)
        assert token.cjk and _is_cjk_term(char), hex(ord(char))


# -------------------- any schema (issue 15): a recipes schema unlike the sample corpus's

RECIPE_INFO = schema_info(
    "Recipes from a cooking site",
    cuisine=("str", "The cuisine of the recipe"),
    course=("str", "Course: starter (前菜), main (主菜), dessert (甜点)"),
    minutes=("int", "Total preparation time in minutes"),
    rating=("float", "Average rating"),
    year=("int", "Year the recipe was published"),
    chef=("str", "The chef who wrote the recipe"),
)
RECIPE_VOCAB = {
    "cuisine": {"italian", "thai", "mexican", "french"},
    "course": {"starter", "main", "dessert"},
    "minutes": {10, 30, 60},
    "rating": {3.5, 4.5},
    "year": {2021, 2023, 2024},
    "chef": {"Marco Rossi", "Ana Lima"},
}
RECIPES = RuleBasedSpecGenerator(RECIPE_INFO, RECIPE_VOCAB, today=date(2026, 3, 1))


def filters_of(gen: RuleBasedSpecGenerator, query: str) -> set:
    """The spec's filters as ``(key, operator, value)`` triples, lists as tuples."""
    return {
        (f.key, f.operator.value, tuple(f.value) if isinstance(f.value, list) else f.value)
        for f in gen.generate(query).filters
    }


def recipe_filters(query: str) -> set:
    return filters_of(RECIPES, query)


@pytest.mark.parametrize(
    "query,expected",
    [
        ("2024 年 thai 菜谱", {("year", "==", 2024), ("cuisine", "==", "thai")}),
        ("2024年thai菜谱", {("year", "==", 2024), ("cuisine", "==", "thai")}),
        ("mexican 前菜", {("cuisine", "==", "mexican"), ("course", "==", "starter")}),
        ("有没有 french 的甜点", {("cuisine", "==", "french"), ("course", "==", "dessert")}),
    ],
)
def test_latin_values_are_matched_inside_chinese_text(query: str, expected: set) -> None:
    assert recipe_filters(query) == expected


@pytest.mark.parametrize(
    "query,expected",
    [
        ("ready in under 30 minutes", {("minutes", "<", 30)}),
        ("dishes taking at least 45 minutes", {("minutes", ">=", 45)}),
        ("at most twenty minutes", {("minutes", "<=", 20)}),
        ("recipes with 60 minutes or more", {("minutes", ">=", 60)}),
        ("between 30 and 60 minutes", {("minutes", ">=", 30), ("minutes", "<=", 60)}),
        ("15-25 minutes", {("minutes", ">=", 15), ("minutes", "<=", 25)}),
        ("not more than 30 minutes", {("minutes", "<=", 30)}),
        ("rating above 4.5", {("rating", ">", 4.5)}),
        ("超过 60 分钟的菜", {("minutes", ">", 60)}),
        ("45分钟以上", {("minutes", ">=", 45)}),
        ("20分钟以下", {("minutes", "<=", 20)}),
        ("三十分钟以内", {("minutes", "<=", 30)}),
        ("不到15分钟", {("minutes", "<", 15)}),
        ("30到60分钟之间", {("minutes", ">=", 30), ("minutes", "<=", 60)}),
        ("评分不低于4", {("rating", ">=", 4.0)}),
        ("30 and 60 minutes", set()),  # two numbers, not a range
        ("a 5 minute dessert", {("course", "==", "dessert")}),  # a size, not a comparison
    ],
)
def test_comparisons_on_a_numeric_key_that_is_not_a_year(query: str, expected: set) -> None:
    assert recipe_filters(query) == expected


def test_integer_keys_get_integers_and_float_keys_floats() -> None:
    (minutes,) = RECIPES.generate("under 30 minutes").filters
    (rating,) = RECIPES.generate("rating above 4").filters
    assert type(minutes.value) is int and type(rating.value) is float


def test_a_unit_two_keys_share_names_neither() -> None:
    info = schema_info(
        "tasks",
        prep_minutes=("int", "preparation time"),
        cook_minutes=("int", "cooking time"),
    )
    gen = RuleBasedSpecGenerator(info, {})
    assert gen.generate("under 30 minutes").filters == []
    assert [(f.key, f.operator.value, f.value) for f in gen.generate("cook under 30").filters] == [
        ("cook_minutes", "<", 30)
    ]


@pytest.mark.parametrize(
    "query,expected",
    [
        ("desserts that are not italian", {("course", "==", "dessert"), ("cuisine", "!=", "italian")}),
        ("recipes that aren't thai or mexican", {("cuisine", "nin", ("thai", "mexican"))}),
        ("anything except thai and mexican", {("cuisine", "nin", ("thai", "mexican"))}),
        ("anything but thai", {("cuisine", "!=", "thai")}),
        ("non-italian mains", {("cuisine", "!=", "italian"), ("course", "==", "main")}),
        ("mains, excluding anything by Rossi", {("course", "==", "main"), ("chef", "!=", "Marco Rossi")}),
        ("recipes not from 2021", {("year", "!=", 2021)}),
        ("mains not before 2023", {("course", "==", "main"), ("year", ">=", 2023)}),
        ("不是意大利菜的甜点", {("cuisine", "!=", "italian"), ("course", "==", "dessert")}),
        ("除了泰国菜以外的主菜", {("cuisine", "!=", "thai"), ("course", "==", "main")}),
        ("意大利、法国之外的甜点", {("cuisine", "nin", ("italian", "french")), ("course", "==", "dessert")}),
        ("不是2021年的菜谱", {("year", "!=", 2021)}),
        ("mexican or thai, but not desserts", {("cuisine", "in", ("mexican", "thai")), ("course", "!=", "dessert")}),
    ],
)
def test_negation_gives_the_excluding_filter(query: str, expected: set) -> None:
    assert recipe_filters(query) == expected


@pytest.mark.parametrize(
    "query,unsure",
    [
        ("not spicy thai food", "thai"),  # "not spicy" or "not thai"?
        ("recipes not between 2021 and 2023", "2021"),  # outside a range: two alternatives
        ("recipes not between 30 and 60 minutes", "30"),
    ],
)
def test_a_negation_of_unclear_reach_gives_no_filter_and_says_so(query: str, unsure: str) -> None:
    reading = RECIPES.read(query)
    assert reading.spec.filters == []
    assert any(unsure in note for note in reading.notes)


@pytest.mark.parametrize(
    "query,expected",
    [
        ("thai or mexican starters", {("cuisine", "in", ("thai", "mexican")), ("course", "==", "starter")}),
        ("泰国菜或墨西哥菜", {("cuisine", "in", ("thai", "mexican"))}),
        ("甜点或者主菜", {("course", "in", ("dessert", "main"))}),
        ("desserts by Lima or Rossi", {("course", "==", "dessert"), ("chef", "in", ("Ana Lima", "Marco Rossi"))}),
    ],
)
def test_disjunction_of_one_key_gives_in(query: str, expected: set) -> None:
    assert recipe_filters(query) == expected


def test_or_across_keys_gives_no_filter_and_says_so() -> None:
    reading = RECIPES.read("thai recipes or desserts")
    assert reading.spec.filters == []
    assert any("cuisine" in note and "course" in note for note in reading.notes)


@pytest.mark.parametrize(
    "query,expected",
    [
        ("main courses from 2023", {("course", "==", "main"), ("year", "==", 2023)}),
        ("italian mains", {("cuisine", "==", "italian"), ("course", "==", "main")}),
        ("what is the main ingredient of pesto?", set()),
        ("the main reason bread goes stale", set()),
        ("thai curry", {("cuisine", "==", "thai")}),  # a rare word of the data is the value
    ],
)
def test_a_value_that_is_a_common_word_needs_a_value_context(query: str, expected: set) -> None:
    assert recipe_filters(query) == expected


def test_value_phrases_come_from_descriptions_names_and_the_lexicon() -> None:
    assert recipe_filters("甜点") == {("course", "==", "dessert")}  # "dessert (甜点)" in the description
    assert recipe_filters("Rossi's desserts") == {("chef", "==", "Marco Rossi"), ("course", "==", "dessert")}
    assert recipe_filters("chef: Ana Lima") == {("chef", "==", "Ana Lima")}
    assert recipe_filters("墨西哥菜谱") == {("cuisine", "==", "mexican")}  # built-in bilingual lexicon
    custom = RuleBasedSpecGenerator(RECIPE_INFO, RECIPE_VOCAB, synonyms={"cuisine": {"泰餐馆风味": "thai"}})
    assert [(f.key, f.value) for f in custom.generate("泰餐馆风味的主菜").filters] == [
        ("cuisine", "thai"),
        ("course", "main"),
    ]


def test_unsure_notes_reach_the_report() -> None:
    from llama_index_ext_recursive.auto import RuleSpecGenerator, SpecValidator

    gen = RuleSpecGenerator(RECIPES, SpecValidator(RECIPE_INFO, RECIPE_VOCAB))
    spec, report = gen.generate("thai recipes or desserts")
    assert spec.filters == [] and report.notes and report.to_dict()["notes"] == report.notes


# -------------------- values in pinyin, money and periods, one numeric key, the year key

RENT_INFO = schema_info(
    "Rental listings",
    city=("str", "City of the property"),
    property_type=("str", "apartment, studio or villa"),
    agency=("str", "Letting agency"),
    year_built=("int", "Year the building was completed"),
    monthly_rent=("int", "Monthly rent in yuan"),
)
RENT_VOCAB = {
    "city": {"shanghai", "beijing", "hangzhou"},
    "property_type": {"apartment", "studio", "villa"},
    "agency": {"Wo Ai Wo Jia", "Ziroom"},
    "year_built": {2005, 2015, 2020},
    "monthly_rent": {3000, 6000},
}
RENT = RuleBasedSpecGenerator(RENT_INFO, RENT_VOCAB, today=date(2026, 6, 15))


def rent_filters(query: str) -> set:
    return filters_of(RENT, query)


@pytest.mark.parametrize(
    "query,expected",
    [
        ("上海的别墅", {("city", "==", "shanghai"), ("property_type", "==", "villa")}),
        ("杭州或者北京的公寓", {("city", "in", ("hangzhou", "beijing")), ("property_type", "==", "apartment")}),
        ("我爱我家的房源", {("agency", "==", "Wo Ai Wo Jia")}),
        ("除了上海和北京", {("city", "nin", ("shanghai", "beijing"))}),
    ],
)
def test_chinese_words_match_values_stored_in_pinyin(query: str, expected: set) -> None:
    assert rent_filters(query) == expected


@pytest.mark.parametrize(
    "query,expected",
    [
        ("apartments under 6000 a month", {("property_type", "==", "apartment"), ("monthly_rent", "<", 6000)}),
        ("studios under ¥5000", {("property_type", "==", "studio"), ("monthly_rent", "<", 5000)}),
        ("月租3000以下", {("monthly_rent", "<=", 3000)}),
        ("租金最多3500", {("monthly_rent", "<=", 3500)}),
        ("built before 2015", {("year_built", "<", 2015)}),  # a year, not a rent
    ],
)
def test_a_key_named_per_period_or_in_a_currency_reads_its_numbers(query: str, expected: set) -> None:
    assert rent_filters(query) == expected


def test_with_one_numeric_key_a_bare_comparison_is_read_for_it_and_noted() -> None:
    reading = RENT.read("studios for at most 3500")
    assert [(f.key, f.operator.value, f.value) for f in reading.spec.filters] == [
        ("property_type", "==", "studio"),
        ("monthly_rent", "<=", 3500),
    ]
    assert any("monthly_rent" in note for note in reading.notes)
    assert RECIPES.read("dishes for at most 3500").spec.filters == []  # minutes or rating? unsaid


def test_the_year_key_holds_calendar_years_not_years_of_experience() -> None:
    info = schema_info(
        "Job postings",
        experience_years=("int", "Minimum years of experience"),
        year=("int", "Year the job was posted"),
    )
    gen = RuleBasedSpecGenerator(info, {"experience_years": {0, 2, 5}, "year": {2023, 2024}}, today=date(2026, 6, 15))
    assert gen.year_key == "year"
    assert [(f.key, f.operator.value, f.value) for f in gen.generate("jobs since 2024 needing 5+ years").filters] == [
        ("year", ">=", 2024),
        ("experience_years", ">=", 5),
    ]


@pytest.mark.parametrize(
    "query,expected",
    [
        ("studio apartments in shanghai", {("property_type", "==", "studio"), ("city", "==", "shanghai")}),
        ("the villa was smaller than the photos", set()),
        ("give me 3 listings in beijing", {("city", "==", "beijing")}),
    ],
)
def test_compounds_subjects_and_counts(query: str, expected: set) -> None:
    assert rent_filters(query) == expected
    if query.startswith("give me 3"):
        assert RENT.generate(query).top_k == 3


# ---------------------------------------------------------------- words no term names: stems and glosses

MUSIC_DOCS_INFO = schema_info(
    "Music tracks and technical documentation pages",
    genre=("str", "Music genre"),
    doc_type=("str", "Kind of page"),
    language=("str", "Programming language of the examples"),
)
MUSIC_DOCS = RuleBasedSpecGenerator(
    MUSIC_DOCS_INFO,
    {
        "genre": {"classical", "hip-hop", "jazz", "rock"},
        "doc_type": {"tutorial", "reference", "changelog", "terminated"},
        "language": {"python", "rust"},
    },
    today=TODAY,
)


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        # another form of the value's word, by its Snowball stem
        ("termination pages", {("doc_type", "==", "terminated")}),
        # Chinese words by their CC-CEDICT gloss: the whole gloss is the value
        ("Python 教程", {("language", "==", "python"), ("doc_type", "==", "tutorial")}),
        ("嘻哈", {("genre", "==", "hip-hop")}),
        ("爵士乐", {("genre", "==", "jazz")}),
        # jieba keeps 古典音乐 whole: "classical music", less the kind of document
        ("古典音乐", {("genre", "==", "classical")}),
        # and a negation before it still excludes
        ("不要古典音乐", {("genre", "!=", "classical")}),
    ],
)
def test_words_no_term_names_reach_a_value_by_stem_or_gloss(query: str, expected: set[Triple]) -> None:
    assert got(query, MUSIC_DOCS) == frozenset(expected)
    rules = {m.rule for m in MUSIC_DOCS.generate_with_matches(query)[1]}
    assert rules & {"stem", "gloss", "not-gloss", "not-stem"}


@pytest.mark.parametrize(
    "query",
    [
        "is rock harder than granite",  # a value as a word needs its context: no stem or gloss changes that
        "rent pages",  # a shorter word sharing a value's stem ("rented") is not that value
        "有什么好看看的",  # a common word (看看) is not read by its glosses
        "摇滚明星的传记",  # 摇滚 ("rock") before a content word is a topic, as "Chinese tea" is
    ],
)
def test_stems_and_glosses_keep_the_context_rules(query: str) -> None:
    generator = RuleBasedSpecGenerator(
        MUSIC_DOCS_INFO,
        {"genre": {"rock"}, "doc_type": {"rented", "survey"}, "language": {"python"}},
        today=TODAY,
    )
    assert got(query, generator) == frozenset()


def test_a_gloss_naming_values_of_two_keys_names_neither() -> None:
    generator = RuleBasedSpecGenerator(
        MUSIC_DOCS_INFO, {"genre": {"jazz"}, "doc_type": {"knight"}, "language": {"python"}}, today=TODAY
    )
    assert got("爵士", generator) == frozenset()  # "knight", "sir", "jazz": two keys, so neither
    assert got("爵士", MUSIC_DOCS) == frozenset({("genre", "==", "jazz")})


def test_a_common_chinese_word_is_not_read_by_its_glosses() -> None:
    generator = RuleBasedSpecGenerator(
        MUSIC_DOCS_INFO, {"genre": {"electronic"}, "doc_type": {"page"}, "language": {"python"}}, today=TODAY
    )
    assert got("电子", generator) == frozenset()  # 电子 is a common word: "electronic", "electron"
    assert got("电子音乐", generator) == frozenset({("genre", "==", "electronic")})  # 电子音乐 is not


# ---------------------------------------------------------------- by meaning (auto/meaning.py)


def test_a_phrase_reads_as_a_value_only_when_similar_and_clearly_ahead() -> None:
    import math

    def at(degrees: float) -> list[float]:
        return [math.cos(math.radians(degrees)), math.sin(math.radians(degrees)), 0.0]

    model = FixedEmbedding(
        dim=3,
        fallback=[0.0, 0.0, 1.0],  # the schema's other phrases ("wifis"): orthogonal to every phrase here
        table={
            "wifi": at(0),
            "pool": at(90),
            "wireless network": at(40),
            "net": at(52),
            "lan": at(45),
            "router": [0.3, 0.0, math.sqrt(1 - 0.09)],  # far from both, though nearer wifi
        },
    )
    matcher = PhraseMatcher(model, {"wifi": ("amenity", "wifi"), "pool": ("amenity", "pool")})
    close, far, even, weak = matcher.read(["wireless network", "net", "lan", "router"])
    # cos 40 = 0.77 to wifi, cos 50 = 0.64 to pool: similar, but 0.12 ahead only
    assert close is not None and close.label == ("amenity", "wifi")
    assert round(close.similarity, 2) == 0.77 and not close.accepted and close.doubtful
    # cos 52 = 0.62 to wifi, cos 38 = 0.79 to pool: pool, 0.17 ahead
    assert far is not None and far.label == ("amenity", "pool") and far.accepted
    assert even is not None and even.margin < 1e-6 and not even.accepted  # halfway: no reading
    # 0.3 ahead of pool, but only 0.3 similar to wifi: neither a reading nor a doubt
    assert weak is not None and weak.margin > 0.25 and not weak.accepted and not weak.doubtful
    # in a generator: a doubt is a note, not a filter
    info = VectorStoreInfo(
        content_info="Hotels", metadata_info=[MetadataInfo(name="amenity", type="str", description="Amenity")]
    )
    generator = RuleBasedSpecGenerator(info, {"amenity": {"wifi", "pool"}}, today=TODAY, meaning_model=model)
    reading = generator.read("wireless network")
    assert reading.spec.filters == []
    assert reading.notes == [
        "'wireless network' may mean amenity='wifi' (similarity 0.77, 0.12 ahead of the next value); "
        "not sure enough to filter"
    ]


def test_values_by_meaning_with_the_bundled_model(real_model) -> None:
    info = schema_info(
        "Hotel listings",
        amenity=("str", "What the hotel offers"),
        city=("str", "City"),
    )
    vocabulary = {"amenity": {"wifi", "pool", "parking", "gym"}, "city": {"paris", "rome"}}
    generator = RuleBasedSpecGenerator(info, vocabulary, today=TODAY, meaning_model=real_model)
    assert got("hotels in paris with a fitness centre", generator) == {
        ("city", "==", "paris"),
        ("amenity", "==", "gym"),
    }
    assert got("有无线网的酒店", generator) == {("amenity", "==", "wifi")}  # 无线网: "wireless network"
    assert got("不要停车场的酒店", generator) == {("amenity", "!=", "parking")}  # 停车场: "parking lot"
    # a single English word is not read by meaning: most are the topic ("about bread" is not food)
    topics = RuleBasedSpecGenerator(
        VectorStoreInfo(
            content_info="Blog posts and manuals",
            metadata_info=[MetadataInfo(name="category", type="str", description="Topic")],
        ),
        {"category": {"food", "software", "transport"}},
        today=TODAY,
        meaning_model=real_model,
    )
    assert got("blog posts about bread", topics) == frozenset()
    # a verb's gloss names an act: 租房 is "to rent an apartment", not an apartment to filter on
    rentals = RuleBasedSpecGenerator(
        VectorStoreInfo(
            content_info="Rental listings",
            metadata_info=[MetadataInfo(name="property_type", type="str", description="Kind of home")],
        ),
        {"property_type": {"apartment", "house", "room"}},
        today=TODAY,
        meaning_model=real_model,
    )
    assert got("租房要注意什么", rentals) == frozenset()
    without = RuleBasedSpecGenerator(info, vocabulary, today=TODAY, meaning_model=False)
    assert got("有无线网的酒店", without) == frozenset()


def test_outside_a_place_excludes_it() -> None:
    """'outside the united states' is an exclusion (a blind set read it as the country itself)."""
    info = VectorStoreInfo(
        content_info="Clinical trials",
        metadata_info=[MetadataInfo(name="country", type="str", description="Country where the trial runs")],
    )
    generator = RuleBasedSpecGenerator(
        info, {"country": {"united states", "germany"}}, today=TODAY, meaning_model=False
    )
    assert got("trials outside the united states", generator) == {("country", "!=", "united states")}
    assert got("trials outside of germany", generator) == {("country", "!=", "germany")}


def test_a_code_by_its_name_and_a_number_in_roman_numerals() -> None:
    info = schema_info(
        "Clinical trials",
        condition=("str", "Condition studied"),
        phase=("str", "Trial phase"),
    )
    vocabulary = {"condition": {"covid-19", "asthma"}, "phase": {"phase 1", "phase 2", "phase 3"}}
    generator = RuleBasedSpecGenerator(info, vocabulary, today=TODAY, meaning_model=False)
    assert got("covid trials", generator) == {("condition", "==", "covid-19")}
    assert got("phase III trials for asthma", generator) == {("phase", "==", "phase 3"), ("condition", "==", "asthma")}
    assert got("trials in a later phase", generator) == frozenset()  # "phase" names phase 1 to 3 alike


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("lung or breast cancer trials", {("condition", "in", ("breast cancer", "lung cancer"))}),
        ("lung, colon or breast cancer", {("condition", "in", ("breast cancer", "colon cancer", "lung cancer"))}),
        ("not lung or breast cancer", {("condition", "nin", ("breast cancer", "lung cancer"))}),
        ("smokers and breast cancer", {("condition", "==", "breast cancer")}),  # "smokers cancer" is no value
    ],
)
def test_a_list_that_leaves_out_the_shared_last_word(query: str, expected: set[Triple]) -> None:
    info = VectorStoreInfo(
        content_info="Clinical trials",
        metadata_info=[MetadataInfo(name="condition", type="str", description="Condition studied")],
    )
    vocabulary = {"condition": {"lung cancer", "breast cancer", "colon cancer", "asthma"}}
    generator = RuleBasedSpecGenerator(info, vocabulary, today=TODAY, meaning_model=False)
    assert got(query, generator) == frozenset(expected)


# ---------------------------------------------------------------- cues for inferred readings


def test_an_alternative_to_a_sure_value_and_a_glued_or() -> None:
    generator = RuleBasedSpecGenerator(
        MUSIC_DOCS_INFO, {"genre": {"electronic", "hip-hop"}, "doc_type": {"page"}, "language": {"python"}}, today=TODAY
    )
    # jieba glues 或 to 嘻哈; 电子 is a common word, but "or hip-hop" says it is a genre too
    assert got("电子或嘻哈", generator) == {("genre", "in", ("electronic", "hip-hop"))}
    assert got("电子", generator) == frozenset()


def test_a_chinese_head_noun_after_de_and_neighbouring_values() -> None:
    info = schema_info(
        "Music tracks",
        genre=("str", "Music genre"),
        language=("str", "Language of the lyrics"),
        year=("int", "Year of release"),
    )
    vocabulary = {"genre": {"rock", "jazz"}, "language": {"english", "spanish"}, "year": {2019, 2020, 2021}}
    generator = RuleBasedSpecGenerator(info, vocabulary, today=TODAY, meaning_model=False)
    # the head noun of a query that filters by something else names what is wanted
    assert got("2020年发行的摇滚", generator) == {("year", "==", 2020), ("genre", "==", "rock")}
    # two values side by side: each makes the other a value, not a topic
    assert got("英文摇滚", generator) == {("language", "==", "english"), ("genre", "==", "rock")}
    # a gloss that is the value and the key's noun ("spanish language"), before a word for the documents
    assert got("西班牙语歌曲", generator) == {("language", "==", "spanish")}
    # alone, 摇滚 has no cue: a common word ("rock")
    assert got("摇滚", generator) == frozenset()


def test_names_and_what_a_gloss_says_the_value_is() -> None:
    info = schema_info(
        "Clinical trials",
        condition=("str", "Condition studied"),
        sponsor=("str", "Lead sponsor"),
    )
    vocabulary = {"condition": {"alzheimer's", "covid-19", "diabetes"}, "sponsor": {"Pfizer", "Novartis"}}
    generator = RuleBasedSpecGenerator(info, vocabulary, today=TODAY, meaning_model=False)
    assert got("辉瑞的试验", generator) == {("sponsor", "==", "Pfizer")}  # "Pfizer, American pharmaceutical company"
    assert got("阿尔茨海默病", generator) == {("condition", "==", "alzheimer's")}  # "alzheimer's disease"
    assert got("新冠肺炎", generator) == {("condition", "==", "covid-19")}  # "COVID-19, the coronavirus disease ..."


def test_a_noun_near_the_documents_kind_names_them(real_model) -> None:
    info = schema_info(
        "Registered clinical trials, each with a brief summary",
        intervention=("str", "Type of intervention"),
        condition=("str", "Condition studied"),
    )
    vocabulary = {"intervention": {"drug", "device"}, "condition": {"asthma", "depression"}}
    generator = RuleBasedSpecGenerator(info, vocabulary, today=TODAY, meaning_model=real_model)
    # 药物 ("drug") is a common word; 试验 ("experiment") is near "trials", so it is a kind wanted
    assert got("哮喘药物试验", generator) == {("condition", "==", "asthma"), ("intervention", "==", "drug")}
    # "studies" is near "trials": a common value before it is a facet, unless both are what an act is done to
    assert got("depression studies", generator) == {("condition", "==", "depression")}
    assert got("designing depression studies", generator) == frozenset()
    # a number a noun names is a label, not a count of results
    assert got("type 2 asthma studies", generator) == {("condition", "==", "asthma")}
    assert generator.generate("type 2 asthma studies").top_k is None
    # not by meaning, the same words are read as before
    plain = RuleBasedSpecGenerator(info, vocabulary, today=TODAY, meaning_model=False)
    assert got("哮喘药物试验", plain) == {("condition", "==", "asthma")}


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("二期试验", {("phase", "==", "phase 2")}),  # a numeral and the noun it numbers: "phase 2"
        ("已完成的试验", {("status", "==", "completed")}),  # 已: a state the documents are in
        ("未完成的哮喘试验", {("status", "!=", "completed"), ("condition", "==", "asthma")}),  # 未: not yet
        ("不再招募的试验", {("status", "!=", "recruiting")}),  # no longer
        ("不在德国进行的试验", {("country", "!=", "germany")}),  # not in
        ("德国进行的哮喘试验", {("country", "==", "germany"), ("condition", "==", "asthma")}),  # a verb after it
        ("如何提高招募效率", frozenset()),  # 招募 as a verb of a topic: no cue, no filter
    ],
)
def test_chinese_states_numbered_nouns_and_negations(query: str, expected: set[Triple]) -> None:
    info = schema_info(
        "Clinical trials",
        phase=("str", "Trial phase"),
        status=("str", "Recruitment status"),
        condition=("str", "Condition studied"),
        country=("str", "Country where the trial runs"),
    )
    vocabulary = {
        "phase": {"phase 1", "phase 2", "phase 3"},
        "status": {"recruiting", "completed", "terminated"},
        "condition": {"asthma", "diabetes"},
        "country": {"germany", "japan"},
    }
    generator = RuleBasedSpecGenerator(info, vocabulary, today=TODAY, meaning_model=False)
    assert got(query, generator) == frozenset(expected)


def test_a_rare_word_of_a_name_with_joining_words_names_it() -> None:
    from llama_index_ext_recursive.auto.terms import name_parts

    parts = name_parts(["University of Tartu", "Bank of America", "Marco Rossi", "of course"])
    assert parts["tartu"] == "University of Tartu" and parts["rossi"] == "Marco Rossi"
    assert "of" not in parts and "america" not in parts  # a joining word, a common word: neither names it
    assert "course" not in parts  # "of course" starts lower case: no name


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("behavioural studies", {("intervention", "==", "behavioral")}),  # British spelling
        ("paediatric trials", {("population", "==", "pediatric")}),
        ("asthmatic patients", {("condition", "==", "asthma")}),  # the noun of a derived adjective
        ("alzheimers trials", {("condition", "==", "alzheimer's")}),  # written without its apostrophe
    ],
)
def test_spellings_apostrophes_and_derived_adjectives(query: str, expected: set[Triple]) -> None:
    info = schema_info(
        "Clinical trials",
        intervention=("str", "Type of intervention"),
        population=("str", "Who takes part"),
        condition=("str", "Condition studied"),
    )
    vocabulary = {
        "intervention": {"behavioral", "drug"},
        "population": {"pediatric", "adult"},
        "condition": {"asthma", "alzheimer's"},
    }
    generator = RuleBasedSpecGenerator(info, vocabulary, today=TODAY, meaning_model=False)
    assert got(query, generator) == frozenset(expected)


def test_a_common_value_listed_with_a_sure_one_is_a_value_too() -> None:
    info = VectorStoreInfo(
        content_info="IT support tickets",
        metadata_info=[MetadataInfo(name="product", type="str", description="Product the ticket is about")],
    )
    generator = RuleBasedSpecGenerator(info, {"product": {"vpn", "phone", "printer"}}, today=TODAY, meaning_model=False)
    assert got("tickets excluding vpn and phone", generator) == {("product", "nin", ("phone", "vpn"))}
    assert got("my phone is broken", generator) == frozenset()  # alone, "phone" is a common word


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("高优先级的工单", {("priority", "==", "high")}),  # a value before its key's noun: "high priority"
        ("低优先级工单", {("priority", "==", "low")}),  # jieba keeps 低优先级 whole: "low" + "priority level"
        ("不要已关闭的工单", {("status", "!=", "closed")}),  # 已 between the negation and the value
        ("printer and phone tickets", {("product", "in", ("phone", "printer"))}),
    ],
)
def test_values_before_their_key_and_in_lists(query: str, expected: set[Triple]) -> None:
    info = schema_info(
        "IT support tickets",
        priority=("str", "Priority: low, medium, high"),
        status=("str", "Ticket status"),
        product=("str", "Product the ticket is about"),
    )
    vocabulary = {
        "priority": {"low", "medium", "high"},
        "status": {"open", "closed"},
        "product": {"printer", "phone"},
    }
    generator = RuleBasedSpecGenerator(info, vocabulary, today=TODAY, meaning_model=False)
    assert got(query, generator) == frozenset(expected)


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("songs with 100000 plays or more", {("plays", ">=", 100000)}),  # the key's name as its unit
        ("songs with 500 or more plays", {("plays", ">=", 500)}),  # the unit after the comparison
        ("at least 10 recorded plays", {("plays", ">=", 10)}),  # a participle before the unit
        ("songs with 1000-5000 plays", {("plays", ">=", 1000), ("plays", "<=", 5000)}),
        ("播放量在50万以上", {("plays", ">=", 500000)}),  # the only numeric key, a bound after the number
        ("30万以下的歌", {("plays", "<=", 300000)}),
    ],
)
def test_a_key_named_by_what_it_counts(query: str, expected: set[Triple]) -> None:
    info = schema_info(
        "Music tracks",
        plays=("int", "Number of times the track was played"),
        year=("int", "Year of release"),
    )
    generator = RuleBasedSpecGenerator(info, {"year": {2020, 2021}}, today=TODAY, meaning_model=False)
    assert got(query, generator) == frozenset(expected)


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        # the descriptions say what the documents are ("the case"): "contract cases" asks for the area
        ("contract cases", {("area", "==", "contract")}),
        ("IP cases in the US", {("area", "==", "intellectual property"), ("jurisdiction", "==", "united states")}),
        ("tell us about supreme court cases", {("court", "==", "supreme court")}),  # "us": a pronoun
        ("Canadian tribunals", {("jurisdiction", "==", "canada"), ("court", "==", "tribunal")}),  # a demonym
        (
            "tax cases from India decided before 2000",
            {("area", "==", "tax"), ("jurisdiction", "==", "india"), ("year", "<", 2000)},
        ),
        ("top 5 most cited tax cases", {("area", "==", "tax")}),
        ("family law", {("area", "==", "family")}),  # "Area of law ...": a value before "law"
        ("a five-judge panel", {("judges", "==", 5)}),  # a number and the key's noun: exactly that many
        ("single-judge rulings", {("judges", "==", 1)}),
    ],
)
def test_nouns_the_descriptions_use_initials_and_demonyms(query: str, expected: set[Triple]) -> None:
    info = schema_info(
        "Court decisions from several jurisdictions",
        area=("str", "Area of law the case concerns"),
        court=("str", "Level of the court that decided the case"),
        jurisdiction=("str", "Country whose court decided the case"),
        year=("int", "Year the decision was handed down"),
        judges=("int", "Number of judges on the panel"),
    )
    vocabulary = {
        "area": {"contract", "tax", "intellectual property", "family"},
        "court": {"supreme court", "tribunal"},
        "jurisdiction": {"united states", "canada", "india"},
        "year": {1990, 2010, 2020},
    }
    generator = RuleBasedSpecGenerator(info, vocabulary, today=TODAY, meaning_model=False)
    assert got(query, generator) == frozenset(expected)
    if query.startswith("top 5"):
        assert generator.generate(query).top_k == 5


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("revenue over 5 billion", {("revenue", ">", 5000.0)}),  # the key is in millions
        ("revenue over 500", {("revenue", ">", 500.0)}),  # a bare number is already in the key's scale
        ("revenue between 1 and 2 billion", {("revenue", ">=", 1000.0), ("revenue", "<=", 2000.0)}),
        ("between 1 and 2 million employees", {("employees", ">=", 1000000), ("employees", "<=", 2000000)}),
    ],
)
def test_numbers_in_the_scale_a_key_states(query: str, expected: set[Triple]) -> None:
    info = schema_info(
        "Company filings",
        revenue=("float", "Annual revenue in millions of US dollars"),
        employees=("int", "Number of employees"),
    )
    generator = RuleBasedSpecGenerator(info, {}, today=TODAY, meaning_model=False)
    assert got(query, generator) == frozenset(expected)


@pytest.mark.parametrize(
    ("query", "expected", "top_k"),
    [
        ("CVE-2021-44228", frozenset(), None),  # a year inside an identifier is none
        ("filings from 2021-2023", {("fiscal_year", ">=", 2021), ("fiscal_year", "<=", 2023)}, None),
        ("annual reports in FY2024", {("fiscal_year", "==", 2024), ("report_type", "==", "annual")}, None),
        (
            "2019-2021年的年报",
            {("fiscal_year", ">=", 2019), ("fiscal_year", "<=", 2021), ("report_type", "==", "annual")},
            None,
        ),
        ("annual reports on how their top 10 customers pay", {("report_type", "==", "annual")}, None),
        ("the OWASP top 10", frozenset(), None),  # a list the text talks about, not a count of results
        ("列出前10家的年报", {("report_type", "==", "annual")}, 10),
        ("给我看5个年报", {("report_type", "==", "annual")}, 5),
    ],
)
def test_years_in_identifiers_fiscal_years_and_counts(query: str, expected: set[Triple], top_k: int | None) -> None:
    info = schema_info(
        "Annual and quarterly reports of listed companies",
        report_type=("str", "Kind of report: annual (年报), quarterly"),
        fiscal_year=("int", "Fiscal year the filing reports on"),
        revenue=("float", "Revenue for the fiscal year, in millions"),
    )
    vocabulary = {"report_type": {"annual", "quarterly"}, "fiscal_year": {2019, 2021, 2023, 2024}}
    generator = RuleBasedSpecGenerator(info, vocabulary, today=TODAY, meaning_model=False)
    assert got(query, generator) == frozenset(expected)
    assert generator.generate(query).top_k == top_k


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("advisories with a CVSS score of 9 or above", {("cvss", ">=", 9.0)}),  # words between name and number
        ("CVSS 评分 8 分以上", {("cvss", ">=", 8.0)}),  # 分: the points of a score
        ("bugs affecting more than 50 versions", {("affected_versions", ">", 50)}),  # the key's last noun
        ("audited by EY or KPMG", {("auditor", "in", ("EY", "KPMG"))}),  # a value of two capitals
        ("hey, what is new", frozenset()),  # not inside a word, nor in lower case
    ],
)
def test_scores_counted_nouns_and_short_names(query: str, expected: set[Triple]) -> None:
    info = schema_info(
        "Security advisories",
        cvss=("float", "CVSS base score, 0 to 10"),
        affected_versions=("int", "How many releases are affected"),
        auditor=("str", "Audit firm"),
    )
    generator = RuleBasedSpecGenerator(info, {"auditor": {"EY", "KPMG", "BDO"}}, today=TODAY, meaning_model=False)
    assert got(query, generator) == frozenset(expected)


def test_a_gloss_by_its_last_word_needs_a_cue() -> None:
    info = VectorStoreInfo(
        content_info="Annual reports of listed companies",
        metadata_info=[MetadataInfo(name="sector", type="str", description="Industry sector of the company")],
    )
    generator = RuleBasedSpecGenerator(
        info, {"sector": {"energy", "utilities", "technology"}}, today=TODAY, meaning_model=False
    )
    # 科技 "science and technology": the last word names the value, listed with a sure one
    assert got("能源和科技", generator) == {("sector", "in", ("energy", "technology"))}
    assert got("科技", generator) == frozenset()  # alone: no cue


def test_numeric_keys_named_in_chinese_by_the_dictionary() -> None:
    info = schema_info(
        "Court decisions",
        judges=("int", "Number of judges on the panel"),
        affected_versions=("int", "Releases affected"),
    )
    generator = RuleBasedSpecGenerator(info, {}, today=TODAY, meaning_model=False)
    assert got("三名法官以上审理的案件", generator) == {("judges", ">=", 3)}  # 法官 "judge", 名 a measure word
    assert got("影响超过100个版本", generator) == {("affected_versions", ">", 100)}  # 版本 "version"
    assert got("more than 3 judges", generator) == {("judges", ">", 3)}


def test_a_name_by_a_word_below_the_common_word_line() -> None:
    from llama_index_ext_recursive.auto.terms import name_parts

    parts = name_parts(["Samsung Electronics", "University of Oxford", "Christopher Nolan"])
    assert parts["samsung"] == "Samsung Electronics" and parts["oxford"] == "University of Oxford"
    assert "university" not in parts and "electronics" not in parts  # common or not the rarest: nothing
    assert "christopher" not in parts  # "Nolan" is the rarest word of that name


@pytest.mark.parametrize(
    ("query", "expected", "top_k"),
    [
        ("pharma patents", {("field", "==", "pharmaceuticals")}, None),  # a clipped value
        ("tech patents", {("field", "==", "technology")}, None),  # a common clipping, with a cue
        ("the latest tech", frozenset(), None),  # ... without one
        ("documentary patents", {("field", "==", "documentary")}, None),
        ("document patents", frozenset(), None),  # a common word is no clipping of a rare value
        ("引用次数前十的专利", frozenset(), 10),  # 前十的: the top ten
    ],
)
def test_clipped_values_and_top_ten(query: str, expected: set[Triple], top_k: int | None) -> None:
    info = schema_info("Granted patents", field=("str", "Technology field of the patent"))
    generator = RuleBasedSpecGenerator(
        info, {"field": {"pharmaceuticals", "technology", "documentary"}}, today=TODAY, meaning_model=False
    )
    assert got(query, generator) == frozenset(expected)
    assert generator.generate(query).top_k == top_k


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("expired patents", {("legal_status", "==", "expired")}),
        ("detecting expired food in a fridge", frozenset()),  # a participle describing another noun
        ("path traversals in pypi", {("vuln_type", "==", "path traversal"), ("ecosystem", "==", "pypi")}),
        ("sql injections", {("vuln_type", "==", "sql injection")}),  # a phrase by its words' stems
        ("Python 教程", frozenset()),  # a Latin word and a gloss that name no value together
    ],
)
def test_participles_and_phrases_by_stems(query: str, expected: set[Triple]) -> None:
    info = schema_info(
        "Security advisories and patents",
        legal_status=("str", "Legal status"),
        vuln_type=("str", "Vulnerability type"),
        ecosystem=("str", "Package ecosystem"),
    )
    vocabulary = {
        "legal_status": {"expired", "granted"},
        "vuln_type": {"path traversal", "sql injection"},
        "ecosystem": {"pypi", "npm"},
    }
    generator = RuleBasedSpecGenerator(info, vocabulary, today=TODAY, meaning_model=False)
    assert got(query, generator) == frozenset(expected)
