"""The summary index and its retriever: per-call options, children built once,
composed explanations, LlamaIndex-native construction, early keyword errors, spans."""

import asyncio
import re

import pytest
from conftest import TOPICS, topic_nodes
from llama_index.core import Settings, VectorStoreIndex
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.instrumentation.events.retrieval import RetrievalStartEvent
from llama_index.core.node_parser import SentenceSplitter, TokenTextSplitter
from llama_index.core.schema import Document, IndexNode, NodeRelationship, NodeWithScore, RelatedNodeInfo, TextNode

from llama_index_ext_recursive import FilteredQueryBundle, RecursiveSummaryRetriever
from llama_index_ext_recursive.recursive.index import RecursiveIndex
from llama_index_ext_recursive.retrievers import vector as vector_module

MODES = [
    {},
    {"score_mode": "chunk"},
    {"score_mode": "weighted", "summary_mode": "vector", "chunk_mode": "vector"},
    {"score_mode": "product", "summary_mode": "bm25", "chunk_mode": "bm25"},
]


def topic_documents():
    return [
        Document(text=" ".join(sentences), metadata={"doc_id": doc_id, "title": title, "category": category})
        for doc_id, (title, category, _, sentences) in TOPICS.items()
    ]


def plain_nodes():
    """Nodes as a LlamaIndex app has them: a ref_doc_id, no metadata['doc_id']."""
    nodes = []
    for node in topic_nodes():
        metadata = {k: v for k, v in node.metadata.items() if k != "doc_id"}
        copy = TextNode(id_=node.node_id, text=node.text, metadata=metadata)
        copy.relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id=node.metadata["doc_id"])
        nodes.append(copy)
    return nodes


class Static(BaseRetriever):
    """A child that ignores filters and returns fixed hits, as many upstream retrievers do."""

    def __init__(self, hits):
        self._hits = hits
        super().__init__()

    def _retrieve(self, query_bundle):
        return [NodeWithScore(node=h.node, score=h.score) for h in self._hits]


# -- per call ------------------------------------------------------------------
@pytest.mark.parametrize("options", MODES, ids=lambda o: "-".join(o.values()) or "fused")
def test_per_call_top_k_is_honoured_sync_and_async(lexical, options):
    """``top_k`` per call answers as a retriever built with that ``similarity_top_k``."""
    retriever = RecursiveSummaryRetriever.from_nodes(
        topic_nodes(), embed_model=lexical, similarity_top_k=4, num_routed_docs=2, **options
    )
    query = "queen bee eggs in the hive and bread"
    for k in (2, 6):
        built = RecursiveSummaryRetriever(
            retriever.index, similarity_top_k=k, num_routed_docs=2, calibration=retriever.calibration, **options
        )
        expected = [(h.node.node_id, h.score) for h in built.retrieve(query)]
        assert len(expected) == k or options.get("chunk_mode") == "bm25"  # BM25 returns matches only
        hits = [(h.node.node_id, h.score) for h in retriever.retrieve(FilteredQueryBundle(query, top_k=k))]
        again = asyncio.run(retriever.aretrieve(FilteredQueryBundle(query, top_k=k)))
        assert [(h.node.node_id, h.score) for h in again] == hits
        if k > 4 or options.get("score_mode") != "chunk":
            assert hits == expected
        else:  # a hybrid level asks its children for at least its own k (retrievers/fusion.py)
            assert len(hits) == k
    assert len(retriever.retrieve(query)) == 4  # the retriever's own k


def test_child_searchers_are_built_once_not_per_query(lexical, monkeypatch):
    retriever = RecursiveSummaryRetriever.from_nodes(
        topic_nodes(), embed_model=lexical, score_mode="chunk", summary_mode="vector", chunk_mode="vector"
    )
    built = []
    original = vector_module.BackfillVectorRetriever.__init__

    def counting(self, *args, **kwargs):
        built.append(1)
        original(self, *args, **kwargs)

    monkeypatch.setattr(vector_module.BackfillVectorRetriever, "__init__", counting)
    for query in ("queen bee", "solar panels", "sourdough bread"):
        assert retriever.retrieve(query)
        assert asyncio.run(retriever.aretrieve(query))
    assert built == []
    retriever.add_documents([Document(text="Glaciers carve valleys.", metadata={"doc_id": "ice"})])
    retriever.retrieve("glaciers")
    retriever.retrieve("valleys")
    assert len(built) == 2  # summaries and chunks, once for the new index state


def test_retriever_dict_filter_on_ref_doc_id_keeps_the_childs_hits(lexical):
    """Post-checks read the filterable metadata (ref_doc_id included), as the stores do."""
    bread = [n for n in plain_nodes() if n.ref_doc_id == "bread"][:2]
    index = VectorStoreIndex(bread, embed_model=lexical)
    child = index.as_retriever(similarity_top_k=2)
    alone = child.retrieve("sourdough bread")
    assert len(alone) == 2
    retriever = RecursiveSummaryRetriever.from_retriever_dict(
        [IndexNode(text="Sourdough bread baking", index_id="bread")], {"bread": child}, embed_model=lexical
    )
    hits = retriever.retrieve(FilteredQueryBundle("sourdough bread", filters={"ref_doc_id": "bread"}))
    assert sorted(h.node.node_id for h in hits) == sorted(h.node.node_id for h in alone)
    assert retriever.retrieve(FilteredQueryBundle("sourdough bread", filters={"ref_doc_id": "bees"})) == []


def test_a_child_that_ignores_filters_is_post_filtered(lexical):
    hits = [NodeWithScore(node=n, score=1.0) for n in topic_nodes() if n.metadata["doc_id"] == "bees"]
    retriever = RecursiveSummaryRetriever.from_retriever_dict(
        [IndexNode(text="bees", index_id="bees")], {"bees": Static(hits)}, embed_model=lexical
    )
    found = retriever.retrieve(FilteredQueryBundle("bees", filters={"section": "intro"}))
    assert [h.node.node_id for h in found] == ["bees-0"]


@pytest.mark.parametrize("score_mode", ["chunk", "fused"])
def test_hybrid_levels_keep_the_fusion_part(lexical, score_mode):
    retriever = RecursiveSummaryRetriever.from_nodes(
        topic_nodes(), embed_model=lexical, score_mode=score_mode, summary_mode="hybrid", chunk_mode="hybrid"
    )
    for hits in (retriever.retrieve("queen bee eggs"), asyncio.run(retriever.aretrieve("queen bee eggs"))):
        assert hits
        for hit in hits:
            assert hit.explanation.route is not None and hit.explanation.route.score_mode == score_mode
            names = {h.retriever_name for h in hit.explanation.fusion}
            assert names and names <= {"vector", "bm25"}
            assert hit.provenance == hit.explanation.fusion
            if score_mode == "fused":  # the chunk searches' shares add up to the chunk's fused score
                total = sum(h.contribution for h in hit.explanation.fusion)
                assert total == pytest.approx(hit.explanation.route.chunk_score)


def test_vector_chunks_have_no_fusion_part(lexical):
    retriever = RecursiveSummaryRetriever.from_nodes(topic_nodes(), embed_model=lexical, chunk_mode="vector")
    assert all(hit.explanation.fusion is None for hit in retriever.retrieve("queen bee eggs"))


def test_settings_round_trip_through_to_dict(lexical):
    retriever = RecursiveSummaryRetriever.from_nodes(
        topic_nodes(),
        embed_model=lexical,
        similarity_top_k=3,
        score_mode="weighted",
        score_alpha=0.4,
        summary_mode="vector",
        chunk_mode="bm25",
        filters={"category": "food"},
        filter_policy="replace",
    )
    data = retriever.to_dict()
    assert data["type"].endswith("RecursiveSummaryRetriever")
    again = RecursiveSummaryRetriever.from_dict(data, retriever.index)
    assert again.to_dict() == data
    assert [h.node.node_id for h in again.retrieve("bread")] == [h.node.node_id for h in retriever.retrieve("bread")]


# -- LlamaIndex-native construction ----------------------------------------------
def test_ref_doc_id_is_the_default_document_key(lexical):
    index = VectorStoreIndex(plain_nodes(), embed_model=lexical)
    retriever = RecursiveSummaryRetriever.from_nodes(list(index.docstore.docs.values()), embed_model=lexical)
    assert sorted(retriever.documents) == sorted(TOPICS)
    assert retriever.retrieve("queen bee eggs")[0].explanation.route.doc_id == "bees"


def test_metadata_doc_id_is_still_accepted_and_wins(lexical):
    nodes = topic_nodes()  # metadata['doc_id'] and no ref_doc_id
    assert RecursiveSummaryRetriever.from_nodes(nodes, embed_model=lexical).documents.keys() == TOPICS.keys()


def test_a_node_without_a_document_names_both_keys(lexical):
    with pytest.raises(ValueError, match=r"no metadata\['doc_id'\] nor a ref_doc_id"):
        RecursiveSummaryRetriever.from_nodes([TextNode(text="orphan")], embed_model=lexical)


def test_from_index_reuses_the_stored_chunk_embeddings(lexical):
    index = VectorStoreIndex(plain_nodes(), embed_model=lexical)
    lexical.text_calls = 0
    retriever = RecursiveSummaryRetriever.from_index(index, summary_mode="vector", chunk_mode="vector")
    assert lexical.text_calls == len(TOPICS)  # one summary text per document (blend); no chunk
    assert retriever.index.embed_model is lexical  # the index's model embeds the queries
    assert all(n.embedding is None for n in index.docstore.docs.values())  # the index is not changed
    assert retriever.retrieve("queen bee eggs")[0].explanation.route.doc_id == "bees"


def test_transformations_are_accepted_and_kept_for_updates(lexical):
    splitter = TokenTextSplitter(chunk_size=30, chunk_overlap=0)
    retriever = RecursiveSummaryRetriever.from_documents(
        topic_documents(), transformations=[splitter], embed_model=lexical
    )
    assert retriever.index.transformations == [splitter]
    assert len(retriever.documents["bees"].chunk_ids) > 1
    retriever.add_documents([Document(text="Glaciers carve valleys. " * 12, metadata={"doc_id": "ice"})])
    assert len(retriever.documents["ice"].chunk_ids) > 1


def test_explicitly_set_settings_are_honoured_and_upstream_defaults_are_not(lexical, monkeypatch):
    monkeypatch.setattr(Settings, "_node_parser", None)
    monkeypatch.setattr(Settings, "_transformations", None)
    assert Settings.transformations  # what upstream's VectorStoreIndex.from_documents reads: a default parser
    default = RecursiveSummaryRetriever.from_documents(topic_documents(), embed_model=lexical)
    assert default.index.transformations[0].chunk_size == 256  # ours, not upstream's 1024
    Settings.chunk_size = 30
    Settings.chunk_overlap = 0
    small = RecursiveSummaryRetriever.from_documents(topic_documents(), embed_model=lexical)
    assert small.index.transformations[0].chunk_size == 30
    assert len(small.documents["bees"].chunk_ids) > len(default.documents["bees"].chunk_ids)
    Settings.transformations = [SentenceSplitter(chunk_size=40, chunk_overlap=0)]
    assert (
        RecursiveSummaryRetriever.from_documents(topic_documents(), embed_model=lexical)
        .index.transformations[0]
        .chunk_size
        == 40
    )


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"similarity_topk": 3}, TypeError, "did you mean 'similarity_top_k'"),
        ({"transformation": []}, TypeError, "did you mean 'transformations'"),
        ({"transformations": SentenceSplitter()}, TypeError, "wrap it in a list"),
        ({"transformations": ["split"]}, TypeError, r"transformations\[0\] is a str"),
        ({"transformations": []}, TypeError, "transformations is empty"),
        ({"node_parser": SentenceSplitter(), "transformations": [SentenceSplitter()]}, TypeError, "not both"),
        ({"score_mode": "best"}, ValueError, "score_mode must be one of"),
    ],
)
def test_bad_keywords_fail_before_any_work(lexical, kwargs, error, message):
    documents = topic_documents()
    lexical.calls = 0
    for build in (RecursiveSummaryRetriever.from_documents, RecursiveSummaryRetriever.from_nodes):
        source = documents if build is RecursiveSummaryRetriever.from_documents else topic_nodes()
        with pytest.raises(error, match=message):
            build(source, embed_model=lexical, **kwargs)
    assert lexical.calls == 0


def test_from_index_checks_keywords_before_embedding(lexical):
    index = VectorStoreIndex(plain_nodes(), embed_model=lexical)
    lexical.calls = 0
    with pytest.raises(TypeError, match="did you mean 'num_routed_docs'"):
        RecursiveSummaryRetriever.from_index(index, num_routed_doc=2)
    assert lexical.calls == 0


# -- spans -----------------------------------------------------------------------
class _Starts(BaseEventHandler):
    count: int = 0

    def handle(self, event, **kwargs):
        if isinstance(event, RetrievalStartEvent):
            self.count += 1


@pytest.mark.parametrize(
    "options, events",
    [
        ({}, 2),
        ({"score_mode": "weighted", "summary_mode": "vector", "chunk_mode": "vector"}, 2),
        # a hybrid level's HybridFusionRetriever still calls its two children through
        # retrieve (retrievers/fusion.py): two levels x two children per query
        ({"score_mode": "chunk"}, 2 + 2 * 4),
    ],
    ids=["fused", "weighted-vector", "chunk-hybrid"],
)
def test_one_query_emits_one_retrieval_event_pair(lexical, options, events):
    """Internal searches are parts of one retrieval: no span or event of their own."""
    retriever = RecursiveSummaryRetriever.from_nodes(topic_nodes(), embed_model=lexical, **options)
    handler = _Starts()
    dispatcher = get_dispatcher()
    dispatcher.add_event_handler(handler)
    try:
        retriever.retrieve("queen bee eggs")
        asyncio.run(retriever.aretrieve("queen bee eggs"))
    finally:
        dispatcher.event_handlers.remove(handler)
    assert handler.count == events


def test_summary_index_is_shared_by_retrievers_with_other_settings(lexical):
    index = RecursiveIndex.from_nodes(topic_nodes(), embed_model=lexical)
    narrow = RecursiveSummaryRetriever(index, similarity_top_k=2, summary_mode="vector", chunk_mode="vector")
    wide = RecursiveSummaryRetriever(index, similarity_top_k=5, summary_mode="vector", chunk_mode="vector")
    assert len(narrow.retrieve("bees")) == 2 and len(wide.retrieve("bees")) == 5
    index.delete_document("bees")
    assert all(h.explanation.route.doc_id != "bees" for h in narrow.retrieve("queen bee eggs"))
    assert all(h.explanation.route.doc_id != "bees" for h in wide.retrieve("queen bee eggs"))


def test_the_old_name_summary_index_still_imports_with_a_warning_naming_the_new_one():
    import llama_index_ext_recursive as package

    with pytest.warns(DeprecationWarning, match="RecursiveIndex"):
        assert package.SummaryIndex is RecursiveIndex
    assert "SummaryIndex" not in package.__all__  # a star import does not shadow llama_index.core's
    with pytest.raises(AttributeError, match="NoSuchThing"):
        package.NoSuchThing  # noqa: B018


# -- LlamaIndex conventions ----------------------------------------------------------
def test_as_retriever_shares_the_index_and_takes_the_constructor_settings(lexical):
    index = RecursiveIndex.from_documents(topic_documents(), embed_model=lexical)
    retriever = index.as_retriever(similarity_top_k=2)
    assert isinstance(retriever, RecursiveSummaryRetriever) and retriever.index is index
    assert len(retriever.retrieve("honeybee queen")) == 2
    # documents added through the retriever are seen through the index, and the other way round
    retriever.add_documents([Document(text="Kites fly in steady wind.", metadata={"doc_id": "kites"})])
    assert "kites" in index.documents and "kites" in index.as_retriever().index.documents
    with pytest.raises(TypeError, match="similarity_top_k"):
        index.as_retriever(similarity_topk=2)


def test_as_query_engine_answers_from_our_results_with_the_given_llm_and_never_a_default(lexical):
    from llama_index.core.llms import MockLLM
    from llama_index.core.query_engine import RetrieverQueryEngine

    index = RecursiveIndex.from_documents(topic_documents(), embed_model=lexical)
    # no llm and no Settings.llm: refused, naming both fixes, instead of upstream's OpenAI default
    with pytest.raises(ValueError, match=r"pass llm=\.\.\. or set llama_index\.core\.Settings\.llm.*as_retriever"):
        index.as_query_engine()
    engine = index.as_query_engine(llm=MockLLM(max_tokens=8), similarity_top_k=3, response_mode="compact")
    assert isinstance(engine, RetrieverQueryEngine)
    response = engine.query("Who lays the eggs in a honeybee colony?")
    expected = [
        h.node.node_id
        for h in index.as_retriever(similarity_top_k=3).retrieve("Who lays the eggs in a honeybee colony?")
    ]
    assert [n.node.node_id for n in response.source_nodes] == expected and str(response)  # the LLM wrote it
    Settings.llm = MockLLM()  # an explicitly set Settings.llm is used (the autouse fixture resets it)
    assert isinstance(index.as_query_engine().query("bees").source_nodes, list)
    with pytest.raises(TypeError, match="response_mode"):
        index.as_query_engine(llm=MockLLM(), respones_mode="compact")


def test_the_typed_builder_options_list_exactly_what_the_builders_accept():
    import inspect

    from llama_index_ext_recursive.recursive.index import FromNodesOptions
    from llama_index_ext_recursive.recursive.settings import BuildOptions, RetrieverOptions

    def keywords(function, *named):
        return set(inspect.signature(function).parameters) - {"self", "cls", "kwargs", *named}

    assert set(RetrieverOptions.__optional_keys__) == keywords(RecursiveSummaryRetriever.__init__, "index")
    from_documents_names = keywords(RecursiveIndex.from_documents, "documents")
    assert (
        set(FromNodesOptions.__optional_keys__) == keywords(RecursiveIndex.from_nodes, "nodes") - from_documents_names
    )
    assert set(BuildOptions.__optional_keys__) == (
        set(FromNodesOptions.__optional_keys__) | from_documents_names | set(RetrieverOptions.__optional_keys__)
    )
    # every typed option is taken by the builders (none refused as unknown, as this one is)
    with pytest.raises(TypeError, match="unexpected keyword"):
        RecursiveSummaryRetriever.from_nodes([], not_an_option=1)
    for name in BuildOptions.__optional_keys__ - {"node_parser", "transformations"}:
        with pytest.raises(Exception) as refused:
            RecursiveSummaryRetriever.from_nodes([], **{name: object()})
        assert "unexpected keyword" not in str(refused.value) and "did you mean" not in str(refused.value)


def test_a_build_shows_no_empty_embedding_bars(lexical, capsys):
    # summaries and chunks are embedded before the stores are made: upstream's own bar over
    # them counted nothing and printed "Generating embeddings: 0it" twice per build
    RecursiveIndex.from_documents(topic_documents(), embed_model=lexical, show_progress=True)
    err = capsys.readouterr().err
    assert "Summarizing documents" in err  # the bars are on
    assert not re.search(r": 0it \[", err)  # a bar over nothing: "Generating embeddings: 0it [00:00, ?it/s]"
