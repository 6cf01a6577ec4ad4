"""The embedding cache: hits and misses, persistence, keys, safety on foreign or broken files.

Pure logic, so a counting deterministic embedding stands in for a model; the
builds use the lexical test embedding (tests/conftest.py).
"""

from __future__ import annotations

import logging
import re
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from conftest import LexicalEmbedding
from llama_index.core import Document
from llama_index.core.bridge.pydantic import Field
from llama_index.core.schema import TextNode

from llama_index_ext_recursive import CachedEmbedding, HybridFusionRetriever, RecursiveIndex, RecursiveSummaryRetriever
from llama_index_ext_recursive.embedding_cache import EmbeddingCacheError, check_cache_path, default_cache_path
from llama_index_ext_recursive.model_identity import PROBES


class Counting(LexicalEmbedding):
    """Records what it embeds, by role; queries get a different vector than texts."""

    queries: list[str] = Field(default_factory=list)
    texts: list[str] = Field(default_factory=list)

    def _get_query_embedding(self, query: str) -> list[float]:
        if query not in PROBES:
            self.queries.append(query)
        return list(-np.asarray(self._vector(query)))

    def _get_text_embedding(self, text: str) -> list[float]:
        if text not in PROBES:  # the identity probes (test_model_identity.py counts those)
            self.texts.append(text)
        return self._vector(text)


def _model(name: str = "counting") -> Counting:
    return Counting(model_name=name)


@pytest.fixture(autouse=True)
def _private_cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))


def test_misses_are_embedded_once_and_hits_counted(tmp_path):
    model = _model()
    cache = CachedEmbedding(model, tmp_path / "c.sqlite")
    first = cache.get_text_embedding_batch(["bees", "hive", "bees"])
    assert model.texts == ["bees", "hive"] and (cache.computed, cache.reused) == (2, 1)
    again = cache.get_text_embedding_batch(["hive", "bees"])
    assert again == [first[1], first[0]] and model.texts == ["bees", "hive"]
    assert (cache.computed, cache.reused) == (2, 3)
    assert first[0] == pytest.approx(model._vector("bees"), abs=1e-6)
    assert len(cache) == 2 and cache.model_name == "counting"


def test_entries_persist_across_instances(tmp_path):
    path = tmp_path / "deep" / "folder" / "c.sqlite"
    first = CachedEmbedding(_model(), path)
    vectors = first.get_text_embedding_batch(["a b", "c d"])
    first.close()
    model = _model()
    second = CachedEmbedding(model, path)
    assert second.get_text_embedding_batch(["c d", "a b"]) == [vectors[1], vectors[0]]
    assert model.texts == [] and (second.computed, second.reused) == (0, 2)


def test_roles_and_model_names_are_kept_apart(tmp_path):
    path = tmp_path / "c.sqlite"
    model = _model()
    cache = CachedEmbedding(model, path, cache_queries=True)
    text, query = cache.get_text_embedding("bees"), cache.get_query_embedding("bees")
    assert text != query and model.texts == ["bees"] and model.queries == ["bees"]
    assert cache.get_query_embedding("bees") == query and model.queries == ["bees"]
    other = _model("other")
    CachedEmbedding(other, path).get_text_embedding("bees")
    assert other.texts == ["bees"]  # another model's entry is not this one's


def test_cache_queries_false_passes_queries_through_and_builds_never_cache_them(tmp_path, lexical):
    model = _model()
    cache = CachedEmbedding(model, tmp_path / "c.sqlite", cache_queries=False)
    expected = list(-np.asarray(model._vector("secret question")))
    assert cache.get_query_embedding("secret question") == pytest.approx(expected)
    cache.get_query_embedding("secret question")
    assert model.queries.count("secret question") == 2 and len(cache) == 0
    assert (cache.computed, cache.reused) == (0, 0)  # queries passed through count in neither
    # a cache the builders create from a path does not keep the users' queries
    path = tmp_path / "build.sqlite"
    docs = [
        Document(text="The queen bee lays eggs. Workers gather nectar.", doc_id="bees"),
        Document(text="Solar panels turn sunlight into power.", doc_id="solar"),
    ]
    retriever = RecursiveSummaryRetriever.from_documents(docs, embed_model=lexical, embedding_cache=path)
    rows = len(retriever.index.embed_model)
    retriever.retrieve("who lays the eggs?")
    assert len(retriever.index.embed_model) == rows and not retriever.index.embed_model.cache_queries


def test_a_file_that_is_not_a_cache_is_refused_and_left_untouched(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("years of work", encoding="utf-8")
    other_db = tmp_path / "app.sqlite"
    with sqlite3.connect(other_db) as db:
        db.execute("CREATE TABLE users (name TEXT)")
    foreign_table = tmp_path / "foreign.sqlite"
    with sqlite3.connect(foreign_table) as db:
        db.execute("CREATE TABLE embeddings (id INTEGER, data TEXT)")
    for path, why in (
        (notes, "is not a SQLite database"),
        (other_db, "without an 'embeddings' table"),
        (foreign_table, "with columns ['id', 'data']"),
    ):
        before = path.read_bytes()
        with pytest.raises(EmbeddingCacheError, match=re.escape(why)):
            check_cache_path(path)
        with pytest.raises(EmbeddingCacheError, match=f"{path.name} exists and .*left untouched"):
            CachedEmbedding(_model(), path)
        assert path.read_bytes() == before
    with pytest.raises(EmbeddingCacheError, match="is a folder; pass a file such as"):
        CachedEmbedding(_model(), tmp_path)
    empty = tmp_path / "empty.sqlite"
    empty.touch()  # nothing to lose: becomes a cache
    CachedEmbedding(_model(), empty).get_text_embedding("bees")
    check_cache_path(empty)


def test_a_corrupt_cache_warns_and_still_gives_the_right_vectors(tmp_path, caplog):
    path = tmp_path / "c.sqlite"
    CachedEmbedding(_model(), path).get_text_embedding_batch([f"text {i}" for i in range(50)])
    data = bytearray(path.read_bytes())
    data[100:] = b"\xff" * (len(data) - 100)  # header intact, pages garbage
    path.write_bytes(bytes(data))
    model = _model()
    with caplog.at_level(logging.WARNING, logger="llama_index_ext_recursive.embedding_cache"):
        cache = CachedEmbedding(model, path)
        vectors = cache.get_text_embedding_batch(["text 1", "text 2"])
    assert "embedding without it" in caplog.text and str(path) in caplog.text
    assert vectors[0] == pytest.approx(model._vector("text 1"), abs=1e-6)
    assert model.texts == ["text 1", "text 2"] and cache.path is None
    assert path.read_bytes() == bytes(data)  # left as it was


def test_a_stored_vector_that_is_not_finite_or_of_another_dimension_is_embedded_again(tmp_path):
    path = tmp_path / "c.sqlite"
    cache = CachedEmbedding(_model(), path)
    cache.get_text_embedding_batch(["good", "nan", "short", "fine", "well"])
    with sqlite3.connect(path) as db:
        db.execute(
            "UPDATE embeddings SET vector = ? WHERE key = ?",
            (np.full(64, np.nan, dtype=np.float32).tobytes(), cache._key("text", "nan")),
        )
        db.execute(
            "UPDATE embeddings SET vector = ? WHERE key = ?",
            (np.ones(3, dtype=np.float32).tobytes(), cache._key("text", "short")),
        )
    model = _model()
    fresh = CachedEmbedding(model, path)
    vectors = fresh.get_text_embedding_batch(["good", "nan", "short", "fine", "well"])
    assert model.texts == ["nan", "short"]
    assert vectors[1] == pytest.approx(model._vector("nan"), abs=1e-6) and len(vectors[2]) == 64


def test_a_locked_cache_degrades_to_embedding(tmp_path, caplog, monkeypatch):
    import llama_index_ext_recursive.embedding_cache as module

    monkeypatch.setattr(module, "_LOCK_TIMEOUT_SECONDS", 0.05)
    path = tmp_path / "c.sqlite"
    CachedEmbedding(_model(), path).get_text_embedding("seed")
    model = _model()
    cache = CachedEmbedding(model, path)
    holder = sqlite3.connect(path)
    holder.execute("BEGIN EXCLUSIVE")  # another process writing, past the timeout
    try:
        with caplog.at_level(logging.WARNING, logger="llama_index_ext_recursive.embedding_cache"):
            vector = cache.get_text_embedding("bees")
    finally:
        holder.rollback()
        holder.close()
    assert "database is locked" in caplog.text and vector == pytest.approx(model._vector("bees"), abs=1e-6)
    assert cache.get_text_embedding("bees") == vector and model.texts == ["bees"]  # memory still answers


async def test_async_answers_equal_sync_ones(tmp_path):
    model = _model()
    cache = CachedEmbedding(model, tmp_path / "c.sqlite", cache_queries=True)
    assert await cache.aget_text_embedding("hive") == cache.get_text_embedding("hive")
    assert await cache.aget_query_embedding("bees") == cache.get_query_embedding("bees")
    assert await cache.aget_text_embedding_batch(["a", "hive"]) == cache.get_text_embedding_batch(["a", "hive"])
    assert model.texts == ["hive", "a"] and model.queries == ["bees"]
    plain = CachedEmbedding(_model(), None, cache_queries=False)
    assert await plain.aget_query_embedding("bees") == plain.get_query_embedding("bees")


def test_the_default_path_follows_xdg(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert default_cache_path() == tmp_path / "llama-index-ext-recursive" / "embeddings.sqlite"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/dir")  # the spec says: ignore it
    assert default_cache_path() == Path.home() / ".cache" / "llama-index-ext-recursive" / "embeddings.sqlite"


def test_builds_wrap_the_chosen_model_once_and_updates_reuse_the_cache(tmp_path, lexical):
    path = tmp_path / "c.sqlite"
    docs = [
        Document(text="The queen bee lays eggs. Workers gather nectar.", doc_id="bees"),
        Document(text="Solar panels turn sunlight into power.", doc_id="solar"),
    ]
    index = RecursiveIndex.from_documents(docs, embed_model=lexical, embedding_cache=path)
    assert isinstance(index.embed_model, CachedEmbedding) and index.embed_model.model is lexical
    assert index.embedding_choice["name"] == "lexical-test" and index.embed_model.computed > 0
    again = RecursiveIndex.from_documents(docs, embed_model=lexical, embedding_cache=path)
    assert again.embed_model.computed == 0 and again.embed_model.reused == index.embed_model.computed
    # a document embedded once (in any index using the cache) is not embedded again when added
    wasps = Document(text="Wasps hunt other insects.", doc_id="wasps")
    RecursiveIndex.from_documents([wasps], embed_model=lexical, embedding_cache=path)
    assert again.add_documents([wasps]) == ["wasps"] and again.embed_model.computed == 0
    with pytest.raises(ValueError, match="wraps 'other' .* but the index is embedded with 'lexical-test'"):
        RecursiveIndex.from_documents(docs, embed_model=lexical, embedding_cache=CachedEmbedding(_model("other")))
    calls = lexical.calls
    with pytest.raises(TypeError, match="embedding_cache must be a file path or a CachedEmbedding"):
        RecursiveIndex.from_documents(docs, embed_model=lexical, embedding_cache=3)
    notes = tmp_path / "notes.txt"
    notes.write_text("years of work", encoding="utf-8")
    with pytest.raises(EmbeddingCacheError, match="is not a SQLite database"):
        RecursiveIndex.from_documents(docs, embed_model=lexical, embedding_cache=notes)
    assert lexical.calls == calls and notes.read_text(encoding="utf-8") == "years of work"


def test_a_persisted_index_records_the_inner_model_and_loads_back_without_the_cache(tmp_path, lexical):
    docs = [Document(text="The queen bee lays eggs. Workers gather nectar.", doc_id="bees")]
    built = RecursiveSummaryRetriever.from_documents(docs, embed_model=lexical, embedding_cache=tmp_path / "c.sqlite")
    built.persist(tmp_path / "idx")
    loaded = RecursiveSummaryRetriever.from_persist_dir(tmp_path / "idx", embed_model=lexical)
    assert loaded.index.embed_model is lexical
    assert loaded.index.embedding_choice == built.index.embedding_choice
    assert built.index.embedding_choice["name"] == "lexical-test"


def test_a_rebuild_embeds_nothing_not_even_calibrations_pseudo_queries(tmp_path):
    """Chunks, summaries and the pseudo-queries that fit the fusion weights all come from the cache."""
    path = tmp_path / "c.sqlite"
    docs = [
        Document(text=f"Topic {i}: the queen bee lays eggs while workers gather nectar in spring.", doc_id=f"d{i}")
        for i in range(12)
    ]  # enough pseudo-queries to calibrate (MIN_CALIBRATION_SAMPLES)
    first_model = _model()
    RecursiveSummaryRetriever.from_documents(docs, embed_model=first_model, embedding_cache=path)
    assert first_model.queries and first_model.texts  # calibration embedded pseudo-queries the first time
    second_model = _model()
    again = RecursiveSummaryRetriever.from_documents(docs, embed_model=second_model, embedding_cache=path)
    assert second_model.queries == [] and second_model.texts == []
    assert again.index.embed_model.computed == 0
    # a user's query is not written to the build cache
    again.retrieve("Which bee lays eggs?")
    assert second_model.queries == ["Which bee lays eggs?"]
    again.retrieve("Which bee lays eggs?")
    assert second_model.queries == ["Which bee lays eggs?"] * 2


def test_a_hybrid_rebuild_embeds_nothing(tmp_path):
    path = tmp_path / "c.sqlite"
    nodes = [TextNode(text=f"Note {i} about bees, nectar and hives in the spring.", id_=f"n{i}") for i in range(12)]
    first = _model()
    HybridFusionRetriever.from_nodes([n.model_copy() for n in nodes], first, embedding_cache=path)
    assert first.queries and first.texts
    model = _model()
    HybridFusionRetriever.from_nodes([n.model_copy() for n in nodes], model, embedding_cache=path)
    assert model.queries == [] and model.texts == []
