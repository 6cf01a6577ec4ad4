"""A summary index stored in ColumnarVectorStores (issue 25) answers as the default storage:
the same chunks, scores, documents and explanations in every score mode, sync and async, with
per-call filters, after adds, replacements and deletes; no node per chunk is held in memory."""

import asyncio
import json
import sqlite3

import pytest
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.schema import Document, MetadataMode, TextNode
from recursive_cases import (
    MODES,
    NoTieEmbedding,
    async_recursive_answers,
    chunk_parser,
    make_documents,
    recursive_answers,
    same_answers,
)

from llama_index_ext_recursive import RecursiveSummaryRetriever
from llama_index_ext_recursive.columnar.rows import PublishedTexts, RowStore
from llama_index_ext_recursive.recursive.index import RecursiveIndex
from llama_index_ext_recursive.recursive.links import LinkError
from llama_index_ext_recursive.recursive.records import StoredRecords
from llama_index_ext_recursive.recursive.summaries import StoredSummaries
from llama_index_ext_recursive.retrievers.bm25 import MultilingualBM25Retriever
from llama_index_ext_recursive.retrievers.store_bm25 import StoreBM25Retriever
from llama_index_ext_recursive.stores.columnar_docstore import ColumnarDocumentStore
from llama_index_ext_recursive.stores.columnar_store import ColumnarVectorStore
from llama_index_ext_recursive.tokenizer import MultilingualTokenizer


@pytest.fixture
def embedding():
    return NoTieEmbedding()


def _columnar(**kwargs):
    return {
        "chunk_vector_store": ColumnarVectorStore(tokenizer=MultilingualTokenizer()),
        "summary_vector_store": ColumnarVectorStore(tokenizer=MultilingualTokenizer()),
        **kwargs,
    }


def _load(root, embedding):
    return RecursiveSummaryRetriever.from_persist_dir(root, embed_model=embedding, node_parser=chunk_parser())


def _pair(lexical):
    parser = chunk_parser()
    default = RecursiveIndex.from_documents(make_documents(), embed_model=lexical, node_parser=parser)
    columnar = RecursiveIndex.from_documents(make_documents(), embed_model=lexical, node_parser=parser, **_columnar())
    return default, columnar


@pytest.mark.parametrize("options", MODES, ids=lambda o: "-".join(o.values()) or "fused")
def test_columnar_storage_answers_as_the_default_through_updates(embedding, options):
    default_index, columnar_index = _pair(embedding)
    default = RecursiveSummaryRetriever(default_index, similarity_top_k=4, **options)
    columnar = RecursiveSummaryRetriever(columnar_index, similarity_top_k=4, **options)
    expected = recursive_answers(default)
    assert sum(len(a) for a in expected) > 50
    assert same_answers(recursive_answers(columnar), expected)
    assert same_answers(asyncio.run(async_recursive_answers(columnar)), expected)
    # an added document, a replaced one (new text) and a deleted one
    changes = make_documents(2, seed=7, prefix="new") + [make_documents(1, seed=3, prefix="d")[0]]
    for index in (default_index, columnar_index):
        assert index.add_documents(changes) == ["new0", "new1", "d0"]
        index.delete_document("d4")
    expected = recursive_answers(default)
    assert same_answers(recursive_answers(columnar), expected)


def test_columnar_levels_hold_no_node_and_ask_the_stores(lexical):
    """The levels' BM25 is the stores' column and the docstores are views of the stores: no
    node list, no bm25s index, and index.docstore still answers as LlamaIndex expects."""
    default_index, index = _pair(lexical)
    retriever = RecursiveSummaryRetriever(index)
    levels = retriever._levels()
    assert isinstance(levels.chunk_bm25, StoreBM25Retriever) and isinstance(levels.summary_bm25, StoreBM25Retriever)
    assert not isinstance(levels.chunk_bm25, MultilingualBM25Retriever)
    docstore = index.docstore
    assert isinstance(docstore, ColumnarDocumentStore)
    chunk_id = index.documents["d1"].chunk_ids[0]
    node = docstore.get_node(chunk_id)
    assert node.ref_doc_id == "d1" and node.embedding is None and node.metadata["category"] == "bees"
    assert docstore.get_ref_doc_info("d1").node_ids == index.documents["d1"].chunk_ids
    assert len(docstore.docs) == sum(len(r.chunk_ids) for r in index.documents.values())
    assert index.chunk_index.index_struct.nodes_dict == {}  # no per-node entry in the index struct
    assert sorted(index.summaries) == sorted(index.documents)
    # filters are checked against the store's columns, as against the nodes
    assert index.filter_vocabulary.keys == default_index.filter_vocabulary.keys
    assert {"category", "year", "doc_id", "ref_doc_id"} <= set(index.filter_vocabulary.keys)


def test_a_columnar_index_over_user_nodes_keeps_links_and_text(lexical):
    nodes = [
        TextNode(id_=f"c{i}", text=text, metadata={"doc_id": doc})
        for i, (doc, text) in enumerate(
            [("a", "alpha clause on notice"), ("a", "alpha liability cap"), ("b", "beta warranty period")]
        )
    ]
    index = RecursiveIndex.from_nodes(nodes, embed_model=lexical, **_columnar())
    hits = RecursiveSummaryRetriever(index, similarity_top_k=2).retrieve("warranty period")
    assert hits[0].node.node_id == "c2" and hits[0].node.text == "beta warranty period"


# ------------------------------------------------------------------ persistence
def _retriever(index, **options):
    return RecursiveSummaryRetriever(index, similarity_top_k=4, **options)


def _update(target):
    changes = make_documents(2, seed=7, prefix="new") + [make_documents(1, seed=3, prefix="d")[0]]
    target.add_documents(changes)
    target.delete_document("d4")


def test_a_persisted_columnar_index_reloads_updates_and_persists_only_what_changed(embedding, tmp_path):
    default_index, columnar_index = _pair(embedding)
    default, columnar = _retriever(default_index), _retriever(columnar_index)
    root = tmp_path / "index"
    columnar.persist(root)
    loaded = _load(root, embedding)
    assert isinstance(loaded.index.chunk_index.vector_store, ColumnarVectorStore)
    assert isinstance(loaded._levels().chunk_bm25, StoreBM25Retriever)
    assert loaded.calibration == columnar.calibration  # persisted: not measured again
    assert same_answers(recursive_answers(loaded), recursive_answers(default))
    vectors_file = next((root / "MANIFEST.json").parent.glob("gen-*/chunks/*.npy"))
    first_inode = vectors_file.stat().st_ino
    _update(default)
    _update(loaded)
    loaded.persist(root)
    again = _load(root, embedding)
    assert same_answers(recursive_answers(again), recursive_answers(default))
    # the second generation links the first one's segment files instead of writing them again
    carried = [p for p in root.glob("gen-*/chunks/*.npy") if p.name == vectors_file.name]
    assert [p.stat().st_ino for p in carried] == [first_inode]
    assert not vectors_file.exists()  # the first generation itself was retired
    assert sorted(p.name for p in root.iterdir() if p.name.endswith(".sqlite3")) == [
        "chunks.rows.sqlite3",
        "documents.rows.sqlite3",
        "summaries.rows.sqlite3",
        "summaries_cache.rows.sqlite3",
    ]
    # the records are rows too: the update's persist wrote the three documents it changed
    # (two added, one replaced) and marked the deleted one, not all of them again
    index_json = json.loads(next(root.glob("gen-*/index.json")).read_text())
    assert index_json["init_parameters"]["documents"] is None
    with sqlite3.connect(root / "documents.rows.sqlite3") as db:
        assert db.execute("SELECT COUNT(*) FROM rows WHERE added = 2").fetchone() == (3,)
        assert db.execute("SELECT node_id FROM rows WHERE deleted = 2 ORDER BY node_id").fetchall() == [
            ("d0",),
            ("d4",),
        ]
    assert again.index.documents == default.index.documents


def test_a_columnar_index_that_listed_its_records_in_index_json_loads_and_moves_them_to_rows(
    embedding, tmp_path, monkeypatch
):
    """The previous release kept a columnar index's document records and summaries in
    index.json and summary_cache.json; such a folder loads, and its next persist writes them as rows."""
    from llama_index_ext_recursive.recursive import persist as recursive_persist

    default_index, columnar_index = _pair(embedding)
    root = tmp_path / "index"
    write_files = recursive_persist._write_index_files
    monkeypatch.setattr(recursive_persist, "_write_records", lambda index, root, published: ({}, {}))
    monkeypatch.setattr(RecursiveIndex, "records_published", lambda *args: None)  # they stay in memory
    monkeypatch.setattr(
        recursive_persist,
        "_write_index_files",
        lambda index, staging, config, generation: write_files(index, staging, config),
    )
    _retriever(columnar_index).persist(root)
    monkeypatch.undo()
    assert not (root / "documents.rows.sqlite3").exists()
    assert (next(root.glob("gen-*")) / "summary_cache.json").exists()
    old = _load(root, embedding)
    expected = recursive_answers(_retriever(default_index))
    assert same_answers(recursive_answers(old), expected)
    old.persist(root)
    assert not list(root.glob("gen-*/summary_cache.json"))
    moved = _load(root, embedding)
    assert moved.index.documents == default_index.documents
    assert moved.index.summary_cache.entries == default_index.summary_cache.entries
    assert same_answers(recursive_answers(moved), expected)


def test_a_failed_persist_leaves_the_published_index_and_the_next_one_succeeds(embedding, tmp_path, monkeypatch):
    from llama_index_ext_recursive.recursive import persist as recursive_persist

    _, index = _pair(embedding)
    root = tmp_path / "index"
    _retriever(index).persist(root)
    loaded = _load(root, embedding)
    before = recursive_answers(loaded)
    _update(loaded)
    after = recursive_answers(loaded)
    assert after != before

    def broken(folder, data):
        raise OSError("disk full")

    monkeypatch.setattr(recursive_persist, "write_config", broken)
    with pytest.raises(OSError, match="disk full"):
        loaded.persist(root)
    assert same_answers(recursive_answers(_load(root, embedding)), before)
    monkeypatch.undo()
    loaded.persist(root)
    assert same_answers(recursive_answers(_load(root, embedding)), after)


def test_another_writer_or_another_index_in_the_folder_is_refused(embedding, tmp_path):
    from llama_index_ext_recursive.persist import PersistError

    _, index = _pair(embedding)
    root = tmp_path / "index"
    _retriever(index).persist(root)
    first = _load(root, embedding)
    second = _load(root, embedding)
    first.delete_document("d1")
    first.persist(root)
    second.delete_document("d2")
    with pytest.raises(PersistError, match="another writer"):
        second.persist(root)
    assert "d1" not in _load(root, embedding).index.documents
    manifest = (root / "MANIFEST.json").read_bytes()
    _, fresh = _pair(embedding)  # a new build is not written over the rows of the one in the folder
    with pytest.raises(PersistError, match="persist into an empty folder"):
        _retriever(fresh).persist(root)
    assert (root / "MANIFEST.json").read_bytes() == manifest
    with pytest.raises(PersistError, match="persisted with it"):  # a level is persisted by its index
        first.index.chunk_index.vector_store.persist()


# ------------------------------------------------------------------ streaming build
def test_a_streamed_build_in_small_batches_answers_as_the_default(embedding, monkeypatch):
    """Documents from a generator are chunked, summarized, embedded and stored a few at a time;
    the index answers as one built from the whole list in memory."""
    from llama_index_ext_recursive.recursive import build

    monkeypatch.setattr(build, "STREAM_DOCUMENTS", 3)
    monkeypatch.setattr(build, "STREAM_NODES", 7)
    chunk_store = ColumnarVectorStore(tokenizer=MultilingualTokenizer())
    stored_while_reading = []

    def documents():
        for document in make_documents():
            stored_while_reading.append(chunk_store.node_count)
            yield document

    streamed = RecursiveIndex.from_documents(
        documents(),
        embed_model=embedding,
        node_parser=chunk_parser(),
        chunk_vector_store=chunk_store,
        summary_vector_store=ColumnarVectorStore(tokenizer=MultilingualTokenizer()),
    )
    assert stored_while_reading[0] == 0 and stored_while_reading[-1] > 0  # indexed before the stream ended
    assert chunk_store._postings.segment_count == 1  # the batches' segments were merged at the end
    default = RecursiveIndex.from_documents(make_documents(), embed_model=embedding, node_parser=chunk_parser())
    assert streamed.documents == default.documents
    for options in MODES:
        assert same_answers(
            recursive_answers(_retriever(streamed, **options)), recursive_answers(_retriever(default, **options))
        )


def test_a_stream_whose_documents_are_not_together_or_reuse_ids_is_refused_by_name(embedding, monkeypatch):
    from llama_index_ext_recursive.recursive import build as build_module

    monkeypatch.setattr(build_module, "STREAM_NODES", 2)

    def node(node_id, doc):
        return TextNode(id_=node_id, text=f"text of {node_id}", metadata={"doc_id": doc})

    def build(nodes):
        return RecursiveIndex.from_nodes(nodes, embed_model=embedding, **_columnar())

    with pytest.raises(ValueError, match="the nodes of document 'a' are not together"):
        build(iter([node("a1", "a"), node("a2", "a"), node("b1", "b"), node("b2", "b"), node("a3", "a")]))
    with pytest.raises(ValueError, match="node id 'x' of document 'b' is already indexed as a chunk of document 'a'"):
        build(iter([node("x", "a"), node("a2", "a"), node("x", "b")]))  # across batches: the store is asked
    with pytest.raises(ValueError, match="node id 'x' is used in two documents, 'a' and 'b'"):
        build(iter([node("x", "a"), node("x", "b")]))  # within a batch
    with pytest.raises(ValueError, match="no nodes to index"):
        build(iter([TextNode(id_="blank", text="  ", metadata={"doc_id": "a"})]))
    # a list needs no order: it is grouped whole, then indexed in batches
    index = build([node("a1", "a"), node("b1", "b"), node("c1", "c"), node("a2", "a"), node("b2", "b")])
    assert index.documents["a"].chunk_ids == ["a1", "a2"] and index.documents["b"].chunk_ids == ["b1", "b2"]


def test_columnar_stores_without_a_keyword_column_still_search_hybrid(embedding):
    """Stores created without tokenizer=: the BM25 levels are built in memory from the stored
    nodes, and the answers are the default storage's."""
    default_index, _ = _pair(embedding)
    plain = RecursiveIndex.from_documents(
        make_documents(),
        embed_model=embedding,
        node_parser=chunk_parser(),
        chunk_vector_store=ColumnarVectorStore(),
        summary_vector_store=ColumnarVectorStore(),
    )
    levels = _retriever(plain)._levels()
    assert isinstance(levels.chunk_bm25, MultilingualBM25Retriever)
    assert same_answers(recursive_answers(_retriever(plain)), recursive_answers(_retriever(default_index)))


# ------------------------------------------------------------------ checkpointed build
class _Killed(BaseException):
    """Stands for the process being killed: nothing of the build's memory survives it."""


def _stream(documents, kill_at=None, seen=None):
    for position, document in enumerate(documents):
        if position == kill_at:
            raise _Killed
        if seen is not None:
            seen(position)
        yield document


def _build_into(root, embedding, documents, **kwargs):
    return RecursiveSummaryRetriever.from_documents(
        documents,
        persist_dir=root,
        embed_model=embedding,
        node_parser=chunk_parser(),
        similarity_top_k=4,
        checkpoint_nodes=10,
        **_columnar(),
        **kwargs,
    )


def test_a_checkpointed_build_killed_midway_resumes_and_answers_as_one_build(embedding, tmp_path, monkeypatch, caplog):
    """persist_dir= persists the streaming build every checkpoint_nodes chunks, so what it holds
    in memory is bounded, and the same call after a kill resumes from the last checkpoint."""
    from llama_index_ext_recursive.persist import published_generation
    from llama_index_ext_recursive.recursive import build

    monkeypatch.setattr(build, "STREAM_DOCUMENTS", 2)
    monkeypatch.setattr(build, "STREAM_NODES", 6)
    root = tmp_path / "index"
    generations, pending = [], []

    def seen(position):
        generations.append(published_generation(root) if (root / "MANIFEST.json").exists() else 0)

    with pytest.raises(_Killed):
        _build_into(root, embedding, _stream(make_documents(), kill_at=13, seen=seen))
    assert generations[0] == 0 and generations[-1] >= 1  # checkpoints were published during the stream
    with caplog.at_level("WARNING"):
        interrupted = _load(root, embedding)
    assert "interrupted after" in caplog.text
    kept = set(interrupted.index.documents)
    assert kept and kept < {f"d{i}" for i in range(13)}  # up to the last checkpoint, nothing after it
    assert interrupted.index.partial

    chunk_stores = []
    original = RecursiveIndex.not_indexed

    def spy(self, groups):
        chunk_stores.append(self.chunk_index.vector_store)
        pending.append(len(self.chunk_index.vector_store._pending))
        return original(self, groups)

    monkeypatch.setattr(RecursiveIndex, "not_indexed", spy)
    chunked = []
    resumed = _build_into(root, embedding, _stream(make_documents(), seen=chunked.append))
    assert len(chunked) == 20  # the whole stream is read again; the indexed documents are skipped
    assert max(pending) <= 10 + 6  # rows held in memory between checkpoints: bounded, not the corpus
    assert not resumed.index.partial and not _load(root, embedding).index.partial
    default = RecursiveIndex.from_documents(make_documents(), embed_model=embedding, node_parser=chunk_parser())
    assert resumed.index.documents == default.documents
    assert _load(root, embedding).index.summary_cache.entries == default.summary_cache.entries
    assert same_answers(recursive_answers(_load(root, embedding)), recursive_answers(_retriever(default)))


def test_a_checkpointed_build_never_replaces_a_finished_index_or_takes_changed_documents(
    embedding, tmp_path, monkeypatch
):
    from llama_index_ext_recursive.persist import PersistError
    from llama_index_ext_recursive.recursive import build

    monkeypatch.setattr(build, "STREAM_DOCUMENTS", 2)
    monkeypatch.setattr(build, "STREAM_NODES", 6)

    root = tmp_path / "index"
    _build_into(root, embedding, iter(make_documents(4)))
    manifest = (root / "MANIFEST.json").read_bytes()
    with pytest.raises(PersistError, match="holds a finished index of 4 documents"):
        _build_into(root, embedding, iter(make_documents(4)))
    assert (root / "MANIFEST.json").read_bytes() == manifest
    with pytest.raises(ValueError, match="persist_dir= checkpoints and resumes the build itself"):
        _build_into(tmp_path / "other", embedding, iter(make_documents(4)), checkpoint=print)
    other = tmp_path / "changed"
    with pytest.raises(_Killed):
        _build_into(other, embedding, _stream(make_documents(), kill_at=12))
    changed = make_documents()
    changed[0] = Document(text="a new text entirely", metadata=changed[0].metadata)
    with pytest.raises(ValueError, match="document 'd0' changed since the interrupted build indexed it"):
        _build_into(other, embedding, iter(changed))
    with pytest.raises(ValueError, match="this index is complete"):
        RecursiveIndex.from_nodes([], resume=_load(root, embedding).index)


def test_persist_dir_with_the_default_storage_builds_then_persists(embedding, tmp_path):
    root = tmp_path / "index"
    built = RecursiveSummaryRetriever.from_documents(
        make_documents(6), persist_dir=root, embed_model=embedding, node_parser=chunk_parser(), similarity_top_k=4
    )
    assert same_answers(recursive_answers(_load(root, embedding)), recursive_answers(built))


def test_an_update_reusing_another_documents_chunk_id_is_refused_by_the_store(embedding):
    """The columnar index asks its chunk store who owns the new ids (no map of every chunk)."""
    _, index = _pair(embedding)
    taken = index.documents["d1"].chunk_ids[0]
    with pytest.raises(
        ValueError, match=f"node id '{taken}' of document 'new' is already indexed as a chunk of document 'd1'"
    ):
        index.add_nodes([TextNode(id_=taken, text="other text", metadata={"doc_id": "new"})])
    assert "new" not in index.documents
    assert index.add_nodes([TextNode(id_=taken, text="d1 rewritten", metadata={"doc_id": "d1"})]) == ["d1"]


def test_each_chunk_is_tokenised_once_for_both_levels_with_the_terms_of_the_whole_texts(embedding):
    """level_tokens splits the chunk and document texts into pieces and tokenises each once;
    the terms are those of the whole texts, English and Chinese, headers and templates included."""
    from llama_index_ext_recursive.recursive.build import build_documents, group_nodes
    from llama_index_ext_recursive.recursive.index import level_tokens, search_texts

    nodes = SentenceSplitter(chunk_size=64, chunk_overlap=0).get_nodes_from_documents(make_documents(10))
    nodes[3].text_template = "<{metadata_str}> {content} (end)"  # not header + text: tokenised whole
    nodes[4].metadata["title"] = "Über-Verträge 合同终止 e-mail C57BL/6"
    built = build_documents(group_nodes(nodes))
    tokenizer = MultilingualTokenizer()
    chunk_tokens, summary_tokens = level_tokens(built, tokenizer, workers=1)
    assert chunk_tokens == [tokenizer(n.get_content(metadata_mode=MetadataMode.EMBED)) for n in built.chunk_nodes]
    texts = search_texts(built.summary_nodes, built.records, built.chunk_nodes)
    assert summary_tokens == [tokenizer(text) for text in texts]
    assert any("合同" in tokens for tokens in summary_tokens) and "end" in chunk_tokens[3]


def test_a_streamed_build_trains_the_approximate_step_once_at_its_end(embedding, monkeypatch):
    from llama_index_ext_recursive.columnar.vectors import VectorColumn
    from llama_index_ext_recursive.recursive import build

    monkeypatch.setattr(build, "STREAM_NODES", 7)
    trained = []
    train = VectorColumn._train

    def counting(self):
        trained.append(self.row_count)
        train(self)

    monkeypatch.setattr(VectorColumn, "_train", counting)
    chunks = ColumnarVectorStore(tokenizer=MultilingualTokenizer(), approximate_threshold=8)
    summaries = ColumnarVectorStore(tokenizer=MultilingualTokenizer(), approximate_threshold=1000)
    index = RecursiveIndex.from_documents(
        iter(make_documents()),
        embed_model=embedding,
        node_parser=chunk_parser(),
        chunk_vector_store=chunks,
        summary_vector_store=summaries,
    )
    rows = chunks.node_count
    assert rows > 4 * 8 and trained == [rows]  # not at 8 rows and again at 32 on the way
    assert chunks._vectors.approximate  # the end trained it
    chunks.add([TextNode(id_="later", text="x", embedding=[1.0] * chunks.dimension, metadata={})])
    assert trained == [rows]  # the build's deferral ended with it; training on growth is back
    assert chunks._vectors.train_on_append and index.documents


def test_summaries_and_records_of_a_columnar_index_are_read_when_asked_for(lexical, tmp_path, monkeypatch):
    """Opening a columnar index reads no summary, record or cached summary (at 2M chunks, 100k
    summaries took 9 s of a 13 s open and the records 5 s): each is read from its rows when a
    query or a caller asks, with the default storage's text, metadata and document-level filter
    keys, through updates."""
    default_index, index = _pair(lexical)
    assert isinstance(index.summaries, StoredSummaries)
    for doc_id, summary in default_index.summaries.items():
        assert index.summaries[doc_id].get_content() == summary.get_content()
        assert index.summaries[doc_id].metadata == summary.metadata
    assert index.document_keys == default_index.document_keys == {"doc_id", "category", "year"}
    RecursiveSummaryRetriever(index).persist(tmp_path / "kb")
    asked = []
    original = ColumnarVectorStore.nodes_by_id
    monkeypatch.setattr(ColumnarVectorStore, "nodes_by_id", lambda self, ids: asked.extend(ids) or original(self, ids))
    for method in ("item", "items"):  # no record or cached summary is read either
        monkeypatch.setattr(RowStore, method, lambda self, *args, name=method: asked.append(name))
    loaded = _load(tmp_path / "kb", lexical).index
    assert asked == [] and len(loaded.summaries) == len(default_index.summaries)
    monkeypatch.undo()
    assert isinstance(loaded.documents, StoredRecords) and loaded.documents.changes == {}
    assert dict(loaded.documents.items()) == default_index.documents
    cache = loaded.summary_cache.entries  # read when asked for too, nothing held
    assert isinstance(cache, PublishedTexts) and cache.added == {}
    assert dict(cache.items()) == default_index.summary_cache.entries
    cached_before = set(cache)
    assert loaded.summary_node_id("d3") == default_index.summaries["d3"].node_id
    for target in (default_index, loaded):
        _update(target)
    assert sorted(loaded.summaries) == sorted(loaded.documents) == sorted(default_index.summaries)
    assert loaded.summaries["new1"].get_content() == default_index.summaries["new1"].get_content()
    assert loaded.document_keys == default_index.document_keys
    # the update's new summaries wait in memory for the next persist, which publishes them
    assert set(loaded.summary_cache.entries.added) == set(default_index.summary_cache.entries) - cached_before
    RecursiveSummaryRetriever(loaded).persist(tmp_path / "kb")
    assert loaded.summary_cache.entries.added == {}
    assert dict(_load(tmp_path / "kb", lexical).index.summary_cache.entries.items()) == dict(
        default_index.summary_cache.entries
    )
    # a summary row the records name but the store lost is an error naming the document
    loaded.summary_index.vector_store.delete_nodes([loaded.summary_node_id("d2")])
    with pytest.raises(LinkError, match="document 'd2'.*out of sync"):
        loaded.summaries["d2"]
