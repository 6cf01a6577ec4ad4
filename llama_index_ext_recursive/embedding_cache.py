"""An embedding cache keyed by model and text hash, persisted in SQLite.

Why: the bundled multilingual model indexes 3-21 passages a second here, so
rebuilding an unchanged folder, adding a document again or re-running an
evaluation would spend minutes embedding what was embedded before. Wrap a
model once (the index builders do it for ``embedding_cache=``) and each text
is embedded at most once per model and role, across indexes, builds and runs.

Upstream's ``BaseEmbedding.embeddings_cache`` is not used: it keys by the
text alone, so a query and a passage (E5's ``query:``/``passage:`` roles), or
two models, would share one vector.

The cache file may live in the user's cache folder, next to anything, so it
never touches a file it cannot recognise: an existing path must be empty or a
SQLite database holding our ``embeddings`` table, else
:class:`EmbeddingCacheError` (the file is left as it was). A cache that fails
later (corrupt, locked by another process past the timeout, disk full) is
logged once and dropped: texts are then embedded as without a cache. A stored
vector is used only when it decodes to finite numbers of the model's
dimension; otherwise the text is embedded again.
"""

from __future__ import annotations

import hashlib
import logging
import os
import sqlite3
import threading
from pathlib import Path

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import Field, PrivateAttr

from llama_index_ext_recursive.async_embedding import ThreadedAsyncEmbedding
from llama_index_ext_recursive.errors import LlamaIndexExtRecursiveError
from llama_index_ext_recursive.model_identity import ModelMismatchError, model_identity
from llama_index_ext_recursive.models import embed_model_name
from llama_index_ext_recursive.persist import app_cache_dir
from llama_index_ext_recursive.query_embeddings import embed_queries

logger = logging.getLogger(__name__)

CACHE_FILE = "embeddings.sqlite"
_TABLE = "embeddings"
_COLUMNS = ["key", "vector"]
_SQLITE_HEADER = b"SQLite format 3\x00"
_LOCK_TIMEOUT_SECONDS = 10.0  # another process writing the same cache waits this long
_LOOKUP_BATCH = 500  # keys per SELECT (SQLite's bound-variable limit is 999 in old builds)


class EmbeddingCacheError(LlamaIndexExtRecursiveError, ValueError):
    """The cache path exists and is not an embedding cache (it is left untouched)."""


def default_cache_path() -> Path:
    """Where builds cache embeddings by default: ``embeddings.sqlite`` in
    :func:`~llama_index_ext_recursive.persist.app_cache_dir` (``$XDG_CACHE_HOME``
    or ``~/.cache``, then ``llama-index-ext-recursive``)."""
    return app_cache_dir() / CACHE_FILE


def _not_ours(path: Path, what: str) -> EmbeddingCacheError:
    return EmbeddingCacheError(
        f"embedding cache {path} exists and {what}, so it is not an embedding cache; it was "
        "left untouched: pass the path of a new file, or of a cache this package wrote"
    )


def check_cache_path(path: str | Path) -> None:
    """Refuse, before any work, a cache path that exists and is not an embedding
    cache: a folder, or a file that is neither empty nor a SQLite database
    holding our table. Nothing is created or changed. A file that cannot be
    read passes: the cache then degrades to embedding, with a warning.

    Raises:
        EmbeddingCacheError: naming the path and the fix.
    """
    path = Path(path).expanduser()
    if path.is_dir():
        raise EmbeddingCacheError(f"embedding cache {path} is a folder; pass a file such as {path / CACHE_FILE}")
    try:
        if not path.exists() or path.stat().st_size == 0:
            return
        with path.open("rb") as handle:
            if handle.read(len(_SQLITE_HEADER)) != _SQLITE_HEADER:
                raise _not_ours(path, "is not a SQLite database")
        db = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True, timeout=_LOCK_TIMEOUT_SECONDS)
    except (OSError, sqlite3.Error):
        return
    try:
        _check_table(db, path)
    except sqlite3.Error:
        return
    finally:
        db.close()


def _check_table(db: sqlite3.Connection, path: Path) -> bool:
    """Whether the database holds our table (raising if it holds another of that name)."""
    columns = [row[1] for row in db.execute(f"PRAGMA table_info({_TABLE})")]
    if columns and columns != _COLUMNS:
        raise _not_ours(path, f"has an {_TABLE!r} table with columns {columns}, not {_COLUMNS}")
    if not columns and db.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()[0]:
        raise _not_ours(path, f"is a SQLite database without an {_TABLE!r} table")
    return bool(columns)


def _open(path: Path) -> sqlite3.Connection:
    """Open (or create) the cache at ``path`` (:func:`check_cache_path` first).

    Raises:
        EmbeddingCacheError: ``path`` is not an embedding cache.
        sqlite3.Error, OSError: the file cannot be read or created (the
            caller degrades to no cache).
    """
    check_cache_path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(str(path), timeout=_LOCK_TIMEOUT_SECONDS, check_same_thread=False)
    try:
        if not _check_table(db, path):  # checked again: another process may have created it since
            db.execute(f"CREATE TABLE IF NOT EXISTS {_TABLE} (key TEXT PRIMARY KEY, vector BLOB)")
            db.commit()
    except BaseException:
        db.close()
        raise
    return db


class CachedEmbedding(ThreadedAsyncEmbedding):
    """A ``BaseEmbedding`` that answers from a cache and embeds only misses.

    Entries are keyed by the sha256 of the model's identity (class, name,
    dimension and its answers to probe strings:
    :func:`~llama_index_ext_recursive.model_identity.model_identity`), the role
    (query or text) and the text, so roles and models never share a vector, even
    two models of one name. The dimension is known before any cached vector is
    used, and a stored vector of another length is never returned. Thread-safe
    (one lock around the cache); async calls run in a worker thread.

    Args:
        model: the embedding model to wrap (its name is this wrapper's name,
            so a persisted index records the inner model).
        path: SQLite file for the cache (``None``: in memory only); see
            :func:`default_cache_path`.
        cache_queries: cache query embeddings too. An evaluation asks the same
            queries every run; an index asks its users' queries, which should
            not be written to disk, so the index builders pass ``False`` for
            the cache they create. Queries not cached go to the model directly.

    Raises:
        EmbeddingCacheError: ``path`` exists and is not an embedding cache.
    """

    computed: int = Field(default=0, description="texts the wrapped model embedded (cache misses)")
    reused: int = Field(default=0, description="texts answered from the cache")
    cache_queries: bool = Field(default=True, description="whether query embeddings are cached")
    _model: BaseEmbedding = PrivateAttr()
    _path: Path | None = PrivateAttr(default=None)
    _db: sqlite3.Connection | None = PrivateAttr(default=None)
    _memory: dict[str, np.ndarray] = PrivateAttr(default_factory=dict)
    _dim: int | None = PrivateAttr(default=None)
    _identity: str = PrivateAttr()
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    def __init__(self, model: BaseEmbedding, path: str | Path | None = None, cache_queries: bool = True) -> None:
        if isinstance(model, CachedEmbedding):
            raise TypeError("model is already a CachedEmbedding; pass it as is, or wrap its inner model")
        if not isinstance(cache_queries, bool):
            raise TypeError(f"cache_queries must be True or False, got {cache_queries!r}")
        super().__init__(
            model_name=embed_model_name(model),
            embed_batch_size=model.embed_batch_size,
            cache_queries=cache_queries,
        )
        self._model = model
        identity = model_identity(model)
        self._identity = identity.cache_key()
        self._dim = identity.dim
        if path is not None:
            self._path = Path(path).expanduser()
            try:
                self._db = _open(self._path)
            except (sqlite3.Error, OSError) as exc:
                self._degrade(f"cannot be opened ({exc})")

    @classmethod
    def class_name(cls) -> str:
        return "CachedEmbedding"

    @property
    def model(self) -> BaseEmbedding:
        """The wrapped model."""
        return self._model

    @property
    def path(self) -> Path | None:
        """The cache file (``None``: in memory, or dropped after a failure)."""
        return self._path if self._db is not None else None

    def _degrade(self, problem: str) -> None:
        """Drop the file cache after a failure: embed as without it, never crash."""
        logger.warning(
            "embedding cache %s %s; embedding without it (delete the file to start a new cache)",
            self._path,
            problem,
        )
        if self._db is not None:
            try:
                self._db.close()
            except sqlite3.Error:
                pass
        self._db = None

    def _key(self, kind: str, text: str) -> str:
        return hashlib.sha256(f"{self._identity}\x00{kind}\x00{text}".encode()).hexdigest()

    def _valid(self, vector: np.ndarray) -> bool:
        """A stored vector is used only if it is the model's dimension and finite."""
        if not vector.size or (self._dim is not None and vector.size != self._dim):
            return False
        return bool(np.isfinite(vector).all())

    def _lookup(self, keys: list[str]) -> dict[str, list[float]]:
        found = {k: self._memory[k] for k in keys if k in self._memory}
        missing = [k for k in dict.fromkeys(keys) if k not in found]
        if self._db is not None:
            try:
                for start in range(0, len(missing), _LOOKUP_BATCH):
                    chunk = missing[start : start + _LOOKUP_BATCH]
                    rows = self._db.execute(
                        f"SELECT key, vector FROM {_TABLE} WHERE key IN ({','.join('?' * len(chunk))})", chunk
                    ).fetchall()
                    loaded = {
                        key: np.frombuffer(blob, dtype=np.float32)
                        for key, blob in rows
                        if isinstance(blob, bytes) and blob and len(blob) % 4 == 0
                    }
                    if self._dim is None and loaded:  # before the model answered: the usual length
                        sizes = [v.size for v in loaded.values()]
                        self._dim = max(set(sizes), key=sizes.count)
                    for key, vector in loaded.items():
                        if self._valid(vector):
                            found[key] = self._memory[key] = vector
            except sqlite3.Error as exc:
                self._degrade(f"cannot be read ({exc})")
        return {k: v.tolist() for k, v in found.items()}

    def _store(self, items: dict[str, list[float]]) -> None:
        arrays = {k: np.asarray(v, dtype=np.float32) for k, v in items.items()}
        self._memory.update(arrays)
        if self._db is None:
            return
        try:
            self._db.executemany(
                f"INSERT OR REPLACE INTO {_TABLE} VALUES (?, ?)", [(k, v.tobytes()) for k, v in arrays.items()]
            )
            self._db.commit()
        except sqlite3.Error as exc:
            self._degrade(f"cannot be written ({exc})")

    def _embed(self, kind: str, texts: list[str]) -> list[list[float]]:
        if kind == "query":
            return embed_queries(self._model, texts)  # batched, the model's query prompt kept
        # the inner model's own method: this wrapper already batches by its
        # embed_batch_size and emits the embedding events, once
        return self._model._get_text_embeddings(texts)

    def _cached(self, kind: str, texts: list[str]) -> list[list[float]]:
        with self._lock:
            keys = [self._key(kind, t) for t in texts]
            found = self._lookup(keys)
            todo = {k: t for k, t in zip(keys, texts) if k not in found}
            if todo:
                vectors = self._embed(kind, list(todo.values()))
                # stored as float32: fresh and cached answers are the same numbers
                new = {k: np.asarray(v, dtype=np.float32).tolist() for k, v in zip(todo, vectors)}
                self._dim = self._dim or (len(next(iter(new.values()))) or None)
                self._store(new)
                found.update(new)
            self.computed += len(todo)
            self.reused += len(texts) - len(todo)
            return [found[k] for k in keys]

    # queries not cached go to the model as if there were no cache
    def _get_query_embedding(self, query: str) -> list[float]:
        if not self.cache_queries:
            return self._model._get_query_embedding(query)
        return self._cached("query", [query])[0]

    def _get_query_embeddings(self, queries: list[str]) -> list[list[float]]:
        """Many queries at once (what calibration and the harness use)."""
        if not self.cache_queries:
            return self._embed("query", queries)
        return self._cached("query", queries)

    def corpus_query_embeddings(self, queries: list[str]) -> list[list[float]]:
        """Query-role vectors of texts cut from the corpus (fusion calibration's
        pseudo-queries), cached whatever ``cache_queries`` says: they are corpus
        content, not a user's queries, and a rebuild of an unchanged corpus
        asks for the same ones."""
        return self._cached("query", list(queries))

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._cached("text", [text])[0]

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return self._cached("text", texts)

    def __bool__(self) -> bool:
        # a model is always "given": without this, `embed_model or default`
        # would count the rows of the cache (a SQL query) on every retrieval
        return True

    def __len__(self) -> int:
        """Entries held: the file's rows, or those in memory without a file."""
        with self._lock:
            if self._db is not None:
                try:
                    return self._db.execute(f"SELECT COUNT(*) FROM {_TABLE}").fetchone()[0]
                except sqlite3.Error as exc:
                    self._degrade(f"cannot be read ({exc})")
            return len(self._memory)

    def close(self) -> None:
        """Close the file (the wrapper keeps answering from memory and the model)."""
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None


def as_cached(model: BaseEmbedding, cache: str | Path | CachedEmbedding | None) -> BaseEmbedding:
    """``model`` behind the index builders' ``embedding_cache=``.

    A path gets a :class:`CachedEmbedding` that does not keep queries; a
    ``CachedEmbedding`` is used as given (it must wrap a model of ``model``'s
    identity); ``None`` keeps ``model``.

    ``cache`` is checked first (:func:`check_embedding_cache`).

    Raises:
        ValueError: the cache wraps another model, or ``model`` is already cached.
    """
    if cache is None:
        return model
    if isinstance(cache, CachedEmbedding):
        if not model_identity(cache).same_model(model_identity(model)):
            raise ModelMismatchError(
                f"embedding_cache wraps {model_identity(cache).describe()} but the index is embedded "
                f"with {model_identity(model).describe()}; pass a cache path, or a CachedEmbedding of "
                "that model"
            )
        return cache
    if isinstance(model, CachedEmbedding):
        raise ValueError(
            "embed_model= is already a CachedEmbedding and embedding_cache= names another cache; pass one of them"
        )
    return CachedEmbedding(model, cache, cache_queries=False)


def check_embedding_cache(cache: str | Path | CachedEmbedding | None) -> None:
    """The builders' ``embedding_cache=`` checked before any work: a path
    (:func:`check_cache_path`), a :class:`CachedEmbedding` or ``None``.

    Raises:
        TypeError: anything else.
        EmbeddingCacheError: the path exists and is not an embedding cache.
    """
    if cache is None or isinstance(cache, CachedEmbedding):
        return
    if not isinstance(cache, (str, os.PathLike)):
        raise TypeError(f"embedding_cache must be a file path or a CachedEmbedding, got {type(cache).__name__}")
    check_cache_path(cache)
