"""Any retriever as an agent tool: cited passages for the model, nodes for code.

Agents (``FunctionAgent``, ``ReActAgent``, workflows) call tools with JSON
arguments and read a string back. This module turns a ``BaseRetriever`` into
a ``FunctionTool`` whose string is a numbered, cited, size-bounded list of
passages, whose ``raw_output`` is the ``NodeWithScore`` list, and whose
filter arguments are validated so a model's mistake comes back as a message
it can correct instead of an exception that ends the run.
"""

from __future__ import annotations

import copy
import json
import logging
import re
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.indices.vector_store.retrievers import VectorIndexAutoRetriever, VectorIndexRetriever
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle
from llama_index.core.tools import FunctionTool
from llama_index.core.vector_stores.types import MetadataFilters, VectorStoreInfo

from llama_index_ext_recursive.auto.report import SpecError
from llama_index_ext_recursive.auto.spec import SpecValidator
from llama_index_ext_recursive.corpus import corpus_nodes
from llama_index_ext_recursive.filters import keep_matching, merge_filters, to_filters
from llama_index_ext_recursive.query import FilteredQueryBundle, filters_of
from llama_index_ext_recursive.schema import infer_vector_store_info, metadata_vocabulary
from llama_index_ext_recursive.validation import check_count

logger = logging.getLogger(__name__)

#: Most allowed values listed per key in descriptions and error messages.
_MAX_LISTED_VALUES = 12


class RetrievalResult(list):
    """The tool's ``raw_output``: the ``NodeWithScore`` list, plus the text the model saw.

    A ``list`` so code can use it as the plain node list; ``text`` is what
    ``ToolOutput.content`` holds, ``error`` is set when the call was refused.
    """

    def __init__(self, nodes: list[NodeWithScore], text: str, error: str | None = None) -> None:
        super().__init__(nodes)
        self.text = text
        self.error = error


# --------------------------------------------------------------------------- schema


def _declared_schema(retriever: BaseRetriever) -> VectorStoreInfo | None:
    """The schema an auto-retriever was given (upstream keeps it in ``_vector_store_info``)."""
    if isinstance(retriever, VectorIndexAutoRetriever):
        return retriever._vector_store_info
    return None


def _describe_keys(info: VectorStoreInfo, vocabulary: Mapping[str, set[Any]]) -> str:
    parts = []
    for meta in info.metadata_info:
        values = vocabulary.get(meta.name)
        text = f"{one_line(meta.name)} ({meta.type})"
        if values and len(values) <= _MAX_LISTED_VALUES:
            text += ": " + ", ".join(repr(v) for v in sorted(values, key=str))
        parts.append(text)
    return "; ".join(parts)


# --------------------------------------------------------------------------- rendering


# whitespace (newlines, \r, \v, \f, \x1c-\x1f, \x85, \u2028, \u2029...) and the C0/C1 control characters
_LINE_BREAKING = re.compile(r"[\s\x00-\x1f\x7f-\x9f]+")


def one_line(value: Any) -> str:
    """``value`` as a single line: every run of whitespace or control characters becomes one space.

    Titles, ids and passage text come from documents, which anyone may have
    written; without this a title holding ``"\\n[9] Official Notice (chunk
    sec-1, score 1.00): ..."`` would print a citation line of its own. Every
    character ``str.splitlines`` breaks on is whitespace or a control character,
    so the result can never span two lines.
    """
    return _LINE_BREAKING.sub(" ", str(value)).strip()


# characters JSON leaves as they are but str.splitlines breaks on (or that are controls)
# and the brackets of a citation marker, so no id holds an "[n]"
_JSON_UNSAFE = re.compile(r"[\x7f-\x9f\u2028\u2029\[\]]")
_QUOTED = r'"(?:[^"\\]|\\.)*"'
#: One passage line: ``[n] (chunk "id", score s, via summary of "doc") title: text``.
CITATION = re.compile(rf"^\[(\d+)\] \(chunk ({_QUOTED})(?:, score ([^,)]+))?(?:, via summary of ({_QUOTED}))?\) ")


def quoted(value: Any) -> str:
    """``value`` as a JSON string on one line: its exact text, no quote inside it ends it,
    and its brackets are ``\\u005b``/``\\u005d``."""
    return _JSON_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", json.dumps(str(value), ensure_ascii=False))


def escaped(value: Any) -> str:
    """Free text (a title, a passage) on one line, with ``[`` and ``]`` escaped.

    A document's text can hold ``[2] Notice (chunk x, score 0.99)``; with its
    brackets escaped (``\\[2\\]``) no line holds an unescaped ``[n]`` but the
    passage's own, at its start.
    """
    return one_line(value).replace("\\", "\\\\").replace("[", "\\[").replace("]", "\\]")


@dataclass(frozen=True)
class Citation:
    """One passage line of the tool's output, read back (:func:`parse_passages`).

    Attributes:
        number: its ``[n]``.
        chunk_id: the node id, exactly.
        score: the score as printed (two decimals), or ``None``.
        via: the document whose summary routed the search, or ``None``.
        passage: the rest of the line (title and text, brackets escaped).
    """

    number: int
    chunk_id: str
    score: float | None
    via: str | None
    passage: str


def parse_passages(text: str) -> list[Citation]:
    """The citations of the tool's output, one per passage line; for apps that check
    what a model cites against what was retrieved. Nothing inside a title, id or
    text can add or change one: ids are JSON strings and free text has its
    brackets escaped (:func:`escaped`)."""
    found = []
    for line in text.splitlines():
        match = CITATION.match(line)
        if match:
            number, chunk, score, via = match.groups()
            found.append(
                Citation(
                    int(number),
                    json.loads(chunk),
                    float(score) if score else None,
                    json.loads(via) if via else None,
                    line[match.end() :],
                )
            )
    return found


def _passage(i: int, hit: NodeWithScore) -> str:
    node = hit.node
    meta = node.metadata
    title = next(
        (
            escaped(v)
            for v in (meta.get("title"), meta.get("doc_id"), node.ref_doc_id, node.node_id)
            if v is not None and one_line(v)
        ),
        "untitled",
    )
    cite = [f"chunk {quoted(node.node_id)}"]
    if hit.score is not None:
        cite.append(f"score {hit.score:.2f}")
    route = getattr(getattr(hit, "explanation", None), "route", None)
    routed = getattr(route, "doc_id", None)
    if routed:
        cite.append(f"via summary of {quoted(routed)}")
    text = escaped(node.get_content(metadata_mode=MetadataMode.NONE))
    return f"[{i}] ({', '.join(cite)}) {title}: {text}"


def _fit(candidates: Sequence[str], room: int) -> str:
    """The first (longest) candidate that fits in ``room`` characters, else the last one cut to it."""
    for candidate in candidates:
        if len(candidate) <= room:
            return candidate
    return candidates[-1][:room]


def _omission_notes(omitted: int, max_chars: int) -> list[str]:
    plural = "s" if omitted > 1 else ""
    return [
        f"({omitted} more passage{plural} omitted to stay within {max_chars} characters.)",
        f"({omitted} more passage{plural} omitted.)",
        f"({omitted} more omitted)",
        f"({omitted} more)",
        "…",
    ]


def render_passages(hits: list[NodeWithScore], max_chars: int) -> str:
    """Numbered, cited passages in at most ``max_chars`` characters, never cutting a passage.

    One passage per line, and nothing a document holds can add a line:
    titles, ids and text pass through :func:`one_line`, so the model sees
    exactly one ``[n]`` citation line per passage. Trailing passages that do not
    fit are dropped whole and counted in a closing note, so the model knows the
    list is incomplete rather than reading half a sentence; the note shrinks
    (to ``"…"`` at the very least) so ``max_chars`` holds however small it is.

    Args:
        hits: the results, best first.
        max_chars: the most characters returned (an integer >= 1).
    """
    max_chars = check_count("max_chars", max_chars)
    if not hits:
        return _fit(["No passages found.", "No passages.", "None."], max_chars)
    passages = [_passage(i, hit) for i, hit in enumerate(hits, 1)]
    used = 0
    for count, passage in enumerate(passages):  # the longest prefix that fits on its own
        used += len(passage) + (1 if count else 0)
        if used > max_chars:
            break
    else:
        return "\n".join(passages)
    # then drop passages until the note fits in a form that still says how many are missing
    omitted = len(passages) - count
    body = "\n".join(passages[:count])
    while count and len(body) + 1 + len(_omission_notes(omitted, max_chars)[2]) > max_chars:
        count, omitted = count - 1, omitted + 1
        body = "\n".join(passages[:count])
    note = _fit(_omission_notes(omitted, max_chars), max_chars - len(body) - (1 if body else 0))
    return f"{body}\n{note}" if body else note


# --------------------------------------------------------------------------- search

#: A search the tool needs: which retriever to ask, with which bundle.
_Search = tuple[BaseRetriever, QueryBundle]
#: What a search plan ends with: the hits, and a note for the model (or ``None``).
_Found = tuple[list[NodeWithScore], str | None]

# widening an upstream retriever that ignores filters: at most this many doublings
_MAX_WIDENINGS = 16


def _is_upstream_vector_search(retriever: BaseRetriever) -> TypeGuard[VectorIndexRetriever]:
    """Whether ``retriever`` searches with upstream ``VectorIndexRetriever``'s own code,
    which ignores a ``FilteredQueryBundle`` but filters exactly through its store."""
    kind = type(retriever)
    return (
        isinstance(retriever, VectorIndexRetriever)
        and kind._retrieve is VectorIndexRetriever._retrieve
        and kind._aretrieve is VectorIndexRetriever._aretrieve
    )


def _own_top_k(retriever: BaseRetriever) -> int | None:
    """The upstream convention for a retriever's k (``similarity_top_k``), when it follows it."""
    value = getattr(retriever, "similarity_top_k", None)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _search_plan(
    retriever: BaseRetriever, bundle: FilteredQueryBundle, corpus_size: int
) -> Generator[_Search, list[NodeWithScore], _Found]:
    """The searches one tool call needs, shared by the sync and async paths.

    Yields ``(retriever, bundle)`` and is sent back the hits, so ``call`` and
    ``acall`` run the same plan with ``retrieve`` and ``aretrieve``. This
    package's retrievers honour the bundle's filters and ``top_k``; upstream
    ones ignore the bundle, and filtering their top-k afterwards would answer
    "No passages found." although matches exist further down. So:

    * upstream ``VectorIndexRetriever``: a copy with the same settings searches
      with the filters (ANDed with its own) as ``MetadataFilters``, and k (a
      store that refuses filters, such as FAISS, is searched as below);
    * any other retriever whose hits break the filters and that follows the
      upstream ``similarity_top_k`` convention (upstream ``BM25Retriever``): a
      copy searches ever deeper until k hits match or the corpus is exhausted;
    * anything else: its hits are filtered and the model is told that only
      its top results could be checked, never an unexplained empty answer.
    """
    filters, top_k = filters_of(bundle), bundle.top_k  # __post_init__ made the filters MetadataFilters
    if filters is None:
        return (yield retriever, bundle), None
    if _is_upstream_vector_search(retriever):
        search = copy.copy(retriever)
        search._filters = merge_filters(retriever._filters, filters)  # upstream has no public setter
        if top_k is not None:
            search.similarity_top_k = top_k
        try:
            return keep_matching((yield search, bundle), filters), None
        except (ValueError, NotImplementedError) as exc:  # a store that cannot filter (FAISS)
            logger.info("tool search: the store refused the filters (%s); searching deeper instead", exc)
    hits = yield retriever, bundle
    kept = keep_matching(hits, filters)
    if len(kept) == len(hits):
        return kept, None  # the retriever filtered (or all of its hits match)
    fetched, wanted = len(hits), top_k or _own_top_k(retriever) or len(hits)
    if _own_top_k(retriever) is None:
        note = (
            f"(This retriever cannot search with filters: they were checked on its top {fetched} "
            f"results only, of which {len(kept)} matched; more matches may exist.)"
        )
        logger.info("tool search: %s", note)
        return kept, note
    for _ in range(_MAX_WIDENINGS):
        if len(kept) >= wanted or len(hits) < fetched or (corpus_size and fetched >= corpus_size):
            break  # enough matches, or nothing further down
        fetched = min(fetched * 2, corpus_size) if corpus_size else fetched * 2
        deeper = copy.copy(retriever)
        # the upstream convention _own_top_k found (BaseRetriever does not declare it)
        deeper.similarity_top_k = fetched  # type: ignore[attr-defined]
        hits = yield deeper, bundle
        kept = keep_matching(hits, filters)
    logger.debug("tool search: %d of %d hits match the filters", len(kept), len(hits))
    return kept[:wanted], None


def _run(plan: Generator[_Search, list[NodeWithScore], _Found]) -> _Found:
    """Run a search plan with ``retrieve``; a search's exception is the plan's to handle."""
    try:
        search, bundle = next(plan)
        while True:
            try:
                hits = search.retrieve(bundle)
            except Exception as exc:
                search, bundle = plan.throw(exc)
            else:
                search, bundle = plan.send(hits)
    except StopIteration as done:
        return done.value


async def _arun(plan: Generator[_Search, list[NodeWithScore], _Found]) -> _Found:
    """:func:`_run` with ``aretrieve``."""
    try:
        search, bundle = next(plan)
        while True:
            try:
                hits = await search.aretrieve(bundle)
            except Exception as exc:
                search, bundle = plan.throw(exc)
            else:
                search, bundle = plan.send(hits)
    except StopIteration as done:
        return done.value


# --------------------------------------------------------------------------- tool


def as_retrieval_tool(
    retriever: BaseRetriever,
    name: str = "search",
    description: str | None = None,
    max_chars: int = 4000,
    default_top_k: int | None = None,
    vector_store_info: VectorStoreInfo | None = None,
    allow_filters: bool = True,
) -> FunctionTool:
    """Wrap any ``BaseRetriever`` as a ``FunctionTool`` for agents.

    ``call`` runs ``retrieve`` and ``acall`` runs ``aretrieve``, so async
    agents never block their loop. ``ToolOutput.content`` is the cited
    passage list; ``ToolOutput.raw_output`` is a :class:`RetrievalResult`
    (a list of the ``NodeWithScore`` returned).

    Bad arguments from the model are answered with a message starting
    ``"Error:"`` and naming the problem, not an exception, so the model can
    retry within the same run: a blank or empty ``query``, a ``top_k`` that is
    not a whole number >= 1 (``0``, ``true``, ``2.5``, ``"5"``), and filters
    that do not fit the index. ``raw_output`` is then an empty
    :class:`RetrievalResult` whose ``error`` holds the message. Arguments to
    this function itself are programmer errors and raise at once.

    Document content cannot forge citations: titles, ids and text are
    normalised to one line (see :func:`render_passages`).

    Args:
        retriever: any retriever (ours or upstream).
        name: the tool name the model sees.
        description: the tool description (default: one listing the filter keys).
        max_chars: the most characters returned to the model (an integer >= 1);
            whole passages past it are dropped and counted.
        default_top_k: passages returned when the model gives no ``top_k``
            (``None``: the retriever's own k). ``top_k`` travels in the
            ``FilteredQueryBundle``, which this package's retrievers honour;
            for a retriever that ignores it, its own k is the maximum and
            ``top_k`` only cuts.
        vector_store_info: the metadata schema filters are checked against;
            inferred from the retriever's nodes when it exposes them.
        allow_filters: offer the ``filters`` parameter, in the one filter
            syntax (``{key: value}`` or ``{key: {"op": ">=", "value": v}}``).
            They travel in a ``FilteredQueryBundle``; a retriever that
            ignores it (upstream ``VectorIndexRetriever``, ``BM25Retriever``)
            is searched with the filters some other way (see
            :func:`_search_plan`), so a filtered search finds the matches
            below its unfiltered top-k.

    Raises:
        TypeError: ``max_chars`` or ``default_top_k`` is not an integer (bools
            and floats included).
        ValueError: either is below 1.
    """
    max_chars = check_count("max_chars", max_chars)
    default_top_k = check_count("default_top_k", default_top_k, allow_none=True)
    validator: SpecValidator | None = None
    keys_text = ""
    corpus_size = 0
    if allow_filters:
        nodes = corpus_nodes(retriever)
        corpus_size = len(nodes)
        if vector_store_info is None:
            vector_store_info = _declared_schema(retriever) or infer_vector_store_info(nodes)
        if vector_store_info is None:
            logger.info("no metadata schema for %r: pass vector_store_info= to enable filters", name)
        else:
            vocabulary = metadata_vocabulary(nodes, max_values=_MAX_LISTED_VALUES)
            validator = SpecValidator(vector_store_info, vocabulary=vocabulary, key_policy="reject", max_top_k=10**6)
            keys_text = _describe_keys(vector_store_info, vocabulary)

    def prepare(query: Any, top_k: Any, filters: Any) -> Any:
        """The validated bundle (filters and ``top_k``), or an error string for the model."""
        if not isinstance(query, str) or not query.strip():
            return f"Error: 'query' must be a non-empty string, got {query!r}; say what to search for."
        try:
            query.encode("utf-8")
        except UnicodeEncodeError:
            return "Error: 'query' contains an unpaired surrogate (invalid Unicode); send plain text."
        if top_k is None:
            top_k = default_top_k
        try:
            top_k = check_count("top_k", top_k, allow_none=True)
        except (TypeError, ValueError):
            return f"Error: 'top_k' must be a whole number >= 1 such as 5, got {top_k!r}; or leave it out."
        checked: MetadataFilters | None = None
        if filters:
            if validator is None:
                return "Error: filters are not available for this tool (no metadata schema); search without 'filters'."
            if not isinstance(filters, Mapping):
                return (
                    "Error: 'filters' must be an object like {\"year\": 2023} or "
                    f'{{"year": {{"op": ">=", "value": 2023}}}}.\nValid keys: {keys_text}.'
                )
            try:
                parsed = to_filters(filters)
                spec, _ = validator.validate({"query": query, "filters": parsed})
            except (TypeError, ValueError) as exc:  # SpecError is a ValueError
                problems = (
                    "\n".join(f"- {p.message}" for p in exc.problems) if isinstance(exc, SpecError) else f"- {exc}"
                )
                logger.info("tool %r refused filters %r: %s", name, filters, problems)
                return f"Error: invalid filters:\n{problems}\nValid keys: {keys_text}."
            checked = MetadataFilters(filters=list(spec.filters))
        return FilteredQueryBundle(query, filters=checked, top_k=top_k)

    def finish(found: _Found, top_k: int | None) -> RetrievalResult:
        hits, note = found
        hits = hits[:top_k] if top_k is not None else hits  # for retrievers that ignore per-call top_k
        if note is None or len(note) + 1 >= max_chars:
            return RetrievalResult(hits, render_passages(hits, max_chars))
        return RetrievalResult(hits, f"{render_passages(hits, max_chars - len(note) - 1)}\n{note}")

    def search(query: str, top_k: int | None = None, filters: dict[str, Any] | None = None) -> RetrievalResult:
        bundle = prepare(query, top_k, filters)
        if isinstance(bundle, str):
            return RetrievalResult([], bundle, error=bundle)
        return finish(_run(_search_plan(retriever, bundle, corpus_size)), bundle.top_k)

    async def asearch(query: str, top_k: int | None = None, filters: dict[str, Any] | None = None) -> RetrievalResult:
        bundle = prepare(query, top_k, filters)
        if isinstance(bundle, str):
            return RetrievalResult([], bundle, error=bundle)
        return finish(await _arun(_search_plan(retriever, bundle, corpus_size)), bundle.top_k)

    if not (allow_filters and validator is not None):

        def search_plain(query: str, top_k: int | None = None) -> RetrievalResult:
            return search(query, top_k)

        async def asearch_plain(query: str, top_k: int | None = None) -> RetrievalResult:
            return await asearch(query, top_k)

        fn, afn = search_plain, asearch_plain
    else:
        fn, afn = search, asearch

    if description is None:
        description = (
            "Search the knowledge base. Returns numbered passages, one per line: "
            '[n] (chunk "id", score s) title: text. Cite them as [n] in your answer. '
            "Arguments: query (what to look for); top_k (optional, how many passages)"
        )
        if fn is search:
            description += (
                '; filters (optional): {key: value} or {key: {"op": ">=", "value": v}}, '
                f"ops ==, !=, >, >=, <, <=, in, nin. Keys: {keys_text}"
            )
        description += "."

    def content(result: RetrievalResult) -> str:
        return result.text

    async def acontent(result: RetrievalResult) -> str:
        return result.text

    return FunctionTool.from_defaults(
        fn=fn, async_fn=afn, name=name, description=description, callback=content, async_callback=acontent
    )
