"""Synthetic corpora: text and vectors made from a seed, one document at a time.

Scale and latency benchmarks need corpora of any size whose content does not
matter but whose shape does (how many words a chunk has, how skewed the word
frequencies are, how close a chunk's vector is to its document's). Real data
stops at a few thousand chunks; these do not. Every generator here is a pure
function of its arguments: the same call yields the same nodes, so a figure can
be reproduced and two versions of the package measured on the same corpus.
Generators yield as they go, so a benchmark that streams them into an index
holds the corpus once, in the index.

Kinds of corpus:

- :func:`word_nodes`: chunks of uniformly drawn words with random unit vectors
  (persist and store timings, where only the sizes matter);
- :func:`zipf_documents`: documents of paragraphs whose words follow a Zipf-like
  law, so BM25 postings are as uneven as in real text (update timings);
- :class:`TopicCorpus`: documents as topics: chunk vectors near their
  document's topic vector, chunk words from the document's own vocabulary, so
  routing to a document and finding a chunk both have a right answer;
- :func:`large_text`: one long document of a given kind (prose, code, ...), for
  the memory and time of building over a single large input.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from llama_index.core import Document
from llama_index.core.schema import TextNode

from harness import REPO

SAMPLE_CORPUS = REPO / "llama_index_ext_recursive" / "sample_data" / "corpus.jsonl"


# ------------------------------------------------------------------ pieces
def vocabulary(size: int, prefix: str = "w", width: int = 0) -> list[str]:
    """``size`` distinct pseudo-words, ``prefix`` + a number (zero-padded to ``width``)."""
    return [f"{prefix}{i:0{width}d}" for i in range(size)]


def zipf_weights(size: int) -> np.ndarray:
    """Probabilities proportional to 1/rank: word frequencies as in natural text."""
    weights = 1.0 / np.arange(1, size + 1)
    return weights / weights.sum()


def unit(vector: np.ndarray) -> np.ndarray:
    """``vector`` scaled to length 1 (a zero vector is returned as is)."""
    norm = np.linalg.norm(vector)
    return vector / (norm if norm else 1.0)


def unit_rows(matrix: np.ndarray) -> np.ndarray:
    """Every row of ``matrix`` scaled to length 1."""
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


def random_unit_vectors(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    """``n`` directions drawn uniformly on the unit sphere (normal, then normalised).

    Uniform directions have no neighbourhood structure (the best cosine of a
    random query is about 0.2): the worst case for approximate indexes, and for
    exact search a cost that depends on the sizes alone.
    """
    return unit_rows(rng.standard_normal((n, dim)))


# ------------------------------------------------------------------ corpora
def word_nodes(
    docs: int, chunks: int, *, vocabulary: Sequence[str], words: int = 12, dim: int = 384, seed: int = 0
) -> Iterator[TextNode]:
    """``docs`` x ``chunks`` chunks of ``words`` uniformly drawn words and a random unit vector.

    Ids are ``doc{d:04d}-{c:02d}``; metadata ``doc_id`` and ``year``
    (``2000 + d % 25``), so the chunks can be grouped into documents and filtered.
    """
    rng = np.random.default_rng(seed)
    for d in range(docs):
        for c in range(chunks):
            vector = rng.normal(size=dim)
            text = " ".join(rng.choice(vocabulary, size=words)) + "."
            yield TextNode(
                id_=f"doc{d:04d}-{c:02d}",
                text=text,
                embedding=(vector / np.linalg.norm(vector)).tolist(),
                metadata={"doc_id": f"doc{d:04d}", "year": 2000 + d % 25},
            )


def zipf_documents(
    count: int,
    paragraphs: int,
    *,
    start: int = 0,
    seed: int = 0,
    words: int = 120,
    vocabulary_size: int = 20_000,
) -> Iterator[Document]:
    """Documents ``doc-{start}`` ... of ``paragraphs`` paragraphs of ``words`` Zipf-drawn words.

    The words are ``term0`` ... ``term{vocabulary_size - 1}``, ``term0`` the most
    frequent; paragraphs are separated by a blank line, so the splitter keeps
    them apart (120 words: about one and a half chunks each).
    """
    rng = np.random.default_rng(seed)
    terms = vocabulary(vocabulary_size, "term")
    weights = zipf_weights(vocabulary_size)
    for i in range(start, start + count):
        text = "\n\n".join(" ".join(rng.choice(terms, size=words, p=weights)) + "." for _ in range(paragraphs))
        yield Document(text=text, doc_id=f"doc-{i}", metadata={"title": f"Document {i}"})


@dataclass
class TopicDocument:
    """One document of a :class:`TopicCorpus`: its topic, its word indices, its chunks."""

    doc_id: str
    topic: np.ndarray
    vocabulary: np.ndarray
    chunks: list[TextNode]


class TopicCorpus:
    """Documents as topics, with vectors assigned up front (no model embeds anything).

    Each of ``docs`` documents has a random unit topic vector and its own
    vocabulary of ``doc_vocabulary`` words drawn from a pool of
    ``vocabulary_size``; each of its ``chunks`` chunks has the vector
    ``unit(topic + noise * unit_noise)`` and ``sentences`` sentences of
    ``words`` words from the document's vocabulary. Chunk ids are
    ``doc{d:05d}-c{c:03d}``, metadata ``doc_id`` (kept out of the embedded text).

    Each document is drawn from its own generator (seeded by ``seed`` and its
    number), so a corpus of any size streams: nothing is held for the
    documents not being drawn, and :meth:`document` draws any one alone,
    identically on every pass.
    """

    def __init__(
        self,
        docs: int,
        chunks: int,
        dim: int = 384,
        seed: int = 0,
        noise: float = 0.5,
        vocabulary_size: int = 5000,
        doc_vocabulary: int = 200,
        sentences: int = 3,
        words: int = 8,
    ) -> None:
        self.docs, self.chunks, self.dim, self.seed, self.noise = docs, chunks, dim, seed, noise
        self.vocabulary_size, self.doc_vocabulary = vocabulary_size, doc_vocabulary
        self.sentences, self.words = sentences, words
        self.pool = vocabulary(vocabulary_size, "w", 4)

    def doc_id(self, d: int) -> str:
        return f"doc{d:05d}"

    @property
    def doc_ids(self) -> list[str]:
        return [self.doc_id(d) for d in range(self.docs)]

    def topic(self, d: int) -> np.ndarray:
        """Document ``d``'s unit topic vector (the first draw of its generator)."""
        return unit(np.random.default_rng([self.seed, d]).standard_normal(self.dim))

    def _draw(self, d: int) -> tuple[np.random.Generator, np.ndarray, np.ndarray, np.ndarray]:
        """Document ``d``'s generator and first draws: topic, vocabulary, chunk vectors (the
        generator goes on to draw the text)."""
        rng = np.random.default_rng([self.seed, d])
        topic = unit(rng.standard_normal(self.dim))
        own = rng.choice(self.vocabulary_size, size=self.doc_vocabulary, replace=False)
        vectors = unit_rows(topic + self.noise * unit_rows(rng.standard_normal((self.chunks, self.dim))))
        return rng, topic, own, vectors

    def chunk_vectors(self, d: int) -> np.ndarray:
        """Document ``d``'s chunk vectors ``[chunks, dim]``, as :meth:`document` gives them, without
        drawing the text (a vectors-only benchmark streams 2M rows in seconds)."""
        return self._draw(d)[3]

    def document(self, d: int) -> TopicDocument:
        """Document ``d``, drawn from its own generator."""
        rng, topic, own, vectors = self._draw(d)
        doc_id = self.doc_id(d)
        chunks = []
        for c in range(self.chunks):
            text = " ".join(
                " ".join(self.pool[w] for w in rng.choice(own, size=self.words)).capitalize() + "."
                for _ in range(self.sentences)
            )
            chunks.append(
                TextNode(
                    id_=f"{doc_id}-c{c:03d}",
                    text=text,
                    metadata={"doc_id": doc_id},
                    excluded_embed_metadata_keys=["doc_id"],
                    embedding=vectors[c].tolist(),
                )
            )
        return TopicDocument(doc_id, topic, own, chunks)

    def documents(self) -> Iterator[TopicDocument]:
        """The documents in order, each drawn as it is asked for."""
        for d in range(self.docs):
            yield self.document(d)

    def nodes(self) -> Iterator[TextNode]:
        """Every chunk, document after document."""
        for document in self.documents():
            yield from document.chunks

    def document_queries(self, n: int, noise: float) -> tuple[list[list[float]], list[int]]:
        """``n`` query vectors ``unit(topic + noise * unit_noise)`` and the index of each one's document."""
        rng = np.random.default_rng(self.seed + 1)
        targets = rng.integers(0, self.docs, size=n)
        vectors = [unit(self.topic(t) + noise * unit(rng.standard_normal(self.dim))).tolist() for t in targets]
        return vectors, [int(t) for t in targets]

    def chunk_queries(
        self, nodes: Sequence[TextNode], vocabularies: Sequence[np.ndarray], n: int, noise: float
    ) -> list[tuple[str, list[float], str, str]]:
        """``n`` queries aimed at one chunk each: (text, vector, chunk id, document id).

        The vector is ``unit(chunk + noise * unit_noise)``; the text is 6 words of
        the chunk and 2 of its document's vocabulary, so BM25 has something to
        find, as real questions reuse their passage's words. ``nodes`` are this
        corpus's chunks in order, ``vocabularies`` its documents' word indices.
        """
        rng = np.random.default_rng(self.seed + 1)
        return [
            self._query_for(nodes[int(row)], vocabularies[int(row) // self.chunks], rng, noise)
            for row in rng.integers(0, len(nodes), size=n)
        ]

    def sampled_chunk_queries(self, n: int, noise: float) -> list[tuple[str, list[float], str, str]]:
        """:meth:`chunk_queries` without the corpus in memory: each query's document is drawn
        alone (:meth:`document`), so a 2M-chunk corpus is never held."""
        rng = np.random.default_rng(self.seed + 1)
        out = []
        for row in rng.integers(0, self.docs * self.chunks, size=n):
            document = self.document(int(row) // self.chunks)
            out.append(self._query_for(document.chunks[int(row) % self.chunks], document.vocabulary, rng, noise))
        return out

    def _query_for(
        self, node: TextNode, vocabulary: np.ndarray, rng: np.random.Generator, noise: float
    ) -> tuple[str, list[float], str, str]:
        picked = list(rng.choice(node.text.replace(".", "").lower().split(), size=6, replace=False))
        picked += [self.pool[w] for w in rng.choice(vocabulary, size=2)]
        vector = unit(np.asarray(node.embedding) + noise * unit(rng.standard_normal(self.dim)))
        return " ".join(picked), vector.tolist(), node.node_id, node.metadata["doc_id"]


# ------------------------------------------------------------ large documents
LARGE_KINDS = ("prose", "oneline", "code", "terse", "words")


@lru_cache(maxsize=1)
def sample_sentences() -> tuple[str, ...]:
    """The English sentences of the package's bundled sample corpus (headings left out)."""
    sentences: list[str] = []
    for line in SAMPLE_CORPUS.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        if row["doc_id"].startswith("zh-"):
            continue
        for paragraph in row["text"].split("\n"):
            if paragraph.strip() and not paragraph.startswith("#"):
                sentences.extend(s for s in re.split(r"(?<=[.!?])\s+", paragraph.strip()) if s)
    return tuple(sentences)


def large_text(kind: str, size: int) -> str:
    """One document of ``size`` characters (ASCII, so bytes too) of a kind in :data:`LARGE_KINDS`.

    - ``prose``: the sample sentences shuffled (``random.Random(0)``) into
      paragraphs of 4-8 sentences, separated by a blank line;
    - ``oneline``: the same on a single line;
    - ``code``: a generated Python module (functions, attributes, numbers, comments);
    - ``terse``: one line of 2-6 word sentences over the sample vocabulary
      (dense sentence ends);
    - ``words``: sentences of 5-20 pseudo-words from a vocabulary of 200,000 (a
      vocabulary far larger than real text's).
    """
    if kind not in LARGE_KINDS:
        raise ValueError(f"kind {kind!r} is not one of {LARGE_KINDS}")
    rng = random.Random(0)
    if kind == "code":
        return _code(rng, size)
    if kind == "words":
        letters = "etaoinshrdlcumwfgypbvkjxqz"
        pool = ["".join(rng.choices(letters, k=rng.randint(3, 10))) for _ in range(200_000)]
        paragraphs: list[str] = []
        total = 0
        while total < size:
            paragraphs.append(
                " ".join(
                    " ".join(rng.choices(pool, k=rng.randint(5, 20))).capitalize() + "."
                    for _ in range(rng.randint(4, 8))
                )
            )
            total += len(paragraphs[-1]) + 2
        return "\n\n".join(paragraphs)[:size]
    if kind == "terse":
        pool = sorted({w.lower() for s in sample_sentences() for w in re.findall(r"[A-Za-z]+", s)})
        parts: list[str] = []
        total = 0
        while total < size:
            parts.append(" ".join(rng.choices(pool, k=rng.randint(2, 6))).capitalize() + ".")
            total += len(parts[-1]) + 1
        return " ".join(parts)[:size]
    sentences = list(sample_sentences())
    parts = []
    total = 0
    while total < size:
        rng.shuffle(sentences)
        for start in range(0, len(sentences), 6):
            parts.append(" ".join(sentences[start : start + rng.randint(4, 8)]))
            total += len(parts[-1]) + 2
            if total >= size:
                break
    return (" " if kind == "oneline" else "\n\n").join(parts)[:size]


def _code(rng: random.Random, size: int) -> str:
    verbs = "load parse compute render fetch store merge split check format update build".split()
    nouns = "user order item record invoice token session cache queue report batch node".split()
    parts: list[str] = []
    total = i = 0
    while total < size:
        verb, noun, other = rng.choice(verbs), rng.choice(nouns), rng.choice(nouns)
        block = (
            f"def {verb}_{noun}_{i}(request, limit={rng.randint(1, 500)}):\n"
            f'    """{verb.capitalize()} the {noun} of a request (see {other}.{rng.choice(verbs)})."""\n'
            f'    {noun}s = request.{other}_{rng.randint(0, 999)}.get("{noun}", [])\n'
            f"    total = sum(x.value * {rng.random():.3f} for x in {noun}s[:limit])\n"
            f"    if total > {rng.randint(0, 10_000)}:  # {rng.choice(verbs)} before {rng.choice(verbs)}\n"
            f"        return {rng.choice(verbs)}_{other}(total, retries={rng.randint(0, 9)})\n"
            f"    return None\n\n\n"
        )
        parts.append(block)
        total += len(block)
        i += 1
    return "".join(parts)[:size]
