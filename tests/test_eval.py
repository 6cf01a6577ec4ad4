"""The evaluation package: metrics, datasets, embedding cache, registry, harness, CLI."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import ir_measures
import pytest
from conftest import LexicalEmbedding, topic_nodes
from llama_index.core import VectorStoreIndex
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.bridge.pydantic import Field
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle, TextNode

from llama_index_ext_recursive import write_sample_dataset
from llama_index_ext_recursive.eval import (
    REGISTRY,
    BeirDataset,
    BuildContext,
    CachedEmbedding,
    DatasetError,
    build_retriever,
    compare,
    evaluate_pairs,
    markdown_table,
    score,
)
from llama_index_ext_recursive.eval.registry import parse_names
from llama_index_ext_recursive.model_identity import PROBES
from llama_index_ext_recursive.sample import _relevant_chunks, load_sample_questions

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


QUERY_INSTRUCTION = "query"


class CountingEmbedding(LexicalEmbedding):
    """LexicalEmbedding that records every text it embeds, by kind. It embeds a query with an
    instruction word, as E5 and BGE do, so queries cannot go through its text API: every
    query is recorded as a query."""

    queries: list[str] = Field(default_factory=list)
    texts: list[str] = Field(default_factory=list)

    def _get_query_embedding(self, query: str) -> list[float]:
        if query not in PROBES:  # the model-identity probes, embedded once per instance
            self.queries.append(query)
        return self._vector(f"{QUERY_INSTRUCTION} {query}")

    def _get_text_embedding(self, text: str) -> list[float]:
        if text not in PROBES:
            self.texts.append(text)
        return self._vector(text)


@pytest.fixture
def counting() -> CountingEmbedding:
    return CountingEmbedding(model_name="counting-test")


# ---------------------------------------------------------------- metrics


def test_ndcg_is_cut_at_k_unlike_llamaindex():
    """3 relevant, top-2 both relevant, k=2: the ideal ranking at 2 is no better."""
    result = score({"q": ["a", "b"]}, {"q": {"a": 1, "b": 1, "c": 1}}, k=2)
    assert result.aggregate["nDCG@2"] == pytest.approx(1.0)
    assert result.aggregate["R@2"] == pytest.approx(2 / 3)
    assert result.aggregate["RR@2"] == pytest.approx(1.0)
    # LlamaIndex's RetrieverEvaluator metric divides by the ideal DCG of all 3 relevant
    from llama_index.core.evaluation.retrieval.metrics import NDCG

    upstream = NDCG().compute(expected_ids=["a", "b", "c"], retrieved_ids=["a", "b"]).score
    assert upstream == pytest.approx(0.7654, abs=1e-4)
    assert upstream == pytest.approx((1 + 1 / math.log2(3)) / (1 + 1 / math.log2(3) + 0.5))


def test_one_relevant_at_rank_three_of_ten():
    ranking = ["x1", "x2", "gold", "x4", "x5", "x6", "x7", "x8", "x9", "x10"]
    metrics = score({"q": ranking}, {"q": {"gold": 1}}, k=10).aggregate
    assert metrics["RR@10"] == pytest.approx(1 / 3)
    assert metrics["nDCG@10"] == pytest.approx(0.5)  # 1/log2(4) over an ideal of 1
    assert metrics["Success@1"] == 0.0
    assert metrics["Success@10"] == 1.0
    assert metrics["R@10"] == 1.0
    assert set(metrics) == {"nDCG@10", "RR@10", "R@10", "Success@1", "Success@10"}


def test_relevant_beyond_k_does_not_count():
    ranking = [f"x{i}" for i in range(10)] + ["gold"]
    metrics = score({"q": ranking}, {"q": {"gold": 1}}, k=10).aggregate
    assert metrics["nDCG@10"] == metrics["RR@10"] == metrics["Success@10"] == metrics["R@10"] == 0.0


@pytest.mark.parametrize("ranking", [{"perfect": ["a"]}, {"perfect": ["a"], "empty": []}])
def test_a_query_without_results_scores_zero_and_stays_in_the_mean(ranking):
    result = score(ranking, {"perfect": {"a": 1}, "empty": {"b": 1}}, k=10)
    assert set(result.per_query) == {"perfect", "empty"}
    assert all(value == 0.0 for value in result.per_query["empty"].values())
    assert result.per_query["empty"]  # zeros are reported, not missing
    assert result.aggregate["nDCG@10"] == pytest.approx(0.5)
    assert result.aggregate["Success@1"] == pytest.approx(0.5)


def test_all_queries_without_results_still_report_every_metric():
    result = score({}, {"q1": {"a": 1}, "q2": {"b": 1}}, k=5)
    assert result.aggregate == {"nDCG@5": 0.0, "RR@5": 0.0, "R@5": 0.0, "Success@1": 0.0, "Success@5": 0.0}


def test_ranking_order_is_scored_not_id_order():
    """trec_eval breaks score ties by document id; score() takes ranked ids, so it cannot."""
    qrels = {"q": {"z": 1}}
    # what scoring the retriever's (tied) scores directly would do: z is moved behind a
    tied = ir_measures.calc_aggregate([ir_measures.RR @ 10], qrels, {"q": {"z": 0.5, "a": 0.5}})
    assert tied[ir_measures.RR @ 10] == pytest.approx(0.5)
    assert score({"q": ["z", "a"]}, qrels).aggregate["RR@10"] == 1.0
    assert score({"q": ["a", "z"]}, qrels).aggregate["RR@10"] == pytest.approx(0.5)


def test_a_repeated_id_keeps_its_first_rank():
    """Regression: a repeat used to overwrite the id's score with its later, lower rank."""
    assert score({"q": ["a", "b", "a"]}, {"q": {"a": 1}}).aggregate["RR@10"] == 1.0
    assert score({"q": ["a", "b", "a"]}, {"q": {"b": 1}}).aggregate["RR@10"] == pytest.approx(0.5)


class FixedRetriever(BaseRetriever):
    """Returns the same nodes, all with the same score, in a fixed order."""

    def __init__(self, ids: list[str]) -> None:
        super().__init__()
        self._ids = ids

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return [NodeWithScore(node=TextNode(id_=i, text=i), score=0.5) for i in self._ids]


def test_tied_retriever_scores_keep_the_retriever_order():
    result = evaluate_pairs(FixedRetriever(["z", "a"]), [("anything", ["z"]), ("other", ["a"])])
    assert result.per_query["q0"]["RR@10"] == 1.0
    assert result.per_query["q1"]["RR@10"] == pytest.approx(0.5)


DOC_OF = {"bees_c0": "bees", "bees_c1": "bees", "solar_c0": "solar", "solar_c1": "solar", "kites_c0": "kites"}


def test_document_level_success_through_doc_of():
    ranking = {"q1": ["bees_c0", "solar_c0", "bees_c1"], "q2": ["bees_c0", "bees_c1", "kites_c0"]}
    qrels = {"q1": {"solar_c1": 1}, "q2": {"kites_c0": 1}}
    doc_qrels = {"q1": {"solar": 1}, "q2": {"kites": 1}}
    at2 = score(ranking, qrels, k=2, doc_of=DOC_OF, doc_qrels=doc_qrels).per_query
    # q1: a different chunk of the right document counts at document level only
    assert at2["q1"]["Success@2"] == 0.0 and at2["q1"]["doc:Success@2"] == 1.0
    # q2: the top-2 chunks are both from bees; kites (rank 3) is outside the cut,
    # at document level as at chunk level
    assert at2["q2"]["doc:Success@2"] == 0.0
    assert score(ranking, qrels, k=3, doc_of=DOC_OF, doc_qrels=doc_qrels).per_query["q2"]["doc:Success@3"] == 1.0
    at1 = score(ranking, qrels, k=1, doc_of=DOC_OF, doc_qrels=doc_qrels).aggregate
    assert at1["doc:Success@1"] == 0.0
    assert "doc:Success@2" not in score(ranking, qrels, k=2).aggregate  # no mapping, no doc metrics


# ---------------------------------------------------------------- datasets


CORPUS = [
    {
        "_id": "bees_c0",
        "title": "Honeybees",
        "text": "The queen bee lays eggs in the hive.",
        "metadata": {"doc_id": "bees"},
    },
    {
        "_id": "bees_c1",
        "title": "Honeybees",
        "text": "Worker bees collect nectar from flowers.",
        "metadata": {"doc_id": "bees"},
    },
    {
        "_id": "solar_c0",
        "title": "Solar",
        "text": "Solar panels turn sunlight into electricity.",
        "metadata": {"doc_id": "solar"},
    },
    {
        "_id": "solar_c1",
        "title": "Solar",
        "text": "An inverter makes alternating current.",
        "metadata": {"doc_id": "solar"},
    },
]
QUERIES = [
    {"_id": "q1", "text": "Who lays the eggs in a hive?"},
    {"_id": "q2", "text": "What does an inverter do?"},
    {"_id": "q3", "text": "An unjudged question about kites"},
    {"_id": "q4", "text": "What do worker bees collect?"},
]
QRELS = ["query-id\tcorpus-id\tscore", "q1\tbees_c0\t1", "q2\tsolar_c1\t1", "q4\tbees_c1\t2"]
DOC_QRELS = ["query-id\tcorpus-id\tscore", "q1\tbees\t1", "q2\tsolar\t1", "q4\tbees\t1"]


def write_dataset(
    root: Path,
    corpus: list[str] | None = None,
    queries: list[str] | None = None,
    qrels: list[str] | None = None,
    doc_qrels: list[str] | None = DOC_QRELS,
) -> Path:
    """A tiny BEIR-layout dataset; each file given as its lines."""
    (root / "qrels").mkdir(parents=True, exist_ok=True)
    files = {
        "corpus.jsonl": corpus if corpus is not None else [json.dumps(r) for r in CORPUS],
        "queries.jsonl": queries if queries is not None else [json.dumps(r) for r in QUERIES],
        "qrels/test.tsv": qrels if qrels is not None else QRELS,
        "qrels/test.doc-level.tsv": doc_qrels,
    }
    for name, lines in files.items():
        if lines is not None:
            (root / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


def _replace(lines: list[str], number: int, text: str) -> list[str]:
    """``lines`` with its 1-based line ``number`` replaced."""
    return lines[: number - 1] + [text] + lines[number:]


CORPUS_LINES = [json.dumps(r) for r in CORPUS]
QUERY_LINES = [json.dumps(r) for r in QUERIES]

BAD = {
    "corpus bad JSON": (
        "corpus",
        _replace(CORPUS_LINES, 3, '{"_id": "solar_c0", "text": '),
        "corpus.jsonl:3",
        "invalid JSON",
    ),
    "corpus not an object": ("corpus", _replace(CORPUS_LINES, 2, '["bees_c1"]'), "corpus.jsonl:2", "JSON object"),
    "corpus missing _id": (
        "corpus",
        _replace(CORPUS_LINES, 3, json.dumps({"text": "no id"})),
        "corpus.jsonl:3",
        "'_id'",
    ),
    "corpus duplicate _id": (
        "corpus",
        _replace(CORPUS_LINES, 3, json.dumps({"_id": "bees_c0", "text": "again"})),
        "corpus.jsonl:3",
        "duplicate",
    ),
    "queries missing text": (
        "queries",
        _replace(QUERY_LINES, 2, json.dumps({"_id": "q2"})),
        "queries.jsonl:2",
        "'text'",
    ),
    "queries duplicate _id": (
        "queries",
        _replace(QUERY_LINES, 4, json.dumps({"_id": "q1", "text": "x"})),
        "queries.jsonl:4",
        "duplicate",
    ),
    "qrels column count": ("qrels", _replace(QRELS, 3, "q2\tsolar_c1"), "test.tsv:3", "3 tab-separated columns"),
    "qrels non-integer relevance": ("qrels", _replace(QRELS, 2, "q1\tbees_c0\thigh"), "test.tsv:2", "not an integer"),
    "qrels unknown query": ("qrels", _replace(QRELS, 3, "q9\tsolar_c1\t1"), "test.tsv:3", "'q9'"),
    "qrels unknown corpus id": ("qrels", _replace(QRELS, 2, "q1\tbees_c7\t1"), "test.tsv:2", "'bees_c7'"),
    "doc qrels unknown document": (
        "doc_qrels",
        _replace(DOC_QRELS, 4, "q4\twasps\t1"),
        "test.doc-level.tsv:4",
        "'wasps'",
    ),
}


@pytest.mark.parametrize("field, lines, where, why", BAD.values(), ids=list(BAD))
def test_a_malformed_line_raises_naming_file_and_line(tmp_path, field, lines, where, why):
    root = write_dataset(tmp_path / "ds", **{field: lines})
    with pytest.raises(DatasetError) as caught:
        BeirDataset.load(root)
    assert where in str(caught.value) and why in str(caught.value)


@pytest.mark.parametrize("missing", ["corpus.jsonl", "queries.jsonl", "qrels/test.tsv"])
def test_a_missing_file_raises_naming_it(tmp_path, missing):
    root = write_dataset(tmp_path / "ds")
    (root / missing).unlink()
    with pytest.raises(DatasetError, match=re.escape(Path(missing).name)):
        BeirDataset.load(root)


def test_a_missing_directory_or_split_raises(tmp_path):
    with pytest.raises(DatasetError, match="not a directory"):
        BeirDataset.load(tmp_path / "nowhere")
    with pytest.raises(DatasetError, match="dev.tsv"):
        BeirDataset.load(write_dataset(tmp_path / "ds"), split="dev")


def test_load_keeps_judged_queries_in_file_order(tmp_path):
    dataset = BeirDataset.load(write_dataset(tmp_path / "ds"))
    assert dataset.name == "ds"
    assert list(dataset.queries) == ["q1", "q2", "q4"]  # q3 has no qrels: not evaluated
    assert dataset.qrels == {"q1": {"bees_c0": 1}, "q2": {"solar_c1": 1}, "q4": {"bees_c1": 2}}
    assert dataset.doc_of == {"bees_c0": "bees", "bees_c1": "bees", "solar_c0": "solar", "solar_c1": "solar"}
    assert dataset.hierarchical
    assert dataset.doc_qrels == {"q1": {"bees": 1}, "q2": {"solar": 1}, "q4": {"bees": 1}}


@pytest.mark.parametrize(
    "cap, expected", [(1, ["q1"]), (2, ["q1", "q2"]), (3, ["q1", "q2", "q4"]), (10, ["q1", "q2", "q4"])]
)
def test_max_queries_keeps_the_first_judged_queries(tmp_path, cap, expected):
    dataset = BeirDataset.load(write_dataset(tmp_path / "ds"), max_queries=cap)
    assert list(dataset.queries) == expected
    assert list(dataset.qrels) == expected
    assert list(dataset.doc_qrels) == expected


@pytest.mark.parametrize(
    "cap, error", [(-1, ValueError), (0, ValueError), (True, TypeError), (2.0, TypeError), ("2", TypeError)]
)
def test_max_queries_that_is_not_a_positive_count_is_refused(tmp_path, cap, error):
    """-1 used to slice off the last query; now every non-count is refused by name."""
    root = write_dataset(tmp_path / "ds")
    with pytest.raises(error, match="max_queries"):
        BeirDataset.load(root, max_queries=cap)


@pytest.mark.parametrize(
    "split", ["../../x", "../test", "sub/test", "..", "", " test", "a\\b", "/etc/passwd", "te\x00st"]
)
def test_a_split_that_is_a_path_is_refused_before_reading(tmp_path, split):
    root = write_dataset(tmp_path / "ds")
    # a qrels file outside the dataset that the split would otherwise reach
    (tmp_path / "x.tsv").write_text("query-id\tcorpus-id\tscore\nq1\tbees_c1\t1\n", encoding="utf-8")
    (root / "qrels" / "sub").mkdir()
    (root / "qrels" / "sub" / "test.tsv").write_text(QRELS[0] + "\n" + QRELS[1] + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match="split must be the name of a qrels file") as caught:
        BeirDataset.load(root, split=split)
    assert not isinstance(caught.value, DatasetError)  # an argument error, not a broken dataset
    with pytest.raises(TypeError, match="split"):
        BeirDataset.load(root, split=None)


def test_a_missing_split_lists_the_splits_there_are(tmp_path):
    root = write_dataset(tmp_path / "ds")
    (root / "qrels" / "dev.tsv").write_text("\n".join(QRELS) + "\n", encoding="utf-8")
    with pytest.raises(DatasetError, match=r"train\.tsv is missing; splits in .*qrels: \['dev', 'test'\]"):
        BeirDataset.load(root, split="train")
    assert list(BeirDataset.load(root, split="dev").queries) == ["q1", "q2", "q4"]


def test_without_doc_level_qrels_the_set_is_flat(tmp_path):
    dataset = BeirDataset.load(write_dataset(tmp_path / "ds", doc_qrels=None))
    assert not dataset.hierarchical and dataset.doc_qrels is None


def test_nodes_embed_the_title_not_the_doc_id(tmp_path):
    dataset = BeirDataset.load(write_dataset(tmp_path / "ds"))
    nodes = {n.node_id: n for n in dataset.nodes()}
    assert list(nodes) == ["bees_c0", "bees_c1", "solar_c0", "solar_c1"]
    embedded = nodes["bees_c0"].get_content(metadata_mode=MetadataMode.EMBED)
    assert "Honeybees" in embedded and "queen bee" in embedded and "doc_id" not in embedded
    flat = {n.node_id: n for n in dataset.nodes(title_in_text=True)}
    assert flat["solar_c0"].text == "Solar Solar panels turn sunlight into electricity."


# ---------------------------------------------------------------- queries from another folder

FRENCH = {
    "q1": "Qui pond les oeufs dans une ruche ?",
    "q2": "A quoi sert un onduleur ?",
    "q4": "Que recoltent les abeilles ouvrieres ?",
}


def _queries_folder(root: Path, queries: dict) -> Path:
    """A folder holding only queries.jsonl, as a translated query set would."""
    root.mkdir(parents=True)
    lines = [json.dumps({"_id": qid, "text": text}, ensure_ascii=False) for qid, text in queries.items()]
    (root / "queries.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


def test_queries_from_another_folder_are_matched_by_id(tmp_path):
    corpus_root = write_dataset(tmp_path / "en")
    (corpus_root / "queries.jsonl").unlink()  # a folder with only corpus and qrels is enough
    dataset = BeirDataset.load(corpus_root, queries_from=_queries_folder(tmp_path / "fr", FRENCH))
    assert dataset.name == "fr->en"
    assert dataset.queries == FRENCH
    assert dataset.qrels == {"q1": {"bees_c0": 1}, "q2": {"solar_c1": 1}, "q4": {"bees_c1": 2}}
    assert dataset.doc_qrels == {"q1": {"bees": 1}, "q2": {"solar": 1}, "q4": {"bees": 1}}
    assert list(dataset.corpus) == [r["_id"] for r in CORPUS]
    capped = BeirDataset.load(corpus_root, max_queries=2, queries_from=tmp_path / "fr")
    assert list(capped.queries) == list(capped.qrels) == list(capped.doc_qrels) == ["q1", "q2"]


def test_queries_from_a_folder_with_some_ids_missing_warns_with_the_count(tmp_path, caplog):
    partial = {qid: FRENCH[qid] for qid in ("q1", "q4")}
    with caplog.at_level("WARNING", logger="llama_index_ext_recursive.eval.data"):
        dataset = BeirDataset.load(
            write_dataset(tmp_path / "en"), queries_from=_queries_folder(tmp_path / "fr", partial)
        )
    assert dataset.queries == partial
    assert list(dataset.qrels) == list(dataset.doc_qrels) == ["q1", "q4"]
    [record] = caplog.records
    assert re.search(
        r"1 of 3 query ids judged in .*test\.tsv are not in .*fr.*queries\.jsonl "
        r"\(e\.g\. 'q2'\): evaluating the other 2",
        record.getMessage(),
    )


def test_queries_from_a_folder_sharing_no_query_id_is_refused(tmp_path):
    other = _queries_folder(tmp_path / "other", {"56be": "Who lays the eggs?", "56bf": "What is an inverter?"})
    with pytest.raises(
        DatasetError,
        match=r"none of the 3 query ids judged in .*test\.tsv \(e\.g\. 'q1'\) "
        r"is in .*other.*queries\.jsonl \(e\.g\. '56be'\): the folders are not parallel",
    ):
        BeirDataset.load(write_dataset(tmp_path / "en"), queries_from=other)


def test_queries_from_a_folder_without_queries_is_refused_naming_it(tmp_path):
    root = write_dataset(tmp_path / "en")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DatasetError, match=r"queries folder .*empty has no queries\.jsonl; pass as queries_from"):
        BeirDataset.load(root, queries_from=tmp_path / "empty")
    with pytest.raises(DatasetError, match=r"queries folder .*nowhere is not a directory"):
        BeirDataset.load(root, queries_from=tmp_path / "nowhere")


def test_queries_from_still_checks_the_corpus_folders_qrels(tmp_path):
    root = write_dataset(tmp_path / "en", qrels=_replace(QRELS, 2, "q1\tbees_c7\t1"))
    with pytest.raises(DatasetError, match=r"test\.tsv:2: 'bees_c7' is not in the corpus"):
        BeirDataset.load(root, queries_from=_queries_folder(tmp_path / "fr", FRENCH))


# ---------------------------------------------------------------- sample dataset


def test_sample_dataset_is_complete_and_loads(tmp_path):
    root = write_sample_dataset(tmp_path / "sample")
    assert root == tmp_path / "sample"
    dataset = BeirDataset.load(root)
    questions = load_sample_questions()
    assert len(dataset.queries) == len(questions) == 24  # every question is judged
    assert dataset.hierarchical
    documents = [json.loads(line) for line in (root / "documents.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(documents) == 12
    for document in documents:
        chunk_ids = document["metadata"]["chunk_ids"]
        assert chunk_ids == [f"{document['_id']}_c{i}" for i in range(len(chunk_ids))]
        assert all(dataset.doc_of[c] == document["_id"] for c in chunk_ids)
    assert sum(len(d["metadata"]["chunk_ids"]) for d in documents) == len(dataset.corpus)
    queries = {
        json.loads(line)["_id"]: json.loads(line)
        for line in (root / "queries.jsonl").read_text(encoding="utf-8").splitlines()
    }
    for number, question in enumerate(questions, 1):
        qid = f"q{number}"
        assert queries[qid]["text"] == question["question"]
        assert queries[qid]["metadata"]["gold_doc_id"] == question["doc_id"]
        assert dataset.qrels[qid], f"{qid} has no relevant chunk"
        assert {dataset.doc_of[c] for c in dataset.qrels[qid]} == {question["doc_id"]}
        assert dataset.doc_qrels[qid] == {question["doc_id"]: 1}
        # today no answer is split by a chunk boundary: every relevant chunk holds it
        assert all(question["answer_contains"] in dataset.corpus[c]["text"] for c in dataset.qrels[qid])


def test_sample_dataset_is_deterministic(tmp_path):
    first, second = write_sample_dataset(tmp_path / "a"), write_sample_dataset(tmp_path / "b")
    for name in ["corpus.jsonl", "documents.jsonl", "queries.jsonl", "qrels/test.tsv", "qrels/test.doc-level.tsv"]:
        assert (first / name).read_bytes() == (second / name).read_bytes(), name


def test_an_answer_split_by_a_chunk_boundary_falls_back_to_its_longest_prefix():
    chunks = {"d_c0": "the starter doubles in", "d_c1": "volume within hours", "d_c2": "doubles"}
    assert _relevant_chunks("doubles in volume", chunks, "x") == ["d_c0"]
    assert _relevant_chunks("volume", chunks, "x") == ["d_c1"]
    assert _relevant_chunks("hours", {"a": "hours", "b": "hours again"}, "x") == ["a", "b"]
    with pytest.raises(ValueError, match="x: no chunk"):
        _relevant_chunks("zebra", {"a": "bees"}, "x")


# ---------------------------------------------------------------- embedding cache


def test_cache_embeds_each_text_once_and_returns_the_same_vectors(counting, tmp_path):
    cache = CachedEmbedding(counting, tmp_path / "cache.sqlite")
    assert cache.model_name == "counting-test"
    fresh = cache.get_text_embedding_batch(["queen bee", "solar panel", "queen bee"])
    assert counting.texts == ["queen bee", "solar panel"]  # a repeat within a batch, too
    again = cache.get_text_embedding_batch(["solar panel", "queen bee"])
    assert cache.get_text_embedding("queen bee") == fresh[0]
    assert counting.texts == ["queen bee", "solar panel"] and cache.computed == 2
    assert again == [fresh[1], fresh[0]] and fresh[2] == fresh[0]
    assert fresh[0] == pytest.approx(counting._vector("queen bee"), abs=1e-6)  # float32 of the model's
    assert len(cache) == 2


def test_query_and_text_embeddings_are_cached_separately(counting):
    cache = CachedEmbedding(counting)
    text_vector = cache.get_text_embedding("bees")
    query_vector = cache.get_query_embedding("bees")
    assert counting.texts == ["bees"] and counting.queries == ["bees"]
    assert cache.get_query_embedding("bees") == query_vector
    assert cache.get_text_embedding("bees") == text_vector
    assert counting.texts == ["bees"] and counting.queries == ["bees"] and cache.computed == 2
    assert len(cache) == 2


async def test_async_calls_use_the_cache(counting):
    cache = CachedEmbedding(counting)
    vector = cache.get_query_embedding("bees")
    assert await cache.aget_query_embedding("bees") == vector
    assert await cache.aget_text_embedding("hive") == cache.get_text_embedding("hive")
    assert counting.queries == ["bees"] and counting.texts == ["hive"]


def test_two_wrappers_share_one_sqlite_file(tmp_path):
    path = tmp_path / "shared" / "cache.sqlite"
    first_model, second_model = CountingEmbedding(model_name="m"), CountingEmbedding(model_name="m")
    first = CachedEmbedding(first_model, path)
    texts = first.get_text_embedding_batch(["a b", "c d"])
    query = first.get_query_embedding("a b")
    first.close()
    second = CachedEmbedding(second_model, path)
    assert second.get_text_embedding_batch(["c d", "a b", "e f"]) == [
        texts[1],
        texts[0],
        second.get_text_embedding("e f"),
    ]
    assert second.get_query_embedding("a b") == query
    assert second_model.texts == ["e f"] and second_model.queries == []
    assert second.computed == 1
    # another model name is another cache entry
    other_model = CountingEmbedding(model_name="other")
    CachedEmbedding(other_model, path).get_text_embedding("a b")
    assert other_model.texts == ["a b"]


# ---------------------------------------------------------------- evaluate_pairs


def test_evaluate_pairs_scores_labelled_pairs(lexical):
    retriever = VectorStoreIndex(topic_nodes(), embed_model=lexical).as_retriever(similarity_top_k=3)
    result = evaluate_pairs(
        retriever,
        [
            ("Which bee lays eggs in the hive?", ["bees-0"]),
            ("What turns direct current from panels into alternating current?", ["solar-1"]),
            ("Why bake bread in a covered pot?", ["bread-1", "bread-0"]),
            ("Something nobody wrote about", ["kites-0"]),
        ],
        k=3,
    )
    assert list(result.per_query) == ["q0", "q1", "q2", "q3"]
    assert result.per_query["q0"]["RR@3"] == 1.0 and result.per_query["q1"]["RR@3"] == 1.0
    assert result.per_query["q2"]["Success@3"] == 1.0
    assert all(value == 0.0 for value in result.per_query["q3"].values())
    assert result.aggregate["Success@3"] == pytest.approx(0.75)


def test_evaluate_pairs_rejects_a_pair_without_expected_ids(lexical):
    retriever = VectorStoreIndex(topic_nodes(), embed_model=lexical).as_retriever()
    with pytest.raises(DatasetError, match=r"pairs\[1\].*no expected node ids"):
        evaluate_pairs(retriever, [("bees", ["bees-0"]), ("solar", [])])


# ---------------------------------------------------------------- registry and harness


def _context(model, nodes=None, gold_docs=None) -> BuildContext:
    nodes = topic_nodes() if nodes is None else nodes
    for node in nodes:
        node.embedding = model.get_text_embedding(node.get_content(metadata_mode=MetadataMode.EMBED))
    # oracle-routing answers only the queries it has gold documents for
    gold = {"Which bee lays eggs in the hive?": ("bees",)} if gold_docs is None else gold_docs
    return BuildContext(nodes=nodes, embed_model=model, top_k=3, gold_docs=gold)


def test_the_registry_has_the_upstream_baselines_and_ours():
    assert {
        "upstream-vector",
        "upstream-bm25",
        "upstream-fusion",
        "upstream-fusion-relative",
        "upstream-recursive",
        "recursive",
        "oracle-routing",
    } <= set(REGISTRY)


# recursive-postgres starts a PostgreSQL server of its own: the server tier
NAMES = [pytest.param(n, marks=pytest.mark.server) if n == "recursive-postgres" else n for n in sorted(REGISTRY)]


@pytest.mark.parametrize("name", NAMES)
def test_every_registered_retriever_builds_and_retrieves(lexical, name):
    context = _context(lexical)
    question = "Which bee lays eggs in the hive?"
    with context.resources:  # a server the factory started stops here
        retriever = build_retriever(name, context)
        assert isinstance(retriever, BaseRetriever)
        results = retriever.retrieve(QueryBundle(question, embedding=lexical.get_query_embedding(question)))
    assert isinstance(results, list) and results
    assert all(isinstance(r, NodeWithScore) for r in results)
    # the tutorial recipe returns its fixed 3 documents x 3 chunks whatever k is (metrics cut at k)
    assert len(results) <= (9 if name == "upstream-recursive" else context.top_k)
    known = {n.node_id for n in context.nodes}
    assert {r.node.node_id for r in results} <= known
    assert results[0].node.metadata["doc_id"] == "bees"
    if name == "recursive-postgres":  # the database ranks as the embedded default does
        embedded = build_retriever("recursive", context).retrieve(
            QueryBundle(question, embedding=lexical.get_query_embedding(question))
        )
        assert [r.node.node_id for r in results] == [r.node.node_id for r in embedded]
        assert [r.score for r in results] == pytest.approx([r.score for r in embedded], abs=1e-5)


def test_an_unknown_retriever_name_lists_the_known_ones(lexical):
    with pytest.raises(KeyError) as caught:
        build_retriever("upstream-vectr", _context(lexical))
    assert "upstream-vectr" in str(caught.value)
    assert all(name in str(caught.value) for name in REGISTRY)
    with pytest.raises(KeyError, match="known: .*upstream-vector"):
        parse_names("upstream-vector,nope")
    with pytest.raises(KeyError):
        parse_names(" , ")
    assert parse_names(" upstream-vector , recursive ") == ["upstream-vector", "recursive"]


METRICS = {"nDCG@10", "RR@10", "R@10", "Success@1", "Success@10"}


def test_compare_reports_every_retriever_on_shared_cached_embeddings(tmp_path, counting):
    dataset = BeirDataset.load(write_dataset(tmp_path / "ds"))
    names = sorted(REGISTRY)
    cache = CachedEmbedding(counting, tmp_path / "cache.sqlite")
    first = compare(dataset, names, embed_model=cache)
    assert [r.name for r in first.reports] == names
    assert (first.dataset, first.queries, first.corpus, first.k) == ("ds", 3, 4, 10)
    for report in first.reports:
        assert set(report.metrics) == METRICS | {"doc:Success@10"}
        assert all(0.0 <= v <= 1.0 for v in report.metrics.values())
        assert set(report.per_query) == {"q1", "q2", "q4"}
        assert report.latency_p50_ms >= 0 and report.build_seconds >= 0
    # every distinct text (chunks, queries, any summaries) embedded exactly once
    embedded = [("text", t) for t in counting.texts] + [("query", q) for q in counting.queries]
    total = first.texts_embedded + first.texts_embedded_in_builds
    assert len(embedded) == len(set(embedded)) == total == len(cache)
    assert first.texts_embedded == 7  # 4 chunks + 3 queries; the rest are summaries built by upstream-recursive
    assert {"Who lays the eggs in a hive?", "What does an inverter do?", "What do worker bees collect?"} <= set(
        counting.queries
    )
    second = compare(dataset, names, embed_model=cache)
    assert second.texts_embedded == 0 and len(counting.texts) + len(counting.queries) == len(embedded)
    assert [r.metrics for r in second.reports] == [r.metrics for r in first.reports]
    data = json.loads(json.dumps(second.to_dict()))
    assert set(data["retrievers"]) == set(names) and "per_query" not in data["retrievers"]["recursive"]
    assert "q1" in second.to_dict(per_query=True)["retrievers"]["recursive"]["per_query"]


def test_compare_on_a_flat_set_has_no_document_metrics(tmp_path, lexical):
    dataset = BeirDataset.load(write_dataset(tmp_path / "ds", doc_qrels=None))
    comparison = compare(dataset, ["upstream-vector", "upstream-bm25"], embed_model=lexical)
    assert all(set(r.metrics) == METRICS for r in comparison.reports)
    table = markdown_table(comparison)
    assert "doc:Success" not in table


def test_markdown_table_has_a_row_per_retriever(tmp_path, lexical):
    dataset = BeirDataset.load(write_dataset(tmp_path / "ds"))
    comparison = compare(dataset, ["upstream-vector", "recursive"], embed_model=lexical, k=3)
    lines = markdown_table(comparison).splitlines()
    assert lines[0].split(" | ")[:2] == ["| retriever", "nDCG@3"] and "doc:Success@3" in lines[0]
    assert [line.split(" | ")[0] for line in lines[2:]] == ["| upstream-vector", "| recursive"]


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"k": 0}, ValueError, "k must be >= 1"),
        ({"k": True}, TypeError, "k must be an integer"),
        ({"k": 2.5}, TypeError, "k must be an integer"),
        ({"concurrency": 0}, ValueError, "concurrency must be >= 1"),
        ({"concurrency": -4}, ValueError, "concurrency must be >= 1"),
        ({"names": []}, ValueError, "names is empty"),
        ({"names": "upstream-vector"}, TypeError, "parse_names"),
        ({"names": ["recursive", "recursive"]}, ValueError, "more than once"),
        ({"names": ["upstream-vectr"]}, KeyError, "upstream-vectr"),
    ],
)
def test_compare_checks_its_arguments_before_embedding_anything(tmp_path, counting, kwargs, error, match):
    dataset = BeirDataset.load(write_dataset(tmp_path / "ds"))
    arguments = {"names": ["upstream-vector"], **kwargs}
    with pytest.raises(error, match=match):
        compare(dataset, embed_model=counting, **arguments)
    assert counting.texts == [] and counting.queries == []


def test_compare_refuses_a_directory_as_cache_before_embedding(tmp_path, counting):
    dataset = BeirDataset.load(write_dataset(tmp_path / "ds"))
    with pytest.raises(ValueError, match="cache_path .* is a directory"):
        compare(dataset, ["upstream-vector"], embed_model=counting, cache_path=tmp_path)
    assert counting.texts == []


def test_scoring_and_running_refuse_bad_counts(lexical):
    with pytest.raises(ValueError, match="k must be >= 1"):
        score({"q": ["a"]}, {"q": {"a": 1}}, k=0)
    with pytest.raises(TypeError, match="k must be an integer"):
        evaluate_pairs(_Fixed(["a"]), [("q", ["a"])], k=1.0)
    from llama_index_ext_recursive.eval import run_queries

    with pytest.raises(ValueError, match="concurrency must be >= 1"):
        run_queries(_Fixed(["a"]), {"q": "question"}, concurrency=0)


class _Fixed(BaseRetriever):
    """Returns the same ranked ids for every query."""

    def __init__(self, ids):
        super().__init__()
        self.ids = ids

    def _retrieve(self, query_bundle):
        return [NodeWithScore(node=TextNode(id_=i, text=i), score=1.0) for i in self.ids]


# ---------------------------------------------------------------- CLI, real model


@pytest.mark.integration
def test_cli_eval_with_the_multilingual_model(tmp_path, capsys):
    from llama_index_ext_recursive.cli import main

    data = write_sample_dataset(tmp_path / "ds")
    out, cache = tmp_path / "out.json", tmp_path / "c.sqlite"
    argv = ["eval", "--data", str(data), "--retrievers", "vector", "--cache", str(cache), "--out", str(out)]
    assert main(argv + ["--embed-model", "multilingual"]) == 0
    metrics = json.loads(out.read_text(encoding="utf-8"))["retrievers"]["vector"]["metrics"]
    assert metrics["doc:Success@10"] >= 0.9 and metrics["nDCG@10"] > 0.5
    assert main(argv + ["--embed-model", "multilingual"]) == 0
    assert "Embedded 0 new chunk" in capsys.readouterr().out  # cached
    # cached under its own name: the English model's run embeds every text anew
    assert main(argv + ["--embed-model", "minilm"]) == 0
    assert "Embedded 0 new chunk" not in capsys.readouterr().out
    # with no model named, the run measures what the library chooses for this mixed corpus
    assert main(argv) == 0
    out_text = capsys.readouterr().out
    assert "embedding model: multilingual-e5-small-q4" in out_text and "Embedded 0 new chunk" in out_text
    assert json.loads(out.read_text(encoding="utf-8"))["embedding_model"]["source"] == "corpus"


def test_cli_eval_on_the_sample_dataset(tmp_path, capsys, real_model):
    from llama_index_ext_recursive.cli import main

    data = write_sample_dataset(tmp_path / "ds")
    out, png, cache = tmp_path / "out.json", tmp_path / "out.png", tmp_path / "c.sqlite"
    argv = [
        "eval",
        "--data",
        str(data),
        "--retrievers",
        "upstream-vector,recursive",
        "--cache",
        str(cache),
        "--out",
        str(out),
        "--plot",
        str(png),
    ]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "ds: 43 chunks, 24 queries" in printed
    rows = [line for line in printed.splitlines() if line.startswith("| ")]
    assert rows[0].startswith("| retriever | nDCG@10 |")
    assert [row.split(" | ")[0] for row in rows[1:]] == ["| upstream-vector", "| recursive"]
    figures = json.loads(out.read_text(encoding="utf-8"))
    assert figures["queries"] == 24 and figures["k"] == 10
    metrics = figures["retrievers"]["recursive"]["metrics"]
    assert set(metrics) == METRICS | {"doc:Success@10"}
    assert metrics["doc:Success@10"] >= 0.9 and metrics["nDCG@10"] > 0.5
    assert len(figures["retrievers"]["upstream-vector"]["per_query"]) == 24
    assert png.read_bytes().startswith(PNG_SIGNATURE)
    # the cache is on disk: a second run embeds nothing new
    assert main(argv) == 0
    assert "Embedded 0 new chunk and query texts" in capsys.readouterr().out


ZH_PASSAGES = {
    "tea": "绿茶最好放在冰箱冷藏，并尽量在一年内喝完。",
    "waste": "大骨头质地坚硬，很多城市要求把它投放到其他垃圾中。",
    "sun": "太阳能电池板把阳光转化为电能。",
}


def _parallel_folders(tmp_path: Path) -> tuple:
    """English questions (``en``) and Chinese passages with Chinese questions and qrels (``zh``)."""
    qrels = ["query-id\tcorpus-id\tscore", "t1\ttea\t1", "w1\twaste\t1"]
    corpus = [json.dumps({"_id": cid, "text": text}, ensure_ascii=False) for cid, text in ZH_PASSAGES.items()]
    chinese = [
        json.dumps({"_id": "t1", "text": "绿茶应该放在哪里？"}, ensure_ascii=False),
        json.dumps({"_id": "w1", "text": "大骨头扔进哪个垃圾桶？"}, ensure_ascii=False),
    ]
    zh = write_dataset(tmp_path / "zh", corpus=corpus, queries=chinese, qrels=qrels, doc_qrels=None)
    en = _queries_folder(
        tmp_path / "en", {"t1": "Where should I keep green tea?", "w1": "Which bin do big bones go in?"}
    )
    return en, zh


@pytest.mark.integration
def test_cli_eval_english_questions_over_chinese_passages(tmp_path, capsys):
    from llama_index_ext_recursive.cli import main

    en, zh = _parallel_folders(tmp_path)
    out = tmp_path / "out.json"
    assert (
        main(
            [
                "eval",
                "--data",
                str(zh),
                "--queries-from",
                str(en),
                "--retrievers",
                "vector",
                "--embed-model",
                "multilingual",
                "--cache",
                str(tmp_path / "c.sqlite"),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert "en->zh: 3 chunks, 2 queries" in capsys.readouterr().out
    figures = json.loads(out.read_text(encoding="utf-8"))
    assert figures["dataset"] == "en->zh" and figures["queries"] == 2
    per_query = figures["retrievers"]["vector"]["per_query"]
    # each English question ranks its Chinese passage first
    assert {qid: m["Success@1"] for qid, m in per_query.items()} == {"t1": 1.0, "w1": 1.0}


def test_cli_eval_queries_from_an_unaligned_folder_fails_before_embedding(tmp_path, capsys):
    from llama_index_ext_recursive.cli import main

    _, zh = _parallel_folders(tmp_path)
    other = _queries_folder(tmp_path / "other", {"x1": "Where should I keep green tea?"})
    cache = tmp_path / "c.sqlite"
    argv = ["eval", "--data", str(zh), "--retrievers", "vector", "--cache", str(cache)]
    assert main(argv + ["--queries-from", str(other)]) == 1
    err = capsys.readouterr().err
    assert re.fullmatch(
        r"error: none of the 2 query ids judged in .*test\.tsv \(e\.g\. 't1'\) is in "
        r".*other.*queries\.jsonl \(e\.g\. 'x1'\): the folders are not parallel; .*\n",
        err,
    )
    assert main(argv + ["--queries-from", str(tmp_path / "nowhere")]) == 1
    assert re.fullmatch(r"error: the queries folder .*nowhere is not a directory; .*\n", capsys.readouterr().err)
    assert not cache.exists()  # refused before the model or the cache was touched


def test_cli_eval_unknown_retriever_lists_known_names(tmp_path, capsys):
    from llama_index_ext_recursive.cli import main

    data = write_sample_dataset(tmp_path / "ds")
    assert main(["eval", "--data", str(data), "--retrievers", "upstream-vector,bogus"]) == 1
    err = capsys.readouterr().err
    assert re.fullmatch(r"error: unknown retriever\(s\) \['bogus'\]; known: .*recursive.*upstream-vector.*\n", err)
    assert "upstream-bm25" in err and "Traceback" not in err


# ---------------------------------------------------------------- issue 12: recipe, fusion, oracle, titles

LEAD = " ".join(f"w{i}" for i in range(100))


def _recipe_nodes():
    """Three contracts with the same boilerplate; only titles and opening names differ."""
    clauses = [
        "The receiving party shall keep the information confidential.",
        "This agreement terminates after two years.",
    ]
    nodes = []
    for doc_id, title, party in [
        ("nda-a", "Acme Rockets NDA", "Acme"),
        ("nda-b", "Birch Bakery NDA", "Birch"),
        ("nda-c", None, "Cedar"),
    ]:
        texts = [f"Agreement between {party} and the recipient.", *clauses]
        for i, text in enumerate(texts):
            metadata = {"doc_id": doc_id, **({"title": title} if title else {})}
            nodes.append(
                TextNode(id_=f"{doc_id}-{i}", text=text, metadata=metadata, excluded_embed_metadata_keys=["doc_id"])
            )
    return nodes


def test_recipe_summary_is_the_title_then_the_first_60_words_in_chunk_order():
    from llama_index_ext_recursive.eval.registry import recipe_summary

    words = LEAD.split()
    chunks = [
        TextNode(text=" ".join(words[:40]), metadata={"title": "The Title"}),
        TextNode(text="\n".join(words[40:])),
    ]
    summary = recipe_summary("doc-1", chunks)
    title, lead = summary.split("\n")
    assert title == "The Title"
    assert lead.split() == LEAD.split()[:60]  # across the chunk boundary, whitespace normalised
    assert recipe_summary("doc-1", [TextNode(text="no title here")]) == "doc-1\nno title here"


def test_upstream_recursive_routes_on_recipe_summaries_top3_by_top3(counting):
    from llama_index_ext_recursive.eval.registry import recipe_summary

    nodes = _recipe_nodes()
    context = _context(counting, nodes=nodes)
    counting.texts.clear()
    retriever = build_retriever("upstream-recursive", context)
    top = retriever._retriever_dict["vector"]
    summaries = {n.index_id: n.text for n in top._index.docstore.docs.values()}
    assert summaries == {
        "nda-a": "Acme Rockets NDA\nAgreement between Acme and the recipient. The receiving party shall "
        "keep the information confidential. This agreement terminates after two years.",
        "nda-b": recipe_summary("nda-b", [n for n in nodes if n.metadata["doc_id"] == "nda-b"]),
        "nda-c": recipe_summary("nda-c", [n for n in nodes if n.metadata["doc_id"] == "nda-c"]),
    }
    assert summaries["nda-c"].startswith("nda-c\nAgreement between Cedar")  # no title: the doc id
    # each summary is embedded from exactly that text (nothing else was embedded while building)
    assert sorted(set(counting.texts)) == sorted(summaries.values())
    assert top._similarity_top_k == 3
    assert all(retriever._retriever_dict[d]._similarity_top_k == 3 for d in ("nda-a", "nda-b", "nda-c"))
    question = "Acme Rockets: when does the agreement terminate?"
    results = retriever.retrieve(QueryBundle(question, embedding=counting.get_query_embedding(question)))
    assert len(results) == 9  # 3 documents x 3 chunks, as the recipe gives
    assert results[0].node.metadata["doc_id"] == "nda-a"  # the title routed it first


def test_upstream_fusion_relative_is_query_fusion_in_relative_score_mode(lexical):
    from llama_index.core.retrievers.fusion_retriever import FUSION_MODES

    context = _context(lexical)
    retriever = build_retriever("upstream-fusion-relative", context)
    assert retriever.mode == FUSION_MODES.RELATIVE_SCORE and retriever.num_queries == 1
    assert retriever.similarity_top_k == context.top_k
    assert [type(r).__name__ for r in retriever._retrievers] == ["VectorIndexRetriever", "BM25Retriever"]
    question = "Which worker bee collects nectar?"
    bundle = QueryBundle(question, embedding=lexical.get_query_embedding(question))
    # relative_score: each child's scores min-max scaled, weighted 1/2, summed per node
    expected = {}
    for child in (build_retriever("upstream-vector", context), build_retriever("upstream-bm25", context)):
        hits = child.retrieve(bundle)
        low, high = min(h.score for h in hits), max(h.score for h in hits)
        for h in hits:
            expected[h.node.node_id] = expected.get(h.node.node_id, 0.0) + 0.5 * (h.score - low) / (high - low)
    got = {r.node.node_id: r.score for r in retriever.retrieve(bundle)}
    best = sorted(expected, key=expected.get, reverse=True)[: context.top_k]
    assert list(got) == best and got == pytest.approx({n: expected[n] for n in best})
    assert best[0] == "bees-1"


def test_oracle_ranks_only_the_gold_documents_chunks_by_rrf(lexical):
    from llama_index_ext_recursive.retrievers.bm25 import MultilingualBM25Retriever

    nodes = topic_nodes()
    query = "Bake the bread in a hot covered pot to trap steam, like the queen bee?"
    context = _context(lexical, nodes=nodes, gold_docs={query: ("bees",), "both": ("solar", "bread")})
    context.top_k = 10
    oracle = build_retriever("oracle-routing", context)
    bundle = QueryBundle(query, embedding=lexical.get_query_embedding(query))
    results = oracle.retrieve(bundle)
    # the bread chunk matches the query best corpus-wide, but bread is not the gold document
    flat = MultilingualBM25Retriever.from_defaults(nodes=nodes, similarity_top_k=1).retrieve(query)
    assert flat[0].node.metadata["doc_id"] == "bread"
    assert [r.node.metadata["doc_id"] for r in results] == ["bees"] * 3
    # reciprocal rank fusion (k=60) of dense cosine and BM25 inside the document
    bees = [n for n in nodes if n.metadata["doc_id"] == "bees"]
    q = lexical.get_query_embedding(query)
    dense = sorted(bees, key=lambda n: -float(sum(a * b for a, b in zip(n.embedding, q))))
    lexical_hits = MultilingualBM25Retriever.from_defaults(nodes=bees, similarity_top_k=3).retrieve(query)
    fused = {}
    for ranked in ([n.node_id for n in dense], [h.node.node_id for h in lexical_hits]):
        for rank, node_id in enumerate(ranked, 1):
            fused[node_id] = fused.get(node_id, 0.0) + 1 / (60 + rank)
    assert {r.node.node_id: r.score for r in results} == pytest.approx(fused)
    assert [r.score for r in results] == sorted(fused.values(), reverse=True)
    # two gold documents: chunks of both, none of the third
    two = oracle.retrieve(QueryBundle("both", embedding=lexical.get_query_embedding("both")))
    assert {r.node.metadata["doc_id"] for r in two} == {"solar", "bread"} and len(two) == 6


def test_oracle_refuses_a_query_it_has_no_answer_for(lexical):
    oracle = build_retriever("oracle-routing", _context(lexical))
    with pytest.raises(
        KeyError,
        match=r"no gold documents for the query 'What is a drone\?'.*only "
        r"answers the 1 judged queries.*BuildContext.gold_docs",
    ):
        oracle.retrieve("What is a drone?")


def test_gold_documents_come_from_doc_qrels_or_the_chunks_documents(tmp_path):
    queries = [*QUERY_LINES, json.dumps({"_id": "q5", "text": "What do worker bees collect?"})]
    qrels = [*QRELS, "q5\tsolar_c0\t1", "q2\tbees_c0\t0"]
    flat = BeirDataset.load(write_dataset(tmp_path / "flat", queries=queries, qrels=qrels, doc_qrels=None))
    # same text twice (q4, q5): the union; relevance 0 is not gold; unjudged q3 is absent
    assert flat.gold_documents() == {
        "Who lays the eggs in a hive?": ("bees",),
        "What does an inverter do?": ("solar",),
        "What do worker bees collect?": ("bees", "solar"),
    }
    doc_level = ["query-id\tcorpus-id\tscore", "q1\tsolar\t1", "q2\tsolar\t1", "q4\tbees\t1"]
    hier = BeirDataset.load(write_dataset(tmp_path / "hier", doc_qrels=doc_level))
    assert hier.gold_documents()["Who lays the eggs in a hive?"] == ("solar",)  # the doc-level file rules


def test_compare_gives_the_oracle_the_gold_documents(tmp_path, lexical):
    dataset = BeirDataset.load(write_dataset(tmp_path / "ds"))
    comparison = compare(dataset, ["upstream-vector", "oracle-routing"], embed_model=lexical, k=1)
    oracle = comparison.reports[1].metrics
    assert oracle["doc:Success@1"] == 1.0 and oracle["Success@1"] == 1.0  # 2 chunks per document


def test_without_embed_title_the_title_is_metadata_only(tmp_path):
    dataset = BeirDataset.load(write_dataset(tmp_path / "ds"))
    node = {n.node_id: n for n in dataset.nodes(embed_title=False)}["bees_c0"]
    assert node.metadata == {"doc_id": "bees", "title": "Honeybees"}
    assert node.get_content(metadata_mode=MetadataMode.EMBED) == "The queen bee lays eggs in the hive."
    assert "Honeybees" in node.get_content(metadata_mode=MetadataMode.LLM)  # the LLM still sees it
    assert node.text == "The queen bee lays eggs in the hive."


@pytest.mark.parametrize("doc_qrels", [DOC_QRELS, None], ids=["hierarchical", "flat"])
def test_compare_embed_title_false_embeds_no_title_and_says_so(tmp_path, counting, doc_qrels):
    dataset = BeirDataset.load(write_dataset(tmp_path / "ds", doc_qrels=doc_qrels))
    comparison = compare(dataset, ["upstream-vector"], embed_model=counting, embed_title=False)
    assert sorted(counting.texts) == sorted(row["text"] for row in CORPUS)  # no title anywhere
    assert comparison.to_dict()["metadata_convention"] == {
        "title": "metadata-not-embedded",
        "embed_title": False,
        "title_in_text": False,
    }
    counting.texts.clear()
    default = compare(dataset, ["upstream-vector"], embed_model=counting)
    assert all(("Honeybees" in t) or ("Solar" in t) for t in counting.texts)
    assert default.to_dict()["metadata_convention"]["title"] == ("embedded-metadata" if doc_qrels else "in-text")
    with pytest.raises(TypeError, match="embed_title must be True or False"):
        compare(dataset, ["upstream-vector"], embed_model=counting, embed_title="no")


@pytest.mark.integration
def test_cli_eval_no_embed_title_and_the_oracle_ceiling(tmp_path, capsys, real_model, monkeypatch):
    from llama_index_ext_recursive.cli import main

    data = write_sample_dataset(tmp_path / "ds")
    out = tmp_path / "out.json"
    # without --cache, eval caches where build does (the user's cache folder), not in the current one
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    # the English model, as the oracle's ceiling was measured (its RRF of a strong dense child
    # and BM25 can rank below the dense child alone)
    argv = [
        "eval",
        "--data",
        str(data),
        "--retrievers",
        "upstream-vector,oracle-routing",
        "--out",
        str(out),
        "--no-embed-title",
        "--embed-model",
        "minilm",
    ]
    assert main(argv) == 0
    assert (tmp_path / "xdg" / "llama-index-ext-recursive" / "embeddings.sqlite").is_file()
    assert not list((tmp_path / "cwd").iterdir())
    assert "chunk titles: metadata-not-embedded" in capsys.readouterr().out
    figures = json.loads(out.read_text(encoding="utf-8"))
    assert figures["metadata_convention"]["embed_title"] is False
    oracle, vector = (
        figures["retrievers"]["oracle-routing"]["metrics"],
        figures["retrievers"]["upstream-vector"]["metrics"],
    )
    assert oracle["doc:Success@10"] == 1.0  # routing is perfect by construction
    assert oracle["nDCG@10"] >= vector["nDCG@10"]


def test_run_eval_covers_legalbench_and_the_new_retrievers():
    import importlib.util
    import sys

    bench = Path(__file__).resolve().parent.parent / "benchmarks"
    sys.path.insert(0, str(bench))  # run_eval imports its sibling scale_recursive
    try:
        spec = importlib.util.spec_from_file_location("run_eval", bench / "run_eval.py")
        run_eval = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(run_eval)
    finally:
        sys.path.remove(str(bench))
    assert "legalbench_contractnli" in run_eval.DATASETS
    assert run_eval.DATASETS["legalbench_contractnli"] is None  # every query
    names = parse_names(run_eval.RETRIEVERS)  # every name is registered
    assert {"upstream-fusion-relative", "oracle-routing", "upstream-fusion", "recursive", "hybrid"} <= set(names)
