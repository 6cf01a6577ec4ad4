"""The retrievers of ``retrievers/``: per-call options, construction, configuration and persistence.

Round trips go both ways the configuration convention offers
(``from_dict(to_dict())`` and ``persist``/``from_persist_dir``) and compare
results, sync and async, not just settings.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest
from conftest import topic_nodes
from llama_index.core import Settings, SimpleDirectoryReader, VectorStoreIndex
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.llms.mock import MockLLM
from llama_index.core.retrievers.fusion_retriever import QueryFusionRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
from llama_index.retrievers.bm25 import BM25Retriever

from llama_index_ext_recursive.filters import FilterError
from llama_index_ext_recursive.persist import PersistError
from llama_index_ext_recursive.query import FilteredQueryBundle
from llama_index_ext_recursive.results import ExplainedNodeWithScore, RetrievalExplanation, explained
from llama_index_ext_recursive.retrievers.bm25 import MultilingualBM25Retriever
from llama_index_ext_recursive.retrievers.fusion import HybridFusionRetriever
from llama_index_ext_recursive.retrievers.vector import BackfillVectorRetriever
from llama_index_ext_recursive.stores.numpy_store import vector_index

QUERIES = ["how do bees make honey", "sunlight electricity", "sourdough starter flour", "蜂蜜"]


def scored(results: list[NodeWithScore]):
    return [(hit.node.node_id, round(hit.score, 9)) for hit in results]


def same_results(a: BaseRetriever, b: BaseRetriever, bundles) -> None:
    for bundle in bundles:
        expected = scored(a.retrieve(bundle))
        assert scored(b.retrieve(bundle)) == expected
        assert scored(asyncio.run(b.aretrieve(bundle))) == expected


BUNDLES = [
    *QUERIES,
    FilteredQueryBundle("bees and flowers", filters={"category": "biology"}),
    FilteredQueryBundle("panels", filters={"year": {"op": ">=", "value": 2021}}, top_k=2),
]


@pytest.fixture(scope="module")
def embedded_nodes(real_model):
    nodes = topic_nodes()
    for node, vector in zip(nodes, real_model.get_text_embedding_batch([n.text for n in nodes])):
        node.embedding = vector
    return nodes


# ---------------------------------------------------------------- per-call options


def test_per_call_top_k_is_honoured_by_every_retriever(embedded_nodes, real_model):
    index = vector_index(embedded_nodes, real_model)
    retrievers = [
        MultilingualBM25Retriever(embedded_nodes, similarity_top_k=4),
        BackfillVectorRetriever(index, similarity_top_k=4),
        HybridFusionRetriever.from_index(index, similarity_top_k=4, calibrate=False),
    ]
    for retriever in retrievers:
        default = retriever.retrieve("bees queen drones panels sunlight bread dough")
        assert len(default) == 4
        fewer = retriever.retrieve(FilteredQueryBundle("bees queen drones panels sunlight bread dough", top_k=2))
        assert scored(fewer) == scored(default)[:2]
        assert scored(
            asyncio.run(
                retriever.aretrieve(FilteredQueryBundle("bees queen drones panels sunlight bread dough", top_k=2))
            )
        ) == scored(fewer)
    # more than the retriever's own k: the children are asked for at least that many
    vector, hybrid = retrievers[1], retrievers[2]
    assert len(vector.retrieve(FilteredQueryBundle("bees", top_k=7))) == 7
    assert len(hybrid.retrieve(FilteredQueryBundle("bees", top_k=7))) == 7


def test_bm25_filter_policy_merge_or_replace():
    nodes = topic_nodes()
    merge = MultilingualBM25Retriever(nodes, filters={"category": "biology"})
    replace = MultilingualBM25Retriever(nodes, filters={"category": "biology"}, filter_policy="replace")
    bundle = FilteredQueryBundle("the bread and the bees", filters={"category": "food"})
    assert merge.retrieve(bundle) == []  # biology AND food
    assert {hit.node.metadata["category"] for hit in replace.retrieve(bundle)} == {"food"}
    # without per-call filters both keep the construction-time ones
    for retriever in (merge, replace):
        assert {h.node.metadata["category"] for h in retriever.retrieve("the bread and the bees")} == {"biology"}


class _Routed(BaseRetriever):
    """A child that attaches a route part, as the recursive retriever does."""

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        route = RetrievalExplanation(
            doc_id="bees",
            summary_node_id="s",
            summary_score=1.0,
            chunk_score=0.5,
            final_score=1.5,
            score_mode="fused",
            path=["bees"],
        )
        return [explained(NodeWithScore(node=TextNode(id_="bees-0", text="bees"), score=0.5), route=route)]


def test_fusion_keeps_the_route_part_its_child_attached():
    fused = HybridFusionRetriever([_Routed(), _Routed()], retriever_names=["a", "b"]).retrieve("bees")
    assert isinstance(fused[0], ExplainedNodeWithScore)
    assert fused[0].explanation.route.doc_id == "bees"
    assert [hit.retriever_name for hit in fused[0].explanation.fusion] == ["a", "b"]


# ------------------------------------------------------------------- construction


def test_subclasses_keep_every_attribute_their_parent_sets():
    """The parents' constructors run, so an attribute a later upstream release
    adds is there too; the fusion parent is never handed Settings.llm."""
    nodes = topic_nodes()
    upstream_bm25 = BM25Retriever(nodes=nodes, similarity_top_k=2)
    ours_bm25 = MultilingualBM25Retriever(nodes, similarity_top_k=2)
    assert set(vars(upstream_bm25)) <= set(vars(ours_bm25))
    upstream_fusion = QueryFusionRetriever([ours_bm25], llm=MockLLM(), num_queries=1)
    ours_fusion = HybridFusionRetriever([ours_bm25])
    assert set(vars(upstream_fusion)) <= set(vars(ours_fusion))
    assert ours_fusion._llm is None and Settings._llm is None


def test_from_defaults_takes_an_index_or_nodes(lexical):
    nodes = topic_nodes()
    from_nodes = HybridFusionRetriever.from_defaults(nodes=nodes, embed_model=lexical, calibrate=False)
    index = vector_index(topic_nodes(), lexical)
    from_index = HybridFusionRetriever.from_defaults(index=index, calibrate=False)
    assert scored(from_nodes.retrieve("solar panels")) == scored(from_index.retrieve("solar panels"))
    with pytest.raises(ValueError, match="exactly one of index or nodes"):
        HybridFusionRetriever.from_defaults()
    with pytest.raises(ValueError, match="exactly one of index or nodes"):
        HybridFusionRetriever.from_defaults(index=index, nodes=nodes)
    with pytest.raises(TypeError, match="similarity_topk"):
        HybridFusionRetriever.from_defaults(index=index, similarity_topk=3)


def test_from_index_reuses_the_stored_embeddings(tmp_path, lexical):
    """The app path: SimpleDirectoryReader -> VectorStoreIndex -> from_index; no
    node is embedded again (calibration embeds only its pseudo-queries)."""
    for name, text in {
        "bees.txt": "Worker bees collect nectar and pollen from flowers.",
        "solar.txt": "Solar panels convert sunlight into electricity.",
        "bread.txt": "A sourdough starter is flour and water.",
    }.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    documents = SimpleDirectoryReader(str(tmp_path)).load_data()
    index = VectorStoreIndex.from_documents(documents, embed_model=lexical)
    embedded = lexical.text_calls
    assert embedded == len(index.docstore.docs)
    hybrid = HybridFusionRetriever.from_index(index)
    doc_of = {d.metadata["file_name"]: d.doc_id for d in documents}
    results = hybrid.retrieve("solar electricity")
    assert lexical.text_calls == embedded
    assert results[0].node.ref_doc_id == doc_of["solar.txt"]
    # ref_doc_id, the key every node of this app has, filters both children
    bread = hybrid.retrieve(FilteredQueryBundle("flour bees solar", filters={"ref_doc_id": doc_of["bread.txt"]}))
    assert [hit.node.ref_doc_id for hit in bread] == [doc_of["bread.txt"]]


def test_hybrid_retriever_over_children_built_elsewhere(lexical):
    """The recursive levels hand their own children in; the hybrid is the same."""
    from llama_index_ext_recursive.retrievers.hybrid import hybrid_retriever

    nodes = topic_nodes()
    index = vector_index(nodes, lexical)
    built = HybridFusionRetriever.from_index(index, similarity_top_k=3, calibrate=False)
    shared = hybrid_retriever(
        HybridFusionRetriever,
        vector=BackfillVectorRetriever(index, 3, unknown_filter_key=None),
        bm25=MultilingualBM25Retriever(nodes, 3, unknown_filter_key=None),
        similarity_top_k=3,
        calibrate=False,
        check_filters=False,
    )
    same_results(built, shared, QUERIES)
    assert built.filter_vocabulary is not None and shared.filter_vocabulary is None
    with pytest.raises(ValueError, match="index=, or both vector= and bm25="):
        hybrid_retriever(HybridFusionRetriever, bm25=MultilingualBM25Retriever(nodes))


# ---------------------------------------------------------------- configuration


def test_bm25_to_dict_from_dict_and_persist_round_trip(tmp_path):
    nodes = topic_nodes()
    bm25 = MultilingualBM25Retriever(
        nodes,
        similarity_top_k=3,
        filters={"year": {"op": ">=", "value": 2020}},
        filter_policy="replace",
        unknown_filter_key="warn",
        language="en",
    )
    data = json.loads(json.dumps(bm25.to_dict()))
    assert data["type"].endswith("MultilingualBM25Retriever")
    rebuilt = MultilingualBM25Retriever.from_dict(data, nodes)
    assert rebuilt.to_dict() == bm25.to_dict()
    same_results(bm25, rebuilt, BUNDLES)
    bm25.persist(tmp_path / "bm25")
    loaded = MultilingualBM25Retriever.from_persist_dir(tmp_path / "bm25")
    assert loaded.to_dict() == bm25.to_dict()
    same_results(bm25, loaded, BUNDLES)


def test_backfill_to_dict_from_dict_and_persist_round_trip(tmp_path, embedded_nodes, real_model):
    index = vector_index(embedded_nodes, real_model)
    vector = BackfillVectorRetriever(
        index,
        similarity_top_k=3,
        filters={"section": "body"},
        filter_policy="replace",
        stale_policy="raise",
        unknown_filter_key="warn",
    )
    data = json.loads(json.dumps(vector.to_dict()))
    rebuilt = BackfillVectorRetriever.from_dict(data, index)
    assert rebuilt.to_dict() == vector.to_dict()
    same_results(vector, rebuilt, BUNDLES)
    vector.persist(tmp_path / "vector")
    loaded = BackfillVectorRetriever.from_persist_dir(tmp_path / "vector", embed_model=real_model)
    assert loaded.to_dict() == vector.to_dict()
    same_results(vector, loaded, BUNDLES)
    with pytest.raises(PersistError, match="holds a BackfillVectorRetriever index"):
        MultilingualBM25Retriever.from_persist_dir(tmp_path / "vector")


def test_backfill_over_a_store_that_keeps_its_own_data_is_not_persisted(tmp_path, lexical):
    from llama_index.core.vector_stores.types import BasePydanticVectorStore

    class Remote(BasePydanticVectorStore):
        stores_text: bool = True

        @property
        def client(self):
            return None

        def add(self, nodes, **kwargs):
            return [n.node_id for n in nodes]

        def delete(self, ref_doc_id, **kwargs):
            pass

        def query(self, query, **kwargs):
            raise AssertionError("not searched")

    index = vector_index(topic_nodes(), lexical, vector_store=Remote(), store_nodes_override=True)
    with pytest.raises(TypeError, match="Remote keeps its data itself.*from_vector_store"):
        BackfillVectorRetriever(index).persist(tmp_path / "remote")
    assert not (tmp_path / "remote").exists()


def test_hybrid_round_trips_keep_weights_calibration_and_filter_checks(
    tmp_path, embedded_nodes, real_model, monkeypatch
):
    hybrid = HybridFusionRetriever.from_nodes(
        embedded_nodes,
        embed_model=real_model,
        similarity_top_k=4,
        child_top_k=6,
        filters={"year": {"op": ">=", "value": 2019}},
        filter_policy="replace",
    )
    assert hybrid.calibration is not None
    data = json.loads(json.dumps(hybrid.to_dict()))
    init = data["init_parameters"]
    assert init["mode"] == "relative_score" and init["child_top_k"] == 6
    assert init["calibration"] == hybrid.calibration.to_dict()
    rebuilt = HybridFusionRetriever.from_dict(data, hybrid.retrievers)
    assert rebuilt.to_dict() == hybrid.to_dict()
    same_results(hybrid, rebuilt, BUNDLES)

    hybrid.persist(tmp_path / "hybrid")
    import llama_index_ext_recursive.retrievers.fusion as fusion_module

    def no_calibration(*args, **kwargs):
        raise AssertionError("a persisted hybrid is not calibrated again")

    monkeypatch.setattr(fusion_module, "calibrate_children", no_calibration)
    loaded = HybridFusionRetriever.from_persist_dir(tmp_path / "hybrid", embed_model=real_model)
    assert loaded.to_dict() == hybrid.to_dict()
    assert [type(c) for c in loaded.retrievers] == [BackfillVectorRetriever, MultilingualBM25Retriever]
    same_results(hybrid, loaded, BUNDLES)
    with pytest.raises(FilterError, match="categroy"):
        loaded.retrieve(FilteredQueryBundle("bees", filters={"categroy": "biology"}))


def test_hybrid_with_a_child_it_cannot_persist_writes_nothing(tmp_path):
    hybrid = HybridFusionRetriever([_Routed()])
    with pytest.raises(TypeError, match="_Routed, which a HybridFusionRetriever cannot persist"):
        hybrid.persist(tmp_path / "h")
    assert not (tmp_path / "h").exists()


# ------------------------------------------------------------------------ logging


@pytest.mark.integration  # a real Python process
def test_bm25s_is_quiet_in_an_app_logging_at_debug_unless_asked():
    """bm25s sets its own logger to DEBUG at import; an app at DEBUG or INFO
    got "Building index from tokens" for every index. Fresh interpreters: in
    this one other imports may already have configured logging."""
    build = (
        "from llama_index.core.schema import TextNode; "
        "from llama_index_ext_recursive.retrievers.bm25 import MultilingualBM25Retriever; "
        "MultilingualBM25Retriever([TextNode(text='bees make honey')])"
        # the package builds its bm25s index itself (columnar/terms.py): bm25s'
        # own indexing, called here, is what logs
        ".bm25.index([['bees']], show_progress=False)"
    )
    app = f"import logging; logging.basicConfig(level=logging.DEBUG); {build}"
    quiet = subprocess.run([sys.executable, "-c", app], capture_output=True, text=True, check=True)
    assert "Building index" not in quiet.stderr
    asked = (
        "import logging; logging.basicConfig(level=logging.DEBUG); "
        "import llama_index_ext_recursive.retrievers.bm25; "
        f"logging.getLogger('bm25s').setLevel(logging.DEBUG); {build}"
    )
    loud = subprocess.run([sys.executable, "-c", asked], capture_output=True, text=True, check=True)
    assert "Building index from tokens" in loud.stderr
