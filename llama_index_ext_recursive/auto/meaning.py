"""Matching a phrase to a metadata value by meaning, with an embedding model, when no term names it.

The rules name values by the phrases a schema gives (values, descriptions,
``synonyms=``), by stems and by dictionary glosses (:mod:`.terms`). A user's
own words for a value ("wireless network" for ``wifi``, "release notes" for
``changelog``, "labour law" for ``employment``) are none of those. Here each
of the schema's phrases is embedded once, and a query phrase is read as the
value whose phrases it is most similar to, when it is similar enough
(:data:`MIN_SIMILARITY`) and clearly more similar to that value than to any
other (:data:`MIN_MARGIN`). Near misses are reported, never guessed.

The model is English all-MiniLM-L6-v2 by default: measured on word-level
pairs it separates meanings well (a right reading 0.55-0.90 with a margin of
0.15-0.5, wrong ones below 0.45), where the bundled multilingual-e5-small did
not (the right value of 摇滚 or 现场 within 0.01 of a wrong one). Chinese
words reach it through their English glosses. Thresholds: docs/BENCHMARKS.md,
"Auto-retrieval on a schema it has never seen (issue 30)".
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from llama_index_ext_recursive.model_identity import model_identity

logger = logging.getLogger(__name__)

# a phrase reads as a value from this cosine similarity to one of its phrases ...
MIN_SIMILARITY = 0.55
# ... and when the best other value is at least this much less similar
MIN_MARGIN = 0.15
# a reading this similar but short of the thresholds is reported as a doubt
NOTE_SIMILARITY = 0.45
# (model identity, phrase) -> vector, shared by every matcher; the least recently used go first
_vectors: OrderedDict[tuple[str, str], np.ndarray] = OrderedDict()
MAX_REMEMBERED = 20_000  # phrase vectors kept (1.5 kB each)
_vectors_lock = threading.Lock()


@dataclass(frozen=True)
class Reading:
    """What one query phrase was read as: the value's label, its similarity and the margin over
    the next value; ``accepted`` when both pass the thresholds."""

    phrase: str
    label: Hashable
    similarity: float
    margin: float

    @property
    def accepted(self) -> bool:
        return self.similarity >= MIN_SIMILARITY and self.margin >= MIN_MARGIN

    @property
    def doubtful(self) -> bool:
        return not self.accepted and self.similarity >= NOTE_SIMILARITY


class PhraseMatcher:
    """The schema's phrases, embedded once, and the value each stands for.

    Args:
        model: a LlamaIndex embedding model (its text embeddings are compared).
        phrases: ``{phrase: label}``; a label (any hashable: the rules use
            ``(key, value)``) may have several phrases, and the best of them counts.
    """

    def __init__(self, model: Any, phrases: Mapping[str, Hashable]) -> None:
        self._model = model
        self._owner = model_identity(model).cache_key()  # whose vectors: two models never share one
        self._labels = list(dict.fromkeys(phrases.values()))
        index = {label: i for i, label in enumerate(self._labels)}
        self._phrase_label = np.array([index[label] for label in phrases.values()], dtype=np.int64)
        self._matrix = self._embed(list(phrases))

    def _embed(self, texts: Sequence[str]) -> np.ndarray:
        """Unit vectors of ``texts``, each embedded once per model and process."""
        owner = self._owner
        with _vectors_lock:
            known = {t: _vectors[(owner, t)] for t in texts if (owner, t) in _vectors}
        missing = list(dict.fromkeys(t for t in texts if t not in known))
        if missing:
            computed = np.asarray(self._model.get_text_embedding_batch(missing), dtype=np.float32)
            computed /= np.clip(np.linalg.norm(computed, axis=1, keepdims=True), 1e-12, None)
            known.update(zip(missing, computed))
        with _vectors_lock:
            for text, vector in known.items():
                _vectors[(owner, text)] = vector
                _vectors.move_to_end((owner, text))
            while len(_vectors) > MAX_REMEMBERED:
                _vectors.popitem(last=False)
        return np.stack([known[t] for t in texts]) if texts else np.zeros((0, 0), np.float32)

    def read(self, phrases: Sequence[str]) -> list[Reading | None]:
        """The best reading of each phrase (``None`` with fewer than one value to read it as)."""
        if not phrases or not self._labels:
            return [None] * len(phrases)
        similarity = self._embed(phrases) @ self._matrix.T  # (phrases, schema phrases)
        best = np.full((len(phrases), len(self._labels)), -1.0, dtype=np.float32)
        for column, label in enumerate(self._phrase_label):
            best[:, label] = np.maximum(best[:, label], similarity[:, column])
        out: list[Reading | None] = []
        for row, phrase in enumerate(phrases):
            order = np.argsort(-best[row])
            first = float(best[row, order[0]])
            second = float(best[row, order[1]]) if len(order) > 1 else -1.0
            out.append(Reading(phrase, self._labels[order[0]], first, first - second))
        return out
