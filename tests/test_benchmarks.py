"""The benchmark scripts import, and the harness they share does what its figures rely on.

Cheap on purpose (no benchmark runs, no timing asserted, nothing read from
``../shared``, which a clone does not have): a script that no longer imports
after a module moved is caught here rather than at its next long run.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import BENCHMARKS
from harness import cli, corpus, data, memory, models, report, timing, versions

SCRIPTS = sorted(BENCHMARKS.glob("*.py"))


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.stem)
def test_every_script_imports_without_running(script: Path) -> None:
    spec = importlib.util.spec_from_file_location(f"benchmark_{script.stem}", script)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    try:
        spec.loader.exec_module(module)  # not __main__: nothing runs
    finally:
        del sys.modules[spec.name]
    assert callable(getattr(module, "main", None)), f"{script.name} has no main()"
    assert module.__doc__, f"{script.name} says nothing about what it measures"


# ------------------------------------------------------------------ timing
def test_median_and_percentile() -> None:
    assert timing.median([3, 1, 2]) == 2
    assert timing.median([4, 1, 3, 2]) == 2.5
    assert timing.percentile([0, 10], 50) == 5
    assert timing.percentile(list(range(1, 102)), 95) == 96


def test_interleaved_rotates_the_order_from_round_to_round() -> None:
    order = []
    contestants = {name: (lambda n=name: order.append(n) or len(order)) for name in "abc"}
    figures = timing.interleaved(contestants, rounds=3)
    assert order == list("abcbcacab")
    assert {name: len(values) for name, values in figures.items()} == {"a": 3, "b": 3, "c": 3}


def test_interleaved_calls_warm_up_then_time_every_item_by_every_contestant() -> None:
    seen = []
    contestants = {name: (lambda item, n=name: seen.append((n, item))) for name in "ab"}
    figures = timing.interleaved_calls(contestants, [1, 2, 3], rounds=2, warmup=1)
    assert seen[:2] == [("a", 1), ("b", 1)]  # the warm-up
    assert seen[2:6] == [("a", 1), ("b", 1), ("b", 2), ("a", 2)]
    assert [len(v) for v in figures.values()] == [6, 6]
    seen.clear()
    timing.interleaved_calls(contestants, [1, 2], rounds=1, rotate=False)
    assert seen == [("a", 1), ("b", 1), ("a", 2), ("b", 2)]


def test_latencies_stop_at_the_budget_and_keep_the_results() -> None:
    results = []
    ms = timing.latencies_ms(lambda x: x * 2, list(range(10)), warmup=2, budget_s=-1, min_calls=3, results=results)
    assert len(ms) == 3 and results == [0, 2, 4]
    assert len(timing.latencies_ms(lambda x: x, [1, 2, 3])) == 3
    assert timing.ms_per_call(lambda x: x, [1, 2]) >= 0


def test_limited_seconds_returns_the_time_of_a_quick_call() -> None:
    assert timing.limited_seconds(lambda: None, 5) < 5


# ------------------------------------------------------------------ report
def test_table_is_github_markdown_with_labels_left_and_figures_right() -> None:
    table = report.Table(["set", "p50 ms", "model"], align="lrl")
    assert table.header() == "| set | p50 ms | model |\n|---|---:|---|"
    assert table.row("scifact", 1.5, "minilm") == "| scifact | 1.5 | minilm |"
    assert report.table(["a", "b"], [[1, 2]]) == "| a | b |\n|---|---:|\n| 1 | 2 |"
    with pytest.raises(ValueError):
        table.row("too", "few")
    with pytest.raises(ValueError):
        report.Table(["a"], align="lr")
    assert report.fmt(None) == "-" and report.fmt(1.23456, 3) == "1.235"


def test_write_puts_markdown_and_json_side_by_side(tmp_path: Path) -> None:
    out = report.write(tmp_path / "deep" / "result.md", "# title", {"p50": 1.0})
    assert out.read_text() == "# title\n"
    assert json.loads(out.with_suffix(".json").read_text()) == {"p50": 1.0}


def test_machine_line_and_fingerprint() -> None:
    assert "nproc=" in report.machine(blas=False)
    assert len(report.library_fingerprint()) == 12
    assert versions.package_dir().name == "llama_index_ext_recursive"


# ------------------------------------------------------------------ corpus
def test_topic_corpus_is_streamed_and_the_same_on_every_pass() -> None:
    small = corpus.TopicCorpus(docs=3, chunks=2, dim=8, seed=5)
    assert inspect.isgenerator(small.documents()) and inspect.isgenerator(small.nodes())
    first = [(n.node_id, n.text, n.embedding) for n in small.nodes()]
    again = [(n.node_id, n.text, n.embedding) for n in corpus.TopicCorpus(docs=3, chunks=2, dim=8, seed=5).nodes()]
    assert first == again == [(n.node_id, n.text, n.embedding) for n in small.nodes()]
    assert [i for i, _, _ in first] == [
        "doc00000-c000",
        "doc00000-c001",
        "doc00001-c000",
        "doc00001-c001",
        "doc00002-c000",
        "doc00002-c001",
    ]
    assert np.allclose(np.linalg.norm([e for _, _, e in first], axis=1), 1.0)
    assert first != [(n.node_id, n.text, n.embedding) for n in corpus.TopicCorpus(3, 2, dim=8, seed=6).nodes()]
    vectors, targets = small.document_queries(4, noise=0.5)
    assert len(vectors) == 4 and len(vectors[0]) == 8 and all(0 <= t < 3 for t in targets)
    assert (vectors, targets) == small.document_queries(4, noise=0.5)


def test_chunk_vectors_are_the_documents_embeddings_without_the_text() -> None:
    small = corpus.TopicCorpus(docs=3, chunks=4, dim=8, seed=2)
    for d in range(3):
        embeddings = [n.embedding for n in small.document(d).chunks]
        assert np.array_equal(small.chunk_vectors(d), np.asarray(embeddings))
    assert not np.array_equal(small.chunk_vectors(0), small.chunk_vectors(1))


def test_chunk_queries_reuse_their_chunks_words() -> None:
    small = corpus.TopicCorpus(docs=2, chunks=3, dim=8)
    documents = list(small.documents())
    nodes = [n for d in documents for n in d.chunks]
    queries = small.chunk_queries(nodes, [d.vocabulary for d in documents], 5, noise=1.0)
    for text, vector, chunk_id, doc_id in queries:
        chunk = next(n for n in nodes if n.node_id == chunk_id)
        words = text.split()
        assert len(words) == 8 and set(words[:6]) <= set(chunk.text.replace(".", "").lower().split())
        assert chunk.metadata["doc_id"] == doc_id and len(vector) == 8


def test_zipf_documents_and_word_nodes_are_deterministic_streams() -> None:
    stream = corpus.zipf_documents(3, 2, start=10, words=20)
    assert inspect.isgenerator(stream)
    documents = list(stream)
    assert [d.doc_id for d in documents] == ["doc-10", "doc-11", "doc-12"]
    assert all(len(d.text.split("\n\n")) == 2 and len(d.text.split()) == 40 for d in documents)
    assert [d.text for d in corpus.zipf_documents(3, 2, start=10, words=20)] == [d.text for d in documents]
    common = sum(d.text.split().count("term0") for d in documents)
    assert common > sum(d.text.split().count("term999") for d in documents)  # Zipf: rank 1 dominates
    nodes = list(corpus.word_nodes(2, 3, vocabulary=corpus.vocabulary(50), words=5, dim=4))
    assert [n.node_id for n in nodes][:2] == ["doc0000-00", "doc0000-01"] and len(nodes) == 6
    assert all(len(n.text.split()) == 5 and n.metadata["doc_id"].startswith("doc") for n in nodes)


@pytest.mark.parametrize("kind", [k for k in corpus.LARGE_KINDS if k != "words"])  # words: 1 s of vocabulary
def test_large_text_has_the_size_asked_and_is_the_same_every_time(kind: str) -> None:
    text = corpus.large_text(kind, 3000)
    assert len(text) == 3000 and text == corpus.large_text(kind, 3000)
    assert ("\n" in text) == (kind in ("prose", "code"))


# ------------------------------------------------------------------ models
def test_hashed_words_are_unit_vectors_of_the_dimension_asked() -> None:
    model = models.hashed_words(64)
    vector = model.get_text_embedding("Bees pollinate flowers")
    assert len(vector) == 64 and np.isclose(np.linalg.norm(vector), 1.0)
    assert vector == model.get_query_embedding("bees pollinate flowers")
    assert np.allclose(model.get_text_embedding("..."), 1 / 8)  # no word: the uniform unit vector
    near = np.dot(vector, model.get_text_embedding("bees and flowers"))
    assert near > np.dot(vector, model.get_text_embedding("granite tectonics"))


def test_topic_embedding_maps_a_summary_to_its_documents_topic() -> None:
    small = corpus.TopicCorpus(docs=2, chunks=1, dim=8)
    model = models.topic_embedding(small)
    assert np.allclose(model.get_text_embedding("doc00001. Some summary."), small.topic(1))
    assert np.allclose(small.document(1).topic, small.topic(1)) and not np.allclose(small.topic(0), small.topic(1))
    other = model.get_text_embedding("unrelated text")
    assert len(other) == 8 and other == model.get_text_embedding("unrelated text")


def test_topic_corpus_draws_any_document_alone_as_a_full_pass_does() -> None:
    """Streaming scale runs draw documents one by one; queries draw the ones they aim at."""
    small = corpus.TopicCorpus(docs=4, chunks=3, dim=8)
    passed = list(small.documents())
    alone = small.document(2)
    assert [c.text for c in alone.chunks] == [c.text for c in passed[2].chunks]
    assert [c.embedding for c in alone.chunks] == [c.embedding for c in passed[2].chunks]
    assert passed[2].chunks[0].text != passed[1].chunks[0].text


# ------------------------------------------------------------------ data, cli, memory
@pytest.fixture
def beir(tmp_path: Path) -> Path:
    folder = tmp_path / "tiny"
    (folder / "qrels").mkdir(parents=True)
    rows = [
        {"_id": f"c{i}", "title": f"T{i}", "text": f"text number {i}", "metadata": {"doc_id": f"d{i // 2}"}}
        for i in range(4)
    ]
    (folder / "corpus.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    (folder / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "number 3"}))
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\tc3\t1\n")
    return folder


def test_datasets_load_through_the_packages_loader(beir: Path) -> None:
    assert data.folder("tiny", root=beir.parent) == beir
    assert data.folder(str(beir)) == beir
    assert data.first_texts(beir, 2) == ["text number 0", "text number 1"]
    dataset = data.load("tiny", root=beir.parent)
    model = models.hashed_words(16)
    nodes = data.embed_nodes(dataset, model)
    assert [len(n.embedding) for n in nodes] == [16] * 4
    assert nodes[0].text.startswith("T0 ")  # a flat set: the title in the text, as BEIR does
    assert list(data.query_vectors(dataset, model)) == ["q1"]
    assert data.query_bundles(dataset, model)[0].embedding == model.get_query_embedding("number 3")


def test_cli_flags_and_the_quoted_command() -> None:
    assert cli.csv(int)("1000, 50,,7") == [1000, 50, 7]
    parser = cli.parser("First line.\n\nMore below.")
    cli.add_rounds(parser)
    cli.add_embed_model(parser)
    assert parser.description == "First line." and parser.parse_args([]).rounds == 3
    assert parser.parse_args(["--embed-model", "default"]).embed_model == "default"
    chosen_later = cli.parser(None)
    cli.add_embed_model(chosen_later, default=None)  # the script chooses per dataset when not given
    assert chosen_later.parse_args([]).embed_model is None
    assert cli.command(["--x", "a b"], script="/any/where/foo.py") == ".venv/bin/python benchmarks/foo.py --x 'a b'"


def test_ann_variants_scores_every_row_of_the_probed_lists_and_only_those() -> None:
    spec = importlib.util.spec_from_file_location("benchmark_ann_variants", BENCHMARKS / "ann_variants.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rng = np.random.default_rng(0)
    near = np.array([1.0, 0, 0, 0]) + 0.05 * rng.standard_normal((10, 4))  # the query's 10 neighbours: list 0
    far = np.array([0, 1.0, 0, 0]) + 0.05 * rng.standard_normal((12, 4))  # list 1
    vectors = np.concatenate([near, far]).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    lists = np.array([0] * 10 + [1] * 12)
    queries = np.array([[1.0, 0, 0, 0]], dtype=np.float32)
    truth = module.exact_truth(vectors, queries)
    assert sorted(truth[0]) == list(range(10))
    for probed, recall, share in (([0], 1.0, 10 / 22), ([1], 0.0, 12 / 22), ([0, 1], 1.0, 1.0), ([-1], 0.0, 0.0)):
        got, scanned = module.probed_recall(vectors, queries, truth, lists, np.array([probed]))
        assert got.tolist() == [recall] and scanned == pytest.approx(share)


def test_run_child_reports_its_output_and_peak_memory_and_stops_at_the_limit() -> None:
    done = memory.run_child([sys.executable, "-c", "print('hi')"])
    assert done.returncode == 0 and done.stdout.strip() == "hi" and done.peak_rss_mib > 1
    assert set(done.usage()) == {"wall_s", "user_s", "sys_s", "max_rss_kb"}
    stuck = memory.run_child([sys.executable, "-c", "import time; time.sleep(30)"], timeout=0.3)
    assert stuck.timed_out and stuck.wall_s < 10
    assert memory.peak_rss_mib() > 1
