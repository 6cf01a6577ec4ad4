"""BM25 updated by the changed documents only (issue 23): removed rows are tombstones, added rows a
delta segment, scored with the live rows' statistics, so that every score equals a fresh build's
exactly; segments are merged from the kept term frequencies (no text tokenised again)."""

from __future__ import annotations

import asyncio
import logging

import bm25s
import numpy as np
import pytest
from llama_index.core import Document
from llama_index.core.schema import QueryBundle, TextNode

from llama_index_ext_recursive import MultilingualBM25Retriever, RecursiveSummaryRetriever
from llama_index_ext_recursive.columnar.terms import index_tokens
from llama_index_ext_recursive.query import FilteredQueryBundle
from llama_index_ext_recursive.retrievers.bm25 import COMPACT_SHARE

logging.getLogger("bm25s").setLevel(logging.ERROR)

WORDS = [f"w{i}" for i in range(300)]
QUERIES = ["w1 w5 w9", "w100 w7", "w42", "w3 w250 w17 w8", "w1 w1 w2", "fresh w5"]


def _nodes(count: int, prefix: str, seed: int):
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, len(WORDS) + 1)
    return [
        TextNode(
            id_=f"{prefix}{i}", text=" ".join(rng.choice(WORDS, int(rng.integers(5, 60)), p=weights / weights.sum()))
        )
        for i in range(count)
    ]


def _scores(retriever, query):
    """Every matching node's score, by id (exact floats)."""
    return retriever.scores_by_id(QueryBundle(query), top_k=10_000)


def _ranking(retriever, query):
    return [(h.node.node_id, h.score) for h in retriever.retrieve(query)]


def _fresh(nodes):
    return MultilingualBM25Retriever.from_defaults(nodes=list(nodes), similarity_top_k=10)


@pytest.fixture(scope="module")
def base():
    return _fresh(_nodes(400, "n", 0))


class CountingTokenizer:
    """Wraps a tokenizer and counts the texts it tokenises."""

    def __init__(self, tokenizer):
        self.tokenizer, self.texts = tokenizer, 0

    def __call__(self, text):
        self.texts += 1
        return self.tokenizer(text)

    def __getattr__(self, name):
        return getattr(self.tokenizer, name)


def test_the_index_built_is_bm25s_own_bit_for_bit():
    """The vectorised build gives the scores bm25s.BM25().index gives on the same tokens."""
    rng = np.random.default_rng(7)
    corpus = [list(rng.choice(WORDS[:80], int(rng.integers(0, 40)))) for _ in range(500)]
    reference = bm25s.BM25()
    reference.index(corpus, show_progress=False)
    ours, _ = index_tokens(corpus)
    for query in (["w1", "w5", "w1"], ["w79"], ["w3", "w40", "w17"]):
        expected = reference.get_scores(query)
        assert np.array_equal(ours.get_scores_from_ids(ours.get_tokens_ids(query)), expected)


def test_updates_give_exactly_a_fresh_builds_scores_and_leave_the_original_as_it_was(base):
    before = {q: _scores(base, q) for q in QUERIES}
    added = _nodes(6, "x", 1) + [TextNode(id_="x-new", text="fresh words w5 fresh")]
    updated = base.with_changes(added[:3], ["n3", "n7"]).with_changes(added[3:], ["x1", "n250"])
    live = [n for n in base.nodes if n.node_id not in ("n3", "n7", "n250")] + [a for a in added if a.node_id != "x1"]
    fresh = _fresh(live)
    assert updated._terms.changed  # segments, not a rebuild
    assert updated.bm25 is base.bm25
    for query in QUERIES:
        assert _scores(updated, query) == _scores(fresh, query)
        assert _ranking(updated, query) == _ranking(fresh, query)
        assert not {"n3", "n7", "n250", "x1"} & set(_scores(updated, query))
        assert _scores(base, query) == before[query]
    assert updated.retrieve("fresh")[0].node.node_id == "x-new"  # a word only the delta holds
    for query in QUERIES:
        assert [(h.node.node_id, h.score) for h in asyncio.run(updated.aretrieve(query))] == _ranking(updated, query)


def test_filters_read_before_an_update_see_the_added_nodes_and_never_the_removed(base):
    """The equality postings (a routed document's filter) are carried over, not rebuilt."""
    nodes = [TextNode(id_=f"t{i}", text=f"w1 w{i % 7}", metadata={"group": f"g{i % 3}"}) for i in range(60)]
    first = _fresh(nodes)
    query = FilteredQueryBundle("w1 w2", filters={"group": "g1"})
    first.scores_by_id(query, top_k=100)  # builds the postings of "group"
    added = [
        TextNode(id_="t-new", text="w1 w2 w2", metadata={"group": "g1"}),
        TextNode(id_="t-other", text="w1 w2 w2", metadata={"group": "g9"}),
    ]
    updated = first.with_changes(added, ["t1", "t4"])
    assert "group" in updated._postings_cache  # carried over
    fresh = _fresh([n for n in nodes if n.node_id not in ("t1", "t4")] + added)
    for filters in ({"group": "g1"}, {"group": "g9"}, {"group": "g0"}):
        bundle = FilteredQueryBundle("w1 w2", filters=filters)
        assert updated.scores_by_id(bundle, top_k=100) == fresh.scores_by_id(bundle, top_k=100)
    assert "t-new" in updated.scores_by_id(query, top_k=100) and "t1" not in updated.scores_by_id(query, top_k=100)
    # the keys filters are checked against follow the update too (counted, not re-read from every node)
    assert updated.filter_vocabulary.keys == fresh.filter_vocabulary.keys


@pytest.mark.parametrize("read_before", [True, False])
def test_a_key_only_removed_nodes_held_is_unknown_afterwards(read_before):
    """Whether the filter vocabulary was built before the update (then carried over)
    or after it (then read from the live nodes only)."""
    from llama_index_ext_recursive.filters import FilterError

    nodes = [TextNode(id_=f"k{i}", text="w1 w2", metadata={"group": "g"}) for i in range(30)]
    nodes[3].metadata["rare"] = "yes"
    first = _fresh(nodes)
    if read_before:
        assert "rare" in first.filter_vocabulary.keys
    updated = first.with_changes([], ["k3"])
    with pytest.raises(FilterError, match="rare"):
        updated.retrieve(FilteredQueryBundle("w1", filters={"rare": "yes"}))


def test_segments_past_the_share_are_merged_from_the_kept_frequencies(base):
    many = _nodes(int(COMPACT_SHARE * len(base.nodes)) + 1, "y", 2)
    counting = CountingTokenizer(base.tokenizer)
    base.tokenizer, original = counting, base.tokenizer
    try:
        merged = base.with_changes(many, ["n0"])
    finally:
        base.tokenizer = original
    assert counting.texts == len(many)  # the added nodes only: nothing indexed is tokenised again
    assert not merged._terms.changed and merged.bm25 is not base.bm25
    assert len(merged.nodes) == len(base.nodes) - 1 + len(many)
    fresh = _fresh([n for n in base.nodes if n.node_id != "n0"] + many)
    for query in QUERIES:
        assert _scores(merged, query) == _scores(fresh, query)
    # merging segments changes no score either
    updated = base.with_changes(many[:3], ["n5"])
    for query in QUERIES:
        assert _scores(updated.compacted(), query) == _scores(updated, query)


def test_a_replaced_node_is_found_by_its_new_text_and_bad_ids_are_refused(base):
    replaced = TextNode(id_="n10", text="w299 w298 w297")
    updated = base.with_changes([], ["n10"]).with_changes([replaced], [])
    assert updated.retrieve("w299 w298")[0].node.get_content() == "w299 w298 w297"
    assert [n.node_id for n in updated.nodes].count("n10") == 2  # the old row stays, removed
    with pytest.raises(ValueError, match="cannot remove \\['nope'\\]"):
        base.with_changes([], ["nope"])
    with pytest.raises(ValueError, match="indexed already"):
        base.with_changes([TextNode(id_="n1", text="w1")], [])
    with pytest.raises(ValueError, match="cannot remove \\['n10'\\]"):
        updated.with_changes([], ["n10"]).with_changes([], ["n10"])


def test_a_persisted_updated_retriever_loads_with_its_statistics_and_updates_without_tokenising(base, tmp_path):
    updated = base.with_changes(_nodes(3, "z", 3), ["n0"])
    updated.persist(tmp_path / "bm25")
    loaded = MultilingualBM25Retriever.from_persist_dir(tmp_path / "bm25")
    for query in QUERIES:
        assert _scores(loaded, query) == _scores(updated, query)
    counting = CountingTokenizer(loaded.tokenizer)
    loaded.tokenizer = counting
    again = loaded.with_changes(_nodes(2, "v", 4), ["n1"])
    assert counting.texts == 2
    fresh = _fresh([n for n in updated.nodes if n.node_id not in ("n0", "n1")] + _nodes(2, "v", 4))
    for query in QUERIES:
        assert _scores(again, query) == _scores(fresh, query)


def test_a_folder_without_term_statistics_loads_and_is_indexed_again_at_its_first_change(base, tmp_path):
    """Folders written before terms format 2 hold the bm25s files only."""
    old = base.with_changes([], [])
    old._terms = None  # what a retriever written by the previous format carries
    old.persist(tmp_path / "old")
    assert not list((tmp_path / "old").rglob("terms.index.json"))
    loaded = MultilingualBM25Retriever.from_persist_dir(tmp_path / "old")
    assert loaded._terms is None
    for query in QUERIES:
        assert _scores(loaded, query) == _scores(base, query)
    changed = loaded.with_changes(_nodes(1, "u", 5), ["n2"])
    fresh = _fresh([n for n in base.nodes if n.node_id != "n2"] + _nodes(1, "u", 5))
    for query in QUERIES:
        assert _scores(changed, query) == _scores(fresh, query)
    assert changed._terms is not None


def _docs(count: int, seed: int, start: int = 0):
    rng = np.random.default_rng(seed)
    return [
        Document(
            text=" ".join(rng.choice(WORDS, 60)) + ".\n\n" + " ".join(rng.choice(WORDS, 60)) + ".", doc_id=f"doc-{i}"
        )
        for i in range(start, start + count)
    ]


def _by_content(bm25, query):
    """Scores keyed by what a node holds (chunk ids differ between two builds)."""
    node_of = {n.node_id: n for n in bm25.nodes}
    return {(node_of[i].ref_doc_id, node_of[i].get_content()): s for i, s in _scores(bm25, query).items()}


def _results(hits):
    return [(h.node.ref_doc_id, h.node.get_content(), h.score) for h in hits]


def test_the_recursive_retriever_updates_its_levels_with_the_changed_documents_only(lexical, tmp_path):
    docs = _docs(60, 4)  # so that four changed documents stay segments (under COMPACT_SHARE)
    retriever = RecursiveSummaryRetriever.from_documents(docs, embed_model=lexical, similarity_top_k=5)
    retriever.retrieve("w1 w2")
    full = retriever._built
    calibration = retriever.calibration
    added = _docs(2, 5, start=100)
    retriever.add_documents(added[:1])
    retriever.retrieve("w3")
    retriever.delete_document("doc-3")
    retriever.add_documents(added[1:])
    retriever.add_documents([Document(text="w7 w8 w9 replaced text.", doc_id="doc-5")])  # an update
    hits = retriever.retrieve(added[0].text)
    assert hits[0].node.ref_doc_id == "doc-100"
    updated = retriever._built
    # the BM25 levels were updated, not rebuilt: they share the first build's index
    assert updated.chunk_bm25.bm25 is full.chunk_bm25.bm25 and updated.summary_bm25.bm25 is full.summary_bm25.bm25
    assert retriever.calibration == calibration  # measured once, kept
    final = [d for d in docs if d.doc_id not in ("doc-3", "doc-5")] + added
    final.append(Document(text="w7 w8 w9 replaced text.", doc_id="doc-5"))
    fresh = RecursiveSummaryRetriever.from_documents(
        final, embed_model=lexical, similarity_top_k=5, calibration=calibration
    )
    fresh.retrieve("w1")
    for query in QUERIES + [added[0].text, "replaced"]:
        for level in ("chunk_bm25", "summary_bm25"):
            assert _by_content(getattr(updated, level), query) == _by_content(getattr(fresh._built, level), query)
        got = retriever.retrieve(query)
        assert all(h.node.ref_doc_id != "doc-3" for h in got)
        assert _results(got) == _results(fresh.retrieve(query))
        assert _results(asyncio.run(retriever.aretrieve(query))) == _results(got)
    # persisted and loaded, the same results
    retriever.persist(tmp_path / "idx")
    loaded = RecursiveSummaryRetriever.from_persist_dir(tmp_path / "idx", embed_model=lexical)
    for query in QUERIES:
        assert [(h.node.node_id, h.score) for h in loaded.retrieve(query)] == [
            (h.node.node_id, h.score) for h in retriever.retrieve(query)
        ]


def test_term_statistics_of_another_format_or_shape_are_refused_naming_the_file(base, tmp_path):
    from llama_index_ext_recursive.persist import PersistError

    base.write_files(tmp_path)
    (tmp_path / "terms.index.json").write_text('{"format_version": 3}', encoding="utf-8")
    with pytest.raises(PersistError, match="terms.index.json has format_version 3; this version reads 2"):
        MultilingualBM25Retriever.read_files(tmp_path)
    (tmp_path / "terms.index.json").write_text('{"format_version": 2}', encoding="utf-8")
    np.save(tmp_path / "tf.csc.index.npy", base.terms.tf[:-1])
    with pytest.raises(PersistError, match="tf.csc.index.npy and lengths.index.npy do not match"):
        MultilingualBM25Retriever.read_files(tmp_path)
