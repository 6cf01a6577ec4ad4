"""Build-pipeline input hygiene: empty documents, iterables, duplicate ids, vectors, huge text."""

from __future__ import annotations

import logging
import random

import nltk.redos
import numpy as np
import pytest
from conftest import DIM, LexicalEmbedding, topic_nodes
from llama_index.core import Document
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.schema import IndexNode, MetadataMode, TextNode

from llama_index_ext_recursive import RecursiveSummaryRetriever
from llama_index_ext_recursive.recursive.build import (
    DOCUMENT_CONTEXT_KEY,
    ChunkContext,
    ChunkedNodes,
    NodeGroups,
    SummaryEmbedding,
    build_documents,
    check_new_node_ids,
    chunk_documents,
    default_node_parser,
    group_nodes,
    windowed_sentence_tokenizer,
)
from llama_index_ext_recursive.recursive.persist import node_parser_config, node_parser_from_config
from llama_index_ext_recursive.recursive.vectors import attach_embeddings

WORDS = "the bee colony queen worker nectar pollen summer hive honey flower season".split()


def one_line_prose(size: int, punctuation: bool, seed: int = 0) -> str:
    """``size`` characters of prose on one line: short sentences, or none at all."""
    rng = random.Random(seed)
    parts: list[str] = []
    total = 0
    while total < size:
        sentence = " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 6)))
        sentence = sentence.capitalize() + ". " if punctuation else sentence + " "
        parts.append(sentence)
        total += len(sentence)
    return "".join(parts)


def doc(doc_id: str, text: str) -> Document:
    return Document(id_=doc_id, text=text, metadata={"doc_id": doc_id, "title": doc_id})


def builder_warnings(caplog) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "llama_index_ext_recursive.recursive.build" and r.levelno == logging.WARNING
    ]


# ------------------------------------------------------------ empty documents
def test_empty_and_whitespace_documents_are_skipped_with_one_warning_naming_them(caplog):
    docs = [
        doc("bees", "Bees make honey."),
        doc("empty", ""),
        doc("blank", " \n\t\u3000 "),
        doc("solar", "Panels make power."),
    ]
    nodes = chunk_documents(docs)
    assert isinstance(nodes, ChunkedNodes) and isinstance(nodes, list)
    assert sorted({n.metadata["doc_id"] for n in nodes}) == ["bees", "solar"]
    assert nodes.skipped_documents == ["empty", "blank"]
    (warning,) = builder_warnings(caplog)
    assert "2 of 4 documents" in warning and "'empty'" in warning and "'blank'" in warning


def test_many_skipped_documents_are_counted_and_the_first_few_named(caplog):
    docs = [doc(f"e{i}", "   ") for i in range(12)] + [doc("bees", "Bees make honey.")]
    nodes = chunk_documents(docs)
    assert len(nodes.skipped_documents) == 12
    (warning,) = builder_warnings(caplog)
    assert "12 of 13" in warning and "'e0'" in warning and "and 7 more" in warning
    assert "'e11'" not in warning


def test_every_document_empty_is_a_value_error_saying_so():
    with pytest.raises(ValueError, match=r"every document was empty.*'a', 'b'"):
        chunk_documents([doc("a", ""), doc("b", "  ")])


def test_from_documents_skips_an_empty_document_instead_of_a_link_error(real_model, caplog):
    docs = [
        doc("bees", "The queen bee lays eggs. Worker bees collect nectar from flowers."),
        doc("empty", ""),
        doc("blank", "   "),
        doc("solar", "Solar panels convert sunlight into electricity."),
    ]
    retriever = RecursiveSummaryRetriever.from_documents(docs, embed_model=real_model)
    assert sorted(retriever.documents) == ["bees", "solar"]
    hits = retriever.retrieve("Which insects collect nectar?")
    assert hits[0].node.metadata["doc_id"] == "bees"
    assert len(builder_warnings(caplog)) == 1


def test_blank_nodes_are_skipped_index_nodes_kept_and_emptied_documents_dropped(caplog):
    nodes = topic_nodes() + [
        TextNode(id_="bees-blank", text=" \n ", metadata={"doc_id": "bees"}),
        TextNode(id_="ghost-0", text="", metadata={"doc_id": "ghost"}),
        TextNode(id_="ghost-1", text="\t", metadata={"doc_id": "ghost"}),
        IndexNode(id_="solar-link", text="", index_id="bees", metadata={"doc_id": "solar"}),
    ]
    groups = group_nodes(nodes)
    assert isinstance(groups, NodeGroups)
    assert sorted(groups) == ["bees", "bread", "solar"]
    assert [n.node_id for n in groups["bees"]] == ["bees-0", "bees-1", "bees-2"]
    assert "solar-link" in [n.node_id for n in groups["solar"]]
    assert groups.skipped_nodes == ["bees-blank", "ghost-0", "ghost-1"]
    assert groups.skipped_documents == ["ghost"]
    (warning,) = builder_warnings(caplog)
    assert "3 blank nodes" in warning and "'ghost'" in warning


def test_from_nodes_with_only_blank_nodes_says_every_document_was_empty(lexical):
    nodes = [TextNode(id_=f"n{i}", text=" ", metadata={"doc_id": "d"}) for i in range(2)]
    with pytest.raises(ValueError, match="every document was empty.*'n0', 'n1'.*'d'"):
        RecursiveSummaryRetriever.from_nodes(nodes, embed_model=lexical)


def test_group_nodes_carries_over_the_documents_chunk_documents_skipped():
    nodes = chunk_documents([doc("bees", "Bees make honey."), doc("empty", "")])
    assert group_nodes(nodes).skipped_documents == ["empty"]


# ------------------------------------------------------------ any iterable
def test_generators_of_documents_and_nodes_are_accepted():
    listed = chunk_documents([doc("bees", "Bees make honey."), doc("solar", "Panels make power.")])
    generated = chunk_documents(doc(i, t) for i, t in [("bees", "Bees make honey."), ("solar", "Panels make power.")])
    assert [n.text for n in generated] == [n.text for n in listed]
    groups = group_nodes(n for n in topic_nodes())
    assert sorted(groups) == ["bees", "bread", "solar"] and len(groups["bees"]) == 3


def test_non_documents_and_lone_items_are_clear_type_errors():
    with pytest.raises(TypeError, match=r"documents\[1\] is a TextNode, not a Document.*from_nodes"):
        chunk_documents(iter([doc("a", "text"), TextNode(text="x")]))
    with pytest.raises(TypeError, match="got one Document: wrap it in a list"):
        chunk_documents(doc("a", "text"))
    with pytest.raises(TypeError, match="got one str"):
        chunk_documents("some text")
    with pytest.raises(TypeError, match=r"nodes\[0\] is a str, not a node"):
        group_nodes(["text"])


# ------------------------------------------------------------ duplicate node ids
def test_duplicate_node_id_in_two_documents_names_both(lexical):
    nodes = [
        TextNode(id_="n1", text="Bees make honey.", metadata={"doc_id": "bees"}),
        TextNode(id_="n1", text="Panels make power.", metadata={"doc_id": "solar"}),
    ]
    with pytest.raises(
        ValueError, match=r"'n1' is used in two documents, 'bees' and 'solar' \(nodes\[0\] and nodes\[1\]\)"
    ):
        group_nodes(nodes)
    with pytest.raises(ValueError, match="'n1' is used in two documents"):
        RecursiveSummaryRetriever.from_nodes(nodes, embed_model=lexical)
    assert lexical.calls == 0  # refused before anything was embedded


def test_duplicate_node_id_in_one_document_is_refused():
    nodes = topic_nodes() + [TextNode(id_="bees-1", text="Again.", metadata={"doc_id": "bees"})]
    with pytest.raises(ValueError, match=r"'bees-1' is used twice in document 'bees' \(nodes\[1\] and nodes\[9\]\)"):
        group_nodes(nodes)


def test_new_node_ids_may_be_reused_only_by_their_own_document():
    indexed = {"bees-0": "bees", "bees-1": "bees"}
    update = group_nodes([TextNode(id_="bees-0", text="New text.", metadata={"doc_id": "bees"})])
    check_new_node_ids(update, indexed)  # an update of the same document is fine
    moved = group_nodes([TextNode(id_="bees-1", text="Panels.", metadata={"doc_id": "solar"})])
    with pytest.raises(
        ValueError, match="'bees-1' of document 'solar' is already indexed as a chunk of document 'bees'"
    ):
        check_new_node_ids(moved, indexed)


# ------------------------------------------------------------ embedding vectors
class PoisonEmbedding(LexicalEmbedding):
    """Lexical vectors, but NaN for any text containing 'poison'."""

    def _get_text_embedding(self, text: str) -> list[float]:
        vector = self._vector(text)
        return [float("nan")] * DIM if "poison" in text else vector


def built_from(nodes):
    return build_documents(group_nodes(nodes))


def test_nan_vector_from_the_model_is_refused_naming_model_and_chunk():
    nodes = topic_nodes() + [TextNode(id_="bees-9", text="A poison sting.", metadata={"doc_id": "bees"})]
    built = built_from(nodes)
    with pytest.raises(
        ValueError,
        match=r"'poison-model' returned NaN or infinite values for chunk 'bees-9' of document 'bees' \(computed\)",
    ):
        attach_embeddings(built, PoisonEmbedding(model_name="poison-model"), SummaryEmbedding.CENTROID)
    assert all(n.embedding is None for n in built.chunk_nodes)  # nothing attached
    assert all(s.embedding is None for s in built.summary_nodes)


def test_from_nodes_refuses_a_nan_vector_before_indexing():
    nodes = topic_nodes() + [TextNode(id_="bees-9", text="A poison sting.", metadata={"doc_id": "bees"})]
    with pytest.raises(ValueError, match="'poison-model' returned NaN"):
        RecursiveSummaryRetriever.from_nodes(nodes, embed_model=PoisonEmbedding(model_name="poison-model"))


def test_supplied_vectors_of_another_dimension_or_infinite_are_refused(lexical):
    nodes = topic_nodes()
    for node in nodes:
        node.embedding = lexical.get_text_embedding(node.text)
    nodes[4].embedding = nodes[4].embedding[:10]
    with pytest.raises(
        ValueError,
        match=rf"10-dimensional vectors for chunk 'solar-1' .*supplied with the node.*holds {DIM}-dimensional",
    ):
        attach_embeddings(built_from(nodes), lexical)
    nodes[4].embedding = [float("inf")] * DIM
    with pytest.raises(ValueError, match="'lexical-test' returned NaN or infinite values for chunk 'solar-1'"):
        attach_embeddings(built_from(nodes), lexical)


def test_vectors_are_checked_against_the_dimension_of_the_index(lexical):
    assert attach_embeddings(built_from(topic_nodes()), lexical) == DIM
    with pytest.raises(ValueError, match=f"{DIM}-dimensional vectors for chunk .*holds 384-dimensional"):
        attach_embeddings(built_from(topic_nodes()), lexical, dim=384)


def test_blended_summary_vectors_are_checked_too():
    nodes = [
        TextNode(
            id_="p",
            text="Clean text.",
            metadata={"doc_id": "poison", "title": "poison"},
            excluded_embed_metadata_keys=["title"],
        )
    ]  # the chunk embeds cleanly
    with pytest.raises(ValueError, match="returned NaN or infinite values for the summary of 'poison'"):
        attach_embeddings(built_from(nodes), PoisonEmbedding(model_name="m"), SummaryEmbedding.BLEND)


# ------------------------------------------------------------ huge unbroken text
def test_long_single_line_text_is_chunked_by_the_default_parser():
    text = one_line_prose(300_000, punctuation=False)
    nodes = chunk_documents([doc("big", text)])
    assert nodes[0].start_char_idx == 0 and nodes[-1].end_char_idx == len(text.rstrip())
    assert all(text[n.start_char_idx : n.end_char_idx] == n.text for n in nodes)
    assert 150 < len(nodes) < 600  # ~256-token chunks, not one per window


def test_a_parser_timeout_names_the_document_and_the_windowed_tokenizer_avoids_it(monkeypatch):
    text = one_line_prose(300_000, punctuation=True)
    monkeypatch.setattr(nltk.redos, "DEFAULT_TIMEOUT", 0.05)  # upstream needs ~1 s for this text
    with pytest.raises(
        ValueError, match=r"document 'big' \(300,0\d\d characters\) could not be chunked: SentenceSplitter timed out"
    ):
        chunk_documents([doc("big", text)], SentenceSplitter(chunk_size=256, chunk_overlap=32))
    windowed = windowed_sentence_tokenizer(window=2000)
    parser = SentenceSplitter(chunk_size=256, chunk_overlap=32, chunking_tokenizer_fn=windowed)
    nodes = chunk_documents([doc("big", text)], parser)
    assert nodes[0].start_char_idx == 0 and nodes[-1].end_char_idx == len(text.rstrip())
    assert all(text[n.start_char_idx : n.end_char_idx] == n.text for n in nodes)


def test_windows_keep_every_character_and_cut_after_whitespace():
    for text in [("word " * 700 + "\n") * 100, one_line_prose(50_000, True), "x" * 25_000]:
        pieces = windowed_sentence_tokenizer(window=10_000)(text)
        assert "".join(pieces) == text and max(len(p) for p in pieces) <= 10_000
    lines = windowed_sentence_tokenizer(window=10_000)(("word " * 700 + "\n") * 100)
    assert sum(p.endswith("\n") for p in lines) >= 30  # cut at line breaks when there are some
    short = windowed_sentence_tokenizer(window=10_000)("Short text. Two sentences.")
    assert short == ["Short text. ", "Two sentences."]  # upstream's split, unchanged


def test_reloaded_sentence_splitter_keeps_the_windowed_tokenizer():
    text = one_line_prose(250_000, punctuation=False)
    plain = SentenceSplitter(chunk_size=256, chunk_overlap=32)
    assert len(plain._chunking_tokenizer_fn(text)) == 1  # upstream: one 250 kB "sentence"
    reloaded = node_parser_from_config(node_parser_config(default_node_parser()))
    pieces = reloaded._chunking_tokenizer_fn(text)
    assert len(pieces) == 3 and "".join(pieces) == text
    assert (reloaded.chunk_size, reloaded.chunk_overlap) == (256, 32)


def test_default_parser_chunks_ordinary_text_exactly_as_upstream():
    text = " ".join(f"Sentence number {i} is about bees and honey." for i in range(400))
    ours = default_node_parser().split_text(text)
    assert ours == SentenceSplitter(chunk_size=256, chunk_overlap=32).split_text(text)
    assert np.mean([len(c) for c in ours]) > 500


# ------------------------------------------------------------ document context
def _chunks(metadata: dict, excluded: list[str], texts=("The queen lays eggs.", "Workers gather nectar.")):
    return [
        TextNode(
            id_=f"{metadata['doc_id']}-{i}",
            text=t,
            metadata=dict(metadata),
            excluded_embed_metadata_keys=list(excluded),
        )
        for i, t in enumerate(texts)
    ]


def test_title_context_is_embedded_and_bm25_indexed_but_not_shown_to_the_llm():
    user = _chunks({"doc_id": "d1", "title": "Honeybee colonies"}, excluded=["title"])
    built = build_documents(group_nodes(user, "doc_id"), "doc_id", chunk_context=ChunkContext.TITLE)
    for chunk in built.chunk_nodes:
        assert chunk.metadata[DOCUMENT_CONTEXT_KEY] == "Honeybee colonies"
        assert "Honeybee colonies" in chunk.get_content(metadata_mode=MetadataMode.EMBED)
        assert f"{DOCUMENT_CONTEXT_KEY}: " not in chunk.get_content(metadata_mode=MetadataMode.LLM)
    assert all(DOCUMENT_CONTEXT_KEY not in n.metadata for n in user)  # the user's nodes are untouched
    # the content hash does not depend on the setting: an update compares it with the stored one
    plain = build_documents(group_nodes(user, "doc_id"), "doc_id", chunk_context=ChunkContext.NONE)
    assert plain.records["d1"].content_hash == built.records["d1"].content_hash
    assert all(DOCUMENT_CONTEXT_KEY not in c.metadata for c in plain.chunk_nodes)


def test_title_context_is_not_added_twice_nor_from_a_bare_id_nor_over_the_users_key():
    shown = _chunks({"doc_id": "d1", "title": "Honeybee colonies"}, excluded=[])  # the title is embedded already
    untitled = _chunks({"doc_id": "3f2a9c"}, excluded=[])  # only an id: nothing a model can read
    own = _chunks({"doc_id": "d3", "title": "Solar", DOCUMENT_CONTEXT_KEY: "mine"}, excluded=["title"])
    built = build_documents(group_nodes(shown + untitled + own, "doc_id"), "doc_id", chunk_context="title")
    by_doc = {d: [c for c in built.chunk_nodes if c.ref_doc_id == d] for d in ("d1", "3f2a9c", "d3")}
    assert all(DOCUMENT_CONTEXT_KEY not in c.metadata for c in by_doc["d1"] + by_doc["3f2a9c"])
    assert [c.metadata[DOCUMENT_CONTEXT_KEY] for c in by_doc["d3"]] == ["mine", "mine"]


def test_files_read_by_simple_directory_reader_are_titled_by_their_folder_and_name(tmp_path):
    from llama_index.core import SimpleDirectoryReader

    for package in ("bees", "kites"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text(f'"""The {package} package."""\n')
    documents = SimpleDirectoryReader(str(tmp_path), recursive=True).load_data()
    nodes = [  # as a node parser copies them
        TextNode(
            text=d.text,
            metadata=d.metadata,
            id_=f"n-{d.id_}",
            excluded_embed_metadata_keys=d.excluded_embed_metadata_keys,
        )
        for d in documents
    ]
    for node, document in zip(nodes, documents):
        node.metadata["doc_id"] = document.id_  # a UUID: no title of its own
    built = build_documents(group_nodes(nodes, "doc_id"), "doc_id", chunk_context="title")
    titles = {built.records[d.id_].title for d in documents}
    assert titles == {"bees/__init__.py", "kites/__init__.py"}
    # the reader embeds file_path, so each chunk's embedded text shows its title already
    assert all(DOCUMENT_CONTEXT_KEY not in c.metadata for c in built.chunk_nodes)
