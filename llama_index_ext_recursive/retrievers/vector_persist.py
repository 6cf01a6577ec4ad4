"""Saving a :class:`~llama_index_ext_recursive.retrievers.vector.BackfillVectorRetriever`.

The settings follow :mod:`llama_index_ext_recursive.config` (``to_dict()``:
``{"type": ..., "init_parameters": {...}}``, plus an ``index`` entry naming
the index id, the vector store's class and the embedding model); ``persist``
writes them as ``config.json`` beside upstream's own ``StorageContext``
files (docstore, index store, vector store), so the folder is also loadable
with ``load_index_from_storage``. Only stores that live in those files can be
saved this way (``SimpleVectorStore``, ``NumpyVectorStore``, FAISS); a
database-backed store (PostgreSQL, Chroma, ...) keeps its own data: build the
retriever again with ``BackfillVectorRetriever.from_vector_store``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Optional, Type, Union

from llama_index.core import StorageContext, load_index_from_storage
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.vector_stores import SimpleVectorStore
from llama_index.core.vector_stores.types import BasePydanticVectorStore, MetadataFilters

from llama_index_ext_recursive.config import component_to_dict, init_parameters, read_config, type_name, write_config
from llama_index_ext_recursive.model_identity import ModelIdentity, ModelMismatchError, check_same_model, model_identity
from llama_index_ext_recursive.models import embed_model_name, resolve_embed_model
from llama_index_ext_recursive.persist import PersistError, read_index, write_index

if TYPE_CHECKING:
    from llama_index.core import VectorStoreIndex

    from llama_index_ext_recursive.retrievers.vector import BackfillVectorRetriever

logger = logging.getLogger(__name__)

PERSIST_KIND = "BackfillVectorRetriever"  # names the index kind in its folder's manifest


def _store_kinds() -> Dict[str, Type[BasePydanticVectorStore]]:
    """The vector stores whose data ``StorageContext.persist`` writes into the folder."""
    from llama_index_ext_recursive.stores.numpy_store import NumpyVectorStore

    kinds: list = [SimpleVectorStore, NumpyVectorStore]
    try:
        from llama_index.vector_stores.faiss import FaissMapVectorStore, FaissVectorStore

        kinds += [FaissVectorStore, FaissMapVectorStore]
    except ImportError:
        pass
    return {type_name(kind): kind for kind in kinds}


def vector_to_dict(retriever: "BackfillVectorRetriever") -> Dict[str, Any]:
    """:meth:`BackfillVectorRetriever.to_dict`."""
    filters = retriever._filters
    data = component_to_dict(
        retriever,
        similarity_top_k=retriever._similarity_top_k,
        filters=filters.model_dump(mode="json") if filters is not None else None,
        filter_policy=retriever.filter_policy.value,
        stale_policy=retriever.stale_policy.value,
        filter_in_store=retriever.filter_in_store,
        unknown_filter_key=(
            retriever.unknown_filter_key.value if retriever.unknown_filter_key is not None else None
        ),
        vector_store_query_mode=retriever._vector_store_query_mode.value,
        alpha=retriever._alpha,
        sparse_top_k=retriever._sparse_top_k,
        hybrid_top_k=retriever._hybrid_top_k,
    )
    data["index"] = {
        "index_id": retriever._index.index_id,
        "vector_store": type_name(type(retriever._vector_store)),
        "embed_model": embed_model_name(retriever._embed_model),
        "embed_model_identity": model_identity(retriever._embed_model).to_dict(),
    }
    return data


def vector_from_dict(
    cls: Type["BackfillVectorRetriever"],
    data: Dict[str, Any],
    index: "VectorStoreIndex",
    overrides: Dict[str, Any],
) -> "BackfillVectorRetriever":
    """:meth:`BackfillVectorRetriever.from_dict`."""
    parameters = init_parameters(cls, data)
    if parameters.get("filters") is not None:
        parameters["filters"] = MetadataFilters.model_validate(parameters["filters"])
    parameters.update(overrides)
    return cls(index, **parameters)


def persist_vector(retriever: "BackfillVectorRetriever", persist_dir: Union[str, Path]) -> None:
    """:meth:`BackfillVectorRetriever.persist`."""
    check_persistable(retriever)
    with write_index(persist_dir, PERSIST_KIND) as staging:
        write_files(retriever, staging)


def check_persistable(retriever: "BackfillVectorRetriever") -> None:
    """Refuse, before anything is written, a store whose data is not in the folder."""
    store = retriever._vector_store
    if type_name(type(store)) not in _store_kinds():
        raise TypeError(
            f"{type(store).__name__} keeps its data itself, so a BackfillVectorRetriever over it "
            "is not persisted; build it again with BackfillVectorRetriever.from_vector_store "
            f"(persistable stores: {sorted(k.__name__ for k in _store_kinds().values())})"
        )


def write_files(retriever: "BackfillVectorRetriever", folder: Path) -> None:
    """Write the index (upstream's ``StorageContext`` files) and ``config.json`` into ``folder``."""
    check_persistable(retriever)
    retriever._index.storage_context.persist(persist_dir=str(folder))
    write_config(folder, vector_to_dict(retriever))


def load_vector(
    cls: Type["BackfillVectorRetriever"],
    persist_dir: Union[str, Path],
    embed_model: Optional[BaseEmbedding],
    overrides: Dict[str, Any],
) -> "BackfillVectorRetriever":
    """:meth:`BackfillVectorRetriever.from_persist_dir`."""
    return read_index(
        persist_dir, PERSIST_KIND, lambda folder: read_files(cls, folder, embed_model, overrides)
    )


def read_files(
    cls: Type["BackfillVectorRetriever"],
    folder: Path,
    embed_model: Optional[BaseEmbedding],
    overrides: Dict[str, Any],
) -> "BackfillVectorRetriever":
    """Load what :func:`write_files` wrote into ``folder``."""
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
        index = load_index_from_storage(
            storage, index_id=index_info.get("index_id"), embed_model=model
        )
    except (OSError, ValueError, KeyError) as exc:
        raise PersistError(f"{folder}: the index files cannot be loaded ({exc})") from exc
    from llama_index.core import VectorStoreIndex

    if not isinstance(index, VectorStoreIndex):  # index_store.json names another kind of index
        raise PersistError(f"{folder}: the index files hold a {type(index).__name__}, not a vector index; "
                           "the folder is damaged")
    try:
        return cls.from_dict(data, index, **overrides)
    except (TypeError, ValueError) as exc:
        raise PersistError(f"{folder / 'config.json'} holds invalid settings ({exc})") from exc
