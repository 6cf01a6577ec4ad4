"""Inputs that crashed or came back silently empty (issue 23): each is now a clear error or a right answer."""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
import shutil

import numpy as np
import pytest
from llama_index.core import Document, StorageContext, VectorStoreIndex
from llama_index.core.schema import IndexNode, QueryBundle, TextNode
from llama_index.core.vector_stores.types import MetadataInfo, VectorStoreInfo, VectorStoreQuery

from llama_index_ext_recursive import (
    BackfillVectorRetriever,
    FilteredQueryBundle,
    HybridFusionRetriever,
    MultilingualBM25Retriever,
    NumpyVectorStore,
    RecursiveSummaryRetriever,
    ValidatedAutoRetriever,
)
from llama_index_ext_recursive.eval.data import DatasetError
from llama_index_ext_recursive.filters import FilterError
from llama_index_ext_recursive.recursive.links import LinkError
from llama_index_ext_recursive.validation import closest

DOCS = [
    Document(
        text="Bees dance to share where flowers are.",
        doc_id="bees",
        metadata={"tags": ["insects", "biology"], "year": 2020},
    ),
    Document(
        text="Solar panels convert sunlight into power.", doc_id="solar", metadata={"tags": ["energy"], "year": 2021}
    ),
]


@pytest.fixture(scope="module")
def retrievers():
    from conftest import LexicalEmbedding

    model = LexicalEmbedding(model_name="lexical-test")
    nodes = [TextNode(id_=f"{d.doc_id}-0", text=d.text, metadata={**d.metadata, "doc_id": d.doc_id}) for d in DOCS]
    index = VectorStoreIndex(nodes, embed_model=model)
    return {
        "recursive": RecursiveSummaryRetriever.from_documents(DOCS, embed_model=model),
        "hybrid": HybridFusionRetriever.from_nodes(nodes, model),
        "bm25": MultilingualBM25Retriever(nodes=nodes),
        "backfill": BackfillVectorRetriever(index, 2),
        "auto": ValidatedAutoRetriever(
            index,
            VectorStoreInfo(
                content_info="facts", metadata_info=[MetadataInfo(name="year", type="int", description="year")]
            ),
        ),
    }


def _docs(hits):
    return sorted({h.node.metadata["doc_id"] for h in hits})


@pytest.mark.parametrize("kind", ["recursive", "hybrid"])
def test_list_valued_keys_filter_by_membership_and_refuse_whole_list_comparisons(retrievers, kind):
    retriever = retrievers[kind]
    contains = FilteredQueryBundle("bees", filters={"tags": {"op": "contains", "value": "insects"}})
    assert _docs(retriever.retrieve(contains)) == ["bees"]
    any_of = FilteredQueryBundle("power", filters={"tags": {"op": "any", "value": ["energy", "none"]}})
    assert _docs(retriever.retrieve(any_of)) == ["solar"]
    for filters in ({"tags": "insects"}, {"tags": ["insects", "energy"]}):
        with pytest.raises(FilterError, match=r"'tags' holds lists .* \"contains\""):
            retriever.retrieve(FilteredQueryBundle("bees", filters=filters))


@pytest.mark.parametrize("kind", ["recursive", "hybrid"])
def test_a_none_filter_value_is_refused_not_an_empty_result(retrievers, kind):
    with pytest.raises(FilterError, match="year=None matches nothing"):
        retrievers[kind].retrieve(FilteredQueryBundle("bees", filters={"year": None}))


def test_a_datetime_filter_value_names_the_key_and_the_fix():
    with pytest.raises(ValueError, match=r"filter 'date': .* got datetime .*isoformat"):
        FilteredQueryBundle("bees", filters={"date": {"op": ">=", "value": datetime.datetime(2021, 1, 1)}})


@pytest.mark.parametrize("kind", ["recursive", "hybrid", "bm25", "backfill", "auto"])
@pytest.mark.parametrize(
    "query,message",
    [
        (b"bees", r"the query is bytes, not text: decode it first"),
        (bytearray(b"bees"), r"the query is bytes, not text: decode it first"),
        (None, "the query must be a string or a QueryBundle, got NoneType"),
        (5, "the query must be a string or a QueryBundle, got int"),
        ("bees \ud800", "'\\\\ud800' at position 5, a lone surrogate"),
        (QueryBundle("bees", custom_embedding_strs=[]), "custom_embedding_strs is an empty list"),
        (QueryBundle("bees", custom_embedding_strs=["ok", ""]), r"custom_embedding_strs\[1\]"),
    ],
    ids=["bytes", "bytearray", "none", "int", "surrogate", "no-embedding-strs", "blank-embedding-str"],
)
def test_queries_that_are_not_text_are_refused_by_name(retrievers, kind, query, message):
    """Upstream's retrieve read .query_str of bytes before any of our checks ran (AttributeError)."""
    retriever = retrievers[kind]
    with pytest.raises((TypeError, ValueError), match=message):
        retriever.retrieve(query)
    with pytest.raises((TypeError, ValueError), match=message):
        asyncio.run(retriever.aretrieve(query))


def test_numpy_metadata_is_kept_as_the_number_it_holds(lexical):
    docs = [
        Document(
            text="Bees dance.",
            doc_id="bees",
            metadata={"year": np.int64(2020), "score": np.float32(0.5), "ok": np.bool_(True)},
        )
    ]
    retriever = RecursiveSummaryRetriever.from_documents(docs, embed_model=lexical)
    hit = retriever.retrieve(FilteredQueryBundle("bees", filters={"year": 2020}))[0]
    assert hit.node.metadata["year"] == 2020 and type(hit.node.metadata["year"]) is int
    assert type(hit.node.metadata["score"]) is float and hit.node.metadata["ok"] is True
    assert type(docs[0].metadata["year"]) is np.int64  # the user's document is not changed


@pytest.mark.parametrize(
    "value,fix",
    [(datetime.date(2020, 1, 1), "isoformat"), ({1, 2}, "sorted"), (object(), "a string, a number")],
)
def test_metadata_no_index_can_hold_is_refused_before_any_embedding(lexical, value, fix):
    docs = [Document(text="Bees dance.", doc_id="bees"), Document(text="Ants.", doc_id="ants", metadata={"d": value})]
    with pytest.raises(TypeError, match=rf"document 'ants': metadata\['d'\] .*{fix}"):
        RecursiveSummaryRetriever.from_documents(docs, embed_model=lexical)
    assert lexical.calls == 0


def test_an_integer_document_id_deletes_the_document_indexed_under_it(lexical):
    nodes = [
        TextNode(id_="a", text="five bees", metadata={"doc_id": 5}),
        TextNode(id_="b", text="six ants", metadata={"doc_id": 6}),
    ]
    retriever = RecursiveSummaryRetriever.from_nodes(nodes, embed_model=lexical)
    retriever.delete_document(5)
    assert sorted(retriever.documents) == ["6"]
    with pytest.raises(KeyError, match=r"no document '7' \(known: \['6'\]\)"):
        retriever.delete_document(7)


def test_closest_suggests_among_integer_ids():
    assert closest(5, [4, "5", 50]) == "did you mean '5'?"


def test_integer_retriever_dict_keys_route_to_the_string_index_id(lexical):
    from llama_index.core import VectorStoreIndex as Index

    bees = Index([TextNode(id_="c", text="bees dance")], embed_model=lexical).as_retriever()
    ants = Index([TextNode(id_="c2", text="ants march")], embed_model=lexical).as_retriever()
    summaries = [
        IndexNode(id_="s5", text="About bees", index_id="5"),
        IndexNode(id_="s6", text="About ants", index_id="6"),
    ]
    retriever = RecursiveSummaryRetriever.from_retriever_dict(summaries, {5: bees, 6: ants}, embed_model=lexical)
    assert retriever.retrieve("ants march")[0].node.node_id == "c2"
    with pytest.raises(ValueError, match="retriever_dict keys 5 and '5' both name document '5': keep one"):
        RecursiveSummaryRetriever.from_retriever_dict(summaries, {5: bees, "5": bees, 6: ants}, embed_model=lexical)
    with pytest.raises(TypeError, match=r"retriever_dict key \(5,\) is a tuple: keys are document ids"):
        RecursiveSummaryRetriever.from_retriever_dict(summaries, {(5,): bees}, embed_model=lexical)


def test_a_delete_that_would_leave_a_link_pointing_nowhere_is_refused_and_adds_keep_working(lexical):
    nodes = [
        TextNode(id_="a", text="bees dance", metadata={"doc_id": "d1"}),
        IndexNode(id_="link", text="see the ants", index_id="d2", metadata={"doc_id": "d1"}),
        TextNode(id_="b", text="ants march", metadata={"doc_id": "d2"}),
    ]
    retriever = RecursiveSummaryRetriever.from_nodes(nodes, embed_model=lexical)
    with pytest.raises(LinkError, match="deleting document 'd2' would leave a link pointing nowhere: IndexNode 'link'"):
        retriever.delete_document("d2")
    assert sorted(retriever.documents) == ["d1", "d2"]
    assert retriever.add_documents([Document(text="Wasps hunt.", doc_id="d3")]) == ["d3"]
    retriever.delete_document("d1")
    retriever.delete_document("d2")  # nothing links to it now
    assert sorted(retriever.documents) == ["d3"]


LINKED = [
    TextNode(id_="a", text="bees dance", metadata={"doc_id": "d1"}),
    IndexNode(id_="link", text="see the ants chunk", index_id="b", metadata={"doc_id": "d1"}),
    TextNode(id_="b", text="ants march", metadata={"doc_id": "d2"}),
]


def test_an_update_that_would_strand_a_link_is_refused_naming_the_update(lexical):
    retriever = RecursiveSummaryRetriever.from_nodes(LINKED, embed_model=lexical)
    with pytest.raises(
        LinkError,
        match=r"after updating document\(s\) \['d2'\]: IndexNode 'link' in document "
        r"'d1' points to 'b'.*keep that chunk id in the new version",
    ):
        retriever.index.add_nodes([TextNode(id_="b2", text="ants march on", metadata={"doc_id": "d2"})])
    assert retriever.index.documents["d2"].chunk_ids == ["b"]
    # updating both in one call is how the link moves
    retriever.index.add_nodes(
        [
            TextNode(id_="b2", text="ants march on", metadata={"doc_id": "d2"}),
            TextNode(id_="a", text="bees dance", metadata={"doc_id": "d1"}),
            IndexNode(id_="link", text="see the ants chunk", index_id="b2", metadata={"doc_id": "d1"}),
        ]
    )
    assert "b2" in [h.node.node_id for h in retriever.retrieve("see the ants chunk")]


def test_an_update_of_metadata_or_a_link_target_only_is_not_skipped_as_unchanged(lexical):
    retriever = RecursiveSummaryRetriever.from_documents(DOCS, embed_model=lexical)
    same_text = Document(text=DOCS[0].text, doc_id="bees", metadata={"tags": ["insects"], "year": 2024})
    assert retriever.add_documents([same_text]) == ["bees"]
    assert _docs(retriever.retrieve(FilteredQueryBundle("bees", filters={"year": 2024}))) == ["bees"]
    assert retriever.add_documents([same_text]) == []  # really unchanged: not re-indexed


def test_a_link_an_earlier_release_left_pointing_nowhere_blocks_no_update_or_load(lexical, tmp_path, caplog):
    retriever = RecursiveSummaryRetriever.from_nodes(LINKED, embed_model=lexical)
    index = retriever.index
    with index.state_lock.writing():  # what delete_document did before it checked links
        index._swap(remove=[index.documents["d2"]], add=None)
    with caplog.at_level(logging.WARNING):
        assert retriever.add_documents([Document(text="Wasps hunt.", doc_id="d3")]) == ["d3"]
        assert "a" in [h.node.node_id for h in retriever.retrieve("see the ants chunk")]
        retriever.persist(tmp_path / "idx")
        loaded = RecursiveSummaryRetriever.from_persist_dir(tmp_path / "idx", embed_model=lexical)
        assert sorted(loaded.documents) == ["d1", "d3"]
        assert loaded.retrieve("see the ants chunk")
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(
        "1 link(s) already pointed nowhere" in w
        and "IndexNode 'link' in document 'd1' points to 'b'" in w
        and "update or delete the linking document" in w
        for w in warnings
    )
    assert any(
        "IndexNode 'link' of document 'd1' points to 'b', which no longer exists; not followed" in w for w in warnings
    )
    loaded.add_documents([Document(text="Bees dance all day.", doc_id="d1")])  # the fix the warning names
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        loaded.validate_links()
        loaded.retrieve("see the ants chunk")
    assert not caplog.records


def test_top_k_beyond_the_store_is_clamped_and_below_one_refused(lexical):
    import faiss
    from llama_index.vector_stores.faiss import FaissMapVectorStore

    nodes = [TextNode(id_=f"n{i}", text=f"bees {i}") for i in range(5)]
    store = FaissMapVectorStore(faiss_index=faiss.IndexIDMap2(faiss.IndexFlatIP(64)))
    index = VectorStoreIndex(
        nodes, storage_context=StorageContext.from_defaults(vector_store=store), embed_model=lexical
    )
    assert len(BackfillVectorRetriever(index, 3).retrieve(FilteredQueryBundle("bees", top_k=10**9))) == 5
    numpy_store = NumpyVectorStore()
    VectorStoreIndex(nodes, storage_context=StorageContext.from_defaults(vector_store=numpy_store), embed_model=lexical)
    with pytest.raises(ValueError, match="similarity_top_k must be >= 0, got -1"):
        numpy_store.query(VectorStoreQuery(query_embedding=[1.0] * 64, similarity_top_k=-1))


def _beir(tmp_path, corpus_rows, qrels="query-id\tcorpus-id\tscore\nq1\tc1\t1\n", raw_corpus=None):
    from llama_index_ext_recursive.eval.data import BeirDataset

    root = tmp_path / "set"
    (root / "qrels").mkdir(parents=True)
    corpus = raw_corpus if raw_corpus is not None else "\n".join(json.dumps(r) for r in corpus_rows).encode()
    (root / "corpus.jsonl").write_bytes(corpus)
    (root / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "bees"}) + "\n")
    (root / "qrels" / "test.tsv").write_text(qrels)
    return BeirDataset.load(root)


@pytest.mark.parametrize(
    "rows,qrels,raw,message",
    [
        ([{"_id": "c1", "text": 42}], None, None, r"corpus.jsonl:1: 'text' is a int"),
        ([{"_id": {"a": 1}, "text": "x"}], None, None, r"'_id' is a dict"),
        ([{"_id": "c1", "text": "x", "title": ["a"]}], None, None, r"'title' is a list"),
        ([{"_id": "c1", "text": "x"}], "q1\tc1\t1.5\n", None, r"test.tsv:1: relevance '1.5' is not an integer"),
        ([{"_id": "c1", "text": "x"}], "q1\tc1\t1\nq1\tc1\t2\n", None, r"test.tsv:2: query 'q1' judges 'c1' again"),
        (None, None, b'{"_id": "c1", "text": "caf\xe9"}\n', r"corpus.jsonl:1: byte 26 .* is not UTF-8"),
        ([{"_id": "c1", "text": "x"}], "q1\tc1\t\u0661\n", None, r"test.tsv:1: relevance '\u0661' is not an integer"),
        (None, None, b'{"_id": "c1", "text": "x", "_id": "c2"}\n', r"corpus.jsonl:1: key '_id' is given twice"),
        (
            [{"_id": "c1", "text": "x", "metadata": {"doc_id": None}}],
            None,
            None,
            r"corpus.jsonl:1: metadata: missing 'doc_id'",
        ),
        (
            [{"_id": "c1", "text": "x", "metadata": {"doc_id": ["d"]}}],
            None,
            None,
            r"corpus.jsonl:1: metadata: 'doc_id' is a list",
        ),
        (
            None,
            None,
            b'{"_id": "c1", "text": "bad \\ud800 escape"}\n',
            r"corpus.jsonl:1: 'text' holds '\\ud800' at position 4, a lone surrogate",
        ),
    ],
)
def test_the_beir_loader_refuses_bad_values_by_file_and_line(tmp_path, rows, qrels, raw, message):
    kwargs = {"qrels": qrels} if qrels else {}
    with pytest.raises(DatasetError, match=message):
        _beir(tmp_path, rows, raw_corpus=raw, **kwargs)


def test_a_previous_release_folder_with_desktop_files_and_a_readme_loads_and_keeps_them(lexical, tmp_path):
    from test_persist import as_previous_format

    from llama_index_ext_recursive.persist import current_generation

    retriever = RecursiveSummaryRetriever.from_documents(DOCS, embed_model=lexical)
    retriever.persist(tmp_path / "idx")
    legacy = tmp_path / "legacy"
    as_previous_format(current_generation(tmp_path / "idx"), legacy)
    (legacy / ".DS_Store").write_bytes(b"\x00\x00\x00\x01Bud1")
    (legacy / "README.md").write_text("our contracts index")
    loaded = RecursiveSummaryRetriever.from_persist_dir(legacy, embed_model=lexical)
    assert [h.node.node_id for h in loaded.retrieve("bees")] == [h.node.node_id for h in retriever.retrieve("bees")]
    loaded.persist(legacy)  # migrates the index; the user's files stay
    assert (legacy / "README.md").read_text() == "our contracts index"
    assert (legacy / ".DS_Store").read_bytes() == b"\x00\x00\x00\x01Bud1"
    assert RecursiveSummaryRetriever.from_persist_dir(legacy, embed_model=lexical).retrieve("bees")
    shutil.rmtree(tmp_path / "idx")


def test_two_summaries_with_one_index_id_are_refused_naming_both(lexical):
    from llama_index.core import VectorStoreIndex as Index

    child = Index([TextNode(id_="c", text="bees dance")], embed_model=lexical).as_retriever()
    summaries = [
        IndexNode(id_="s1", text="About bees", index_id="bees"),
        IndexNode(id_="s2", text="Also bees", index_id="bees"),
    ]
    with pytest.raises(LinkError, match="'s1' and 's2' both have index_id 'bees'"):
        RecursiveSummaryRetriever.from_retriever_dict(summaries, {"bees": child}, embed_model=lexical)
