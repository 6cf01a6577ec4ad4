"""Saving a ``ValidatedAutoRetriever``: its query settings (``config.py``'s convention) and the index it searches.

The retriever's own state is its settings; what it searches is the
``VectorStoreIndex`` it was given, which its vector child writes and reads
(:meth:`~llama_index_ext_recursive.retrievers.vector.BackfillVectorRetriever.write_files`),
so ``persist`` writes ``config.json`` (``ValidatedAutoRetriever.to_dict``)
and the child's files in ``vector/``. A retriever over ``retriever=`` wraps
another component's state; it is saved as settings only (``to_dict``),
beside that component's own ``persist``.

The functions here take plain values (the configuration dict, the vector
child) and the retriever's methods call them, so this module stands below
:mod:`~llama_index_ext_recursive.auto.retriever`.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import date
from pathlib import Path
from typing import Any, TypeVar

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.indices.vector_store.base import VectorStoreIndex
from llama_index.core.prompts.base import BasePromptTemplate, PromptTemplate
from llama_index.core.vector_stores.types import MetadataFilters, VectorStoreInfo, VectorStoreQueryMode

from llama_index_ext_recursive.auto.prompt import DEFAULT_SPEC_PROMPT
from llama_index_ext_recursive.config import init_parameters, read_config, write_config
from llama_index_ext_recursive.persist import PersistError, read_index, write_index
from llama_index_ext_recursive.retrievers.vector import BackfillVectorRetriever
from llama_index_ext_recursive.retrievers.vector_persist import check_persistable

PERSIST_KIND = "ValidatedAutoRetriever"  # names the index kind in its folder's manifest
VECTOR_FOLDER = "vector"  # the vector child's files: the index searched
R = TypeVar("R")  # what read_folder's load builds


def prompt_template(prompt: BasePromptTemplate) -> str | None:
    """The ``prompt_template_str`` setting that stands for ``prompt`` (``None``: the default).

    Raises:
        ValueError: ``prompt`` is a template object other than a ``PromptTemplate``.
    """
    if prompt is DEFAULT_SPEC_PROMPT:
        return None
    if isinstance(prompt, PromptTemplate):
        return prompt.template
    raise ValueError(
        f"the prompt is a {type(prompt).__name__}, which to_dict() cannot save; "
        "pass prompt_template_str= again to from_dict"
    )


def from_dict(cls: type, data: dict[str, Any]) -> dict[str, Any]:
    """The constructor keywords of ``cls`` a configuration dict of its ``to_dict`` stands for."""
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


def check_savable(wrapped: BaseRetriever | None, vector: BackfillVectorRetriever | None) -> BackfillVectorRetriever:
    """Refuse, before anything is written, a retriever whose state is another
    component's (``wrapped``) or whose vector store keeps its data itself;
    return the vector child to write."""
    if wrapped is not None:
        raise PersistError(
            f"this {PERSIST_KIND} searches a wrapped {type(wrapped).__name__}, "
            "whose state is its own: persist that retriever, save these settings with to_dict(), "
            "and load with ValidatedAutoRetriever.from_dict(data, retriever=...)"
        )
    if vector is None:  # built with retriever=, and wrapped_retriever was set to None since
        raise PersistError(
            f"this {PERSIST_KIND} was built with retriever= and its wrapped_retriever is now None: "
            "it holds no index to persist"
        )
    check_persistable(vector)
    return vector


def write_folder(persist_dir: str | Path, config: dict[str, Any], vector: BackfillVectorRetriever) -> None:
    """Write ``config`` (``config.json``) and the vector child's files (``vector/``) to ``persist_dir``."""
    with write_index(persist_dir, PERSIST_KIND) as staging:
        write_config(staging, config)
        vector.write_files(staging / VECTOR_FOLDER)


def read_folder(
    persist_dir: str | Path,
    embed_model: Any | None,
    load: Callable[[dict[str, Any], VectorStoreIndex], R],
) -> R:
    """``load(config, index)`` over what :func:`write_folder` wrote (the index read
    with ``embed_model``); invalid settings are a ``PersistError`` naming the file."""

    def read(folder: Path) -> R:
        config = read_config(folder)
        vector = BackfillVectorRetriever.read_files(folder / VECTOR_FOLDER, embed_model)
        try:
            return load(config, vector._index)
        except (TypeError, ValueError) as exc:
            raise PersistError(f"{folder / 'config.json'} holds invalid settings ({exc})") from exc

    return read_index(persist_dir, PERSIST_KIND, read)
