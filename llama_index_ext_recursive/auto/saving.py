"""Saving a ``ValidatedAutoRetriever``: its query settings (``config.py``'s convention) and the index it searches.

The retriever's own state is its settings; what it searches is the
``VectorStoreIndex`` it was given, which its vector child writes and reads
(:meth:`~llama_index_ext_recursive.retrievers.vector.BackfillVectorRetriever.write_files`),
so ``persist`` writes ``config.json`` (:meth:`~ValidatedAutoRetriever.to_dict`)
and the child's files in ``vector/``. A retriever over ``retriever=`` wraps
another component's state; it is saved as settings only (``to_dict``),
beside that component's own ``persist``.
"""

from __future__ import annotations

from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Optional, Type, Union

from llama_index.core.prompts.base import PromptTemplate
from llama_index.core.vector_stores.types import MetadataFilters, VectorStoreInfo, VectorStoreQueryMode

from llama_index_ext_recursive.auto.prompt import DEFAULT_SPEC_PROMPT
from llama_index_ext_recursive.config import component_to_dict, init_parameters, read_config, write_config
from llama_index_ext_recursive.persist import PersistError, read_index, write_index
from llama_index_ext_recursive.retrievers.vector import BackfillVectorRetriever
from llama_index_ext_recursive.retrievers.vector_persist import check_persistable

if TYPE_CHECKING:
    from llama_index_ext_recursive.auto.retriever import ValidatedAutoRetriever

PERSIST_KIND = "ValidatedAutoRetriever"  # names the index kind in its folder's manifest
VECTOR_FOLDER = "vector"  # the vector child's files: the index searched


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
    vector = retriever._vector_retriever
    if vector is None:  # built with retriever=, and wrapped_retriever was set to None since
        raise PersistError(
            f"this {PERSIST_KIND} was built with retriever= and its wrapped_retriever is now None: "
            "it holds no index to persist"
        )
    check_persistable(vector)  # before anything is written
    config = retriever.to_dict()
    with write_index(persist_dir, PERSIST_KIND) as staging:
        write_config(staging, config)
        vector.write_files(staging / VECTOR_FOLDER)


def from_persist_dir(
    cls: Type["ValidatedAutoRetriever"],
    persist_dir: Union[str, Path],
    embed_model: Optional[Any],
    overrides: Dict[str, Any],
) -> "ValidatedAutoRetriever":
    """:meth:`ValidatedAutoRetriever.from_persist_dir`."""

    def load(folder: Path) -> "ValidatedAutoRetriever":
        config = read_config(folder)
        vector = BackfillVectorRetriever.read_files(folder / VECTOR_FOLDER, embed_model)
        try:
            return cls.from_dict(config, vector._index, **overrides)
        except (TypeError, ValueError) as exc:
            raise PersistError(f"{folder / 'config.json'} holds invalid settings ({exc})") from exc

    return read_index(persist_dir, PERSIST_KIND, load)
