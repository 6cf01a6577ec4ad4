"""Saving a :class:`~llama_index_ext_recursive.retrievers.fusion.HybridFusionRetriever`.

The settings follow the package's one configuration convention
(:mod:`llama_index_ext_recursive.config`): ``to_dict()`` is
``{"type": ..., "init_parameters": {...}}`` with the mode, k, weights, the
fitted calibration and the filter policies, and ``persist`` writes that dict
as ``config.json`` plus one folder per child (``retriever-0``, ...), each
written by the child's own ``write_files``. Loading reads the children back
with their ``read_files`` and rebuilds the hybrid with :meth:`from_dict`, so
a reloaded hybrid returns what the saved one returned, without calibrating
again.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Type, Union

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.vector_stores.types import MetadataFilters

from llama_index_ext_recursive.config import (
    component_to_dict,
    init_parameters,
    read_config,
    type_name,
    write_config,
)
from llama_index_ext_recursive.filters import FilterVocabulary
from llama_index_ext_recursive.persist import PersistError, read_index, write_index
from llama_index_ext_recursive.retrievers.calibration import Calibration

if TYPE_CHECKING:
    from llama_index_ext_recursive.retrievers.fusion import HybridFusionRetriever

logger = logging.getLogger(__name__)

PERSIST_KIND = "HybridFusionRetriever"  # names the index kind in its folder's manifest
CHILD_FOLDER = "retriever-{}"


def hybrid_to_dict(hybrid: "HybridFusionRetriever") -> Dict[str, Any]:
    """:meth:`HybridFusionRetriever.to_dict`."""
    calibration = hybrid.calibration
    return component_to_dict(
        hybrid,
        mode=hybrid.mode.value,
        similarity_top_k=hybrid.similarity_top_k,
        child_top_k=hybrid.child_top_k,
        num_queries=hybrid.num_queries,
        query_gen_prompt=hybrid.query_gen_prompt,
        retriever_weights=list(hybrid._retriever_weights),
        rrf_k=hybrid.rrf_k,
        score_directions=[d.value for d in hybrid.score_directions],
        retriever_names=list(hybrid.retriever_names),
        filters=hybrid.filters.model_dump(mode="json") if hybrid.filters is not None else None,
        filter_policy=hybrid.filter_policy.value,
        unknown_filter_key=hybrid.unknown_filter_key.value,
        # fitted weights travel as their calibration (with what was measured)
        calibration=calibration.to_dict() if calibration is not None else None,
        script_weights=(
            None if calibration is not None or not hybrid.script_weights
            else {script.value: list(w) for script, w in hybrid.script_weights.items()}
        ),
    )


def hybrid_from_dict(
    cls: Type["HybridFusionRetriever"],
    data: Dict[str, Any],
    retrievers: Sequence[BaseRetriever],
    overrides: Dict[str, Any],
) -> "HybridFusionRetriever":
    """:meth:`HybridFusionRetriever.from_dict`."""
    parameters = init_parameters(cls, data)
    if parameters.get("filters") is not None:
        parameters["filters"] = MetadataFilters.model_validate(parameters["filters"])
    if parameters.get("calibration") is not None:
        parameters["calibration"] = Calibration.from_dict(parameters["calibration"])
    parameters.update(overrides)
    return cls(list(retrievers), **parameters)


def _child_kinds() -> Dict[str, type]:
    """The children a hybrid can persist, by configuration ``type``."""
    from llama_index_ext_recursive.retrievers.bm25 import MultilingualBM25Retriever
    from llama_index_ext_recursive.retrievers.fusion import HybridFusionRetriever
    from llama_index_ext_recursive.retrievers.vector import BackfillVectorRetriever

    kinds = (BackfillVectorRetriever, MultilingualBM25Retriever, HybridFusionRetriever)
    return {type_name(kind): kind for kind in kinds}


def persist_hybrid(hybrid: "HybridFusionRetriever", persist_dir: Union[str, Path]) -> None:
    """:meth:`HybridFusionRetriever.persist`."""
    _check_persistable(hybrid)
    with write_index(persist_dir, PERSIST_KIND) as staging:
        write_files(hybrid, staging)


def _check_persistable(hybrid: "HybridFusionRetriever") -> None:
    kinds = _child_kinds()
    for name, child in zip(hybrid.retriever_names, hybrid.retrievers):
        if type_name(type(child)) not in kinds:
            raise TypeError(
                f"child {name!r} is a {type(child).__name__}, which a HybridFusionRetriever cannot "
                f"persist (it can: {sorted(k.__name__ for k in kinds.values())}); persist the "
                "children yourself and rebuild the hybrid with HybridFusionRetriever.from_dict"
            )
        if type(child).__name__ == PERSIST_KIND:
            _check_persistable(child)  # type: ignore[arg-type]


def write_files(hybrid: "HybridFusionRetriever", folder: Path) -> None:
    """Write ``hybrid``'s settings and children into ``folder``."""
    for i, child in enumerate(hybrid.retrievers):
        child_folder = folder / CHILD_FOLDER.format(i)
        child_folder.mkdir()
        if type(child).__name__ == PERSIST_KIND:
            write_files(child, child_folder)  # type: ignore[arg-type]
        else:
            child.write_files(child_folder)  # type: ignore[attr-defined]
    # which child's nodes filters are checked against (from_nodes/from_index hybrids)
    vocabulary_child = next(
        (i for i, child in enumerate(hybrid.retrievers) if hybrid.filter_vocabulary is not None
         and getattr(child, "nodes", None)),
        None,
    )
    write_config(folder, {**hybrid.to_dict(), "vocabulary_child": vocabulary_child})


def load_hybrid(
    cls: Type["HybridFusionRetriever"],
    persist_dir: Union[str, Path],
    embed_model: Optional[BaseEmbedding],
    overrides: Dict[str, Any],
) -> "HybridFusionRetriever":
    """:meth:`HybridFusionRetriever.from_persist_dir`."""
    return read_index(persist_dir, PERSIST_KIND, lambda folder: read_files(cls, folder, embed_model, overrides))


def read_files(
    cls: Type["HybridFusionRetriever"],
    folder: Path,
    embed_model: Optional[BaseEmbedding],
    overrides: Dict[str, Any],
) -> "HybridFusionRetriever":
    """Load what :func:`write_files` wrote into ``folder``."""
    data = read_config(folder)
    parameters = data.get("init_parameters") or {}
    names = parameters.get("retriever_names") or []
    kinds = _child_kinds()
    children: List[BaseRetriever] = []
    for i in range(len(names)):
        child_folder = folder / CHILD_FOLDER.format(i)
        child_config = read_config(child_folder)
        kind = kinds.get(child_config.get("type", ""))
        if kind is None:
            raise PersistError(
                f"{child_folder / 'config.json'} names {child_config.get('type')!r}, which is not a "
                "retriever a hybrid persists; the folder is damaged"
            )
        if kind.__name__ == PERSIST_KIND:
            children.append(read_files(kind, child_folder, embed_model, {}))
        elif kind.__name__ == "BackfillVectorRetriever":
            children.append(kind.read_files(child_folder, embed_model=embed_model))  # type: ignore[attr-defined]
        else:
            children.append(kind.read_files(child_folder))  # type: ignore[attr-defined]
    try:
        hybrid = cls.from_dict(data, children, **overrides)
    except (TypeError, ValueError) as exc:
        raise PersistError(f"{folder / 'config.json'} holds invalid settings ({exc})") from exc
    source = data.get("vocabulary_child")
    if isinstance(source, int) and 0 <= source < len(children):
        hybrid.filter_vocabulary = FilterVocabulary.from_nodes(children[source].nodes)  # type: ignore[attr-defined]
    return hybrid
