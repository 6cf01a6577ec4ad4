"""MultilingualBM25Retriever and MultilingualTokenizer (upstream BM25 failures F1-F5)."""

from __future__ import annotations

import asyncio
import json
import logging
import pickle
import shutil
import threading

import pytest
from conftest import topic_nodes
from llama_index.core.schema import QueryBundle, TextNode
from llama_index.core.vector_stores.types import (
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
)
from llama_index.retrievers.bm25 import BM25Retriever

from llama_index_ext_recursive.persist import PersistError, current_generation
from llama_index_ext_recursive.query import FilteredQueryBundle
from llama_index_ext_recursive.retrievers.bm25 import MultilingualBM25Retriever, MultilingualTokenizer

logging.getLogger("bm25s").setLevel(logging.ERROR)

METHODS = "定量 PCR 以小鼠肝脏 GAPDH 为内参。实验对象为 SPF 级 C57BL/6 小鼠。"
LANG = "Python 的列表推导式用一行从可迭代对象生成列表。"


def zh_nodes():
    return [
        TextNode(id_="methods", text=METHODS, metadata={"section": "methods"}),
        TextNode(id_="lang", text=LANG, metadata={"section": "lang"}),
    ]


def ids(results):
    return [r.node.node_id for r in results]


def scored(results):
    return [(r.node.node_id, r.score) for r in results]


# -- tokenizer ---------------------------------------------------------------


def test_tokenizer_keeps_identifiers_and_stems_english():
    tok = MultilingualTokenizer()
    tokens = tok("Running the GAPDH assay on C57BL/6 mice with v2.4.0 via e-mail.")
    assert "gapdh" in tokens
    assert "c57bl/6" in tokens
    assert "v2.4.0" in tokens
    assert "e-mail" in tokens
    assert "run" in tokens and "running" not in tokens
    assert "the" not in tokens and "on" not in tokens  # English stopwords
    assert "." not in tokens and "" not in tokens


def test_tokenizer_indexes_compounds_whole_and_by_parts():
    tok = MultilingualTokenizer()
    assert tok("IL-6 in C57BL/6") == ["il-6", "il", "6", "c57bl/6", "c57bl", "6"]
    assert MultilingualTokenizer(split_compounds=False)("IL-6") == ["il-6"]
    # files written before the setting existed keep their tokenization
    old = {k: v for k, v in tok.to_dict().items() if k != "split_compounds"}
    assert MultilingualTokenizer.from_dict(old)("IL-6") == ["il-6"]
    assert MultilingualTokenizer.from_dict(tok.to_dict()) == tok


def test_bm25_matches_a_compound_by_its_parts_and_ranks_the_exact_identifier_first():
    nodes = [
        TextNode(id_="exact", text="Serum IL-6 rose after infection."),
        TextNode(id_="parts", text="IL 6 and IL 10 were measured."),
        TextNode(id_="other", text="Nothing about cytokines here."),
    ]
    retriever = MultilingualBM25Retriever.from_defaults(nodes=nodes, similarity_top_k=3)
    ids = [hit.node.node_id for hit in retriever.retrieve("IL-6")]
    assert ids == ["exact", "parts"]


def test_tokenizer_segments_chinese_and_bigrams_japanese_korean():
    tok = MultilingualTokenizer()
    zh = tok("实验对象为小鼠")
    assert "实验" in zh and "对象" in zh and "小鼠" in zh
    assert "实验对象为小鼠" not in zh
    assert tok("でいます") == ["でい", "いま", "ます"]
    assert tok("한국어") == ["한국", "국어"]
    # mixed scripts in one string, punctuation dropped
    mixed = tok("GAPDH 的实验对象：C57BL/6 小鼠。")
    assert mixed[0] == "gapdh" and "c57bl/6" in mixed and "小鼠" in mixed
    assert "：" not in mixed and "。" not in mixed


def test_tokenizer_stemming_and_stopwords_only_touch_latin_tokens():
    tok = MultilingualTokenizer(language="auto")
    assert MultilingualTokenizer(stem=False)("running") == ["running"]
    assert tok("running 列表") == ["run", "列表"]
    assert tok("the") == []  # stopword
    assert "c57bl/6" in tok("C57BL/6")  # not stemmed: not purely alphabetic


def test_tokenizer_serializes_and_pickles():
    tok = MultilingualTokenizer(language="de", stem=False, stopwords=["und"])
    data = tok.to_dict()
    assert json.loads(json.dumps(data)) == data
    assert MultilingualTokenizer.from_dict(data) == tok
    clone = pickle.loads(pickle.dumps(tok))
    assert clone == tok and clone("Häuser und Autos") == tok("Häuser und Autos")
    with pytest.raises(ValueError):
        MultilingualTokenizer.from_dict({**data, "bogus": 1})
    with pytest.raises(ValueError):
        MultilingualTokenizer(language="klingon")


# -- the Chinese example ---------------------------------------------


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("实验对象是什么物种？", "methods"),
        ("GAPDH 的实验对象是什么物种？", "methods"),
        ("C57BL/6", "methods"),
        ("列表推导式", "lang"),
    ],
)
def test_chinese_example_ranks_right_document_first(query, expected):
    retriever = MultilingualBM25Retriever.from_defaults(nodes=zh_nodes())
    results = retriever.retrieve(query)
    assert results and results[0].node.node_id == expected
    assert all(r.score > 0 for r in results)


def test_upstream_bm25_scores_zero_on_the_chinese_example():
    upstream = BM25Retriever.from_defaults(nodes=zh_nodes(), similarity_top_k=2)
    for query in ("实验对象是什么物种？", "列表推导式"):
        results = upstream.retrieve(query)
        assert results  # upstream returns zero-score filler
        assert all(r.score == 0.0 for r in results)


def test_default_top_k_and_plain_contract():
    retriever = MultilingualBM25Retriever.from_defaults(nodes=topic_nodes())
    assert retriever.similarity_top_k == 10
    assert isinstance(retriever, BM25Retriever)
    results = retriever.retrieve(QueryBundle("solar panels electricity"))
    assert ids(results)[0].startswith("solar")


async def test_aretrieve_builds_the_filter_vocabulary_off_the_event_loop(monkeypatch):
    from llama_index_ext_recursive.filters import FilterVocabulary

    retriever = MultilingualBM25Retriever.from_defaults(nodes=topic_nodes())
    built_on = []
    original = FilterVocabulary.from_nodes.__func__

    def recording(cls, nodes):
        built_on.append(threading.get_ident())
        return original(cls, nodes)

    monkeypatch.setattr(FilterVocabulary, "from_nodes", classmethod(recording))
    hits = await retriever.aretrieve(FilteredQueryBundle("solar panels", filters={"category": "energy"}))
    assert built_on and threading.get_ident() not in built_on  # the first call read every node elsewhere
    assert hits and all(h.node.metadata["category"] == "energy" for h in hits)


# -- zero scores, top-k ------------------------------------------------------


def test_zero_score_nodes_never_returned():
    retriever = MultilingualBM25Retriever.from_defaults(nodes=topic_nodes(), similarity_top_k=9)
    assert retriever.retrieve("quantum chromodynamics") == []
    assert retriever.retrieve("the of and") == []  # only stopwords
    with pytest.raises(ValueError, match="the query is empty"):  # was [], now a clear error
        retriever.retrieve("")
    results = retriever.retrieve("queen")
    assert sorted(ids(results)) == ["bees-0", "bees-2"]
    assert all(r.score > 0 for r in results)


def test_top_k_larger_than_corpus_is_kept():
    retriever = MultilingualBM25Retriever.from_defaults(nodes=zh_nodes(), similarity_top_k=50)
    assert retriever.similarity_top_k == 50
    assert len(retriever.retrieve("GAPDH 的实验对象")) == 2
    with pytest.raises(ValueError):
        MultilingualBM25Retriever.from_defaults(nodes=zh_nodes(), similarity_top_k=0)
    with pytest.raises(ValueError):
        MultilingualBM25Retriever.from_defaults(nodes=[])


def test_top_k_truncates_in_score_order():
    retriever = MultilingualBM25Retriever.from_defaults(nodes=topic_nodes(), similarity_top_k=2)
    results = retriever.retrieve("panels electricity sunlight")
    assert len(results) == 2
    assert results[0].score >= results[1].score > 0


# -- filters -----------------------------------------------------------------


def test_per_call_filters_never_leak():
    retriever = MultilingualBM25Retriever.from_defaults(nodes=topic_nodes(), similarity_top_k=9)
    query = "the queen bee panels bread electricity sourdough"
    unfiltered = retriever.retrieve(query)
    assert {r.node.metadata["category"] for r in unfiltered} == {"biology", "energy", "food"}

    results = retriever.retrieve(FilteredQueryBundle(query, filters={"category": "energy"}))
    assert results and all(r.node.metadata["category"] == "energy" for r in results)
    assert all(r.score > 0 for r in results)
    # exact filtered top-k: every matching energy node with a non-zero score is returned
    expected = [r.node.node_id for r in unfiltered if r.node.metadata["category"] == "energy"]
    assert ids(results) == expected

    # filter matching nothing -> empty, not a fallback to unfiltered results
    assert retriever.retrieve(FilteredQueryBundle(query, filters={"category": "space"})) == []
    # the filter is per call: the next plain query is unfiltered again
    assert ids(retriever.retrieve(query)) == ids(unfiltered)


def test_filtered_top_k_is_exact_when_matches_rank_low():
    """With k=1 the single result is the best *matching* node, not a filtered-out one."""
    retriever = MultilingualBM25Retriever.from_defaults(nodes=topic_nodes(), similarity_top_k=1)
    query = "queen bee queen bee queen panels"
    assert ids(retriever.retrieve(query))[0].startswith("bees")
    results = retriever.retrieve(FilteredQueryBundle(query, filters={"category": "energy"}))
    assert len(results) == 1 and results[0].node.metadata["category"] == "energy"


def test_construction_filters_and_per_call_filters_combine_with_and():
    retriever = MultilingualBM25Retriever.from_defaults(
        nodes=topic_nodes(),
        similarity_top_k=9,
        filters=MetadataFilters(filters=[MetadataFilter(key="year", value=2020, operator=FilterOperator.GT)]),
    )
    query = "the queen bee panels bread electricity sourdough dough"
    base = retriever.retrieve(query)
    assert base and all(r.node.metadata["year"] > 2020 for r in base)
    assert {r.node.metadata["category"] for r in base} == {"energy", "food"}

    both = retriever.retrieve(FilteredQueryBundle(query, filters={"section": "body"}))
    assert both and all(r.node.metadata["year"] > 2020 and r.node.metadata["section"] == "body" for r in both)
    # per-call filter cannot widen the construction filter
    assert retriever.retrieve(FilteredQueryBundle(query, filters={"category": "biology"})) == []


# -- persistence -------------------------------------------------------------


def test_persist_round_trip_keeps_tokenizer_and_scores(tmp_path):
    tokenizer = MultilingualTokenizer(language="auto", stem=False, stopwords=["python"])
    retriever = MultilingualBM25Retriever.from_defaults(
        nodes=zh_nodes(), similarity_top_k=3, tokenizer=tokenizer, filters={"section": ["methods", "lang"]}
    )
    target = tmp_path / "bm25"
    retriever.persist(target)
    loaded = MultilingualBM25Retriever.from_persist_dir(target)

    assert loaded.tokenizer == tokenizer
    assert loaded.tokenizer.stem is False
    assert loaded.similarity_top_k == 3
    assert loaded.filters == retriever.filters
    assert [n.node_id for n in loaded.nodes] == ["methods", "lang"]
    assert loaded.nodes[0].metadata == {"section": "methods"}
    for query in ("实验对象是什么物种？", "GAPDH", "C57BL/6", "列表推导式", "running"):
        assert scored(loaded.retrieve(query)) == scored(retriever.retrieve(query))
    assert loaded.retrieve("列表推导式")[0].score > 0

    # persisting again over an existing directory replaces it
    retriever.similarity_top_k = 1
    retriever.persist(target)
    assert MultilingualBM25Retriever.from_persist_dir(target).similarity_top_k == 1


def test_load_missing_or_corrupted_dir_raises_clear_error(tmp_path):
    with pytest.raises(PersistError, match="nowhere does not exist"):
        MultilingualBM25Retriever.from_persist_dir(tmp_path / "nowhere")

    target = tmp_path / "bm25"
    for name, damage, expected in (
        ("config.json", "same size", "modified after it was persisted"),
        ("nodes.json", "delete", "missing"),
        ("data.csc.index.npy", "garbage", "truncated or was modified"),
        ("nodes.json", "[]", "truncated or was modified"),
    ):
        MultilingualBM25Retriever.from_defaults(nodes=zh_nodes()).persist(target)
        path = current_generation(target) / name
        if damage == "delete":
            path.unlink()
        elif damage == "same size":
            path.write_bytes(b"{" + b" " * (path.stat().st_size - 2) + b"}")
        else:
            path.write_text(damage, encoding="utf-8")
        with pytest.raises(PersistError, match=rf"{name}.*{expected}"):
            MultilingualBM25Retriever.from_persist_dir(target)


def _previous_release_files(folder, retriever):
    """Turn a persisted generation into what the previous release wrote: its
    settings in ``retriever.json`` (format_version 1) instead of ``config.json``,
    and no term statistics (terms format 2 came later)."""
    (folder / "config.json").unlink()
    for name in ("terms.index.json", "tf.csc.index.npy", "lengths.index.npy"):
        (folder / name).unlink()
    settings = {"format_version": 1, **retriever.get_persist_args()}
    del settings["filter_policy"]  # the previous release had no filter_policy
    (folder / "retriever.json").write_text(json.dumps(settings), encoding="utf-8")


def test_previous_format_folder_loads_and_is_migrated(tmp_path):
    """A folder the previous release wrote (its files at the top level, settings in
    retriever.json) still loads."""
    retriever = MultilingualBM25Retriever.from_defaults(nodes=zh_nodes(), similarity_top_k=1)
    retriever.persist(tmp_path / "new")
    legacy = tmp_path / "legacy"
    shutil.copytree(current_generation(tmp_path / "new"), legacy)
    _previous_release_files(legacy, retriever)
    loaded = MultilingualBM25Retriever.from_persist_dir(legacy)
    assert loaded.get_persist_args() == retriever.get_persist_args()
    assert scored(loaded.retrieve("GAPDH")) == scored(retriever.retrieve("GAPDH"))

    loaded.persist(legacy)  # migrates: the old top-level files go, the index stays
    assert sorted(p.name for p in legacy.iterdir() if not p.name.startswith(".")) == [
        "MANIFEST.json",
        current_generation(legacy).name,
    ]
    assert scored(MultilingualBM25Retriever.from_persist_dir(legacy).retrieve("GAPDH")) == scored(
        retriever.retrieve("GAPDH")
    )


# -- async -------------------------------------------------------------------


def test_aretrieve_equals_retrieve():
    retriever = MultilingualBM25Retriever.from_defaults(nodes=zh_nodes() + topic_nodes())

    async def run():
        queries = ["实验对象是什么物种？", "列表推导式", "solar panels", "nothing-here"]
        bundles = queries + [FilteredQueryBundle("queen panels", filters={"category": "energy"})]
        got = await asyncio.gather(*(retriever.aretrieve(q) for q in bundles))
        return bundles, got

    bundles, got = asyncio.run(run())
    for bundle, results in zip(bundles, got):
        assert scored(results) == scored(retriever.retrieve(bundle))


def test_aretrieve_does_not_block_event_loop(monkeypatch):
    retriever = MultilingualBM25Retriever.from_defaults(nodes=zh_nodes())
    released = threading.Event()
    original = retriever._score_all

    def blocking_score(tokens):
        # If scoring ran on the event loop, `release` below could never run.
        if not released.wait(timeout=10):
            raise AssertionError("scoring blocked the event loop")
        return original(tokens)

    monkeypatch.setattr(retriever, "_score_all", blocking_score)

    async def release():
        await asyncio.sleep(0.01)
        released.set()

    async def run():
        results, _ = await asyncio.wait_for(asyncio.gather(retriever.aretrieve("列表推导式"), release()), timeout=30)
        return results

    results = asyncio.run(run())
    assert ids(results) == ["lang"]


# ------------------------------------------------------------ bad input (issue 11)
def _bad_input_nodes():
    from llama_index.core.schema import TextNode

    return [
        TextNode(id_="a", text="The queen bee lays eggs.", metadata={"category": "biology", "year": 2019}),
        TextNode(id_="b", text="Solar panels make electricity.", metadata={"category": "energy", "year": 2023}),
    ]


@pytest.mark.parametrize("query", ["", "   "])
async def test_blank_queries_are_refused(query):
    bm25 = MultilingualBM25Retriever.from_defaults(nodes=_bad_input_nodes())
    with pytest.raises(ValueError, match="the query is empty"):
        bm25.retrieve(query)
    with pytest.raises(ValueError, match="the query is empty"):
        await bm25.aretrieve(query)


def test_a_lone_surrogate_in_a_query_is_refused_by_position_as_by_every_retriever():
    bm25 = MultilingualBM25Retriever.from_defaults(nodes=_bad_input_nodes())
    with pytest.raises(ValueError, match="at position 6, a lone surrogate"):
        bm25.retrieve("queen \ud800 bee")
    assert [h.node.node_id for h in bm25.retrieve("queen bee")] == ["a"]


@pytest.mark.parametrize("top_k, error", [(True, TypeError), (2.5, TypeError), ("5", TypeError), (0, ValueError)])
def test_similarity_top_k_must_be_a_positive_integer(top_k, error):
    with pytest.raises(error, match="similarity_top_k"):
        MultilingualBM25Retriever.from_defaults(nodes=_bad_input_nodes(), similarity_top_k=top_k)


def test_duplicate_node_ids_are_refused():
    nodes = _bad_input_nodes()
    nodes[1].id_ = "a"
    with pytest.raises(ValueError, match=r"nodes\[0\] and nodes\[1\] share the node id 'a'"):
        MultilingualBM25Retriever.from_defaults(nodes=nodes)


def test_filters_that_cannot_match_raise_or_warn(caplog):
    from llama_index_ext_recursive.filters import FilterError

    bm25 = MultilingualBM25Retriever.from_defaults(nodes=_bad_input_nodes())
    with pytest.raises(FilterError, match="did you mean 'category'"):
        bm25.retrieve(FilteredQueryBundle("queen bee", filters={"categroy": "biology"}))
    with pytest.raises(FilterError, match="'year' holds number values"):
        bm25.retrieve(FilteredQueryBundle("queen bee", filters={"year": "2019"}))
    assert [h.node.node_id for h in bm25.retrieve(FilteredQueryBundle("queen bee", filters={"year": 2019}))] == ["a"]
    lenient = MultilingualBM25Retriever.from_defaults(nodes=_bad_input_nodes(), unknown_filter_key="warn")
    assert lenient.retrieve(FilteredQueryBundle("queen bee", filters={"categroy": "biology"})) == []
    assert "did you mean 'category'" in caplog.text


def test_indexed_filter_masks_equal_a_full_scan():
    """Equality/IN conditions narrow through an inverted index; the mask must be
    exactly what checking every node gives, nested and mixed filters included."""
    from llama_index.core.schema import TextNode
    from llama_index.core.vector_stores.types import FilterCondition, FilterOperator, MetadataFilter, MetadataFilters

    from llama_index_ext_recursive.filters import filterable_metadata, metadata_matcher

    nodes = [
        TextNode(
            id_=f"n{i}",
            text=f"word{i % 7} common",
            metadata={"group": f"g{i % 5}", "year": 2000 + i % 4, "tags": ["a", "b"] if i % 2 else ["c"]},
        )
        for i in range(60)
    ]
    bm25 = MultilingualBM25Retriever.from_defaults(nodes=nodes)
    cases = [
        MetadataFilters(filters=[MetadataFilter(key="group", value="g1")]),
        MetadataFilters(
            filters=[
                MetadataFilter(key="group", value=["g1", "g3"], operator=FilterOperator.IN),
                MetadataFilter(key="year", value=2001),
            ]
        ),
        MetadataFilters(
            filters=[
                MetadataFilter(key="year", value=2002),
                MetadataFilters(
                    filters=[MetadataFilter(key="group", value="g0"), MetadataFilter(key="group", value="g2")],
                    condition=FilterCondition.OR,
                ),
            ]
        ),
        MetadataFilters(
            filters=[
                MetadataFilter(key="year", value=2000, operator=FilterOperator.GT),
                MetadataFilter(key="group", value="g4"),
            ]
        ),
        MetadataFilters(filters=[MetadataFilter(key="tags", value="a", operator=FilterOperator.CONTAINS)]),
        MetadataFilters(filters=[MetadataFilter(key="group", value="nope")]),
    ]
    for filters in cases:
        matches = metadata_matcher(filters)
        full = [bool(matches(filterable_metadata(n))) for n in nodes]
        assert bm25._mask(filters).tolist() == full


@pytest.mark.integration  # a real Python process
def test_bm25s_debug_logs_follow_the_apps_level():
    """bm25s sets its logger to DEBUG at import, which made every index print
    "Building index from tokens" in apps with a root handler. Checked in a fresh
    interpreter: in this one other imports may already have changed it."""
    import subprocess
    import sys

    code = (
        "import logging, llama_index_ext_recursive.retrievers.bm25; "
        "print(logging.getLogger('bm25s').isEnabledFor(logging.DEBUG))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_corpus_without_any_indexable_word_finds_nothing_instead_of_failing(caplog):
    from llama_index.core.schema import TextNode

    from llama_index_ext_recursive.retrievers.bm25 import MultilingualBM25Retriever

    nodes = [TextNode(id_="a", text="a"), TextNode(id_="b", text="the ... !")]
    with caplog.at_level("WARNING"):
        retriever = MultilingualBM25Retriever.from_defaults(nodes=nodes)
    assert "none of the 2 nodes has an indexable word" in caplog.text
    assert retriever.retrieve("a the") == []
    assert retriever.retrieve("anything else") == []
