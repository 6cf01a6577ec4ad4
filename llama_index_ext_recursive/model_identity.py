"""What an embedding model *is*, beyond its name: class, name, dimension and what it answers.

A name alone confuses models: two custom models without a ``model_name`` are
both ``"unknown"``, a fine-tuned copy keeps its base model's name, and a model
of another dimension can carry the same one. Vectors of one model served for
another change every result without an error. :func:`model_identity` adds
what the model answers for a few fixed probe strings, computed once per model
instance, so that

* the embedding cache keys vectors by :meth:`ModelIdentity.cache_key` (never
  by name alone) and knows the dimension before it uses a cached vector, and
* a persisted index keeps :meth:`ModelIdentity.to_dict` and every retriever
  refuses to load with a model whose answers differ
  (:func:`check_same_model`), whatever its name.

Probe vectors are compared with a tolerance, not hashed: the same model gives
slightly different floats across machines and thread counts, and an index must
not be refused for that.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding

from llama_index_ext_recursive.errors import LlamaIndexExtRecursiveError
from llama_index_ext_recursive.models import embed_model_name

logger = logging.getLogger(__name__)

PROBES = (
    "The quick brown fox jumps over the lazy dog.",
    "Photosynthesis converts light into chemical energy.",
    "合同的终止条款",
)
# components kept per probe: enough to tell models apart, small in a config file
PROBE_COMPONENTS = 32
# largest difference of a probe component between two runs of one model
# (float noise across machines and thread counts is ~1e-6)
PROBE_TOLERANCE = 1e-3
_lock = threading.Lock()
# by id(model); an entry leaves with its model (pydantic models are not hashable,
# so no WeakKeyDictionary)
_identities: dict[int, ModelIdentity] = {}


class ModelMismatchError(LlamaIndexExtRecursiveError, ValueError):
    """An index or cache is used with another embedding model than the one that made its vectors."""


@dataclass(frozen=True)
class ModelIdentity:
    """An embedding model's class, name, dimension and probe answers.

    Attributes:
        name: :func:`~llama_index_ext_recursive.models.embed_model_name`.
        cls: the model's class, ``module.QualName``.
        dim: its vector dimension (``None``: the model could not embed the probes).
        probes: the first :data:`PROBE_COMPONENTS` components of its vectors for
            :data:`PROBES` as texts and the first of them as a query (empty: it
            could not embed them).
    """

    name: str
    cls: str
    dim: int | None
    probes: tuple[tuple[float, ...], ...]

    def cache_key(self) -> str:
        """A key that two different models do not share (probe answers rounded to 2 decimals)."""
        rounded = np.round(np.asarray(self.probes, dtype=np.float64), 2) + 0.0  # -0.0 -> 0.0
        digest = hashlib.sha256(rounded.tobytes()).hexdigest()[:16]
        return f"{self.cls}\x00{self.name}\x00{self.dim}\x00{digest}"

    def same_model(self, other: ModelIdentity) -> bool:
        """Same dimension and the same probe answers (within :data:`PROBE_TOLERANCE`).

        Without probe answers on either side (a model that cannot embed them,
        an index saved before identities were kept) the names decide.
        """
        if not self.probes or not other.probes:
            return self.name == other.name and (self.dim is None or other.dim is None or self.dim == other.dim)
        if self.dim != other.dim or len(self.probes) != len(other.probes):
            return False
        a, b = np.asarray(self.probes), np.asarray(other.probes)
        return a.shape == b.shape and bool(np.max(np.abs(a - b)) <= PROBE_TOLERANCE)

    @property
    def embeds_queries_as_texts(self) -> bool:
        """Whether the model answered the first probe as a query exactly as it did as a text
        (no query prompt, one tower): its queries can then be embedded in batches through its
        text API, one request per batch rather than one per query."""
        if len(self.probes) != len(PROBES) + 1:
            return False
        text, query = np.asarray(self.probes[0]), np.asarray(self.probes[-1])
        return text.shape == query.shape and bool(np.max(np.abs(text - query)) <= PROBE_TOLERANCE)

    def describe(self) -> str:
        return f"{self.name!r} ({self.cls}, {self.dim}-dimensional)"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "class": self.cls, "dim": self.dim, "probes": [list(p) for p in self.probes]}

    @classmethod
    def from_dict(cls, data: Any, name: str | None = None) -> ModelIdentity:
        """Read :meth:`to_dict`; an older index kept only the model's ``name``."""
        if not isinstance(data, dict):
            return cls(name=str(name), cls="", dim=None, probes=())
        probes = data.get("probes") or []
        return cls(
            name=str(data.get("name", name)),
            cls=str(data.get("class", "")),
            dim=int(data["dim"]) if isinstance(data.get("dim"), int) else None,
            probes=tuple(tuple(float(x) for x in p) for p in probes if isinstance(p, list)),
        )


def model_identity(model: BaseEmbedding) -> ModelIdentity:
    """The identity of ``model``, computed once per instance (one batch of three short texts).

    A wrapper that names its inner model (``CachedEmbedding.model``) is identified
    by the inner model. A model that fails on the probes is identified by class,
    name and nothing else, with a warning: its vectors cannot be told apart from
    another model's of the same name.
    """
    inner = getattr(model, "model", None)
    if isinstance(inner, BaseEmbedding):
        return model_identity(inner)
    with _lock:
        found = _identities.get(id(model))
    if found is not None:
        return found
    probes: tuple[tuple[float, ...], ...] = ()
    dim: int | None = None
    try:
        # a query too: models that embed queries differently (prefixes, asymmetric towers) differ there
        vectors: list[list[float]] = model.get_text_embedding_batch(list(PROBES))
        vectors.append(model.get_query_embedding(PROBES[0]))
        array = np.asarray(vectors, dtype=np.float64)
        if array.ndim == 2 and array.shape[0] == len(PROBES) + 1 and np.isfinite(array).all():
            dim = int(array.shape[1])
            probes = tuple(tuple(round(float(x), 6) for x in row[:PROBE_COMPONENTS]) for row in array)
    except Exception as exc:  # a user's model: whatever it raises, it is identified by name
        logger.warning(
            "embedding model %r could not embed the identity probes (%s); it is told apart from "
            "other models by class and name only",
            embed_model_name(model),
            exc,
        )
    identity = ModelIdentity(
        name=embed_model_name(model),
        cls=f"{type(model).__module__}.{type(model).__qualname__}",
        dim=dim,
        probes=probes,
    )
    with _lock:
        _identities[id(model)] = identity
    weakref.finalize(model, _identities.pop, id(model), None)
    return identity


def check_same_model(saved: ModelIdentity, model: BaseEmbedding, where: str) -> None:
    """Refuse ``model`` for vectors that ``saved`` made.

    Raises:
        ModelMismatchError: naming both models and the fix.
    """
    current = model_identity(model)
    if saved.same_model(current):
        if saved.name != current.name:
            logger.info("%s: model %r answers as %r, which built it", where, current.name, saved.name)
        return
    raise ModelMismatchError(
        f"{where} was built with embedding model {saved.describe()} but {current.describe()} is "
        "configured, and its vectors differ; pass embed_model= with the model it was built with, "
        "or rebuild the index with this model"
    )
