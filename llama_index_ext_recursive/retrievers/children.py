"""Calling a fusion child: results checked, failures naming the child.

Used by every wrapper that fans a query out to child retrievers
(:class:`~llama_index_ext_recursive.retrievers.fusion.HybridFusionRetriever`,
the auto-retriever).
"""

from __future__ import annotations

from typing import Any

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle


def retrieve_from_child(retriever: BaseRetriever, bundle: QueryBundle, name: str) -> list[NodeWithScore]:
    """``retriever.retrieve(bundle)``, which must give a list of ``NodeWithScore``.

    A child whose ``_retrieve`` returns ``None`` fails inside upstream's
    ``BaseRetriever.retrieve`` with ``'NoneType' object is not iterable``,
    which names nobody; this names the child.
    """
    try:
        results = retriever.retrieve(bundle)
    except (TypeError, AttributeError) as exc:
        _raise_if_bad_result(retriever, name, exc)
        raise
    return _checked_results(retriever, name, results)


async def aretrieve_from_child(retriever: BaseRetriever, bundle: QueryBundle, name: str) -> list[NodeWithScore]:
    """The async :func:`retrieve_from_child`."""
    try:
        results = await retriever.aretrieve(bundle)
    except (TypeError, AttributeError) as exc:
        _raise_if_bad_result(retriever, name, exc)
        raise
    return _checked_results(retriever, name, results)


# where upstream's BaseRetriever iterates what _retrieve/_aretrieve returned
_RESULT_HANDLERS = frozenset({"_handle_recursive_retrieval", "_ahandle_recursive_retrieval"})


def _raise_if_bad_result(retriever: BaseRetriever, name: str, exc: BaseException) -> None:
    """Name the child when ``exc`` comes from upstream iterating its result."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is not None and tb.tb_frame.f_code.co_name in _RESULT_HANDLERS:
        raise TypeError(
            f"retriever {name!r} ({type(retriever).__name__}) did not return a list of "
            f"NodeWithScore ({exc}); its _retrieve/_aretrieve must return one ([] for no hits)"
        ) from exc


def _checked_results(retriever: BaseRetriever, name: str, results: Any) -> list[NodeWithScore]:
    if isinstance(results, list) and all(isinstance(hit, NodeWithScore) for hit in results):
        return results
    got = (
        f"a list of {sorted({type(hit).__name__ for hit in results})}"
        if isinstance(results, list)
        else type(results).__name__
    )
    raise TypeError(
        f"retriever {name!r} ({type(retriever).__name__}) returned {got}, not a list of NodeWithScore ([] for no hits)"
    )
