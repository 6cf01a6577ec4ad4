"""The files of a saved :class:`~llama_index_ext_recursive.retrievers.vector.BackfillVectorRetriever`.

The settings follow :mod:`llama_index_ext_recursive.config` (``to_dict()``:
``{"type": ..., "init_parameters": {...}}``, plus an ``index`` entry naming
the index id, the vector store's class and the embedding model); ``persist``
writes them as ``config.json`` beside upstream's own ``StorageContext``
files (docstore, index store, vector store), so the folder is also loadable
with ``load_index_from_storage``. Only stores that live in those files can be
saved this way (``SimpleVectorStore``, ``NumpyVectorStore``, FAISS); a
database-backed store (PostgreSQL, Chroma, ...) keeps its own data: build the
retriever again with ``BackfillVectorRetriever.from_vector_store``.

What is read here is upstream's: the index, its store and its model
(``VectorIndexRetriever``'s fields), and the configuration dict; the
retriever's own ``to_dict``/``persist``/``from_persist_dir`` use these
functions, so this module stands below the retriever's.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from llama_index.core import StorageContext, VectorStoreIndex, load_index_from_storage
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.indices.vector_store.retrievers import VectorIndexRetriever
from llama_index.core.vector_stores import SimpleVectorStore
from llama_index.core.vector_stores.types import BasePydanticVectorStore, MetadataFilters

from llama_index_ext_recursive.config import read_config, type_name
from llama_index_ext_recursive.model_identity import ModelIdentity, ModelMismatchError, check_same_model, model_identity
from llama_index_ext_recursive.models import embed_model_name, resolve_embed_model
from llama_index_ext_recursive.persist import PersistError

logger = logging.getLogger(__name__)

PERSIST_KIND = "BackfillVectorRetriever"  # names the index kind in its folder's manifest


def _store_kinds() -> dict[str, type[BasePydanticVectorStore]]:
    """The vector stores whose data ``StorageContext.persist`` writes into the folder."""
    from llama_index_ext_recursive.stores.numpy_store import NumpyVectorStore

    kinds: list = [SimpleVectorStore, NumpyVectorStore]
    try:
        from llama_index.vector_stores.faiss import FaissMapVectorStore, FaissVectorStore

        kinds += [FaissVectorStore, FaissMapVectorStore]
    except ImportError:
        pass
    return {type_name(kind): kind for kind in kinds}


def settings_from_config(parameters: dict[str, Any]) -> dict[str, Any]:
    """Constructor arguments from :meth:`BackfillVectorRetriever.to_dict`'s init parameters."""
    if parameters.get("filters") is not None:
        parameters["filters"] = MetadataFilters.model_validate(parameters["filters"])
    return parameters


def index_entry(retriever: VectorIndexRetriever) -> dict[str, Any]:
    """The configuration's ``index`` entry: the index id, the vector store's class
    and the embedding model (name and identity) the retriever searches with."""
    return {
        "index_id": retriever._index.index_id,
        "vector_store": type_name(type(retriever._vector_store)),
        "embed_model": embed_model_name(retriever._embed_model),
        "embed_model_identity": model_identity(retriever._embed_model).to_dict(),
    }


def check_persistable(retriever: VectorIndexRetriever) -> None:
    """Refuse, before anything is written, a store whose data is not in the folder."""
    store = retriever._vector_store
    if type_name(type(store)) not in _store_kinds():
        raise TypeError(
            f"{type(store).__name__} keeps its data itself, so a BackfillVectorRetriever over it "
            "is not persisted; build it again with BackfillVectorRetriever.from_vector_store "
            f"(persistable stores: {sorted(k.__name__ for k in _store_kinds().values())})"
        )


def read_index_files(folder: Path, embed_model: BaseEmbedding | None) -> tuple[dict[str, Any], VectorStoreIndex]:
    """The configuration dict and the index a retriever's ``write_files`` wrote into
    ``folder``, the index loaded with ``embed_model`` (argument > ``Settings.embed_model``
    > the saved model's bundled one), which must be the saved model."""
    data = read_config(folder)
    index_info = data.get("index")
    if not isinstance(index_info, dict) or not isinstance(index_info.get("vector_store"), str):
        raise PersistError(f"{folder / 'config.json'} names no index; the folder is damaged")
    store_kind = _store_kinds().get(index_info["vector_store"])
    if store_kind is None:
        raise PersistError(
            f"{folder / 'config.json'} names the vector store {index_info['vector_store']!r}, "
            "which this installation cannot load (is its integration installed?)"
        )
    saved_model = index_info.get("embed_model")
    model = resolve_embed_model(embed_model, built_with=saved_model)
    if saved_model is not None:
        saved = ModelIdentity.from_dict(index_info.get("embed_model_identity"), saved_model)
        try:
            check_same_model(saved, model, str(folder))
        except ModelMismatchError as exc:
            raise PersistError(str(exc)) from exc
    try:
        store = store_kind.from_persist_dir(str(folder))  # type: ignore[attr-defined]
        storage = StorageContext.from_defaults(persist_dir=str(folder), vector_store=store)
        index = load_index_from_storage(storage, index_id=index_info.get("index_id"), embed_model=model)
    except (OSError, ValueError, KeyError) as exc:
        raise PersistError(f"{folder}: the index files cannot be loaded ({exc})") from exc
    if not isinstance(index, VectorStoreIndex):  # index_store.json names another kind of index
        raise PersistError(
            f"{folder}: the index files hold a {type(index).__name__}, not a vector index; the folder is damaged"
        )
    return data, index
