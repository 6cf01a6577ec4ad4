"""Cases every storage of a recursive index answers alike (the default, columnar stores, PostgreSQL
level stores): documents of five topics (one Chinese), queries and filters, the score modes, and the
answers compared."""

import hashlib

import numpy as np
import pytest
from conftest import LexicalEmbedding
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.schema import Document

from llama_index_ext_recursive import FilteredQueryBundle

MODES = [
    {},
    {"score_mode": "chunk"},
    {"score_mode": "weighted", "summary_mode": "vector", "chunk_mode": "vector"},
    {"score_mode": "product", "summary_mode": "bm25", "chunk_mode": "bm25"},
]
TOPIC_WORDS = {
    "law": "contract termination notice breach party clause liability indemnity court",
    "bees": "queen hive nectar pollen drone worker honey swarm flower",
    "solar": "panel inverter sunlight photovoltaic current battery roof grid",
    "bread": "sourdough starter flour yeast dough oven crust proofing",
    "合同": "合同 终止 通知 违约 当事人 条款 责任 赔偿 法院",
}
QUERIES = [
    "termination notice of the contract",
    "queen bee hive",
    "inverter current from the panel",
    "sourdough starter yeast",
    "合同终止通知",
    "battery grid breach",
]
FILTERS = [None, {"category": "bees"}, {"year": {"op": ">=", "value": 2021}}]


def make_documents(count=20, seed=0, prefix="d"):
    rng = np.random.default_rng(seed)
    topics = list(TOPIC_WORDS)
    documents = []
    for i in range(count):
        topic = topics[i % len(topics)]
        words = TOPIC_WORDS[topic].split()
        joiner = "" if topic == "合同" else " "
        paragraphs = [
            joiner.join(rng.choice(words, size=int(rng.integers(8, 16)))) + ("。" if joiner == "" else ".")
            for _ in range(int(rng.integers(3, 6)))
        ]
        documents.append(
            Document(
                text="\n\n".join(paragraphs),
                metadata={"doc_id": f"{prefix}{i}", "category": topic, "year": 2018 + i % 6},
            )
        )
    return documents


class NoTieEmbedding(LexicalEmbedding):
    """The lexical test embedding plus a little text-seeded noise, so no two similarities are
    exactly equal: among exact ties the stores differ by design (NumpyVectorStore replays
    upstream's heap; the columnar store takes the earlier row), and real models give none."""

    def _vector(self, text):
        base = np.asarray(super()._vector(text))
        rng = np.random.default_rng(int(hashlib.md5(text.encode()).hexdigest()[:8], 16))
        vector = base + 0.05 * rng.random(len(base))
        return list(vector / np.linalg.norm(vector))


def chunk_parser():
    # chunk ids from the document id and position: ties are broken by id, so both builds must share them
    return SentenceSplitter(chunk_size=64, chunk_overlap=0, id_func=lambda i, doc: f"{doc.id_}-{i}")


def recursive_answers(retriever):
    out = []
    for query in QUERIES:
        for filters in FILTERS:
            hits = retriever.retrieve(FilteredQueryBundle(query, filters=filters))
            out.append([(h.node.node_id, h.score, h.node.text) for h in hits])
        documents = retriever.retrieve_documents(query)
        out.append([(d.node.index_id, d.score) for d in documents])
    return out


async def async_recursive_answers(retriever):
    out = []
    for query in QUERIES:
        for filters in FILTERS:
            hits = await retriever.aretrieve(FilteredQueryBundle(query, filters=filters))
            out.append([(h.node.node_id, h.score, h.node.text) for h in hits])
        documents = await retriever.aretrieve_documents(query)
        out.append([(d.node.index_id, d.score) for d in documents])
    return out


def same_answers(answers, expected):
    """The same nodes (and texts) in the same order; scores equal up to float32 rounding (the
    columnar store keeps float32 vectors, NumpyVectorStore rescores in float64)."""
    strip = [[tuple(x for i, x in enumerate(hit) if i != 1) for hit in hits] for hits in answers]
    assert strip == [[tuple(x for i, x in enumerate(hit) if i != 1) for hit in hits] for hits in expected]
    scores = [hit[1] for hits in answers for hit in hits]
    assert scores == pytest.approx([hit[1] for hits in expected for hit in hits], abs=1e-4)
    return True
