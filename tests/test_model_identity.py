"""An embedding model is identified by what it answers, not by its name (issue 23).

Two models without a name, a fine-tuned copy kept under a path that says
"minilm", a model of another dimension: the cache never serves one's vectors
to another, and no retriever loads an index with a model that did not build it.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
from conftest import LexicalEmbedding
from llama_index.core import Document, StorageContext, VectorStoreIndex
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import TextNode

from llama_index_ext_recursive import (
    BackfillVectorRetriever,
    CachedEmbedding,
    HybridFusionRetriever,
    NumpyVectorStore,
    RecursiveSummaryRetriever,
)
from llama_index_ext_recursive.auto.retriever import ValidatedAutoRetriever
from llama_index_ext_recursive.model_identity import PROBES, ModelMismatchError, model_identity
from llama_index_ext_recursive.models import DEFAULT_MODEL_NAME, _bundled_model_path, embed_model_name
from llama_index_ext_recursive.persist import PersistError
from llama_index_ext_recursive.sample import sample_vector_store_info


class Seeded(BaseEmbedding):
    """A custom model with no name (upstream's default "unknown"): vectors from a seed."""

    seed: int = 0
    dim: int = 16
    embedded: list[str] = []

    def _vector(self, text: str) -> list[float]:
        self.embedded.append(text)
        digest = int(hashlib.md5(f"{self.seed}:{text}".encode()).hexdigest(), 16) % 2**32
        v = np.random.default_rng(digest).normal(size=self.dim)
        return (v / np.linalg.norm(v)).tolist()

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._vector(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._vector(text)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._vector(query)


TEXTS = [f"note {i} about bees and hives" for i in range(10)] + ["bees", "hives", "solar"]


def test_two_nameless_models_never_share_cached_vectors(tmp_path):
    a, b = Seeded(seed=1, embedded=[]), Seeded(seed=2, embedded=[])
    assert a.model_name == b.model_name == "unknown"
    path = tmp_path / "cache.sqlite"
    from_a = CachedEmbedding(a, path).get_text_embedding_batch(TEXTS)
    cache_b = CachedEmbedding(b, path)
    from_b = cache_b.get_text_embedding_batch(TEXTS)
    np.testing.assert_allclose(from_b, [b._vector(t) for t in TEXTS], rtol=1e-6)
    assert not np.allclose(from_b, from_a)
    assert cache_b.reused == 0 and cache_b.computed == len(TEXTS)
    # the same model, a new instance: every vector comes from the cache
    again = CachedEmbedding(Seeded(seed=1, embedded=[]), path)
    assert again.get_text_embedding_batch(TEXTS) == from_a and again.reused == len(TEXTS)


def test_a_model_of_another_dimension_is_known_before_any_cached_vector_is_used(tmp_path):
    path = tmp_path / "cache.sqlite"
    CachedEmbedding(Seeded(seed=1, dim=16, embedded=[]), path).get_text_embedding_batch(TEXTS)
    wide = CachedEmbedding(Seeded(seed=1, dim=32, embedded=[]), path)
    assert wide._dim == 32
    assert {len(v) for v in wide.get_text_embedding_batch(TEXTS)} == {32} and wide.reused == 0


def test_a_local_path_that_says_minilm_keeps_its_own_name():
    finetuned = LexicalEmbedding(model_name="/models/all-minilm-l6-v2-finetuned-legal")
    assert embed_model_name(finetuned) == "/models/all-minilm-l6-v2-finetuned-legal"
    assert embed_model_name(LexicalEmbedding(model_name=_bundled_model_path())) == DEFAULT_MODEL_NAME


def test_the_probes_are_embedded_once_per_model_instance():
    model = Seeded(seed=3, embedded=[])
    first = model_identity(model)
    assert model_identity(model) is first and model.embedded == [*PROBES, PROBES[0]]
    assert first.dim == 16 and not first.same_model(model_identity(Seeded(seed=4, embedded=[])))


def test_a_cache_of_another_model_is_refused_by_the_builders(tmp_path):
    with pytest.raises(ModelMismatchError, match="embedding_cache wraps 'unknown' .* embedded with 'unknown'"):
        HybridFusionRetriever.from_nodes(
            [TextNode(id_="n", text="bees")],
            Seeded(seed=1, embedded=[]),
            embedding_cache=CachedEmbedding(Seeded(seed=2, embedded=[])),
        )


def _nodes() -> list[TextNode]:
    return [TextNode(id_=f"n{i}", text=t, metadata={"doc_id": f"d{i % 3}"}) for i, t in enumerate(TEXTS)]


def _backfill(model):
    storage = StorageContext.from_defaults(vector_store=NumpyVectorStore())
    return BackfillVectorRetriever(VectorStoreIndex(_nodes(), storage_context=storage, embed_model=model), 3)


def _auto(model):
    storage = StorageContext.from_defaults(vector_store=NumpyVectorStore())
    index = VectorStoreIndex(_nodes(), storage_context=storage, embed_model=model)
    return ValidatedAutoRetriever(index, sample_vector_store_info(), similarity_top_k=3)


BUILDERS = {
    "recursive": (lambda m: RecursiveSummaryRetriever.from_nodes(_nodes(), embed_model=m), RecursiveSummaryRetriever),
    "hybrid": (lambda m: HybridFusionRetriever.from_nodes(_nodes(), m), HybridFusionRetriever),
    "backfill": (_backfill, BackfillVectorRetriever),
    "auto": (_auto, ValidatedAutoRetriever),
}


@pytest.mark.parametrize("kind", sorted(BUILDERS))
def test_every_retriever_refuses_to_load_with_another_model_of_the_same_dimension(tmp_path, kind):
    build, cls = BUILDERS[kind]
    built_with = Seeded(seed=1, embedded=[])
    build(built_with).persist(tmp_path / kind)
    with pytest.raises(PersistError, match=r"built with embedding model 'unknown' .*16-dimensional.* vectors differ"):
        cls.from_persist_dir(tmp_path / kind, embed_model=Seeded(seed=2, embedded=[]))
    # another instance of the model that built it loads, and answers as before
    loaded = cls.from_persist_dir(tmp_path / kind, embed_model=Seeded(seed=1, embedded=[]))
    assert [h.node.node_id for h in loaded.retrieve("bees")] == [
        h.node.node_id for h in cls.from_persist_dir(tmp_path / kind, embed_model=built_with).retrieve("bees")
    ]


def _drop_identity(folder) -> int:
    """Make a folder look as the previous release wrote it: the model's name only."""
    dropped = 0
    for path in folder.rglob("*.json"):
        text = path.read_text(encoding="utf-8")
        if "embed_model_identity" not in text:
            continue
        data = json.loads(text)

        def strip(node):
            nonlocal dropped
            if isinstance(node, dict):
                dropped += node.pop("embed_model_identity", None) is not None
                for value in node.values():
                    strip(value)

        strip(data)
        path.write_text(json.dumps(data), encoding="utf-8")
    # and the manifest's record of each rewritten file (MANIFEST.json: size and sha256)
    manifest_path = folder / "MANIFEST.json"
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    for name, entry in manifest["files"].items():
        data = (folder / manifest["directory"] / name).read_bytes()
        entry.update(size=len(data), sha256=hashlib.sha256(data).hexdigest())
    manifest_path.write_text(json.dumps(manifest), encoding="utf-8")
    return dropped


@pytest.mark.parametrize("kind", ["recursive", "backfill"])
def test_an_index_saved_with_the_model_name_only_is_checked_by_name(tmp_path, kind):
    build, cls = BUILDERS[kind]
    build(LexicalEmbedding(model_name="lexical-test")).persist(tmp_path / kind)
    assert _drop_identity(tmp_path / kind) >= 1
    assert cls.from_persist_dir(tmp_path / kind, embed_model=LexicalEmbedding(model_name="lexical-test")).retrieve(
        "bees"
    )
    with pytest.raises(PersistError, match="built with embedding model 'lexical-test'"):
        cls.from_persist_dir(tmp_path / kind, embed_model=LexicalEmbedding(model_name="other"))


def test_a_recursive_index_over_documents_answers_the_same_after_a_reload(tmp_path, lexical):
    docs = [
        Document(text="The queen bee lays eggs.", doc_id="bees"),
        Document(text="Panels make power.", doc_id="solar"),
    ]
    built = RecursiveSummaryRetriever.from_documents(docs, embed_model=lexical)
    built.persist(tmp_path / "r")
    loaded = RecursiveSummaryRetriever.from_persist_dir(
        tmp_path / "r", embed_model=LexicalEmbedding(model_name="renamed")
    )
    assert [h.node.node_id for h in loaded.retrieve("queen")] == [h.node.node_id for h in built.retrieve("queen")]
