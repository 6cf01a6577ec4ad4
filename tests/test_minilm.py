"""The bundled all-MiniLM-L6-v2 under ONNX Runtime: torch's vectors, its graph kept safe, no torch to open an index."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from llama_index_ext_recursive import minilm
from llama_index_ext_recursive.minilm import MiniLMEmbedding
from llama_index_ext_recursive.model_identity import model_identity
from llama_index_ext_recursive.models import bundled_embed_model, embed_model_name

# lengths from nothing to past the model's 256 tokens, in no order, so batching by length is exercised
TEXTS = [
    "Worker bees collect nectar and pollen from flowers.",
    "",
    "   padded with spaces   ",
    " ".join(["The contract terminates after thirty days of written notice."] * 60),
    "a",
    "合同的终止条款",
    "Photosynthesis converts light into chemical energy in the chloroplasts of plant cells, "
    "releasing oxygen as a by-product.",
]


@pytest.fixture
def torch_model(torch_minilm):
    return torch_minilm


def test_vectors_equal_sentence_transformers(real_model, torch_model):
    assert isinstance(real_model, MiniLMEmbedding)
    ours = np.asarray(real_model.get_text_embedding_batch(TEXTS))
    theirs = np.asarray(torch_model.get_text_embedding_batch(TEXTS))
    assert ours.shape == theirs.shape == (len(TEXTS), 384)
    assert np.max(np.abs(ours - theirs)) < 1e-5
    query = "when can the contract be terminated?"
    assert (
        np.max(np.abs(np.asarray(real_model.get_query_embedding(query)) - torch_model.get_query_embedding(query)))
        < 1e-5
    )


def test_one_text_alone_equals_it_in_a_batch(real_model):
    """Padding to a batch's longest text changes nothing (the mask is in the graph)."""
    batch = real_model.get_text_embedding_batch(TEXTS)
    for text, vector in zip(TEXTS, batch):
        assert np.max(np.abs(np.asarray(real_model.get_text_embedding(text)) - vector)) < 1e-5


def test_queries_batch_and_async_agree(real_model):
    queries = ["what do bees collect?", "终止条款", "light into energy"]
    one_by_one = [real_model.get_query_embedding(q) for q in queries]
    batched = real_model._get_query_embeddings(queries)
    in_loop = asyncio.run(real_model.aget_query_embedding(queries[0]))
    assert np.allclose(one_by_one, batched, atol=1e-5)
    assert np.allclose(in_loop, one_by_one[0], atol=1e-6)


def test_identity_is_the_bundled_model(real_model):
    """Indexes built with the torch-run model load with this one: same name, same probe answers."""
    identity = model_identity(real_model)
    assert embed_model_name(real_model) == "all-MiniLM-L6-v2"
    assert identity.dim == 384
    assert identity.embeds_queries_as_texts
    assert bundled_embed_model() is real_model


def test_torch_model_answers_as_the_same_model(real_model, torch_model):
    assert model_identity(torch_model).same_model(model_identity(real_model))


def test_an_unreadable_graph_is_exported_again(tmp_path, monkeypatch, caplog, torch_model):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    path = minilm.graph_path()
    path.parent.mkdir(parents=True)
    path.write_bytes(b"not a graph: a file cut short by a full disk")
    with caplog.at_level(logging.WARNING, logger="llama_index_ext_recursive.minilm"):
        model = MiniLMEmbedding()
    assert "could not be read" in caplog.text
    assert path.stat().st_size > 1_000_000
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left
    assert (
        np.max(np.abs(np.asarray(model.get_text_embedding(TEXTS[0])) - torch_model.get_text_embedding(TEXTS[0]))) < 1e-5
    )


def test_a_graph_that_answers_differently_is_refused(real_model):
    graph = real_model._session  # the graph is read back from its file for the check
    expected = graph.run(["last_hidden_state"], minilm._check_inputs())[0]
    path = minilm.graph_path()
    minilm._check_graph(path.read_bytes(), expected)  # the graph in use passes
    with pytest.raises(RuntimeError, match="answers up to .* away from torch.*nothing was written"):
        minilm._check_graph(path.read_bytes(), expected + 0.01)


def test_opening_an_index_does_not_import_torch(tmp_path, real_model):
    """What the reopen time rests on: a process that loads an index and answers a question
    reads the exported graph and never imports torch, transformers or sentence-transformers."""
    from llama_index.core import Document

    from llama_index_ext_recursive import RecursiveSummaryRetriever

    documents = [
        Document(text="Worker bees collect nectar and pollen from flowers.", metadata={"title": "Bees"}),
        Document(text="The contract ends after thirty days of written notice.", metadata={"title": "Contract"}),
    ]
    RecursiveSummaryRetriever.from_documents(documents, embed_model=real_model).persist(str(tmp_path / "index"))
    script = textwrap.dedent(
        f"""
        import sys
        from llama_index_ext_recursive import RecursiveSummaryRetriever
        retriever = RecursiveSummaryRetriever.from_persist_dir({str(tmp_path / "index")!r}, similarity_top_k=1)
        hits = retriever.retrieve("what do bees collect?")
        print(hits[0].node.metadata["title"])
        print(sorted(m for m in ("torch", "transformers", "sentence_transformers") if m in sys.modules))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=dict(os.environ), check=True
    ).stdout.splitlines()
    assert out == ["Bees", "[]"]
