"""Cached values as JSON: a query's vector, a retriever's hits. Data only, never pickle.

Encoded and decoded with ``orjson``: a hit is mostly decoding, and it reads
JSON four times faster than the standard library.

A shared cache is written by every process that uses it, so what is read back
is treated as untrusted: a value that is not JSON of the expected shape (a
foreign writer, a truncated value, another format version) decodes to
``None`` and is counted as a miss. Nodes go through LlamaIndex's
``doc_to_json``/``json_to_doc``, which build only the node classes they know.
"""

from __future__ import annotations

import math
from typing import Any

import orjson
from llama_index.core.schema import NodeWithScore
from llama_index.core.storage.docstore.utils import doc_to_json, json_to_doc
from pydantic import ValidationError

from llama_index_ext_recursive.results import DocumentEvidence, DocumentWithScore, ExplainedNodeWithScore, Explanation

__all__ = ["FORMAT", "decode_hits", "decode_vector", "encode_hits", "encode_vector"]

# the version of what this module writes; another is read as a miss. 2: recursive scores in [0, 1]
# (hits cached by an older release would rank the same but on another scale)
FORMAT = 2


def encode_vector(vector: list[float]) -> str:
    return _dumps({"v": FORMAT, "vector": [float(x) for x in vector]})


def decode_vector(text: str) -> list[float] | None:
    """The vector, or ``None`` unless ``text`` is one of ours holding finite numbers."""
    data = _loaded(text)
    vector = data.get("vector") if data is not None else None
    if not isinstance(vector, list) or not vector:
        return None
    if not all(type(x) in (int, float) and math.isfinite(x) for x in vector):
        return None
    return [float(x) for x in vector]


def encode_hits(hits: list[NodeWithScore]) -> str | None:
    """The hits as JSON, or ``None`` when one cannot be stored as data (an explanation part
    that is not plain data, such as an auto-retriever's), so the result is not cached."""
    rows = []
    for hit in hits:
        row: dict[str, Any] = {"node": doc_to_json(hit.node), "score": hit.score}
        if isinstance(hit, DocumentWithScore):
            row["evidence"] = None if hit.evidence is None else hit.evidence.model_dump(mode="json")
        elif isinstance(hit, ExplainedNodeWithScore):
            if hit.explanation.auto is not None:
                return None
            row["explanation"] = hit.explanation.model_dump(mode="json")
        rows.append(row)
    return _dumps({"v": FORMAT, "hits": rows})


def decode_hits(text: str) -> list[NodeWithScore] | None:
    """The hits, rebuilt as new objects, or ``None`` unless ``text`` is one of ours."""
    data = _loaded(text)
    rows = data.get("hits") if data is not None else None
    if not isinstance(rows, list):
        return None
    hits: list[NodeWithScore] = []
    try:
        for row in rows:
            score = row["score"]
            if score is not None and (type(score) not in (int, float) or not math.isfinite(score)):
                return None
            node = json_to_doc(row["node"])
            if "evidence" in row:
                evidence = None if row["evidence"] is None else DocumentEvidence.model_validate(row["evidence"])
                hits.append(DocumentWithScore(node=node, score=score, evidence=evidence))
            elif "explanation" in row:
                explanation = Explanation.model_validate(row["explanation"])
                hits.append(ExplainedNodeWithScore(node=node, score=score, explanation=explanation))
            else:
                hits.append(NodeWithScore(node=node, score=score))
    except (KeyError, TypeError, ValueError, AttributeError, ValidationError):
        return None
    return hits


def _dumps(data: dict[str, Any]) -> str:
    return orjson.dumps(data).decode("utf-8")


def _loaded(text: str) -> dict[str, Any] | None:
    try:
        data = orjson.loads(text)  # strict JSON: NaN, Infinity and numbers beyond 64 bits are refused
    except (TypeError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("v") == FORMAT else None
