"""Saving a ``ValidatedAutoRetriever``: its query settings (``config.py``'s convention) and the index it searches.

The retriever's own state is its settings; what it searches is the
``VectorStoreIndex`` it was given, so ``persist`` writes both: ``config.json``
(:meth:`~ValidatedAutoRetriever.to_dict`) and ``index/`` (upstream's
``StorageContext.persist``, reloaded with the vector store's own
``from_persist_dir``). A retriever over ``retriever=`` wraps another
component's state; it is saved as settings only (``to_dict``), beside that
component's own ``persist``.
"""

from __future__ import annotations

import importlib
import json
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Optional, Type, Union

from llama_index.core import StorageContext, load_index_from_storage
from llama_index.core.prompts.base import PromptTemplate
from llama_index.core.vector_stores.types import (
    BasePydanticVectorStore,
    MetadataFilters,
    VectorStoreInfo,
    VectorStoreQueryMode,
)

from llama_index_ext_recursive.auto.prompt import DEFAULT_SPEC_PROMPT
from llama_index_ext_recursive.config import (
    component_to_dict,
    init_parameters,
    read_config,
    type_name,
    write_config,
)
from llama_index_ext_recursive.models import embed_model_name, resolve_embed_model
from llama_index_ext_recursive.persist import PersistError, load_json_object, read_index, write_index

if TYPE_CHECKING:
    from llama_index_ext_recursive.auto.retriever import ValidatedAutoRetriever

PERSIST_KIND = "ValidatedAutoRetriever"  # names the index kind in its folder's manifest
INDEX_FOLDER = "index"
STORE_FILE = "store.json"  # the vector store's class and the embedding model's name
# vector store classes are imported by name only from these packages
_STORE_PACKAGES = ("llama_index.", "llama_index_ext_recursive.")


def to_dict(retriever: "ValidatedAutoRetriever") -> Dict[str, Any]:
    """:meth:`ValidatedAutoRetriever.to_dict`."""
    prompt = retriever._prompt
    if prompt is DEFAULT_SPEC_PROMPT:
        template = None
    elif isinstance(prompt, PromptTemplate):
        template = prompt.template
    else:
        raise ValueError(
            f"the prompt is a {type(prompt).__name__}, which to_dict() cannot save; "
            "pass prompt_template_str= again to from_dict"
        )
    vocabulary = retriever._given_vocabulary
    return component_to_dict(
        retriever,
        vector_store_info=retriever._vector_store_info.model_dump(mode="json"),
        prompt_template_str=template,
        max_top_k=retriever._max_top_k,
        similarity_top_k=retriever._similarity_top_k,
        empty_query_top_k=retriever._empty_query_top_k,
        vector_store_query_mode=VectorStoreQueryMode(retriever._vector_store_query_mode).value,
        default_empty_query_vector=retriever._default_empty_query_vector,
        verbose=retriever._verbose,
        extra_filters=(
            retriever._extra_filters.model_dump(mode="json") if retriever._extra_filters is not None else None
        ),
        key_policy=retriever.key_policy,
        vocabulary=(
            {key: sorted(values, key=repr) for key, values in vocabulary.items()}
            if vocabulary is not None else None
        ),
        today=retriever.today.isoformat() if retriever.today is not None else None,
        synonyms=retriever.synonyms,
        filter_policy=retriever.filter_policy.value,
        max_retries=retriever.max_retries,
        unknown_filter_key=retriever.unknown_filter_key.value,
        **retriever._kwargs,
    )


def from_dict(cls: Type["ValidatedAutoRetriever"], data: Dict[str, Any]) -> Dict[str, Any]:
    """The constructor keywords a configuration dict of :func:`to_dict` stands for."""
    params = init_parameters(cls, data)
    try:
        params["vector_store_info"] = VectorStoreInfo.model_validate(params["vector_store_info"])
        if params.get("vector_store_query_mode") is not None:
            params["vector_store_query_mode"] = VectorStoreQueryMode(params["vector_store_query_mode"])
        if params.get("extra_filters") is not None:
            params["extra_filters"] = MetadataFilters.model_validate(params["extra_filters"])
        if params.get("vocabulary") is not None:
            params["vocabulary"] = {key: set(values) for key, values in params["vocabulary"].items()}
        if params.get("today") is not None:
            params["today"] = date.fromisoformat(params["today"])
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ValueError(f"{cls.__name__}.from_dict: invalid settings ({exc})") from exc
    return params


def persist(retriever: "ValidatedAutoRetriever", persist_dir: Union[str, Path]) -> None:
    """:meth:`ValidatedAutoRetriever.persist`."""
    if retriever.wrapped_retriever is not None:
        raise PersistError(
            f"this {PERSIST_KIND} searches a wrapped {type(retriever.wrapped_retriever).__name__}, "
            "whose state is its own: persist that retriever, save these settings with to_dict(), "
            "and load with ValidatedAutoRetriever.from_dict(data, retriever=...)"
        )
    index = retriever._index
    store = index.vector_store
    if not hasattr(type(store), "from_persist_dir") or not type_name(type(store)).startswith(_STORE_PACKAGES):
        raise PersistError(
            f"{type(store).__name__} cannot be saved to files (its data lives in the store): "
            "save the settings with to_dict() and load with ValidatedAutoRetriever.from_dict(data, index=...)"
        )
    config = retriever.to_dict()
    with write_index(persist_dir, PERSIST_KIND) as staging:
        write_config(staging, config)
        index.storage_context.persist(persist_dir=str(staging / INDEX_FOLDER))
        (staging / STORE_FILE).write_text(
            json.dumps({"type": type_name(type(store)), "embed_model": embed_model_name(index._embed_model)}),
            encoding="utf-8",
        )


def from_persist_dir(
    cls: Type["ValidatedAutoRetriever"],
    persist_dir: Union[str, Path],
    embed_model: Optional[Any],
    overrides: Dict[str, Any],
) -> "ValidatedAutoRetriever":
    """:meth:`ValidatedAutoRetriever.from_persist_dir`."""

    def load(folder: Path) -> "ValidatedAutoRetriever":
        config = read_config(folder)
        store_info = load_json_object(folder / STORE_FILE, ("type", "embed_model"))
        model = resolve_embed_model(embed_model)
        if embed_model_name(model) != store_info["embed_model"]:
            raise PersistError(
                f"{folder} was built with the embedding model {store_info['embed_model']!r}, "
                f"not {embed_model_name(model)!r}: pass embed_model= with the model it was built with"
            )
        store_class = _store_class(store_info["type"], folder / STORE_FILE)
        index_dir = str(folder / INDEX_FOLDER)
        try:
            storage = StorageContext.from_defaults(
                persist_dir=index_dir, vector_store=store_class.from_persist_dir(index_dir)
            )
            index = load_index_from_storage(storage, embed_model=model)
        except Exception as exc:  # upstream raises whatever its loaders raise
            raise PersistError(f"{folder / INDEX_FOLDER} could not be loaded ({exc!r}); persist it again") from exc
        return cls.from_dict(config, index, **overrides)

    return read_index(persist_dir, PERSIST_KIND, load)


def _store_class(name: Any, path: Path) -> Type[BasePydanticVectorStore]:
    if not isinstance(name, str) or not name.startswith(_STORE_PACKAGES) or "." not in name:
        raise PersistError(f"{path} names no vector store class of llama_index ({name!r})")
    module, _, qualname = name.rpartition(".")
    try:
        store_class = getattr(importlib.import_module(module), qualname)
    except (ImportError, AttributeError) as exc:
        raise PersistError(f"{path} names {name!r}, which cannot be imported ({exc})") from exc
    if not (isinstance(store_class, type) and issubclass(store_class, BasePydanticVectorStore)):
        raise PersistError(f"{path} names {name!r}, which is not a vector store")
    return store_class
