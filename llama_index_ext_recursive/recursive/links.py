"""Checks on the links of a summary index: summaries name documents, ``IndexNode``
chunks point somewhere, and document links form no cycle.

Run at construction and before an update is swapped in, so a broken link is
refused with the bad id and the closest known ones, not met at query time.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterator, Mapping, Sequence

from llama_index.core.schema import BaseNode, IndexNode
from llama_index.core.storage.docstore.types import BaseDocumentStore

from llama_index_ext_recursive.errors import LlamaIndexExtRecursiveError
from llama_index_ext_recursive.recursive.build import DocumentRecord
from llama_index_ext_recursive.stores.columnar_docstore import ColumnarDocumentStore
from llama_index_ext_recursive.validation import closest

logger = logging.getLogger(__name__)


class LinkError(LlamaIndexExtRecursiveError, ValueError):
    """An ``IndexNode`` points nowhere, or links form a cycle."""


def check_links(
    summaries: Mapping[str, IndexNode],
    documents: Mapping[str, DocumentRecord],
    known: Sequence[str],
    docstore: BaseDocumentStore | None,
    pending: Mapping[str, BaseNode] | None = None,
    removed: Collection[str] = (),
    changed: Collection[str] | None = None,
) -> None:
    """Check that every summary and ``IndexNode`` resolves and no links form a cycle.

    Args:
        summaries: summary ``IndexNode`` by document id.
        documents: per-document records (their chunk ids are checked).
        known: every document id (the records', or a ``retriever_dict``'s keys).
        docstore: the chunk docstore (``None``: opaque per-document retrievers,
            whose links are checked as they are met).
        pending: new chunks by id of an update not yet swapped in.
        removed: chunk ids the update or delete takes out of the docstore: a link
            to one of them would point nowhere once it is swapped in.
        changed: the documents the operation adds or replaces; ``None``: every
            document is new (a build), ``()``: none (a load). A link that already
            pointed nowhere before the operation, in a document it does not
            touch (an index a previous release let a delete break), is logged
            as a warning naming it and the fix, so it cannot block every later
            update; links the operation adds or breaks are errors.

    Raises:
        LinkError: naming the bad id and the closest known ids.
    """
    pending = pending or {}
    stale: list[str] = []
    known_set = set(known)
    # keys only, listed once (summaries read from a store are read when asked for; listing the
    # ids of a store's records is a query, 0.2 s at 100k documents; list() of a ChainMap would
    # also ask its length, a second listing)
    summary_ids = list(iter(summaries))
    for doc_id in summary_ids:
        if doc_id not in known_set:
            raise LinkError(
                f"summary {summaries[doc_id].node_id!r} points to index_id {doc_id!r}, which has no "
                f"chunks or retriever ({closest(doc_id, known)}); fix the index_id or "
                "add the document"
            )
    unreachable = known_set.difference(summary_ids)
    if unreachable:
        logger.warning(
            "%d document(s) have no summary and can never be routed to: %s",
            len(unreachable),
            sorted(unreachable)[:10],
        )
    if docstore is None:
        return
    edges: dict[str, list[str]] = {}
    for record, chunk_id, target in _links(documents, docstore, pending):
        if (
            target not in known_set
            and target not in pending
            and (target in removed or not docstore.document_exists(target))
        ):
            problem = (
                f"IndexNode {chunk_id!r} in document {record.doc_id!r} points "
                f"to {target!r}, which is neither a document nor a chunk "
                f"({closest(target, known)})"
            )
            if changed is None or record.doc_id in changed or target in removed:
                raise LinkError(problem)
            stale.append(problem)
        if target in known_set:
            edges.setdefault(record.doc_id, []).append(target)
    if stale:
        logger.warning(
            "%d link(s) already pointed nowhere and are not followed: %s; update or delete the linking document to fix",
            len(stale),
            "; ".join(stale[:5]),
        )
    raise_on_cycle(edges)


def _links(
    documents: Mapping[str, DocumentRecord], docstore: BaseDocumentStore, pending: Mapping[str, BaseNode]
) -> Iterator[tuple[DocumentRecord, str, str]]:
    """``(record, chunk id, target)`` of every ``IndexNode`` chunk.

    The view of a columnar store answers from the store's map of its
    ``IndexNode`` rows (``link_targets``) and their documents, so neither a
    chunk nor a record other than the linking ones is read (a pass over 2M
    chunk ids at every update, before). Any other docstore is read chunk by
    chunk, and a listed chunk it lacks is an error.

    Raises:
        LinkError: a record lists a chunk the docstore lacks.
    """
    if isinstance(docstore, ColumnarDocumentStore):
        store = docstore.store
        targets = store.link_targets()
        owners = dict(zip(targets, store.ref_doc_ids(list(targets)), strict=True))
        for chunk_id, node in pending.items():  # an update's chunks replace the stored ones
            if isinstance(node, IndexNode):
                targets[chunk_id] = node.index_id
                owners[chunk_id] = node.ref_doc_id
            else:
                targets.pop(chunk_id, None)
        for chunk_id, target in targets.items():  # the links alone, not every chunk of every record
            record = documents.get(owners.get(chunk_id) or "")
            if record is not None and chunk_id in record.chunk_ids:
                yield record, chunk_id, target
        return
    for record in documents.values():
        for chunk_id in record.chunk_ids:
            found = pending.get(chunk_id) or docstore.get_node(chunk_id, raise_error=False)
            if found is None:
                raise LinkError(
                    f"document {record.doc_id!r} lists chunk {chunk_id!r}, which is not in "
                    "the chunk store; rebuild or delete_document() it"
                )
            if isinstance(found, IndexNode):
                yield record, chunk_id, found.index_id


def raise_on_cycle(edges: dict[str, list[str]]) -> None:
    """Raise :class:`LinkError` naming the first cycle in a document link graph."""
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in edges.get(node, []):
            if state.get(nxt) == 1:
                cycle = path[path.index(nxt) :] + [nxt]
                raise LinkError("IndexNode links form a cycle: " + " -> ".join(cycle) + "; remove one of these links")
            if nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = 2

    for start in list(edges):
        if start not in state:
            visit(start, [start])
