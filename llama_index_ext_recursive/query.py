"""The query bundle and the per-call options it carries.

LlamaIndex hands one ``QueryBundle`` from ``RetrieverQueryEngine.query``,
``QueryFusionRetriever`` or an agent tool down to ``BaseRetriever._retrieve``.
:class:`FilteredQueryBundle` is that bundle plus per-call ``filters`` and
``top_k``, so per-call options need no new method and survive every upstream
layer unchanged. ``None`` means "the retriever's own value".

:func:`resolve_call` is the one place where a retriever turns a bundle into
what it searches with (the filters in force under its policy, the k), sync and
async alike; :func:`with_options` is the one way to derive a child's bundle.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, QueryType
from llama_index.core.vector_stores.types import MetadataFilters

from llama_index_ext_recursive.filters import (
    FilterPolicy,
    FiltersLike,
    FilterVocabulary,
    UnknownFilterPolicy,
    apply_policy,
    to_filters,
)
from llama_index_ext_recursive.validation import check_count, check_query

# the k every retriever of this package returns when none is given
DEFAULT_TOP_K = 10


@dataclass
class FilteredQueryBundle(QueryBundle):
    """A ``QueryBundle`` that carries per-call metadata filters and ``top_k``.

    ``retriever.retrieve(FilteredQueryBundle("q", filters={"year": 2024}, top_k=3))``.
    ``filters`` takes ``MetadataFilters`` or a mapping: ``{key: value}`` is
    equality (a list value: ``in``), ``{key: {"op": ">=", "value": 2021}}`` any
    operator; entries are joined by AND. ``None`` (either field): the
    retriever's construction-time value.
    """

    filters: FiltersLike = None
    top_k: int | None = None

    def __post_init__(self) -> None:
        self.filters = to_filters(self.filters)
        self.top_k = check_count("top_k", self.top_k, allow_none=True)


def as_query_bundle(str_or_query_bundle: str | QueryBundle) -> QueryBundle:
    """What ``BaseRetriever.retrieve`` accepts, as a checked bundle (:func:`check_query`):
    bytes, a blank query or text that is not Unicode get an error naming the fix."""
    if isinstance(str_or_query_bundle, str):
        str_or_query_bundle = QueryBundle(str_or_query_bundle)
    check_query(str_or_query_bundle)
    return str_or_query_bundle


def _unspanned(method: Any) -> Any:
    """Mark ``method`` as already instrumented: LlamaIndex's span mixin then leaves it
    alone, so a query keeps the one span of upstream's ``retrieve`` it wraps."""
    method.__dispatcher_span_decorated__ = True
    return method


class QueryCheckingRetriever(BaseRetriever):
    """Checks the query before upstream's ``retrieve``/``aretrieve`` touch it.

    Upstream reads ``.query_str`` of anything that is not a ``str`` (for its
    callback event) before ``_retrieve`` runs, so ``retrieve(b"...")`` failed
    with ``AttributeError: 'bytes' object has no attribute 'query_str'`` in
    every retriever. Each public retriever of this package puts this class
    first among its bases; ``_retrieve`` still checks (via :func:`resolve_call`)
    for callers that reach it directly, as ``QueryFusionRetriever`` does.
    """

    @_unspanned
    def retrieve(self, str_or_query_bundle: QueryType) -> list[NodeWithScore]:
        return super().retrieve(as_query_bundle(str_or_query_bundle))

    @_unspanned
    async def aretrieve(self, str_or_query_bundle: QueryType) -> list[NodeWithScore]:
        return await super().aretrieve(as_query_bundle(str_or_query_bundle))


def filters_of(query_bundle: QueryBundle) -> MetadataFilters | None:
    """Per-call filters carried by a bundle (``None`` for a plain ``QueryBundle``)."""
    return getattr(query_bundle, "filters", None)


def top_k_of(query_bundle: QueryBundle) -> int | None:
    """Per-call ``top_k`` carried by a bundle (``None`` for a plain ``QueryBundle``)."""
    return getattr(query_bundle, "top_k", None)


def with_options(query_bundle: QueryBundle, **changes: Any) -> FilteredQueryBundle:
    """A copy of ``query_bundle`` as a :class:`FilteredQueryBundle`, with ``changes``.

    Every dataclass field is copied (not a fixed list), so a field a later
    LlamaIndex release adds to ``QueryBundle`` travels on; the input is never
    mutated. ``changes`` may set ``filters``, ``top_k`` or any query field.
    """
    if isinstance(query_bundle, FilteredQueryBundle):
        return dataclasses.replace(query_bundle, **changes)
    fields = {f.name: getattr(query_bundle, f.name) for f in dataclasses.fields(query_bundle) if f.init}
    unknown = set(fields) - {f.name for f in dataclasses.fields(FilteredQueryBundle)}
    if unknown:
        raise TypeError(
            f"{type(query_bundle).__name__} has fields {sorted(unknown)} that a "
            "FilteredQueryBundle cannot carry; subclass FilteredQueryBundle instead"
        )
    fields.update(changes)
    return FilteredQueryBundle(**fields)


@dataclass(frozen=True)
class Call:
    """What one retrieval call searches with, resolved once from its bundle.

    Attributes:
        bundle: the caller's bundle, checked (non-empty query or an embedding).
        filters: the filters in force: construction-time and per-call under
            the retriever's ``filter_policy``.
        per_call_filters: the bundle's own filters (``None``: none given).
        top_k: the bundle's ``top_k``, else the retriever's.
    """

    bundle: QueryBundle
    filters: MetadataFilters | None
    per_call_filters: MetadataFilters | None
    top_k: int

    def child_bundle(self, **changes: Any) -> FilteredQueryBundle:
        """The bundle to pass a child: this call's filters and k unless ``changes`` say otherwise."""
        options = {"filters": self.filters, "top_k": self.top_k}
        options.update(changes)
        return with_options(self.bundle, **options)


def resolve_call(
    query_bundle: QueryBundle,
    *,
    filters: MetadataFilters | None,
    filter_policy: FilterPolicy | str,
    top_k: int,
    vocabulary: FilterVocabulary | None = None,
    unknown_filter_key: UnknownFilterPolicy | str = UnknownFilterPolicy.RAISE,
) -> Call:
    """Resolve a bundle against a retriever's settings: the first step of every ``_retrieve``.

    Args:
        query_bundle: what the caller passed (a ``FilteredQueryBundle`` or a plain one).
        filters: the retriever's construction-time filters.
        filter_policy: ``merge`` (AND) or ``replace`` (per-call filters, when
            given, replace the construction-time ones).
        top_k: the retriever's own k, used when the bundle gives none.
        vocabulary: the index's metadata keys and value kinds; when given, the
            filters in force are checked against it under ``unknown_filter_key``.
        unknown_filter_key: ``raise`` or ``warn`` for a filter nothing can match.
    """
    check_query(query_bundle)
    per_call = filters_of(query_bundle)
    effective = apply_policy(filters, per_call, filter_policy)
    if vocabulary is not None:
        vocabulary.check(effective, unknown_filter_key)
    return Call(
        bundle=query_bundle,
        filters=effective,
        per_call_filters=per_call,
        top_k=top_k_of(query_bundle) or top_k,
    )
