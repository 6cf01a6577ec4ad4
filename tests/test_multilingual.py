"""The bundled multilingual model: roles, language pairs, batching, async, retrieval."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from llama_index.core.schema import TextNode

from llama_index_ext_recursive import BackfillVectorRetriever
from llama_index_ext_recursive.multilingual import MULTILINGUAL_MODEL_NAME, MultilingualE5Embedding
from llama_index_ext_recursive.stores.numpy_store import vector_index


@pytest.fixture(scope="module")
def e5() -> MultilingualE5Embedding:
    """The engine itself: every call reaches it (nothing remembered)."""
    return MultilingualE5Embedding(memo_size=0)


def cosine(a, b) -> float:
    a, b = np.asarray(a), np.asarray(b)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_paraphrases_are_closer_than_unrelated_texts(e5):
    a = e5.get_text_embedding("The cat sat on the mat.")
    paraphrase = e5.get_text_embedding("A cat was sitting on the rug.")
    unrelated = e5.get_text_embedding("Interest rates rose by a quarter point.")
    assert cosine(a, paraphrase) > cosine(a, unrelated) + 0.05


@pytest.mark.parametrize(
    "english, chinese",
    [
        ("Green tea is best stored in the refrigerator.", "绿茶最好放在冰箱里保存。"),
        ("Large bones go in the residual waste bin.", "大骨头应该投放到其他垃圾桶。"),
        ("GAPDH expression in C57BL/6 mice", "C57BL/6 小鼠中的 GAPDH 表达"),
    ],
)
def test_translation_pairs_are_closer_than_unrelated_pairs(e5, english, chinese):
    unrelated = "今天的股市大幅下跌，投资者十分担忧。"
    en = e5.get_text_embedding(english)
    assert cosine(en, e5.get_text_embedding(chinese)) > cosine(en, e5.get_text_embedding(unrelated)) + 0.05


def test_queries_and_passages_are_embedded_in_their_roles(e5):
    text = "how long should green tea steep"
    assert not np.allclose(e5.get_query_embedding(text), e5.get_text_embedding(text))
    assert len(e5.get_query_embedding(text)) == 384


def test_a_batch_equals_one_text_at_a_time(e5):
    texts = ["绿茶最好放在冰箱里保存。", "Solar panels turn light into electricity.", "x"]
    batch = e5.get_text_embedding_batch(texts)
    for text, vector in zip(texts, batch):
        assert np.allclose(vector, e5.get_text_embedding(text), atol=1e-5)


async def test_async_equals_sync_and_runs_off_the_event_loop(e5, monkeypatch):
    loop_thread = threading.get_ident()
    seen = []
    original = e5._model.encode

    def recording(texts, is_query):
        seen.append(threading.get_ident())
        return original(texts, is_query)

    monkeypatch.setattr(e5._model, "encode", recording)
    query, text = "泡茶的水温", "Water temperature depends on the tea."
    assert np.allclose(await e5.aget_query_embedding(query), e5.get_query_embedding(query), atol=1e-6)
    assert np.allclose(await e5.aget_text_embedding(text), e5.get_text_embedding(text), atol=1e-6)
    assert seen[0] != loop_thread and seen[2] != loop_thread  # the two awaited calls


def test_an_english_question_finds_the_chinese_passage(e5):
    nodes = [
        TextNode(id_="tea", text="绿茶最好放在冰箱冷藏，并尽量在一年内喝完。"),
        TextNode(id_="waste", text="大骨头质地坚硬，很多城市要求把它投放到其他垃圾中。"),
        TextNode(id_="sun", text="太阳能电池板把阳光转化为电能。"),
    ]
    retriever = BackfillVectorRetriever(vector_index(nodes, e5), similarity_top_k=1)
    assert [h.node.node_id for h in retriever.retrieve("Where should I keep green tea?")] == ["tea"]
    assert [h.node.node_id for h in retriever.retrieve("Which bin do big bones go in?")] == ["waste"]


def test_remembered_vectors_are_the_engines_and_spare_its_calls(e5):
    remembering = MultilingualE5Embedding(memo_size=3)
    asked = []
    original = remembering._model.encode

    def recording(texts, is_query):
        asked.append((list(texts), is_query))
        return original(texts, is_query)

    remembering._model.encode = recording
    texts = ["绿茶最好放在冰箱里保存。", "Solar panels turn light into electricity.", "x"]
    first = remembering.get_text_embedding_batch(texts)
    again = remembering.get_text_embedding_batch([texts[2], texts[0], texts[0]])
    assert asked == [(texts, False)]  # the second batch was remembered whole
    assert again == [first[2], first[0], first[0]]
    assert np.allclose(first, e5.get_text_embedding_batch(texts), atol=1e-6)
    # a query of the same text is another role: the engine is asked
    assert not np.allclose(remembering.get_query_embedding(texts[2]), first[2])
    assert asked[-1] == ([texts[2]], True)
    # four texts remembered at most three: the least recently used ("Solar panels") went first
    remembering.get_text_embedding(texts[1])
    assert asked[-1] == ([texts[1]], False)


def test_memo_size_zero_remembers_nothing():
    forgetful = MultilingualE5Embedding(memo_size=0)
    calls = []
    original = forgetful._model.encode
    forgetful._model.encode = lambda texts, is_query: calls.append(texts) or original(texts, is_query)
    forgetful.get_text_embedding("x")
    forgetful.get_text_embedding("x")
    assert calls == [["x"], ["x"]]


def test_the_model_name_is_recorded_and_bad_arguments_are_refused(e5):
    assert e5.model_name == MULTILINGUAL_MODEL_NAME
    with pytest.raises(ValueError, match="num_threads"):
        MultilingualE5Embedding(num_threads=0)
    with pytest.raises(ValueError, match="memo_size"):
        MultilingualE5Embedding(memo_size=-1)
