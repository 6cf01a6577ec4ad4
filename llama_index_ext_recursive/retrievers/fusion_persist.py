"""The folder of a saved :class:`~llama_index_ext_recursive.retrievers.fusion.HybridFusionRetriever`.

The settings follow the package's one configuration convention
(:mod:`llama_index_ext_recursive.config`): ``to_dict()`` is
``{"type": ..., "init_parameters": {...}}`` with the mode, k, weights, the
fitted calibration and the filter policies, and ``persist`` writes that dict
as ``config.json`` plus one folder per child (``retriever-0``, ...), each
written by the child's own ``write_files``. Loading reads the children back
with their ``read_files`` and rebuilds the hybrid with :meth:`from_dict`, so
a reloaded hybrid returns what the saved one returned, without calibrating
again.

The functions here take the children, the configuration dict and the kinds
of child a hybrid persists (the hybrid's own class among them, passed in);
the hybrid's methods call them, so this module stands below
:mod:`~llama_index_ext_recursive.retrievers.fusion`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.vector_stores.types import MetadataFilters

from llama_index_ext_recursive.config import read_config, type_name
from llama_index_ext_recursive.persist import PersistError
from llama_index_ext_recursive.retrievers.bm25 import MultilingualBM25Retriever
from llama_index_ext_recursive.retrievers.calibration import Calibration
from llama_index_ext_recursive.retrievers.vector import BackfillVectorRetriever

PERSIST_KIND = "HybridFusionRetriever"  # names the index kind in its folder's manifest
CHILD_FOLDER = "retriever-{}"


def settings_from_config(parameters: dict[str, Any]) -> dict[str, Any]:
    """Constructor arguments from :meth:`HybridFusionRetriever.to_dict`'s init parameters."""
    if parameters.get("filters") is not None:
        parameters["filters"] = MetadataFilters.model_validate(parameters["filters"])
    if parameters.get("calibration") is not None:
        parameters["calibration"] = Calibration.from_dict(parameters["calibration"])
    return parameters


def child_kinds(hybrid_class: type) -> dict[str, type]:
    """The children a hybrid can persist, by configuration ``type``."""
    kinds = (BackfillVectorRetriever, MultilingualBM25Retriever, hybrid_class)
    return {type_name(kind): kind for kind in kinds}


def check_children(names: Sequence[str], children: Sequence[BaseRetriever], kinds: dict[str, type]) -> None:
    """Refuse, before anything is written, a child (or a nested hybrid's child)
    that is not one of ``kinds``."""
    for name, child in zip(names, children):
        if type_name(type(child)) not in kinds:
            raise TypeError(
                f"child {name!r} is a {type(child).__name__}, which a HybridFusionRetriever cannot "
                f"persist (it can: {sorted(k.__name__ for k in kinds.values())}); persist the "
                "children yourself and rebuild the hybrid with HybridFusionRetriever.from_dict"
            )
        if type(child).__name__ == PERSIST_KIND:
            check_children(child.retriever_names, child.retrievers, kinds)  # type: ignore[attr-defined]


def write_children(folder: Path, children: Sequence[BaseRetriever]) -> None:
    """Write each child into its own folder of ``folder``, by its ``write_files``."""
    for i, child in enumerate(children):
        child_folder = folder / CHILD_FOLDER.format(i)
        child_folder.mkdir()
        child.write_files(child_folder)  # type: ignore[attr-defined]


def vocabulary_child(children: Sequence[BaseRetriever]) -> int | None:
    """The first child that keeps nodes: filters are checked against them when loaded."""
    return next((i for i, child in enumerate(children) if getattr(child, "nodes", None)), None)


def read_children(
    folder: Path, data: dict[str, Any], kinds: dict[str, type], embed_model: BaseEmbedding | None
) -> list[BaseRetriever]:
    """The children :func:`write_children` wrote into ``folder``, one per name of
    the configuration ``data``; ``embed_model`` embeds the vector children's queries."""
    parameters = data.get("init_parameters") or {}
    names = parameters.get("retriever_names") or []
    children: list[BaseRetriever] = []
    for i in range(len(names)):
        child_folder = folder / CHILD_FOLDER.format(i)
        child_config = read_config(child_folder)
        kind = kinds.get(child_config.get("type", ""))
        if kind is None:
            raise PersistError(
                f"{child_folder / 'config.json'} names {child_config.get('type')!r}, which is not a "
                "retriever a hybrid persists; the folder is damaged"
            )
        if kind is MultilingualBM25Retriever:
            children.append(kind.read_files(child_folder))
        else:
            children.append(kind.read_files(child_folder, embed_model=embed_model))  # type: ignore[attr-defined]
    return children
