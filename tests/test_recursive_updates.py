"""Atomic updates and consistent reads of RecursiveSummaryRetriever (issue 11)."""

from __future__ import annotations

import asyncio
import threading

import pytest
from conftest import LexicalEmbedding, topic_nodes
from llama_index.core.schema import Document

from llama_index_ext_recursive import RecursiveSummaryRetriever

QUERY = "glaciers carve valleys and the queen bee lays eggs"
ICE = Document(
    text="Glaciers carve valleys. Ice sheets store fresh water.",
    metadata={"doc_id": "ice", "title": "Glaciers", "category": "earth", "year": 2022},
)
ICE_CHANGED = Document(
    text="Glaciers move slowly downhill and carve valleys.",
    metadata={"doc_id": "ice", "title": "Glaciers", "category": "earth", "year": 2022},
)


class FailingEmbedding(LexicalEmbedding):
    """Embeds like LexicalEmbedding until ``fail`` is set, then raises as an API
    model does on a 503."""

    fail: bool = False

    def _vector(self, text):
        if self.fail:
            raise ConnectionError("503 Service Unavailable")
        return super()._vector(text)


def snapshot(retriever):
    """Everything a user can observe: documents, results, both stores' contents."""
    return (
        {k: v.to_dict() for k, v in retriever.documents.items()},
        [(h.node.node_id, h.node.get_content(), round(h.score, 12)) for h in retriever.retrieve(QUERY)],
        sorted(retriever.index.chunk_index.docstore.docs),
        sorted(retriever.index.summary_index.docstore.docs),
        sorted(retriever.index.chunk_index.vector_store.data.embedding_dict),
    )


def build(model):
    return RecursiveSummaryRetriever.from_nodes(topic_nodes(), embed_model=model, similarity_top_k=4, num_routed_docs=2)


def test_failed_embedding_leaves_the_index_exactly_as_before():
    model = FailingEmbedding(model_name="flaky")
    retriever = build(model)
    retriever.add_documents([ICE])
    before = snapshot(retriever)
    model.fail = True
    with pytest.raises(ConnectionError):
        retriever.add_documents([ICE_CHANGED])  # an update of an existing document
    with pytest.raises(ConnectionError):
        retriever.add_documents([Document(text="Brand new text.", metadata={"doc_id": "new"})])
    model.fail = False
    assert snapshot(retriever) == before
    assert retriever.add_documents([ICE_CHANGED]) == ["ice"]  # and it still updates
    assert "slowly" in retriever.retrieve("glaciers move downhill")[0].node.get_content()


def test_a_store_failure_during_the_swap_restores_the_previous_state(lexical, monkeypatch):
    retriever = build(lexical)
    retriever.add_documents([ICE])
    before = snapshot(retriever)
    chunk_index = retriever.index.chunk_index
    original = chunk_index.insert_nodes
    calls = {"n": 0}

    def failing_insert(nodes, **kwargs):
        calls["n"] += 1
        if calls["n"] == 1:  # the update's insert; the restore's insert goes through
            raise ConnectionError("connection to the store lost")
        return original(nodes, **kwargs)

    monkeypatch.setattr(chunk_index, "insert_nodes", failing_insert)
    with pytest.raises(ConnectionError):
        retriever.add_documents([ICE_CHANGED])
    monkeypatch.setattr(chunk_index, "insert_nodes", original)
    assert snapshot(retriever) == before


def test_a_node_id_used_by_another_document_is_refused_before_any_change(lexical):
    retriever = build(lexical)
    before = snapshot(retriever)
    clash = topic_nodes()[0].model_copy()  # id "bees-0"
    clash.metadata = {**clash.metadata, "doc_id": "other"}
    with pytest.raises(
        ValueError, match=r"'bees-0' of document 'other' is already indexed as a chunk of document 'bees'"
    ):
        retriever.add_nodes([clash])
    assert snapshot(retriever) == before


def test_an_update_that_would_break_a_link_is_refused_before_any_change(lexical):
    from llama_index.core.schema import IndexNode

    retriever = build(lexical)
    before = snapshot(retriever)
    link = IndexNode(text="see the atlas", index_id="atlas", id_="link-1", metadata={"doc_id": "maps"})
    with pytest.raises(Exception, match="atlas"):
        retriever.add_nodes([link])
    assert snapshot(retriever) == before


def observed(hits):
    """What a reader sees, by content (chunk ids of "ice" are new at each add)."""
    return tuple((h.node.ref_doc_id, h.node.get_content(), round(h.score, 9)) for h in hits)


def _states(retriever):
    """The result of QUERY without and with the document "ice"."""
    without = observed(retriever.retrieve(QUERY))
    retriever.add_documents([ICE])
    with_ice = observed(retriever.retrieve(QUERY))
    retriever.delete_document("ice")
    assert without != with_ice  # the test can tell the two states apart
    return without, with_ice


def test_reads_during_updates_see_the_state_before_or_after_never_a_mix(lexical):
    retriever = build(lexical)
    allowed = set(_states(retriever))
    errors, seen = [], []
    stop = threading.Event()

    def let_readers_in():
        """Wait (bounded) until readers finished a read in this state, so both
        states are observed while other reads keep racing the next update."""
        target = len(seen) + 2
        for _ in range(200):
            if len(seen) >= target:
                return
            stop.wait(0.005)

    def writer():
        try:
            for _ in range(60):
                retriever.add_documents([ICE])
                let_readers_in()
                retriever.delete_document("ice")
                let_readers_in()
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            stop.set()

    def reader():
        try:
            while not stop.is_set():
                seen.append(observed(retriever.retrieve(QUERY)))
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer)] + [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads)
    assert errors == []
    assert set(seen) <= allowed
    assert len(set(seen)) == 2  # readers saw both states, so the check above had teeth


async def test_async_reads_during_updates_see_before_or_after(lexical):
    retriever = build(lexical)
    allowed = set(_states(retriever))
    done = threading.Event()

    def writer():
        try:
            for _ in range(40):
                retriever.add_documents([ICE])
                retriever.delete_document("ice")
        finally:
            done.set()

    thread = threading.Thread(target=writer)
    thread.start()
    seen = []
    while not done.is_set():
        hits = await asyncio.gather(*(retriever.aretrieve(QUERY) for _ in range(4)))
        seen.extend(observed(r) for r in hits)
    thread.join(timeout=120)
    assert seen and set(seen) <= allowed


async def test_aretrieve_waits_for_a_writer_without_blocking_the_loop(lexical):
    retriever = build(lexical)
    ticks = []
    with retriever.index.state_lock.writing():  # as an update does while it swaps nodes in
        pending = asyncio.ensure_future(retriever.aretrieve(QUERY))
        for _ in range(5):
            await asyncio.sleep(0.01)
            ticks.append(pending.done())
    assert ticks == [False] * 5  # the loop kept running while the read waited
    assert [h.node.node_id for h in await pending] == [h.node.node_id for h in retriever.retrieve(QUERY)]


def test_levels_follow_updates_from_the_change_log_and_are_rebuilt_past_it(lexical, monkeypatch):
    """After updates the next query brings the levels up to date with the changed documents
    alone (the index's log of changes); once more updates happened than the log keeps, it
    builds them anew. Either way it answers as a retriever made after the updates."""
    from llama_index_ext_recursive.recursive import index as index_module
    from llama_index_ext_recursive.recursive import levels as levels_module

    monkeypatch.setattr(index_module, "CHANGES_KEPT", 2)
    monkeypatch.setattr(levels_module, "UPDATE_SHARE", 1.0)  # three documents: any change is a large share
    retriever = build(lexical)
    retriever.retrieve(QUERY)
    rebuilt = []
    build_levels = levels_module.build_levels
    monkeypatch.setattr(levels_module, "build_levels", lambda owner: rebuilt.append(owner) or build_levels(owner))

    def answers(target):
        return [(h.node.node_id, round(h.score, 9)) for h in target.retrieve(QUERY)]

    def fresh():
        return RecursiveSummaryRetriever(retriever.index, similarity_top_k=4, num_routed_docs=2)

    retriever.index.add_documents([ICE])
    retriever.index.add_documents([ICE_CHANGED])
    assert answers(retriever) == answers(fresh()) and len(rebuilt) == 1  # only the fresh one built
    assert any(h.node.ref_doc_id == "ice" for h in retriever.retrieve("glaciers move slowly downhill"))
    for change in ([ICE], [ICE_CHANGED]):
        retriever.index.add_documents(change)
    retriever.index.delete_document("ice")  # three changes: the log keeps two
    assert retriever.index.changed_since(retriever._built.generation) is None
    assert answers(retriever) == answers(fresh()) and len(rebuilt) == 3
    assert not any(h.node.ref_doc_id == "ice" for h in retriever.retrieve("glaciers move slowly downhill"))
