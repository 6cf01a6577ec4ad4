"""The files of a saved :class:`~llama_index_ext_recursive.retrievers.bm25.MultilingualBM25Retriever`.

A folder holds bm25s's own index files, the nodes (``nodes.json``), the
settings as ``config.json`` in the package's configuration convention
(:mod:`llama_index_ext_recursive.config`) and, since terms format 2, the term
frequencies and row lengths the index was computed from (``terms.index.json``
naming the format, ``tf.csc.index.npy``, ``lengths.index.npy``), so that a
loaded retriever is updated without tokenising its nodes again
(:class:`~llama_index_ext_recursive.columnar.terms.Terms`; a retriever
with segments is written merged). Folders without them (format 1) still load,
and are indexed again from their nodes at their first change; so do folders of
older releases, whose settings are in ``retriever.json`` (``format_version`` 1).
Every file is checked for its shape and against the others, and a damaged
one is named in the :class:`~llama_index_ext_recursive.persist.PersistError`.

The functions here write and read plain values (the bm25s index, the term
statistics, the nodes, the configuration dict); the retriever's ``persist``
and ``from_persist_dir`` hand them over and build the retriever, so this
module stands below the retriever's.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import bm25s
import numpy as np
from llama_index.core.schema import BaseNode, MetadataMode
from llama_index.core.storage.docstore.utils import doc_to_json, json_to_doc
from llama_index.core.vector_stores.types import MetadataFilters

from llama_index_ext_recursive.columnar.terms import METHOD, Terms
from llama_index_ext_recursive.config import CONFIG_FILE, init_parameters, read_config, write_config
from llama_index_ext_recursive.filters import FilterPolicy, UnknownFilterPolicy
from llama_index_ext_recursive.persist import PersistError, load_json, load_json_object
from llama_index_ext_recursive.query import DEFAULT_TOP_K
from llama_index_ext_recursive.retrievers.nodes import refuse_duplicate_ids
from llama_index_ext_recursive.tokenizer import MultilingualTokenizer
from llama_index_ext_recursive.validation import check_count

LEGACY_FORMAT_VERSION = 1
LEGACY_SETTINGS_FILE = "retriever.json"
NODES_FILE = "nodes.json"
BM25_PARAMS_FILE = "params.index.json"
BM25_VOCAB_FILE = "vocab.index.json"
BM25_MATRIX_FILES = ("data.csc.index.npy", "indices.csc.index.npy", "indptr.csc.index.npy")
TERMS_FILE = "terms.index.json"  # {"format_version": 2}: the two files below are present
TERMS_FORMAT_VERSION = 2
TF_FILE = "tf.csc.index.npy"  # term frequency of each posting, aligned with data.csc.index.npy
LENGTHS_FILE = "lengths.index.npy"  # token count of each row


def write_bm25_files(
    folder: Path,
    bm25: bm25s.BM25,
    terms: Terms | None,
    nodes: Sequence[BaseNode],
    config: dict[str, Any],
    **kwargs: Any,
) -> None:
    """Write a bm25s index, its term statistics, its nodes and the retriever's
    configuration dict (``config.json``) into ``folder``; ``kwargs`` go to
    ``bm25s.BM25.save``. The index has no segments (see ``write_files``)."""
    bm25.save(str(folder), show_progress=False, **kwargs)
    if terms is not None:
        np.save(folder / TF_FILE, terms.tf, allow_pickle=False)
        np.save(folder / LENGTHS_FILE, terms.lengths, allow_pickle=False)
        (folder / TERMS_FILE).write_text(json.dumps({"format_version": TERMS_FORMAT_VERSION}), encoding="utf-8")
    (folder / NODES_FILE).write_text(
        json.dumps([doc_to_json(node) for node in nodes], ensure_ascii=False),
        encoding="utf-8",
    )
    write_config(folder, config)


def read_bm25_files(cls: type, folder: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """What :func:`write_bm25_files` wrote into ``folder`` (or a previous release's
    ``retriever.json`` layout), as the constructor arguments of ``cls`` (the
    retriever class the configuration must name): the data (``nodes``,
    ``existing_bm25``, ``existing_terms``) and the settings."""
    settings_path = folder / CONFIG_FILE
    try:
        if settings_path.exists():
            data = read_config(folder)
            settings = settings_from_config(init_parameters(cls, data))
        else:
            settings_path = folder / LEGACY_SETTINGS_FILE
            settings = _legacy_settings(settings_path)
    except (TypeError, ValueError) as exc:
        raise PersistError(f"{settings_path} holds invalid settings ({exc})") from exc
    nodes_path = folder / NODES_FILE
    raw_nodes = load_json(nodes_path)
    if not isinstance(raw_nodes, list) or not raw_nodes:
        raise PersistError(f"{nodes_path} holds no list of nodes: it is damaged; persist the retriever again")
    try:
        nodes = [json_to_doc(item) for item in raw_nodes]
    except (KeyError, TypeError, ValueError) as exc:
        raise PersistError(f"{nodes_path} holds an invalid node ({exc!r})") from exc
    try:
        refuse_duplicate_ids(nodes)
    except ValueError as exc:
        raise PersistError(f"{nodes_path} is damaged: {exc}") from exc
    bm25 = _load_bm25(folder, len(nodes), nodes_path)
    terms = _load_terms(folder, bm25) if (folder / TERMS_FILE).exists() else None
    return {"nodes": nodes, "existing_bm25": bm25, "existing_terms": terms}, settings


def settings_from_config(parameters: dict[str, Any]) -> dict[str, Any]:
    """Constructor arguments from :meth:`MultilingualBM25Retriever.to_dict`'s init parameters."""
    known = {
        "similarity_top_k",
        "metadata_mode",
        "tokenizer",
        "filters",
        "filter_policy",
        "unknown_filter_key",
    }
    unknown = set(parameters) - known
    if unknown:
        raise ValueError(f"unknown settings {sorted(unknown)}")
    out = dict(parameters)
    if "tokenizer" in out:
        out["tokenizer"] = MultilingualTokenizer.from_dict(out["tokenizer"])
    if out.get("filters") is not None:
        out["filters"] = MetadataFilters.model_validate(out["filters"])
    if "metadata_mode" in out:
        out["metadata_mode"] = MetadataMode(out["metadata_mode"])
    if "filter_policy" in out:
        out["filter_policy"] = FilterPolicy(out["filter_policy"])
    if out.get("unknown_filter_key") is not None:
        out["unknown_filter_key"] = UnknownFilterPolicy(out["unknown_filter_key"])
    check_count("similarity_top_k", out.get("similarity_top_k", DEFAULT_TOP_K))
    return out


def _legacy_settings(path: Path) -> dict[str, Any]:
    """Constructor arguments from a previous release's ``retriever.json``."""
    settings = load_json_object(path, ("format_version", "tokenizer"))
    if settings.get("format_version") != LEGACY_FORMAT_VERSION:
        raise PersistError(
            f"{path} has format_version {settings.get('format_version')!r}; "
            f"this version reads {LEGACY_FORMAT_VERSION}: persist the retriever again"
        )
    parameters = {k: v for k, v in settings.items() if k != "format_version"}
    # files written before the policy existed keep the constructor's default
    parameters.setdefault("unknown_filter_key", UnknownFilterPolicy.RAISE.value)
    return settings_from_config(parameters)


def _load_bm25(folder: Path, num_nodes: int, nodes_path: Path) -> bm25s.BM25:
    """Load the ``bm25s`` index in ``folder``, checking its files against each other."""
    params_path, vocab_path = folder / BM25_PARAMS_FILE, folder / BM25_VOCAB_FILE
    params = load_json_object(params_path, ("num_docs", "k1", "b", "method"))
    vocab = load_json_object(vocab_path)
    if not isinstance(params["num_docs"], int) or params["num_docs"] != num_nodes:
        raise PersistError(
            f"{params_path} indexes {params['num_docs']!r} documents but {nodes_path} holds "
            f"{num_nodes} nodes: the files are from different indexes; persist the retriever again"
        )
    if not vocab or not all(isinstance(i, int) and not isinstance(i, bool) for i in vocab.values()):
        raise PersistError(f"{vocab_path} is not a token vocabulary: it is damaged")
    try:
        bm25 = bm25s.BM25.load(str(folder), load_corpus=False, show_progress=False)
    except Exception as exc:  # bm25s raises OSError/ValueError/pickle errors alike
        raise PersistError(
            f"{folder}: the BM25 matrix files ({', '.join(BM25_MATRIX_FILES)}) are missing or "
            f"corrupted ({exc}); persist the retriever again"
        ) from exc
    data, indices, indptr = (np.asarray(bm25.scores[k]) for k in ("data", "indices", "indptr"))
    consistent = (  # one CSC column per token: columns <= vocabulary, rows < nodes
        len(data) == len(indices)
        and 1 <= len(indptr) <= len(vocab) + 1
        and int(indptr[-1]) == len(data)
        and bool(np.all(np.diff(indptr) >= 0))
        and (len(indices) == 0 or (int(indices.min()) >= 0 and int(indices.max()) < num_nodes))
    )
    if not consistent:
        raise PersistError(
            f"{folder}: the BM25 matrix files ({', '.join(BM25_MATRIX_FILES)}) do not match "
            f"{vocab_path.name} and {nodes_path.name}; persist the retriever again"
        )
    return bm25


def _load_terms(folder: Path, bm25: bm25s.BM25) -> Terms:
    """The term statistics beside the bm25s index in ``folder``, checked against it."""
    path = folder / TERMS_FILE
    version = load_json_object(path, ("format_version",))["format_version"]
    if version != TERMS_FORMAT_VERSION:
        raise PersistError(
            f"{path} has format_version {version!r}; this version reads {TERMS_FORMAT_VERSION}: "
            "upgrade the package, or persist the retriever again with this one"
        )
    arrays = []
    for name in (TF_FILE, LENGTHS_FILE):
        try:
            arrays.append(np.load(folder / name, allow_pickle=False))
        except (OSError, ValueError) as exc:
            raise PersistError(f"{folder / name} is missing or damaged ({exc}); persist the retriever again") from exc
    tf, lengths = arrays
    scores = bm25.scores
    if (
        (bm25.method, bm25.idf_method) != (METHOD, METHOD)  # the scoring Terms reproduces
        or tf.dtype.kind != "i"
        or lengths.dtype.kind != "i"
        or tf.shape != np.shape(scores["data"])
        or lengths.shape != (scores["num_docs"],)
        or (tf.size and int(tf.min()) < 1)
        or (lengths.size and int(lengths.min()) < 0)
    ):
        raise PersistError(
            f"{folder}: {TF_FILE} and {LENGTHS_FILE} do not match the BM25 matrix files; persist the retriever again"
        )
    return Terms(
        vocab=bm25.vocab_dict,
        indptr=np.asarray(scores["indptr"]),
        rows=np.asarray(scores["indices"]),
        tf=tf,
        lengths=lengths,
        main_rows=int(scores["num_docs"]),
        extra={},
    )
