"""Routing that finds a chunk through its document, and never loses what flat search finds.

The contract fixture is the case the recursive retriever exists for: four
agreements whose clauses are the same boilerplate, told apart only by the
parties named in their titles and opening lines. Chunk embeddings do not see
the title (as when a user excludes it), so only document-level evidence can
pick the contract the query names.
"""

import asyncio
import random

import pytest
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.schema import IndexNode, TextNode

from llama_index_ext_recursive import BackfillVectorRetriever, RecursiveSummaryRetriever
from llama_index_ext_recursive.recursive import levels as levels_module
from llama_index_ext_recursive.recursive.evidence import (
    UNSURE_SHARE,
    chunk_shares,
    document_share,
    rank_chunks,
    routing_certainty,
)
from llama_index_ext_recursive.recursive.retriever import ScoreMode
from llama_index_ext_recursive.results import DocumentWithScore
from llama_index_ext_recursive.retrievers.fusion_scores import head_scores, min_max_scores, relative_score_fusion

PARTIES = {
    "nda-acme": ("Acme Robotics", "Bluewater Foods"),
    "nda-orion": ("Orion Shipping", "Maple Dental"),
    "nda-quartz": ("Quartz Analytics", "Redwood Bakery"),
    "nda-zephyr": ("Zephyr Airlines", "Hillside Vineyards"),
}
CLAUSES = [
    "The Receiving Party shall hold all Confidential Information in strict confidence and "
    "shall not disclose it to any third party without prior written consent.",
    "Upon termination the Receiving Party shall promptly return or destroy all documents and "
    "materials containing Confidential Information.",
    "This Agreement shall be governed by the laws of the State of Delaware, and the courts of "
    "Delaware shall have exclusive jurisdiction over any dispute.",
    "The obligations of confidentiality shall survive the termination of this Agreement for a period of five years.",
    "Nothing in this Agreement grants the Receiving Party any licence or other right in the Confidential Information.",
]


def contract_nodes():
    nodes = []
    for doc_id, (first, second) in PARTIES.items():
        title = f"Non-Disclosure Agreement between {first} and {second}"
        opening = (
            f"This Mutual Non-Disclosure Agreement is entered into by {first} and {second}, "
            "each of which may disclose Confidential Information to the other."
        )
        for i, text in enumerate([opening, *CLAUSES]):
            nodes.append(
                TextNode(
                    id_=f"{doc_id}-{i}",
                    text=text,
                    metadata={"doc_id": doc_id, "title": title},
                    excluded_embed_metadata_keys=["doc_id", "title"],
                )
            )
    return nodes


def question(doc_id: str, ask: str) -> str:
    first, second = PARTIES[doc_id]
    return f"Consider the Non-Disclosure Agreement between {first} and {second}; {ask}"


RETURN = "does it require returning or destroying the materials upon termination?"


@pytest.fixture(scope="module")
def contracts(real_model):
    return RecursiveSummaryRetriever.from_nodes(contract_nodes(), embed_model=real_model, similarity_top_k=3)


@pytest.mark.parametrize("summary_mode", ["vector", "bm25", "hybrid"])
def test_the_named_contract_routes_first_at_every_level(real_model, summary_mode):
    retriever = RecursiveSummaryRetriever.from_nodes(
        contract_nodes(), embed_model=real_model, similarity_top_k=3, summary_mode=summary_mode
    )
    for doc_id in PARTIES:
        documents = retriever.retrieve_documents(question(doc_id, RETURN))
        assert documents[0].node.index_id == doc_id, (summary_mode, doc_id, documents[:2])


def test_the_named_contracts_clause_outranks_every_copy_of_it(contracts):
    """The same clause is in all four contracts; the named one's comes first."""
    for doc_id in PARTIES:
        results = contracts.retrieve(question(doc_id, RETURN))
        copies = [r for r in results if r.node.node_id.endswith("-2")]
        assert copies[0].node.node_id == f"{doc_id}-2", [r.node.node_id for r in results]
        assert results.index(copies[0]) <= 1  # at most the opening chunk naming the parties first
        assert copies[0].explanation.route.doc_id == doc_id
        assert copies[0].explanation.route.score_mode == "fused"
        assert copies[0].explanation.route.summary_score == 1.0  # the best-routed document


def test_chunk_text_alone_cannot_tell_the_copies_apart_and_the_title_on_each_chunk_can(real_model, contracts):
    """The control: flat dense search over the chunks as given scores the four copies of a clause
    the same; with its contract's title on each chunk (the default), the named copy scores best."""
    plain = RecursiveSummaryRetriever.from_nodes(contract_nodes(), embed_model=real_model, chunk_context="none")
    for retriever, tells_apart in ((plain, False), (contracts, True)):
        flat = BackfillVectorRetriever(retriever.index.chunk_index, 24, embed_model=retriever.index.embed_model)
        hits = {h.node.node_id: h.score for h in flat.retrieve(question("nda-quartz", RETURN))}
        copies = {d: hits[f"{d}-2"] for d in PARTIES}
        if tells_apart:
            assert max(copies, key=copies.__getitem__) == "nda-quartz", copies
        else:
            assert max(copies.values()) - min(copies.values()) < 1e-6


def test_a_chunk_of_a_document_routing_missed_still_comes_back(real_model):
    """One routed document; a strong chunk lives in another, which flat search finds."""
    nodes = contract_nodes()
    memo = [
        "The printer on the third floor is out of toner until Friday.",
        "Parking permits for the new quarter can be collected at reception.",
        "Emperor penguins huddle together through the Antarctic winter to share warmth.",
        "The summer party will be held in the courtyard if the weather allows.",
    ]
    for i, text in enumerate(memo):
        nodes.append(
            TextNode(
                id_=f"memo-{i}",
                text=text,
                metadata={"doc_id": "memo", "title": "Office memo"},
                excluded_embed_metadata_keys=["doc_id", "title"],
            )
        )
    query = "Acme Robotics and Bluewater Foods: penguins in winter"
    # chunks as given: with the title on every chunk, the named contract's chunks all match the
    # party names and fill the top 3; the flat search that brings back an unrouted chunk is tested here
    fused = RecursiveSummaryRetriever.from_nodes(
        nodes, embed_model=real_model, similarity_top_k=3, num_routed_docs=1, chunk_context="none"
    )
    assert fused.retrieve_documents(query)[0].node.index_id == "nda-acme"
    found = {n.node.node_id: n for n in fused.retrieve(query)}
    assert "memo-2" in found and found["memo-2"].explanation.route.doc_id == "memo"
    routed_only = RecursiveSummaryRetriever.from_nodes(
        nodes, embed_model=real_model, similarity_top_k=3, num_routed_docs=1, score_mode="chunk", chunk_context="none"
    )
    assert "memo-2" not in [n.node.node_id for n in routed_only.retrieve(query)]


def test_retrieve_documents_sync_equals_async(contracts):
    query = question("nda-orion", RETURN)
    sync = contracts.retrieve_documents(query)
    concurrent = asyncio.run(contracts.aretrieve_documents(query))
    assert [(d.node.index_id, d.score) for d in sync] == [(d.node.index_id, d.score) for d in concurrent]
    assert all(isinstance(d, DocumentWithScore) for d in sync)
    best = sync[0].evidence
    assert best.doc_id == "nda-orion" and best.rank == 1 and best.title.startswith("Non-Disclosure")
    assert best.lexical_score is not None and best.dense_score is not None


def test_retrieve_sync_equals_async(contracts):
    query = question("nda-zephyr", "which state's laws govern the agreement?")
    sync = contracts.retrieve(query)
    concurrent = asyncio.run(contracts.aretrieve(query))
    assert [(n.node.node_id, n.score) for n in sync] == [(n.node.node_id, n.score) for n in concurrent]


def test_retrieve_documents_refuses_what_is_not_a_query(contracts):
    with pytest.raises(TypeError, match="the query must be a string or a QueryBundle, got int"):
        contracts.retrieve_documents(42)
    with pytest.raises(ValueError):
        contracts.retrieve_documents("   ")


def test_reloaded_index_gives_identical_results_without_recalibrating(contracts, real_model, tmp_path, monkeypatch):
    contracts.persist(tmp_path / "index")
    calls = []
    monkeypatch.setattr(levels_module, "calibrate_children", lambda *a, **k: calls.append(a) or None)
    loaded = RecursiveSummaryRetriever.from_persist_dir(tmp_path / "index", embed_model=real_model)
    assert calls == []
    assert loaded.calibration == contracts.calibration
    for doc_id in PARTIES:
        query = question(doc_id, RETURN)
        assert [(n.node.node_id, n.score) for n in loaded.retrieve(query)] == [
            (n.node.node_id, n.score) for n in contracts.retrieve(query)
        ]


def test_calibration_is_measured_per_level_and_script(contracts):
    calibration = contracts.calibration
    assert set(calibration) == {"documents", "chunks"}
    for level in calibration.values():
        latin = level["scripts"]["latin"]
        assert latin["samples"] >= 8 and latin["weights"] is not None
        assert abs(sum(latin["weights"]) - 1.0) < 1e-9


def test_calibration_is_passed_back_not_remeasured(contracts, real_model, monkeypatch):
    monkeypatch.setattr(levels_module, "calibrate_children", lambda *a, **k: pytest.fail("recalibrated"))
    again = RecursiveSummaryRetriever.from_nodes(
        contract_nodes(),
        embed_model=real_model,
        similarity_top_k=3,
        calibration=contracts.calibration,
    )
    assert again.calibration == contracts.calibration


def test_a_bad_calibration_is_refused_by_name(real_model):
    with pytest.raises(ValueError, match="unknown level 'sumaries'"):
        RecursiveSummaryRetriever.from_nodes(contract_nodes(), embed_model=real_model, calibration={"sumaries": {}})


def test_fused_mode_needs_the_chunk_store(lexical):
    with pytest.raises(ValueError, match="score_mode='fused'"):
        RecursiveSummaryRetriever.from_retriever_dict(
            [IndexNode(text="a", index_id="a")],
            {"a": _Static()},
            score_mode="fused",
            embed_model=lexical,
        )


def test_a_retriever_dict_setup_defaults_to_routed_chunk_scores(lexical):
    retriever = RecursiveSummaryRetriever.from_retriever_dict(
        [IndexNode(text="a", index_id="a")], {"a": _Static()}, embed_model=lexical
    )
    assert retriever.score_mode == ScoreMode.CHUNK and retriever.chunk_mode.value == "vector"


def test_defaults_are_the_measured_configuration(contracts):
    assert contracts.score_mode == ScoreMode.FUSED
    assert contracts.summary_mode.value == "hybrid" and contracts.chunk_mode.value == "hybrid"


ZH_TOPICS = {
    "tea": ("茶叶", ["绿茶在中国已有几千年的历史，主要产于浙江和福建。", "乌龙茶属于半发酵茶，香气浓郁。"]),
    "rail": ("高铁", ["京沪高铁全长一千三百多公里，连接北京和上海。", "高铁列车的最高运营时速可达三百五十公里。"]),
    "panda": ("熊猫", ["大熊猫主要生活在四川的山区竹林中。", "大熊猫每天要吃大量的竹子来维持体力。"]),
}


def test_chinese_default_configuration_ranks_the_right_chunk_first(real_model):
    """An English embedding model and Chinese text: the default still works,
    because lexical evidence (jieba BM25) takes part at both levels."""
    nodes = [
        TextNode(id_=f"{doc}-{i}", text=text, metadata={"doc_id": doc, "title": title})
        for doc, (title, texts) in ZH_TOPICS.items()
        for i, text in enumerate(texts)
    ]
    retriever = RecursiveSummaryRetriever.from_nodes(nodes, embed_model=real_model, similarity_top_k=3)
    assert retriever.retrieve("京沪高铁连接哪两个城市？")[0].node.node_id == "rail-0"
    assert retriever.retrieve("大熊猫吃什么？")[0].node.node_id == "panda-1"
    assert retriever.retrieve_documents("乌龙茶是什么茶？")[0].node.index_id == "tea"


class _Static(BaseRetriever):
    def _retrieve(self, query_bundle):
        return []


# ------------------------------------------------------------ chunk evidence, scaled by the flat head
def test_head_scores_scale_by_the_best_head_and_equal_min_max_on_a_short_list():
    scores = [10.0, 9.0, 8.0, 1.0]
    assert head_scores(scores, 4) == min_max_scores(scores)
    assert head_scores(scores, 3) == pytest.approx([1.0, 0.5, 0.0, -3.5])
    assert head_scores([1.0, 2.0, 5.0], 2, distance=True) == pytest.approx([1.0, 0.0, -3.0])


def test_chunk_shares_rank_the_flat_candidates_as_a_flat_fusion_of_the_top_k_whatever_was_routed():
    rng = random.Random(7)
    # the flat top-5 of each search, in opposite orders: how the two weigh decides
    dense_flat = {"f0": 0.90, "f1": 0.88, "f2": 0.86, "f3": 0.84, "f4": 0.82}
    lexical_flat = {"f0": 5.0, "f1": 6.0, "f2": 7.0, "f3": 8.0, "f4": 10.0}
    dense = {**dense_flat, **{f"r{i}": rng.random() * 0.5 for i in range(40)}}  # routed: a long tail
    lexical = {**lexical_flat, **{f"r{i}": rng.random() * 3 for i in range(40)}}
    flat = relative_score_fusion([dense_flat, lexical_flat], [0.6, 0.4])
    expected = sorted(flat, key=flat.__getitem__)

    def totals(shares):
        return {n: sum(v for v in parts if v is not None) for n, parts in shares.items()}

    headed = totals(chunk_shares(dense, lexical, (0.6, 0.4), head=5))
    assert sorted(flat, key=headed.__getitem__) == expected
    assert max(headed.values()) == pytest.approx(1.0) and min(headed.values()) == pytest.approx(0.0)
    # scaled by the whole pool, the dense tail squeezes the flat dense differences: BM25 decides
    pooled = totals(chunk_shares(dense, lexical, (0.6, 0.4)))
    assert sorted(flat, key=pooled.__getitem__) != expected
    # the shares add up to the score rank_chunks gives each chunk
    ranked = rank_chunks(dense, lexical, {n: "d" for n in dense}, {"d": 0.5}, (0.6, 0.4), 1.0, head=5)
    assert {e.node_id: e.chunk for e in ranked} == pytest.approx(headed)


def test_without_a_tail_the_flat_candidates_rank_exactly_as_the_flat_hybrid_fusion():
    # each search's flat top-3, partly disjoint: the hybrid gives a chunk missing from a list nothing
    dense = {"a": 0.9, "b": 0.8, "c": 0.7, "d": 0.1, "e": 0.65, "r": 0.6}
    lexical = {"d": 9.0, "e": 8.0, "a": 7.5, "b": 0.5, "c": 1.0, "r": 6.0}  # the routed searches scored b, c, r too
    top = {name: dict(sorted(s.items(), key=lambda kv: -kv[1])[:3]) for name, s in (("d", dense), ("l", lexical))}
    hybrid = relative_score_fusion([top["d"], top["l"]], [0.5, 0.5])
    hybrid_order = sorted(hybrid, key=lambda n: (-hybrid[n], n))

    def order(tail):
        ranked = rank_chunks(dense, lexical, dict.fromkeys(dense, "doc"), {"doc": 0.5}, head=3, tail=tail)
        return [e.node_id for e in ranked]

    assert order(0.0)[: len(hybrid_order)] == hybrid_order and order(0.0)[-1] == "r"  # routed-only: last
    # with the whole tail, d's poor dense score and b's poor BM25 score count against them
    assert order(1.0)[: len(hybrid_order)] != hybrid_order


def test_routing_certainty_is_the_lead_of_the_best_document_and_sets_the_document_share():
    assert routing_certainty({"named": 1.0, "other": 0.3}) == 1.0
    assert routing_certainty({"a": 1.0, "b": 0.9, "c": 0.0}) == pytest.approx(0.2)
    assert routing_certainty({"a": 1.0, "b": 1.0}) == 0.0  # a tie: routing is a guess
    # one document (or none) to choose from: routing tells nothing
    assert routing_certainty({"only": 0.8}) == 0.0 and routing_certainty({}) == 0.0
    assert document_share(0.0) == UNSURE_SHARE and document_share(1.0) == 1.0
    assert document_share(0.2) == pytest.approx(UNSURE_SHARE + (1 - UNSURE_SHARE) * 0.2)


def test_the_named_contract_routes_with_full_document_weight(contracts):
    for doc_id in PARTIES:
        hit = contracts.retrieve(question(doc_id, RETURN))[0]
        assert hit.explanation.route.document_weight == contracts.document_weight


def test_fused_scores_stay_in_zero_to_one_and_keep_the_order_of_the_unscaled_sum():
    rng = random.Random(3)
    dense = {f"c{i}": rng.random() for i in range(30)}
    lexical = {f"c{i}": rng.random() * 12 for i in range(0, 30, 2)}
    doc_of = {n: f"d{int(n[1:]) % 4}" for n in dense}
    documents = {f"d{i}": rng.random() for i in range(4)}
    for weight in (0.0, 0.5, 1.0, 3.0):
        ranked = rank_chunks(dense, lexical, doc_of, documents, document_weight=weight, head=10)
        assert all(0.0 <= e.final <= 1.0 for e in ranked)
        assert max(e.final for e in ranked) > 0.5  # not squeezed toward 0
        unscaled = sorted(ranked, key=lambda e: (-(e.chunk + weight * e.document), e.node_id))
        assert [e.node_id for e in ranked] == [e.node_id for e in unscaled]
