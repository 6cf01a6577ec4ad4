"""The bundled sample corpus: 12 multi-section documents (English and Chinese)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from importlib import resources
from pathlib import Path
from typing import Any

from llama_index.core.schema import Document
from llama_index.core.vector_stores.types import MetadataInfo, VectorStoreInfo

from llama_index_ext_recursive.recursive.build import default_node_parser


def _read_jsonl(name: str) -> list[dict]:
    text = (
        resources.files("llama_index_ext_recursive").joinpath("sample_data").joinpath(name).read_text(encoding="utf-8")
    )
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def load_sample_documents() -> list[Document]:
    """The sample corpus as Documents (``doc_id``, ``title`` and metadata set)."""
    return [
        Document(
            id_=row["doc_id"],
            text=row["text"],
            metadata={"doc_id": row["doc_id"], "title": row["title"], **row["metadata"]},
        )
        for row in _read_jsonl("corpus.jsonl")
    ]


def sample_vector_store_info() -> VectorStoreInfo:
    """The sample corpus's metadata schema, as an auto-retriever needs it described."""
    return VectorStoreInfo(
        content_info="Short articles on everyday topics (baking, bees, solar power, history, sport, "
        "software, company policy, tea, recycling, railways, gardening), in English and Chinese",
        metadata_info=[
            MetadataInfo(
                name="category",
                type="str",
                description="Topic area, one of food, biology, energy, history, sports, "
                "software, policy, environment, transport, gardening",
            ),
            MetadataInfo(name="year", type="int", description="Year the document was published"),
            MetadataInfo(
                name="language",
                type="str",
                description="Language of the document: en (English) or zh (Chinese)",
            ),
            MetadataInfo(
                name="source",
                type="str",
                description="Kind of publication: blog, encyclopedia, manual or handbook",
            ),
        ],
    )


def load_sample_questions() -> list[dict]:
    """Sample questions with the ``doc_id`` that answers each and an answer snippet."""
    return _read_jsonl("questions.jsonl")


def _relevant_chunks(answer: str, chunks: dict[str, str], where: str) -> list[str]:
    """Chunks containing ``answer``; else those containing its longest prefix found."""
    for length in range(len(answer), 0, -1):
        prefix = answer[:length]
        hits = [chunk_id for chunk_id, text in chunks.items() if prefix in text]
        if hits:
            return hits
    raise ValueError(f"{where}: no chunk of the gold document contains any prefix of {answer!r}")


def _write_jsonl(path: Path, rows: Iterable[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")


def write_sample_dataset(path: str | Path) -> Path:
    """Write the sample corpus and questions as a BEIR-layout dataset; return its directory.

    Runs the evaluation (``llama-recursive eval --data <path>``, or
    ``BeirDataset.load``) offline with no external data. Deterministic:

    - ``corpus.jsonl``: the 12 documents chunked by
      :func:`~llama_index_ext_recursive.recursive.build.default_node_parser` (sized with
      the title, which is embedded with each chunk), ids ``<doc_id>_c<i>``,
      ``metadata`` = ``doc_id`` plus the document's metadata;
    - ``documents.jsonl``: the whole documents, ``metadata.chunk_ids`` in order;
    - ``queries.jsonl``: the 24 questions, ids ``q1`` ... ``q24`` in
      ``questions.jsonl`` order, ``metadata.gold_doc_id``;
    - ``qrels/test.tsv``: relevant = every chunk of the gold document that
      contains ``answer_contains`` (if a chunk boundary splits it: every chunk
      containing its longest prefix found);
    - ``qrels/test.doc-level.tsv``: each question's gold document.

    Existing files of the same names are overwritten.
    """
    root = Path(path)
    (root / "qrels").mkdir(parents=True, exist_ok=True)
    parser = default_node_parser()
    corpus_rows: list[dict[str, Any]] = []
    document_rows: list[dict[str, Any]] = []
    chunks_of: dict[str, dict[str, str]] = {}
    for row in _read_jsonl("corpus.jsonl"):
        doc_id, title = row["doc_id"], row["title"]
        nodes = parser.get_nodes_from_documents([Document(text=row["text"], metadata={"title": title})])
        chunks = {f"{doc_id}_c{i}": node.get_content() for i, node in enumerate(nodes)}
        chunks_of[doc_id] = chunks
        for chunk_id, text in chunks.items():
            corpus_rows.append(
                {"_id": chunk_id, "title": title, "text": text, "metadata": {"doc_id": doc_id, **row["metadata"]}}
            )
        document_rows.append(
            {
                "_id": doc_id,
                "title": title,
                "text": row["text"],
                "metadata": {"chunk_ids": list(chunks), **row["metadata"]},
            }
        )
    query_rows: list[dict[str, Any]] = []
    qrels = ["query-id\tcorpus-id\tscore\n"]
    doc_qrels = ["query-id\tcorpus-id\tscore\n"]
    for number, question in enumerate(load_sample_questions(), 1):
        qid, gold = f"q{number}", question["doc_id"]
        if gold not in chunks_of:
            raise ValueError(f"questions.jsonl:{number}: unknown doc_id {gold!r}")
        query_rows.append(
            {
                "_id": qid,
                "text": question["question"],
                "metadata": {"gold_doc_id": gold, "answer_contains": question["answer_contains"]},
            }
        )
        for chunk_id in _relevant_chunks(question["answer_contains"], chunks_of[gold], f"questions.jsonl:{number}"):
            qrels.append(f"{qid}\t{chunk_id}\t1\n")
        doc_qrels.append(f"{qid}\t{gold}\t1\n")
    _write_jsonl(root / "corpus.jsonl", corpus_rows)
    _write_jsonl(root / "documents.jsonl", document_rows)
    _write_jsonl(root / "queries.jsonl", query_rows)
    (root / "qrels" / "test.tsv").write_text("".join(qrels), encoding="utf-8")
    (root / "qrels" / "test.doc-level.tsv").write_text("".join(doc_qrels), encoding="utf-8")
    return root
