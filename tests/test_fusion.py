"""HybridFusionRetriever: upstream QueryFusionRetriever failures C1-C10 fixed, plus fusion logic."""

from __future__ import annotations

import asyncio
import copy
import logging
import sys

import pytest
from conftest import topic_nodes
from hypothesis import given, settings
from hypothesis import strategies as st
from llama_index.core import Settings, StorageContext, VectorStoreIndex
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.llms.types import CompletionResponse
from llama_index.core.llms import MockLLM
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from llama_index_ext_recursive.query import FilteredQueryBundle, filters_of
from llama_index_ext_recursive.results import FusedNodeWithScore, FusionHit
from llama_index_ext_recursive.retrievers.fusion import HybridFusionRetriever
from llama_index_ext_recursive.retrievers.hybrid import CROSS_SCRIPT_WEIGHTS
from llama_index_ext_recursive.stores.numpy_store import NumpyVectorStore

logging.getLogger("bm25s").setLevel(logging.ERROR)

MODES = ["reciprocal_rerank", "relative_score", "dist_based_score", "simple"]


class Static(BaseRetriever):
    """Returns a fixed list (the same objects every call); records what it was asked."""

    def __init__(self, hits: list[NodeWithScore]) -> None:
        self.hits = hits
        self.seen: list[QueryBundle] = []
        super().__init__()

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        self.seen.append(query_bundle)
        return list(self.hits)

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        await asyncio.sleep(0)
        return self._retrieve(query_bundle)


class Failing(BaseRetriever):
    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        raise RuntimeError("child exploded")

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        raise RuntimeError("child exploded")


def N(node_id: str, score: float | None, text: str | None = None, **metadata) -> NodeWithScore:
    return NodeWithScore(node=TextNode(id_=node_id, text=text or f"text {node_id}", metadata=metadata), score=score)


def ids(results) -> list[str]:
    return [n.node.node_id for n in results]


def pairs(results):
    return [(n.node.node_id, n.score) for n in results]


def FixedLLM(text: str) -> MockLLM:
    """An LLM whose completion is fixed text (query generation)."""

    class _Fixed(MockLLM):
        def complete(self, prompt, formatted=False, **kwargs):
            return CompletionResponse(text=text)

        async def acomplete(self, prompt, formatted=False, **kwargs):
            return CompletionResponse(text=text)

    return _Fixed()


# --------------------------------------------------------------------------- C1


def test_c1_no_llm_needed_for_one_query(monkeypatch):
    monkeypatch.setitem(sys.modules, "llama_index.llms.openai", None)  # openai absent
    assert Settings._llm is None
    for mode in MODES:
        fusion = HybridFusionRetriever([Static([N("a", 1.0)])], mode=mode, num_queries=1)
        assert ids(fusion.retrieve("q")) == ["a"]
    fusion = HybridFusionRetriever([Static([N("a", 1.0)])])  # all defaults
    assert ids(fusion.retrieve("q")) == ["a"]
    assert Settings._llm is None  # nothing resolved behind our back


def test_c1_extra_queries_without_llm_is_a_clear_error():
    with pytest.raises(ValueError, match=r"llm=.*Settings\.llm"):
        HybridFusionRetriever([Static([N("a", 1.0)])], num_queries=3)


def test_extra_queries_use_given_or_settings_llm():
    child = Static([N("a", 1.0)])
    fusion = HybridFusionRetriever([child], llm=FixedLLM(text="other\nanother"), num_queries=3)
    fusion.retrieve("q")
    assert [b.query_str for b in child.seen] == ["q", "other", "another"]
    Settings.llm = FixedLLM(text="from settings")
    child2 = Static([N("a", 1.0)])
    HybridFusionRetriever([child2], num_queries=2).retrieve("q")
    assert [b.query_str for b in child2.seen] == ["q", "from settings"]


# --------------------------------------------------------------------------- C2


@pytest.mark.parametrize("mode", MODES)
def test_c2_weights_change_the_result(mode):
    def run(weights):
        fusion = HybridFusionRetriever(
            [Static([N("a", 0.9), N("b", 0.5)]), Static([N("c", 0.8), N("b", 0.7)])],
            mode=mode,
            retriever_weights=weights,
        )
        return fusion.retrieve("q")

    assert ids(run([0.99, 0.01]))[0] == "a"
    assert ids(run([0.01, 0.99]))[0] == "c"


def test_weight_zero_removes_a_child_and_skips_it():
    removed = Static([N("x", 1.0)])
    fusion = HybridFusionRetriever([Static([N("a", 0.9)]), removed], retriever_weights=[1.0, 0.0])
    assert ids(fusion.retrieve("q")) == ["a"]
    assert removed.seen == []


def test_bad_weights_rejected():
    with pytest.raises(ValueError):
        HybridFusionRetriever([Static([])], retriever_weights=[0.0])
    with pytest.raises(ValueError):
        HybridFusionRetriever([Static([])], retriever_weights=[1.0, 1.0])
    with pytest.raises(ValueError):
        HybridFusionRetriever([Static([])], retriever_weights=[-1.0])


# --------------------------------------------------------------------------- C6, RRF


def test_c6_one_based_rank():
    fusion = HybridFusionRetriever([Static([N("a", 0.9), N("b", 0.1)])], retriever_weights=[2.5])
    results = fusion.retrieve("q")
    assert results[0].score == pytest.approx(2.5 / 61)
    assert results[1].score == pytest.approx(2.5 / 62)


def test_rrf_hand_computed_example():
    # child 0 (w=2): a, b, c   child 1 (w=1): c, d, a    k=10
    fusion = HybridFusionRetriever(
        [Static([N("a", 0.9), N("b", 0.8), N("c", 0.7)]), Static([N("c", 5.0), N("d", 4.0), N("a", 3.0)])],
        retriever_weights=[2.0, 1.0],
        rrf_k=10,
    )
    expected = {
        "a": 2 / 11 + 1 / 13,
        "b": 2 / 12,
        "c": 2 / 13 + 1 / 11,
        "d": 1 / 12,
    }
    results = fusion.retrieve("q")
    assert ids(results) == ["a", "c", "b", "d"]
    for node_id, score in pairs(results):
        assert score == pytest.approx(expected[node_id])


# --------------------------------------------------------------------------- C7


def test_c7_rank_is_the_childs_order_not_resorted():
    # a child whose scores are not sorted (e.g. a reranker's order): its order counts
    fusion = HybridFusionRetriever([Static([N("first", 0.1), N("second", 0.9)])])
    assert ids(fusion.retrieve("q")) == ["first", "second"]


@pytest.mark.parametrize("mode", MODES)
def test_c7_distance_children_rank_correctly(mode):
    dist = Static([N("best", 0.10), N("mid", 0.50), N("worst", 2.00)])
    fusion = HybridFusionRetriever([dist], mode=mode, score_directions=["distance"])
    results = fusion.retrieve("q")
    assert ids(results) == ["best", "mid", "worst"]
    if mode == "relative_score":
        assert results[0].score == pytest.approx(1.0)
        assert results[-1].score == pytest.approx(0.0)


def test_distance_and_similarity_children_combine():
    fusion = HybridFusionRetriever(
        [Static([N("a", 0.1), N("b", 3.0)]), Static([N("a", 0.9), N("b", 0.2)])],
        mode="relative_score",
        score_directions=["distance", "similarity"],
    )
    assert pairs(fusion.retrieve("q")) == [("a", pytest.approx(1.0)), ("b", pytest.approx(0.0))]


# --------------------------------------------------------------------------- C8


def test_c8_zero_score_bm25_hits_get_no_credit():
    from llama_index.retrievers.bm25 import BM25Retriever

    texts = [
        ("a", "photosynthesis in plants"),
        ("b", "chlorophyll absorbs light"),
        ("c", "stock market volatility"),
        ("d", "bond yields rise"),
        ("e", "football results"),
    ]
    nodes = [TextNode(text=t, id_=i) for i, t in texts]
    bm25 = BM25Retriever.from_defaults(nodes=nodes, similarity_top_k=3)
    query = "how do leaves make sugar"  # no word in common with any node
    assert all(n.score == 0.0 for n in bm25.retrieve(query))
    dense = Static(
        [
            NodeWithScore(node=nodes[0], score=0.82),
            NodeWithScore(node=nodes[1], score=0.80),
            NodeWithScore(node=nodes[4], score=0.31),
        ]
    )
    for mode in MODES:
        fusion = HybridFusionRetriever([dense, bm25], mode=mode, retriever_names=["dense", "bm25"])
        results = fusion.retrieve(query)
        assert ids(results) == ["a", "b", "e"]
        assert all(h.retriever_name == "dense" for n in results for h in n.provenance)


def test_none_and_zero_scores_excluded_for_similarity_only():
    fusion = HybridFusionRetriever(
        [Static([N("s", 0.5), N("zero", 0.0), N("none", None)]), Static([N("d0", 0.0)])],
        score_directions=["similarity", "distance"],
    )
    assert sorted(ids(fusion.retrieve("q"))) == ["d0", "s"]  # distance 0.0 is a perfect match


# --------------------------------------------------------------------------- C3


@pytest.mark.parametrize("mode", MODES)
def test_c3_identical_text_under_two_ids_stays_two(mode):
    fusion = HybridFusionRetriever(
        [Static([N("doc1-footer", 0.9, "Copyright ACME")]), Static([N("doc2-footer", 0.8, "Copyright ACME")])],
        mode=mode,
    )
    assert sorted(ids(fusion.retrieve("q"))) == ["doc1-footer", "doc2-footer"]


def test_c3_same_id_merges_and_sums_credit():
    a1 = NodeWithScore(node=TextNode(text="same id", id_="X", metadata={"src": "vec"}), score=0.9)
    a2 = NodeWithScore(node=TextNode(text="same id", id_="X", metadata={"src": "bm25"}), score=0.8)
    fusion = HybridFusionRetriever([Static([a1]), Static([a2])])
    results = fusion.retrieve("q")
    assert len(results) == 1
    assert results[0].score == pytest.approx(2 / 61)
    assert [h.retriever_index for h in results[0].provenance] == [0, 1]
    assert results[0].node.metadata["src"] == "vec"  # the first child's copy


def test_duplicate_within_one_child_counts_once_at_best_rank():
    fusion = HybridFusionRetriever([Static([N("a", 0.9), N("b", 0.8), N("a", 0.7)])])
    results = fusion.retrieve("q")
    assert pairs(results) == [("a", pytest.approx(1 / 61)), ("b", pytest.approx(1 / 62))]


# --------------------------------------------------------------------------- C4


@pytest.mark.parametrize("mode", MODES)
def test_c4_children_objects_unchanged(mode):
    shared = [N("a", 0.9), N("b", 0.1)]
    other = [N("c", 0.5), N("a", 0.4)]
    before = copy.deepcopy(shared + other)
    fusion = HybridFusionRetriever([Static(shared), Static(other)], mode=mode)
    results = fusion.retrieve("q")
    results += asyncio.run(fusion.aretrieve("q"))
    assert [(n.node.node_id, n.score, n.node.metadata) for n in shared + other] == [
        (n.node.node_id, n.score, n.node.metadata) for n in before
    ]
    originals = {id(n) for n in shared + other}
    assert all(id(n) not in originals for n in results)
    assert all(isinstance(n, FusedNodeWithScore) for n in results)


# --------------------------------------------------------------------------- C5


def test_c5_relative_score_divides_by_queries_actually_run():
    child = Static([N("a", 0.9), N("b", 0.1)])
    # the LLM returns the original query again: one distinct query is run
    fusion = HybridFusionRetriever([child], llm=FixedLLM(text="q\nq"), num_queries=4, mode="relative_score")
    assert pairs(fusion.retrieve("q")) == [("a", pytest.approx(1.0)), ("b", pytest.approx(0.0))]
    assert len(child.seen) == 1
    # one distinct extra query: two queries run, each contributes half
    child2 = Static([N("a", 0.9), N("b", 0.1)])
    fusion2 = HybridFusionRetriever([child2], llm=FixedLLM(text="other"), num_queries=4, mode="dist_based_score")
    results = fusion2.retrieve("q")
    assert len(child2.seen) == 2
    assert [h.query_str for h in results[0].provenance] == ["q", "other"]
    assert results[0].provenance[0].contribution == pytest.approx(results[0].score / 2)


# --------------------------------------------------------------------------- C10


def test_c10_default_top_k_is_10():
    fusion = HybridFusionRetriever([Static([N(f"n{i:02d}", 1.0 - i / 100) for i in range(15)])])
    assert fusion.similarity_top_k == 10
    assert len(fusion.retrieve("q")) == 10
    fusion5 = HybridFusionRetriever([Static([N(f"n{i:02d}", 1.0 - i / 100) for i in range(15)])], similarity_top_k=5)
    assert ids(fusion5.retrieve("q")) == [f"n{i:02d}" for i in range(5)]


# --------------------------------------------------------------------------- C9


def test_c9_child_error_surfaces_in_sync_and_async():
    fusion = HybridFusionRetriever([Static([N("a", 1.0)]), Failing()])
    with pytest.raises(RuntimeError, match="child exploded"):
        fusion.retrieve("q")
    with pytest.raises(RuntimeError, match="child exploded"):
        asyncio.run(fusion.aretrieve("q"))


async def test_c9_sync_retrieve_inside_running_loop():
    fusion = HybridFusionRetriever([Static([N("a", 1.0)])])
    assert ids(fusion.retrieve("q")) == ["a"]  # no nested loop, no worker thread
    failing = HybridFusionRetriever([Failing()])
    with pytest.raises(RuntimeError, match="child exploded"):
        failing.retrieve("q")
    with pytest.raises(RuntimeError, match="child exploded"):
        await failing.aretrieve("q")


async def test_aretrieve_runs_children_concurrently():
    arrived: list[str] = []
    both = asyncio.Event()

    class Barrier(BaseRetriever):
        def __init__(self, name: str) -> None:
            self.name = name
            super().__init__()

        def _retrieve(self, query_bundle):
            return [N(self.name, 1.0)]

        async def _aretrieve(self, query_bundle):
            arrived.append(self.name)
            if len(arrived) == 2:
                both.set()
            await both.wait()  # deadlocks if children ran one after another
            return [N(self.name, 1.0)]

    fusion = HybridFusionRetriever([Barrier("a"), Barrier("b")])
    results = await asyncio.wait_for(fusion.aretrieve("q"), timeout=30)
    assert ids(results) == ["a", "b"]  # tie broken by node_id


# --------------------------------------------------------------------------- provenance


def test_provenance_fields():
    fusion = HybridFusionRetriever(
        [Static([N("a", 0.9), N("b", 0.8)]), Static([N("b", 7.0)])],
        retriever_weights=[1.0, 3.0],
        retriever_names=["vector", "bm25"],
    )
    results = fusion.retrieve("q")
    top = results[0]
    assert top.node.node_id == "b"
    assert top.provenance == [
        FusionHit(retriever_index=0, retriever_name="vector", query_str="q", rank=2, score=0.8, contribution=1 / 62),
        FusionHit(retriever_index=1, retriever_name="bm25", query_str="q", rank=1, score=7.0, contribution=3 / 61),
    ]
    assert top.score == pytest.approx(sum(h.contribution for h in top.provenance))
    assert isinstance(top, NodeWithScore)


def test_default_names_are_class_names():
    results = HybridFusionRetriever([Static([N("a", 1.0)])]).retrieve("q")
    assert results[0].provenance[0].retriever_name == "Static"


# --------------------------------------------------------------------------- filters


def test_per_call_filters_passed_down_and_enforced():
    # the children ignore filters; the fused list is still filtered
    c1 = Static([N("a", 0.9, year=2024), N("b", 0.8, year=2020)])
    c2 = Static([N("c", 0.9, year=2020), N("d", 0.5, year=2024)])
    fusion = HybridFusionRetriever([c1, c2])
    results = fusion.retrieve(FilteredQueryBundle("q", filters={"year": 2024}))
    assert sorted(ids(results)) == ["a", "d"]
    for child in (c1, c2):
        passed = child.seen[-1]
        assert isinstance(passed, FilteredQueryBundle)
        assert filters_of(passed).filters[0].key == "year"
    # a plain query is passed down unchanged and not filtered
    assert sorted(ids(fusion.retrieve("q"))) == ["a", "b", "c", "d"]
    assert not isinstance(c1.seen[-1], FilteredQueryBundle)


def test_construction_filters_merge_with_per_call():
    child = Static(
        [N("a", 0.9, year=2024, lang="en"), N("b", 0.8, year=2024, lang="de"), N("c", 0.7, year=2020, lang="en")]
    )
    fusion = HybridFusionRetriever([child], filters={"lang": "en"})
    assert ids(fusion.retrieve("q")) == ["a", "c"]
    assert ids(fusion.retrieve(FilteredQueryBundle("q", filters={"year": 2024}))) == ["a"]
    assert {f.key for f in filters_of(child.seen[-1]).filters} == {"lang", "year"}
    replace = HybridFusionRetriever([child], filters={"lang": "en"}, filter_policy="replace")
    assert ids(replace.retrieve(FilteredQueryBundle("q", filters={"year": 2024}))) == ["a", "b"]


def test_generated_queries_carry_filters():
    child = Static([N("a", 0.9, year=2024)])
    fusion = HybridFusionRetriever([child], llm=FixedLLM(text="other"), num_queries=2)
    fusion.retrieve(FilteredQueryBundle("q", filters={"year": 2024}))
    assert [type(b).__name__ for b in child.seen] == ["FilteredQueryBundle", "FilteredQueryBundle"]


# --------------------------------------------------------------------------- parity, properties

ID = st.sampled_from([f"n{i}" for i in range(8)])
CHILD = st.lists(st.tuples(ID, st.floats(min_value=0.01, max_value=10.0)), max_size=6)


def build(children, **kwargs):
    return [Static([N(i, s) for i, s in hits]) for hits in children]


@settings(max_examples=60, deadline=None)
@given(children=st.lists(CHILD, min_size=1, max_size=4), mode=st.sampled_from(MODES), data=st.data())
def test_property_order_of_children_is_irrelevant_with_equal_weights(children, mode, data):
    permuted = data.draw(st.permutations(children))
    a = HybridFusionRetriever(build(children), mode=mode).retrieve("q")
    b = HybridFusionRetriever(build(permuted), mode=mode).retrieve("q")
    assert pairs(a) == pairs(b)


@settings(max_examples=60, deadline=None)
@given(children=st.lists(CHILD, min_size=1, max_size=4), mode=st.sampled_from(MODES), data=st.data())
def test_property_node_first_everywhere_is_first(children, mode, data):
    lists = [[("winner", 20.0)] + hits for hits in children]
    weights = data.draw(st.lists(st.floats(min_value=0.1, max_value=5.0), min_size=len(lists), max_size=len(lists)))
    for w in (None, weights):
        results = HybridFusionRetriever(build(lists), mode=mode, retriever_weights=w).retrieve("q")
        assert results[0].node.node_id == "winner"
        assert all(n.score < results[0].score for n in results[1:])


@settings(max_examples=60, deadline=None)
@given(children=st.lists(CHILD, min_size=2, max_size=4), mode=st.sampled_from(MODES), data=st.data())
def test_property_weight_zero_removes_a_child(children, mode, data):
    drop = data.draw(st.integers(min_value=0, max_value=len(children) - 1))
    weights = [1.0] * len(children)
    weights[drop] = 0.0
    with_zero = HybridFusionRetriever(build(children), mode=mode, retriever_weights=weights).retrieve("q")
    kept = [c for i, c in enumerate(children) if i != drop]
    without = HybridFusionRetriever(build(kept), mode=mode).retrieve("q")
    assert pairs(with_zero) == pairs(without)


@settings(max_examples=40, deadline=None)
@given(children=st.lists(CHILD, min_size=1, max_size=3), mode=st.sampled_from(MODES))
def test_property_sync_async_parity(children, mode):
    fusion = HybridFusionRetriever(build(children), mode=mode, similarity_top_k=5)
    sync = fusion.retrieve("q")
    async_ = asyncio.run(fusion.aretrieve("q"))
    assert pairs(sync) == pairs(async_)
    assert [n.provenance for n in sync] == [n.provenance for n in async_]


# --------------------------------------------------------------------------- from_nodes / from_index


def test_from_nodes_hybrid(lexical):
    nodes = topic_nodes()
    fusion = HybridFusionRetriever.from_nodes(nodes, embed_model=lexical)
    assert fusion.similarity_top_k == 10
    assert fusion.retriever_names == ["vector", "bm25"]
    results = fusion.retrieve("solar panels sunlight electricity")
    assert results[0].node.node_id.startswith("solar")
    assert {h.retriever_name for h in results[0].provenance} == {"vector", "bm25"}
    assert pairs(results) == pairs(asyncio.run(fusion.aretrieve("solar panels sunlight electricity")))


def test_from_nodes_per_call_filters(lexical):
    fusion = HybridFusionRetriever.from_nodes(topic_nodes(), embed_model=lexical, similarity_top_k=5)
    results = fusion.retrieve(FilteredQueryBundle("bread dough bees solar", filters={"category": "food"}))
    assert results and all(n.node.metadata["category"] == "food" for n in results)
    assert len(results) == 3  # vector child filtered in the store, so nothing is lost


def test_from_nodes_does_not_reembed(lexical):
    nodes = topic_nodes()
    for node in nodes:
        node.embedding = lexical.get_text_embedding(node.get_content(metadata_mode="embed"))
    calls = lexical.calls
    HybridFusionRetriever.from_nodes(nodes, embed_model=lexical, calibrate=False)
    assert lexical.calls == calls  # calibration would embed its pseudo-queries, never nodes


CHINESE_TEXTS = [
    "定量 PCR 以小鼠肝脏 GAPDH 为内参，实验对象为 SPF 级 C57BL/6 小鼠。",
    "Python 的列表推导式用一行代码从可迭代对象生成新的列表。",
    "长江是中国最长的河流，发源于青藏高原的唐古拉山脉。",
    "光合作用把二氧化碳和水在光照下转化为葡萄糖和氧气。",
    "太阳能电池板把阳光直接转换成电能，效率逐年提高。",
    "面包发酵需要酵母在温暖的环境里把糖分解产生气体。",
    "蜜蜂通过摇摆舞告诉同伴花蜜的方向和距离。",
    "量子计算机利用叠加和纠缠来并行处理大量状态。",
    "北京烤鸭的外皮酥脆，通常配薄饼、葱丝和甜面酱食用。",
    "地震波分为纵波和横波，纵波传播速度比横波更快。",
]


def mixed_nodes() -> list[TextNode]:
    chinese = [TextNode(id_=f"zh{i}", text=text, metadata={"category": "zh"}) for i, text in enumerate(CHINESE_TEXTS)]
    return topic_nodes() + chinese


def test_calibration_gives_no_weight_to_a_child_that_cannot_read_a_script(lexical):
    # LexicalEmbedding hashes whole \w+ runs: a window cut from an unspaced
    # Chinese sentence shares no token with it, so the vector child is blind there
    fusion = HybridFusionRetriever.from_nodes(mixed_nodes(), embed_model=lexical)
    report = fusion.calibration
    assert report is not None and report.names == ["vector", "bm25"]
    assert {s: e.samples for s, e in report.scripts.items()} == {"cjk": 10, "latin": 9}
    cjk = report.scripts["cjk"]
    assert cjk.child_mrr[0] < cjk.child_mrr[1] == 1.0
    # a measured-best point (MRR 1.0, as BM25 alone) that gives the blind child
    # little weight: its chance hits among 10 nodes (MRR 0.15) earn a sliver
    assert cjk.weights[0] <= 0.2 and cjk.weights[1] >= 0.8
    assert cjk.mrr == max(m for _, m in cjk.grid) == 1.0
    latin = report.scripts["latin"]
    assert latin.mrr >= max(latin.child_mrr)
    assert latin.weights[0] > 0 and latin.weights[1] > 0  # both children find English
    assert len(latin.grid) == 11  # (1 - t, t), t = 0, 0.1, ..., 1

    assert fusion.weights_for("实验对象是什么物种？") == cjk.weights
    assert fusion.weights_for("bread dough yeast") == latin.weights
    chinese = fusion.retrieve("实验对象是什么物种？")
    assert chinese[0].node.node_id == "zh0"
    assert "bm25" in {hit.retriever_name for hit in chinese[0].provenance}
    latin_hits = fusion.retrieve("bread dough yeast")
    assert {hit.retriever_name for n in latin_hits for hit in n.provenance} == {"vector", "bm25"}


def test_calibration_is_deterministic_and_sync_async_agree(lexical):
    first = HybridFusionRetriever.from_nodes(mixed_nodes(), embed_model=lexical)
    second = HybridFusionRetriever.from_nodes(mixed_nodes(), embed_model=lexical)
    assert first.calibration == second.calibration
    for query in ("实验对象是什么物种？", "bees dance honey", "GAPDH"):
        sync = [(n.node.node_id, n.score) for n in first.retrieve(query)]
        asyn = [(n.node.node_id, n.score) for n in asyncio.run(first.aretrieve(query))]
        assert sync == asyn


def test_explicit_weights_are_never_recalibrated(lexical):
    fusion = HybridFusionRetriever.from_nodes(mixed_nodes(), embed_model=lexical, retriever_weights=[0.5, 1.0])
    assert fusion.calibration is None and fusion.script_weights == {}
    assert fusion.weights_for("实验对象是什么物种？") == [0.5, 1.0]
    pinned = HybridFusionRetriever.from_nodes(mixed_nodes(), embed_model=lexical, script_weights={"cjk": [1.0, 1.0]})
    assert pinned.calibration is None
    assert pinned.weights_for("实验对象") == [1.0, 1.0]


def test_calibration_needs_enough_samples_per_script(lexical):
    nodes = topic_nodes()[:5]
    fusion = HybridFusionRetriever.from_nodes(nodes, embed_model=lexical)
    entry = fusion.calibration.scripts["latin"]
    assert (entry.samples, entry.weights, entry.grid) == (5, None, [])
    assert fusion.calibration.weights_for("latin") is None
    # the corpus has no Chinese text: Chinese queries get the cross-script weights, measured elsewhere
    assert fusion.script_weights == {"cjk": list(CROSS_SCRIPT_WEIGHTS)}
    assert fusion.weights_for("乌龙茶") == list(CROSS_SCRIPT_WEIGHTS)
    assert fusion.calibration.scripts["cjk"].samples == 0


def test_a_query_in_a_script_the_corpus_lacks_leans_on_the_dense_child(lexical):
    """English questions over Chinese passages: BM25 can match only shared names and digits."""
    nodes = [
        TextNode(text=f"第{i}段：绿茶应当冷藏保存，乌龙茶是半发酵茶，红茶是全发酵茶。", id_=f"zh{i}") for i in range(12)
    ]
    fusion = HybridFusionRetriever.from_nodes(nodes, embed_model=lexical)
    assert fusion.calibration.scripts["cjk"].samples >= 8  # measured
    assert fusion.weights_for("How is green tea stored?") == list(CROSS_SCRIPT_WEIGHTS)
    again = HybridFusionRetriever.from_nodes(nodes, embed_model=lexical, calibration=fusion.calibration)
    assert again.weights_for("How is green tea stored?") == list(CROSS_SCRIPT_WEIGHTS)  # kept when saved


def test_script_weights_are_validated():
    children = [Static([]), Static([])]
    with pytest.raises(ValueError, match="script_weights\\['cjk'\\] has 1 values for 2 retrievers"):
        HybridFusionRetriever(children, script_weights={"cjk": [1.0]})
    with pytest.raises(ValueError, match="unknown script 'greek': use one of \\['latin', 'cjk'\\]"):
        HybridFusionRetriever(children, script_weights={"greek": [1.0, 1.0]})
    with pytest.raises(TypeError, match="no longer takes min_relative_quality.*retriever_weights="):
        HybridFusionRetriever(children).calibrate(topic_nodes(), min_relative_quality=0.25)


def test_from_index(lexical):
    storage = StorageContext.from_defaults(vector_store=NumpyVectorStore())
    index = VectorStoreIndex(topic_nodes(), storage_context=storage, embed_model=lexical)
    fusion = HybridFusionRetriever.from_index(index, similarity_top_k=4, mode="relative_score")
    results = fusion.retrieve("queen bee hive")
    assert len(results) <= 4
    assert results[0].node.node_id.startswith("bees")


def test_from_nodes_child_types_and_upstream_fallback(lexical, monkeypatch):
    fusion = HybridFusionRetriever.from_nodes(topic_nodes(), embed_model=lexical)
    assert type(fusion._retrievers[1]).__name__ == "MultilingualBM25Retriever"
    monkeypatch.setitem(sys.modules, "llama_index_ext_recursive.retrievers.bm25", None)  # module unavailable
    fallback = HybridFusionRetriever.from_nodes(topic_nodes(), embed_model=lexical, similarity_top_k=20)
    assert type(fallback._retrievers[1]).__name__ == "BM25Retriever"
    results = fallback.retrieve("sourdough starter flour")
    assert results[0].node.node_id.startswith("bread")
    assert len(results) <= 9
