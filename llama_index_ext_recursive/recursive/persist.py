"""Persistence of a summary index and the retriever settings saved with it.

A folder (see :mod:`llama_index_ext_recursive.persist` for its safe layout)
holds ``summaries/`` and ``chunks/`` (each a LlamaIndex storage context),
``summary_cache.json``, ``index.json`` (:meth:`RecursiveIndex.to_dict`: the
document records, the embedding model's name, how documents are chunked and
summarized) and ``config.json`` (the retriever's ``to_dict()``), both in the
package's ``{"type", "init_parameters"}`` convention (:mod:`~llama_index_ext_recursive.config`).
Folders of the previous format (one flat ``config.json`` with
``"format_version": 1``) load as before; the next persist rewrites them.

Every file is checked for its shape and against the others (the records
against the docstores, each docstore against its vector store), so a damaged
folder raises :class:`PersistError` naming the file instead of loading an
index that answers ``[]``.

An index whose two levels are each a
:class:`~llama_index_ext_recursive.stores.columnar_store.ColumnarVectorStore`
(``index.json`` says ``"storage": "columnar"``) keeps each level's column
files in ``summaries/`` and ``chunks/`` of the generation and its rows in
``summaries.rows.sqlite3``/``chunks.rows.sqlite3`` beside the generations.
Its document records and summaries are rows too (``documents.rows.sqlite3``,
``summaries_cache.rows.sqlite3``; ``index.json`` names the generation they
are read at instead of listing them). Its persist carries the previous
generation's files over and writes only what changed (new segments,
tombstones, the changed documents' records, the new summaries, the small
JSON files), so persisting a one-document update of a 2M-chunk index writes
kilobytes, and the rows follow the generation (a failed persist leaves the
published index). Such an index is loaded memory-mapped, and its levels are
checked by their counts. A columnar folder of the previous layout (records in
``index.json``, summaries in ``summary_cache.json``) loads, and its next
persist moves them into rows.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llama_index.core import StorageContext, VectorStoreIndex, load_index_from_storage
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.node_parser import NodeParser, SentenceSplitter
from llama_index.core.schema import TransformComponent
from llama_index.core.storage.index_store import SimpleIndexStore
from llama_index.core.vector_stores.simple import SimpleVectorStore

from llama_index_ext_recursive.columnar.rows import PublishedTexts, RowStore
from llama_index_ext_recursive.config import CONFIG_FILE, component_to_dict, write_config
from llama_index_ext_recursive.model_identity import ModelIdentity, ModelMismatchError, check_same_model, model_identity
from llama_index_ext_recursive.models import embed_model_name, resolve_embed_model
from llama_index_ext_recursive.persist import (
    NoIndexError,
    PersistError,
    check_persist_target,
    load_json_object,
    load_string_map,
    published_directory,
    published_generation,
    read_index,
    rows_database,
    write_index,
)
from llama_index_ext_recursive.recursive.build import ChunkContext, DocumentRecord, windowed_sentence_tokenizer
from llama_index_ext_recursive.recursive.index import RecursiveIndex, store_view_index
from llama_index_ext_recursive.recursive.records import PostgresRecords, StoredRecords, document_record
from llama_index_ext_recursive.recursive.summarize import ExtractiveSummarizer, Summarizer, SummaryCache
from llama_index_ext_recursive.stores.columnar_store import ColumnarVectorStore
from llama_index_ext_recursive.stores.docstore import LinearDocumentStore
from llama_index_ext_recursive.stores.numpy_store import NumpyVectorStore

if TYPE_CHECKING:  # the postgres extra is optional
    from llama_index_ext_recursive.stores.pg_index import PostgresIndexStore

logger = logging.getLogger(__name__)

PERSIST_KIND = "RecursiveSummaryRetriever"  # names the index kind in its folder's manifest
INDEX_FILE = "index.json"
SUMMARY_CACHE_FILE = "summary_cache.json"
SIMPLE, COLUMNAR = "simple", "columnar"  # how index.json says the levels are stored
# a columnar index's document records and summaries: rows beside its generations (_write_records)
DOCUMENTS, SUMMARIES = "documents", "summaries_cache"
LEVELS = ("summaries", "chunks")
LEGACY_FORMAT = 1  # one flat config.json holding the index and the settings
# settings of the previous format that are the retriever's, not the index's
LEGACY_SETTINGS = (
    "similarity_top_k",
    "num_routed_docs",
    "score_mode",
    "score_alpha",
    "document_weight",
    "calibration",
    "filters",
    "filter_policy",
    "max_link_depth",
    "summary_mode",
    "chunk_mode",
    "unknown_filter_key",
)


def transformations_config(steps: Sequence[TransformComponent]) -> list[dict[str, Any]]:
    """JSON-able descriptions of chunking steps, restored by :func:`transformations_from_config`."""
    return [config for config in (node_parser_config(step) for step in steps) if config is not None]


def transformations_from_config(configs: Sequence[dict[str, Any]] | None) -> list[TransformComponent] | None:
    """The chunking steps :func:`transformations_config` described (``None``: none could be)."""
    steps: list[TransformComponent] = [
        step for step in (node_parser_from_config(c) for c in configs or []) if step is not None
    ]
    return steps or None


def node_parser_config(parser: TransformComponent | None) -> dict[str, Any] | None:
    """A JSON-able description of ``parser`` that :func:`node_parser_from_config` restores."""
    if parser is None:
        return None
    config = parser.to_dict()
    id_func = config.pop("id_func", None)
    if isinstance(id_func, dict) and id_func.get("id_func_name") not in (None, "default_id_func"):
        logger.warning(
            "node parser %s has a custom id_func, which cannot be persisted; pass "
            "node_parser= to from_persist_dir to keep it",
            config.get("class_name"),
        )
    return config


def node_parser_from_config(config: dict[str, Any] | None) -> NodeParser | None:
    """Rebuild a LlamaIndex node parser from :func:`node_parser_config` output.

    A ``SentenceSplitter`` gets :func:`windowed_sentence_tokenizer` back (a
    tokenizer function is not part of the saved settings), so a reloaded index
    chunks huge documents as the one that was saved.
    """
    if config is None:
        return None
    import llama_index.core.node_parser as parsers

    parser_class = getattr(parsers, str(config.get("class_name")), None)
    if parser_class is None:
        logger.warning(
            "node parser %r is not one of llama_index.core.node_parser; pass node_parser= "
            "to from_persist_dir (the default parser is used for new documents)",
            config.get("class_name"),
        )
        return None
    if parser_class is SentenceSplitter:
        return parser_class.from_dict(dict(config), chunking_tokenizer_fn=windowed_sentence_tokenizer())
    return parser_class.from_dict(dict(config))


def index_to_dict(index: RecursiveIndex, generation: int | None = None) -> dict[str, Any]:
    """``index.json``: what a :class:`RecursiveIndex` needs besides its stores.

    Args:
        generation: for the columnar storage, the generation being written: its
            document records are then rows of :data:`DOCUMENTS` (read back as
            that generation publishes them), not a list in this file.
    """
    summarizer = index.summarizer
    return component_to_dict(
        index,
        documents=None if generation is not None else {k: v.to_dict() for k, v in index.documents.items()},
        generation=generation,
        embed_model=embed_model_name(index.embed_model),
        embed_model_identity=model_identity(index.embed_model).to_dict(),
        embedding_choice=index.embedding_choice,
        summarizer=(
            summarizer.to_dict()
            if isinstance(summarizer, ExtractiveSummarizer)
            else {"type": "custom", "fingerprint": summarizer.fingerprint}
        ),
        transformations=transformations_config(index.transformations),
        doc_id_key=index.doc_id_key,
        summary_embedding=index.summary_embedding.value,
        chunk_context=index.chunk_context.value,
        storage=COLUMNAR if _columnar_stores(index) else SIMPLE,
        partial=index.partial,
    )


def _columnar_stores(index: RecursiveIndex) -> dict[str, ColumnarVectorStore] | None:
    """The two levels' stores by folder name, when both are columnar (``None`` otherwise)."""
    if index.chunk_index is None:
        return None
    stores = dict(zip(LEVELS, (index.summary_index.vector_store, index.chunk_index.vector_store), strict=True))
    if all(isinstance(store, ColumnarVectorStore) for store in stores.values()):
        return stores  # type: ignore[return-value]
    return None


def persist_index(index: RecursiveIndex, persist_dir: str | Path, config: Mapping[str, Any]) -> None:
    """Write ``index`` and the retriever ``config`` to the index folder ``persist_dir``.

    Raises:
        PersistError: ``persist_dir`` holds something else; nothing was written.
        NotImplementedError: the vectors live in an external store.
    """
    chunk_index = index.require_stores("persist")
    stores = _columnar_stores(index)
    if stores is not None:
        _persist_columnar(index, Path(persist_dir), stores, config)
        return
    for part in (index.summary_index, chunk_index):
        if not isinstance(part.vector_store, SimpleVectorStore):
            raise NotImplementedError(
                f"persist writes the embedded stores (the default, or a ColumnarVectorStore for both "
                f"levels), but this retriever uses {type(part.vector_store).__name__}, which keeps its own "
                "data; rebuild with an embedded store to persist, or keep the external store and rebuild "
                "the retriever over it"
            )
    with write_index(persist_dir, PERSIST_KIND) as staging, index.state_lock.reading():
        index.summary_index.storage_context.persist(str(staging / "summaries"))
        chunk_index.storage_context.persist(str(staging / "chunks"))
        _write_index_files(index, staging, config)
        written = index.generation
    _published(index, Path(persist_dir), written)


def _published(index: RecursiveIndex, root: Path, written: int) -> None:
    """Tell ``index`` the folder generation it was just published as (the state it had at
    ``written``), for :attr:`RecursiveIndex.cache_generation`."""
    directory = published_directory(root)
    if directory is not None:
        index.published_as(directory, written)


def _write_index_files(
    index: RecursiveIndex, staging: Path, config: Mapping[str, Any], generation: int | None = None
) -> None:
    """``summary_cache.json`` (not for the columnar storage, which keeps the summaries as
    rows), ``index.json`` and ``config.json``, as new files: a staging folder that carries
    the previous generation over holds links to its files, which must be replaced, never
    written into."""
    for name in (SUMMARY_CACHE_FILE, INDEX_FILE, CONFIG_FILE):
        (staging / name).unlink(missing_ok=True)
    if generation is None:
        index.summary_cache.save(staging / SUMMARY_CACHE_FILE)
    (staging / INDEX_FILE).write_text(
        json.dumps(index_to_dict(index, generation), ensure_ascii=False, indent=1), encoding="utf-8"
    )
    write_config(staging, config)


def _write_records(
    index: RecursiveIndex, root: Path, published: int
) -> tuple[dict[str, DocumentRecord | None], dict[str, str]]:
    """Commit the document records and summaries changed since the last persist as rows of
    generation ``published + 1`` (:meth:`RowStore.write_items`), so a persist writes what
    changed, not every record (a one-document update of a 100k-document index rewrote 50 MB).

    Returns:
        The documents and the summaries written, to mark persisted once published.
    """
    written = index.unpublished_records()
    entries = index.summary_cache.entries
    # read from the rows but for the summaries made since; in a plain dict, none is persisted yet
    new = dict(entries.added if isinstance(entries, PublishedTexts) else entries)
    with RowStore(root / rows_database(DOCUMENTS)) as documents:
        documents.settle(published)
        documents.write_items(
            published + 1,
            {
                doc_id: None if record is None else json.dumps(record.to_dict(), ensure_ascii=False)
                for doc_id, record in written.items()
            },
        )
    with RowStore(root / rows_database(SUMMARIES)) as cached:
        cached.settle(published)
        cached.write_items(published + 1, {key: json.dumps(text, ensure_ascii=False) for key, text in new.items()})
    return written, new


def _read_records(root: Path, generation: int, index_path: Path) -> tuple[StoredRecords, PublishedTexts]:
    """The document records and summaries generation ``generation`` of the index folder
    ``root`` publishes (:func:`_write_records`), each read when asked for
    (:class:`StoredRecords`, :class:`PublishedTexts`: 100k records with 2M chunk ids took
    5 s to read at open, and only the documents a query routes to are needed).

    Raises:
        PersistError: a database is missing (naming it).
    """
    for part in (DOCUMENTS, SUMMARIES):
        if not (root / rows_database(part)).is_file():
            raise PersistError(
                f"{root / rows_database(part)} is missing, but {index_path} keeps the {part} there: restore it, "
                "or build the index again"
            )
    return (
        StoredRecords(RowStore(root / rows_database(DOCUMENTS)), generation),
        PublishedTexts(RowStore(root / rows_database(SUMMARIES)), generation),
    )


def _persist_columnar(
    index: RecursiveIndex, root: Path, stores: Mapping[str, ColumnarVectorStore], config: Mapping[str, Any]
) -> None:
    """Publish the changes of both columnar levels and the index files as one generation.

    Raises:
        PersistError: another writer published at ``root`` since the index was
            read, or ``root`` holds another index (nothing is written).
    """
    with write_index(root, PERSIST_KIND, carry_over=True) as staging, index.state_lock.reading():
        published = published_generation(root)
        for part, store in stores.items():
            store.write_part(staging / part, root / rows_database(part), published)
        written, summaries = _write_records(index, root, published)
        _write_index_files(index, staging, config, generation=published + 1)
        state = index.generation
    _published(index, root, state)
    for store in stores.values():
        store.mark_published(published + 1)
    index.records_published(root / rows_database(DOCUMENTS), published + 1, written)
    cache = index.summary_cache
    entries = cache.entries
    if isinstance(entries, PublishedTexts):
        cache.entries = entries.published(published + 1, summaries)
    else:  # the summaries made meanwhile are kept until the next persist
        cache.entries = PublishedTexts(
            RowStore(root / rows_database(SUMMARIES)),
            published + 1,
            {key: text for key, text in entries.items() if key not in summaries},
        )


def load_persisted(
    persist_dir: str | Path,
    make: Callable[[RecursiveIndex, dict[str, Any]], Any],
    embed_model: BaseEmbedding | None = None,
    summarizer: Summarizer | None = None,
    transformations: list | None = None,
) -> Any:
    """Load the folder at ``persist_dir`` and return ``make(index, retriever settings)``.

    ``make`` runs inside the folder's read, so an invalid setting names ``config.json``.
    """
    model: list = []  # resolved once, only when there is an index to load

    def load(root: Path) -> Any:
        config_path = root / "config.json"
        raw = load_json_object(config_path)
        if "init_parameters" in raw:
            settings = init_parameters_of(raw, config_path)
            index_path = root / INDEX_FILE
            stored = init_parameters_of(
                load_json_object(index_path, ("type", "init_parameters")),
                index_path,
                ("documents", "embed_model"),
            )
        elif raw.get("format_version") == LEGACY_FORMAT:
            load_json_object(config_path, ("format_version", "documents", "embed_model"))
            index_path, stored = config_path, dict(raw)
            if "node_parser" in stored:
                stored["transformations"] = [stored.pop("node_parser")]
            settings = {key: raw[key] for key in LEGACY_SETTINGS if key in raw}
        else:
            raise PersistError(
                f"{config_path} has format_version {raw.get('format_version')!r}; "
                f"this version reads {LEGACY_FORMAT} and the current format: rebuild the retriever"
            )
        if not model:
            model.append(resolve_embed_model(embed_model, built_with=stored["embed_model"]))
        saved = ModelIdentity.from_dict(stored.get("embed_model_identity"), stored["embed_model"])
        try:
            check_same_model(saved, model[0], str(root))
        except ModelMismatchError as exc:
            raise PersistError(str(exc)) from exc
        storage = stored.get("storage", SIMPLE)
        in_rows = storage == COLUMNAR and stored["documents"] is None  # else listed in index.json
        cache = SummaryCache()
        documents: Mapping[str, DocumentRecord]
        if in_rows:
            generation = stored.get("generation")
            if isinstance(generation, bool) or not isinstance(generation, int):
                raise PersistError(f"{index_path} names no generation of its records; persist the retriever again")
            documents, cache.entries = _read_records(root.parent, generation, index_path)
        else:
            documents = _records(stored["documents"], index_path)
            cache.entries = load_string_map(root / SUMMARY_CACHE_FILE)
        if storage == COLUMNAR:
            summary_index, chunk_index = (columnar_level(root, part, model[0]) for part in LEVELS)
            _check_counts(documents, summary_index, chunk_index, index_path)
        elif storage == SIMPLE:
            summary_index = load_level(root / "summaries", model[0])
            chunk_index = load_level(root / "chunks", model[0])
            _check_records(documents, summary_index, chunk_index, root, index_path)
        else:
            raise PersistError(
                f"{index_path} keeps its levels in {storage!r} storage, which this version cannot read "
                f"(it reads {SIMPLE!r} and {COLUMNAR!r}): upgrade llama-index-ext-recursive"
            )
        try:
            steps = transformations or transformations_from_config(stored.get("transformations"))
            index = RecursiveIndex(
                summary_index,
                chunk_index,
                documents=documents,
                embed_model=model[0],
                doc_id_key=stored.get("doc_id_key"),
                transformations=steps,
                summarizer=summarizer or _summarizer(stored.get("summarizer"), root),
                summary_cache=cache,
                **({"summary_embedding": stored["summary_embedding"]} if "summary_embedding" in stored else {}),
                # an index persisted before chunk_context existed was built without it
                chunk_context=stored.get("chunk_context", ChunkContext.NONE.value),
                embedding_choice=stored.get("embedding_choice"),
                loaded=True,
                partial=stored.get("partial", False) is True,
            )
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise PersistError(f"{index_path} holds an invalid setting ({exc}); persist the retriever again") from exc
        if root != Path(persist_dir):  # a published generation folder (not a previous-format one)
            index.published_as(root.name, index.generation)
        try:
            return make(index, settings)
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise PersistError(f"{config_path} holds an invalid setting ({exc}); persist the retriever again") from exc

    return read_index(persist_dir, PERSIST_KIND, load)


def interrupted_build(persist_dir: str | Path, embed_model: BaseEmbedding | None = None) -> RecursiveIndex | None:
    """The ``partial`` index a checkpointed build left at ``persist_dir``, to resume
    (``None``: nothing is persisted there yet, so a build starts afresh).

    Raises:
        PersistError: ``persist_dir`` holds a finished index (never rebuilt over:
            it is updated with ``add_documents``), or something a build may not
            write into (checked before any work, by :func:`check_persist_target`).
    """
    check_persist_target(persist_dir, PERSIST_KIND)
    try:
        index: RecursiveIndex = load_persisted(persist_dir, lambda index, settings: index, embed_model=embed_model)
    except NoIndexError:
        return None
    if not index.partial:
        raise PersistError(
            f"{persist_dir} holds a finished index of {len(index.documents)} documents, which a build "
            "never replaces: open it with RecursiveSummaryRetriever.from_persist_dir and update it with "
            "add_documents/delete_document, or build into an empty folder"
        )
    return index


def init_parameters_of(data: Mapping[str, Any], path: Path | str, required: tuple[str, ...] = ()) -> dict[str, Any]:
    """The init parameters of a configuration file, or a :class:`PersistError` naming it."""
    if not isinstance(data.get("init_parameters"), dict):
        raise PersistError(f"{path} holds no init_parameters object: it is damaged; persist it again")
    missing = [key for key in required if key not in data["init_parameters"]]
    if missing:
        raise PersistError(f"{path} lacks {missing}: it is damaged; persist the retriever again")
    return dict(data["init_parameters"])


def _summarizer(config: Any, root: Path | str) -> Summarizer | None:
    if isinstance(config, dict) and config.get("type") == "extractive":
        return ExtractiveSummarizer.from_dict(config)
    logger.warning(
        "%s was summarized by %s; documents added later will be summarized by "
        "ExtractiveSummarizer unless you pass summarizer=",
        root,
        config,
    )
    return None


def _records(raw: Any, path: Path) -> dict[str, DocumentRecord]:
    """The records ``index.json`` lists (the default storage, and columnar folders of the
    release before records were rows)."""
    items = raw.items() if isinstance(raw, dict) else [(None, raw)]
    return {doc_id: document_record(doc_id, fields, path) for doc_id, fields in items}  # type: ignore[misc]


def _check_records(
    documents: Mapping[str, DocumentRecord],
    summary_index: VectorStoreIndex,
    chunk_index: VectorStoreIndex,
    root: Path,
    path: Path,
) -> None:
    chunk_ids = set(chunk_index.docstore.docs)
    summary_ids = set(summary_index.docstore.docs)
    for doc_id, record in documents.items():
        lacking = [c for c in record.chunk_ids if c not in chunk_ids]
        if lacking:
            raise PersistError(
                f"{path} lists chunks {lacking[:3]} of document {doc_id!r} that "
                f"{root / 'chunks' / 'docstore.json'} lacks: the files come from "
                "different persists; persist the retriever again"
            )
        if record.summary_node_id not in summary_ids:
            raise PersistError(
                f"{path} names summary {record.summary_node_id!r} of document "
                f"{doc_id!r} that {root / 'summaries' / 'docstore.json'} lacks: the files "
                "come from different persists; persist the retriever again"
            )


def columnar_level(generation: Path, part: str, embed_model: BaseEmbedding) -> VectorStoreIndex:
    """One columnar level: its column files memory-mapped from the verified ``generation``,
    its rows in the SQLite file beside the generations."""
    store = ColumnarVectorStore.open_part(generation / part, generation.parent / rows_database(part))
    return store_view_index(store, embed_model)


def _check_counts(
    documents: Mapping[str, DocumentRecord], summary_index: VectorStoreIndex, chunk_index: VectorStoreIndex, path: Path
) -> None:
    """The records and the columnar levels hold as many chunks and summaries (a check that
    reads no node: the levels' files come from one generation, verified by the manifest)."""
    if isinstance(documents, StoredRecords):  # summed by SQLite: no record read
        chunks = documents.chunk_count()
    else:
        chunks = sum(len(record.chunk_ids) for record in documents.values())
    for level, expected, store in (
        ("chunks", chunks, chunk_index.vector_store),
        ("summaries", len(documents), summary_index.vector_store),
    ):
        held = store.node_count if isinstance(store, ColumnarVectorStore) else -1
        if held != expected:
            raise PersistError(
                f"{path} lists {expected} {level} but the {level} level holds {held}: the files come "
                "from different persists; persist the retriever again"
            )


def load_level(path: Path, embed_model: BaseEmbedding) -> VectorStoreIndex:
    """Load one persisted level (``summaries/`` or ``chunks/``), checking its files agree.

    Raises:
        PersistError: naming the file that is missing, malformed, or lacks
            nodes another file of the level has.
    """
    docstore_path = path / "docstore.json"
    index_path = path / "index_store.json"
    vectors_path = path / "default__vector_store.json"
    docstore = load_json_object(docstore_path, ("docstore/data",))
    stored = docstore["docstore/data"]
    if not isinstance(stored, dict) or not all(isinstance(v, dict) and "__data__" in v for v in stored.values()):
        raise PersistError(f"{docstore_path} holds no valid nodes: it is damaged; persist it again")
    structs = load_json_object(index_path, ("index_store/data",))["index_store/data"]
    try:
        (struct,) = structs.values()
        data = struct["__data__"]
        listed = set((json.loads(data) if isinstance(data, str) else data)["nodes_dict"])
    except (AttributeError, KeyError, TypeError, ValueError):
        raise PersistError(
            f"{index_path} does not hold exactly one vector index: it is damaged; persist it again"
        ) from None
    vector_store = NumpyVectorStore.from_persist_path(str(vectors_path))
    vector_ids = set(vector_store.data.embedding_dict)
    for lacking, owner, other in (
        (vector_ids - set(stored), docstore_path, vectors_path),
        (listed - vector_ids, vectors_path, index_path),
        (vector_ids - listed, index_path, vectors_path),
    ):
        if lacking:
            raise PersistError(
                f"{owner} lacks {len(lacking)} nodes that {other.name} has (e.g. "
                f"{sorted(lacking)[0]!r}): the files come from different persists; persist it again"
            )
    try:
        storage = StorageContext.from_defaults(
            docstore=LinearDocumentStore.from_dict(docstore),
            index_store=SimpleIndexStore.from_dict({"index_store/data": structs}),
            vector_store=vector_store,
            persist_dir=str(path),
        )
        index = load_index_from_storage(storage, embed_model=embed_model)
    except Exception as exc:
        raise PersistError(f"{path} could not be loaded ({exc!r}); persist it again") from exc
    if not isinstance(index, VectorStoreIndex):  # index_store.json names another kind of index
        raise PersistError(f"{path} holds a {type(index).__name__}, not a vector index; persist it again")
    return index


def load_summary_cache(persist_dir: str | Path) -> SummaryCache:
    """The summaries of the index persisted at ``persist_dir``, for a rebuild to reuse.

    The cache is in memory (``path`` is ``None``): the index's own copy is
    rewritten by its next persist.

    Args:
        persist_dir: An index folder, which may not exist yet.

    Returns:
        The persisted cache, or an empty ``SummaryCache()`` when nothing was
        persisted at ``persist_dir``.

    Raises:
        PersistError: ``persist_dir`` holds an index whose files are damaged,
            or an index of another kind.
    """

    def entries(root: Path) -> dict[str, str]:
        if (root / SUMMARY_CACHE_FILE).exists():
            return load_string_map(root / SUMMARY_CACHE_FILE)
        index_path = root / INDEX_FILE
        stored = init_parameters_of(load_json_object(index_path, ("init_parameters",)), index_path)
        return dict(_read_records(root.parent, stored.get("generation", -1), index_path)[1])

    cache = SummaryCache()
    try:
        cache.entries = read_index(persist_dir, PERSIST_KIND, entries)
    except NoIndexError:
        pass
    return cache


DATABASE = "postgres"  # the storage of an index whose levels and records live in PostgreSQL


def persist_to_database(index: RecursiveIndex, config: Mapping[str, Any]) -> None:
    """Write the index's configuration and the retriever's settings ``config`` into the index
    row of its database (the levels and the records are there already: every change commits
    them), so another process opens the index with nothing to build.

    Raises:
        ValueError: the index does not live in a database.
    """
    database = index.database
    if database is None:
        raise ValueError("this index does not live in PostgreSQL: persist it to a folder with persist(persist_dir)")
    data = index_to_dict(index, generation=0)
    params = data["init_parameters"]
    params.update(generation=None, storage=DATABASE)
    database.write_config({"index": data, "retriever": dict(config)})


def load_from_database(
    database: PostgresIndexStore,
    make: Callable[[RecursiveIndex, dict[str, Any]], Any],
    embed_model: BaseEmbedding | None = None,
    summarizer: Summarizer | None = None,
    transformations: list | None = None,
) -> Any:
    """Open the index ``database`` holds and return ``make(index, retriever settings)``: the
    levels and records stay in the database, read when a query asks for them.

    Raises:
        PersistError: the index has no configuration (its build did not finish), a damaged
            one, or was built with another embedding model than ``embed_model``.
    """
    where = f"PostgreSQL index {database.schema}.{database.name}"
    raw = database.read_config()
    if raw is None or not isinstance(raw.get("index"), dict) or not isinstance(raw.get("retriever"), dict):
        raise PersistError(
            f"{where} holds no configuration: its build did not finish; build it again "
            "(RecursiveSummaryRetriever.from_documents(..., postgres=store))"
        )
    settings = init_parameters_of(raw["retriever"], where)
    stored = init_parameters_of(raw["index"], where, ("embed_model",))
    model = resolve_embed_model(embed_model, built_with=stored["embed_model"])
    saved = ModelIdentity.from_dict(stored.get("embed_model_identity"), stored["embed_model"])
    try:
        check_same_model(saved, model, where)
    except ModelMismatchError as exc:
        raise PersistError(str(exc)) from exc
    summary_index, chunk_index = (store_view_index(store, model) for store in (database.summaries, database.chunks))
    try:
        index = RecursiveIndex(
            summary_index,
            chunk_index,
            documents=PostgresRecords(database),
            embed_model=model,
            doc_id_key=stored.get("doc_id_key"),
            transformations=transformations or transformations_from_config(stored.get("transformations")),
            summarizer=summarizer or _summarizer(stored.get("summarizer"), where),
            summary_cache=SummaryCache(),
            **({"summary_embedding": stored["summary_embedding"]} if "summary_embedding" in stored else {}),
            # an index persisted before chunk_context existed was built without it
            chunk_context=stored.get("chunk_context", ChunkContext.NONE.value),
            embedding_choice=stored.get("embedding_choice"),
            loaded=True,
            partial=stored.get("partial", False) is True,
        )
        return make(index, settings)
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise PersistError(f"{where} holds an invalid setting ({exc}); build it again") from exc
