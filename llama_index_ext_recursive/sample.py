"""The bundled sample corpus: 12 multi-section documents (English and Chinese)."""

from __future__ import annotations

import json
from importlib import resources
from typing import Dict, List

from llama_index.core.schema import Document


def _read_jsonl(name: str) -> List[Dict]:
    text = resources.files("llama_index_ext_recursive").joinpath("sample_data", name).read_text(
        encoding="utf-8"
    )
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def load_sample_documents() -> List[Document]:
    """The sample corpus as Documents (``doc_id``, ``title`` and metadata set)."""
    return [
        Document(
            id_=row["doc_id"],
            text=row["text"],
            metadata={"doc_id": row["doc_id"], "title": row["title"], **row["metadata"]},
        )
        for row in _read_jsonl("corpus.jsonl")
    ]


def load_sample_questions() -> List[Dict]:
    """Sample questions with the ``doc_id`` that answers each and an answer snippet."""
    return _read_jsonl("questions.jsonl")
