"""Shared fixtures: a lexical test embedding for pure logic, the real model for integration."""

from __future__ import annotations

import hashlib
import os
import re
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
from llama_index.core import Settings
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import Field
from llama_index.core.schema import TextNode

# OpenMP (torch, the multilingual engine) spins a thread per core in every process; with one test
# worker per core, each worker's threads then wait on the other's. One share of the cores per worker
# (inherited by the tests' subprocesses) took the suite from 484 s to 361 s on 2 cores.
if "PYTEST_XDIST_WORKER_COUNT" in os.environ:
    _share = (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, _share)))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
_CACHE = tempfile.mkdtemp(prefix="llama-recursive-tests-")
os.environ.setdefault("HF_HOME", os.path.join(_CACHE, "hf"))
os.environ.setdefault("LLAMA_INDEX_CACHE_DIR", os.path.join(_CACHE, "llama_index"))
os.environ.setdefault("XDG_CACHE_HOME", os.path.join(_CACHE, "xdg"))  # the CLI's embedding cache

from llama_index_ext_recursive.model_identity import PROBES  # noqa: E402

# the benchmark scripts import their shared harness as benchmarks/<script>.py sees it; tests that
# load a script (test_benchmarks, test_auto_sets) need the same
BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
if str(BENCHMARKS) not in sys.path:
    sys.path.insert(0, str(BENCHMARKS))

DIM = 64


class LexicalEmbedding(BaseEmbedding):
    """Hashed bag-of-words: texts sharing words are similar. For logic tests only."""

    calls: int = 0
    # texts through the text API (calls also counts queries): documents, and the queries of a
    # calibration, which embeds a model's queries through its text API when they are the same
    text_calls: int = 0
    embedded: list = Field(default_factory=list)  # those texts, in order

    def _vector(self, text: str) -> list[float]:
        if text not in PROBES:  # the identity probes: embedded once per model instance, by design
            self.calls += 1
        vec = np.zeros(DIM)
        for word in re.findall(r"\w+", text.lower()):
            vec[int(hashlib.md5(word.encode()).hexdigest(), 16) % DIM] += 1.0
        norm = np.linalg.norm(vec)
        return list(vec / norm) if norm else [1.0 / np.sqrt(DIM)] * DIM

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._vector(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        if text not in PROBES:
            self.text_calls += 1
            self.embedded.append(text)
        return self._vector(text)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._vector(query)


# The fast tier (`make test-fast`: `-m "not integration and not server"`) leaves out every
# test that loads a real model or starts a server. Marked here from the fixtures a test
# uses (directly or through other fixtures), so a new test is tiered by what it needs.
MODEL_FIXTURES = frozenset({"real_model", "e5", "executed_pages", "executed_notebooks"})
SERVER_FIXTURES = frozenset({"pg_server", "fault_server", "redis_server", "own_redis"})


# Fixtures that run for minutes in one go (every docs page, every notebook). Their files are
# handed to the test workers first, so the two long runs overlap with everything else instead
# of being what the suite waits for at the end.
LONG_FIXTURES = frozenset({"executed_pages", "executed_notebooks"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    long_files = set()
    for item in items:
        needs = set(getattr(item, "fixturenames", ()))
        if needs & MODEL_FIXTURES:
            item.add_marker(pytest.mark.integration)
        if needs & SERVER_FIXTURES:
            item.add_marker(pytest.mark.server)
        if needs & LONG_FIXTURES:
            long_files.add(item.path)
    items.sort(key=lambda item: item.path not in long_files)  # stable: each file keeps its order


class FixedEmbedding(BaseEmbedding):
    """Maps known texts to given vectors; anything else to ``fallback`` when given, else to a
    hashed vector of ``dim``."""

    dim: int = 16
    table: dict[str, list[float]] = {}
    fallback: list[float] | None = None

    def _vec(self, text: str) -> list[float]:
        if text in self.table:
            return self.table[text]
        if self.fallback is not None:
            return list(self.fallback)
        rng = np.random.default_rng(abs(hash(text)) % (2**32))
        v = rng.normal(size=self.dim)
        return list(v / np.linalg.norm(v))

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._vec(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._vec(text)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._vec(query)


@pytest.fixture
def lexical() -> LexicalEmbedding:
    return LexicalEmbedding(model_name="lexical-test")


@pytest.fixture(autouse=True)
def _no_global_models():
    """Tests start with nothing configured, as a fresh user does."""
    saved = (Settings._embed_model, Settings._llm)
    Settings._embed_model = None
    Settings._llm = None
    yield
    Settings._embed_model, Settings._llm = saved


@pytest.fixture(scope="session")
def real_model():
    from llama_index_ext_recursive.models import bundled_embed_model

    return bundled_embed_model()


@pytest.fixture(scope="session")
def torch_minilm():
    """The bundled weights as upstream runs them: LlamaIndex's HuggingFaceEmbedding
    (sentence-transformers on torch), what ``real_model`` must agree with."""
    from llama_index.embeddings.huggingface import HuggingFaceEmbedding

    from llama_index_ext_recursive.minilm import weights_folder

    return HuggingFaceEmbedding(model_name=str(weights_folder()), device="cpu")


TOPICS = {
    "bees": (
        "Honeybees",
        "biology",
        2019,
        [
            "The queen bee lays eggs in the hive all summer.",
            "Worker bees collect nectar and pollen from flowers.",
            "Drones mate with the queen and do not sting.",
        ],
    ),
    "solar": (
        "Solar panels",
        "energy",
        2023,
        [
            "Solar panels convert sunlight into electricity with photovoltaic cells.",
            "An inverter turns direct current from panels into alternating current.",
            "Panels facing south produce the most electricity in the north.",
        ],
    ),
    "bread": (
        "Sourdough",
        "food",
        2021,
        [
            "A sourdough starter is flour and water fermented by wild yeast.",
            "Bake the bread in a hot covered pot to trap steam.",
            "Cold proofing the dough overnight deepens the flavour.",
        ],
    ),
}


def topic_nodes(topics=TOPICS) -> list[TextNode]:
    """Three small documents as pre-chunked nodes with document metadata."""
    nodes = []
    for doc_id, (title, category, year, sentences) in topics.items():
        for i, sentence in enumerate(sentences):
            nodes.append(
                TextNode(
                    id_=f"{doc_id}-{i}",
                    text=sentence,
                    metadata={
                        "doc_id": doc_id,
                        "title": title,
                        "category": category,
                        "year": year,
                        "section": "intro" if i == 0 else "body",
                    },
                )
            )
    return nodes


pytest_plugins = [
    "pg_server",  # session fixture pg_server: PostgreSQL + pgvector (tests/pg_server.py)
    "redis_server",  # session fixture redis_server, and own_redis: Debian's redis-server (tests/redis_server.py)
]
