"""``VectorIndexAutoRetriever`` with validated specs, no LLM needed, and an explanation per call.

:class:`ValidatedAutoRetriever` is called like upstream's
``VectorIndexAutoRetriever`` and fixes what goes wrong there:

* **No LLM needed.** Without ``llm=`` the spec comes from
  :class:`~llama_index_ext_recursive.auto.rules.RuleBasedSpecGenerator`
  (English and Chinese, deterministic). ``Settings.llm`` is never consulted,
  so constructing or querying never defaults to OpenAI; pass ``llm=`` (for
  example ``llm=Settings.llm``) to have an LLM write the specs
  (:class:`~llama_index_ext_recursive.auto.llm.LLMSpecGenerator`: tolerant
  parsing, one retry with the problems, rule-based fallback).
* **Every spec is validated** against ``vector_store_info`` and the values
  present in the index (``vocabulary``; by default read from the index's
  docstore): invented keys are dropped with a suggestion (or refused, with
  ``key_policy="reject"``), values are coerced to the declared types,
  operator spellings are mapped, and one bad filter never discards the rest.
* **k:** a ``FilteredQueryBundle``'s ``top_k`` is used as given; otherwise
  the spec's ``top_k`` may raise or lower k within ``[1, max_top_k]``
  (upstream can only lower it); ``similarity_top_k`` (default 10) above
  ``max_top_k`` is clamped.
* **Filters combine, never refused:** generated filters AND the filters the
  call resolves (:func:`~llama_index_ext_recursive.query.resolve_call`:
  ``extra_filters``, any ``MetadataFilters`` tree, and a
  ``FilteredQueryBundle``'s under ``filter_policy``).
* **An empty spec query** (a filters-only request) searches with the
  original query text instead of failing (upstream needs
  ``default_empty_query_vector``; when given, it is still used).
* **Any store:** retrieval goes through one
  :class:`~llama_index_ext_recursive.retrievers.vector.BackfillVectorRetriever`
  built at construction, which filters on stores that cannot (FAISS) and
  survives stale ids; or through ``retriever=`` (e.g. a
  ``RecursiveSummaryRetriever``), called with a ``FilteredQueryBundle`` so
  the filters and k apply at every level it has.
* **Bad input fails early:** a blank query is a ``ValueError``; counts that
  are not integers (``True``, ``2.5``, ``"5"``) and unknown keywords are
  refused at construction; a filter no indexed node can match raises
  :class:`~llama_index_ext_recursive.filters.FilterError` by default
  (``unknown_filter_key``).
* **Explanations:** each result's ``explanation.auto`` is the call's
  :class:`~llama_index_ext_recursive.auto.explanation.AutoExplanation` (the
  spec used, the validation report, which generator wrote the spec, the
  filters applied), added to the parts a wrapped retriever attached (its
  ``route`` or ``fusion``); :meth:`ValidatedAutoRetriever.retrieve_with_explanation`
  returns it even when nothing matched.
* **Saved like every component:** ``to_dict``/``from_dict`` for the query
  settings, ``persist``/``from_persist_dir`` for settings plus the index
  (:mod:`~llama_index_ext_recursive.auto.saving`).

About 550 lines: the class mirrors upstream's ``VectorIndexAutoRetriever``
constructor argument by argument (and ``to_dict`` saves them one by one), and
planning a call (spec, filters, k, explanation) is shared by its sync and async
paths; construction helpers are in :mod:`.construction`, the explanation in
:mod:`.explanation`, the folder a retriever is saved in in :mod:`.saving`.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.bridge.pydantic import BaseModel
from llama_index.core.callbacks.base import CallbackManager
from llama_index.core.indices.vector_store.base import VectorStoreIndex
from llama_index.core.indices.vector_store.retrievers.auto_retriever.auto_retriever import (
    VectorIndexAutoRetriever,
)
from llama_index.core.llms.utils import LLMType
from llama_index.core.prompts.base import BasePromptTemplate
from llama_index.core.prompts.mixin import PromptDictType
from llama_index.core.schema import IndexNode, NodeWithScore, QueryBundle, QueryType
from llama_index.core.vector_stores.types import (
    MetadataFilters,
    VectorStoreInfo,
    VectorStoreQueryMode,
    VectorStoreQuerySpec,
)

from llama_index_ext_recursive.auto import saving
from llama_index_ext_recursive.auto.construction import (
    DEFERRED,
    check_vector_keywords,
    declared_vocabulary,
    spec_generator_for,
)
from llama_index_ext_recursive.auto.explanation import AutoExplanation
from llama_index_ext_recursive.auto.generator import GenerationReport, SpecGenerator
from llama_index_ext_recursive.auto.llm import LLMSpecGenerator
from llama_index_ext_recursive.auto.prompt import DEFAULT_SPEC_PROMPT
from llama_index_ext_recursive.auto.report import SpecReport
from llama_index_ext_recursive.auto.rules import RuleBasedSpecGenerator
from llama_index_ext_recursive.auto.spec import KeyPolicy, SpecValidator
from llama_index_ext_recursive.auto.values import resolve_top_k
from llama_index_ext_recursive.cache.retrieval_cache import RetrievalCache, check_cache
from llama_index_ext_recursive.config import component_to_dict
from llama_index_ext_recursive.filters import (
    FilterPolicy,
    FiltersLike,
    UnknownFilterPolicy,
    keep_matching,
    merge_filters,
    to_filters,
)
from llama_index_ext_recursive.models import resolve_llm
from llama_index_ext_recursive.query import (
    DEFAULT_TOP_K,
    Call,
    FilteredQueryBundle,
    QueryCheckingRetriever,
    as_query_bundle,
    resolve_call,
    top_k_of,
    with_options,
)
from llama_index_ext_recursive.results import explained
from llama_index_ext_recursive.retrievers.fusion import aretrieve_from_child, retrieve_from_child
from llama_index_ext_recursive.retrievers.vector import BackfillVectorRetriever
from llama_index_ext_recursive.validation import check_count

logger = logging.getLogger(__name__)

__all__ = ["AutoExplanation", "ValidatedAutoRetriever"]


@dataclass(frozen=True)
class _Plan:
    """One call's plan: where to search, with what, and its explanation."""

    retriever: BaseRetriever
    bundle: QueryBundle
    top_k: int
    explanation: AutoExplanation


@dataclass
class _PlannedBundle(FilteredQueryBundle):
    """The caller's bundle plus the plan :meth:`ValidatedAutoRetriever.retrieve_with_explanation` made.

    The explanation exists before retrieval (it is there even when nothing
    matches), so the method plans first and hands the plan to ``_retrieve``
    in the bundle, through upstream's ``retrieve`` (events, ``object_map``).
    """

    plan: _Plan | None = None


class ValidatedAutoRetriever(QueryCheckingRetriever, VectorIndexAutoRetriever):
    """Auto-retrieval with validated specs, with or without an LLM.

    Arguments as upstream's ``VectorIndexAutoRetriever`` (``index``,
    ``vector_store_info``, ``llm``, ``prompt_template_str``, ``max_top_k``,
    ``similarity_top_k``, ``empty_query_top_k``, ``vector_store_query_mode``,
    ``default_empty_query_vector``, ``callback_manager``, ``verbose``,
    ``extra_filters``, ``object_map``, ``objects``, extra ``kwargs`` for the
    vector retriever), except that ``similarity_top_k`` defaults to the
    package's 10 (upstream: 2), plus:

    Args:
        llm: writes the specs when given (an ``LLM`` or a spec such as
            ``"local:<path>"``; :class:`LLMSpecGenerator`, with the rules as
            fallback). ``None`` (default): the rules write them and no LLM is
            used; ``Settings.llm`` is never resolved.
        extra_filters: filters always applied: ``MetadataFilters`` (AND, OR,
            NOT, nested) or a filter dict (``{key: value}``,
            ``{key: {"op": ">=", "value": 2021}}``).
        key_policy: ``"drop"`` (drop what cannot be repaired and report it) or
            ``"reject"`` (raise ``SpecError`` listing every problem).
        vocabulary: values present per key; default: read from the index's
            docstore (or a wrapped ``RecursiveSummaryRetriever``'s chunks).
            Values are checked against it, and the rules match value words in
            the query against it, so an empty one means "values unchecked".
        today: reference date for relative dates ("last year"); ``None``: the
            current date.
        synonyms: extra phrases for the rules, ``{key: {phrase: value}}``.
        spec_generator: a custom :class:`SpecGenerator` (or a
            ``RuleBasedSpecGenerator``, which is wrapped); replaces the
            default. Its validator decides ``top_k``, then clamped to
            ``[1, max_top_k]``.
        retriever: search with this retriever instead of a vector retriever
            over ``index`` (``index`` may then be ``None``). It is called with
            a ``FilteredQueryBundle`` carrying the combined filters and the k;
            its results are cut to k and checked against the filters, so a
            retriever that ignores the bundle's options (an upstream one)
            returns fewer results, never unfiltered ones.
        filter_policy: ``merge`` (per-call filters AND ``extra_filters``) or
            ``replace`` (per-call filters, when given, replace them).
        max_retries: LLM retries after an unusable answer (with ``llm``).
        unknown_filter_key: what a filter that no node of ``index`` can match
            does (a key no node holds, a value of a type the key never holds),
            for every filter applied: generated, ``extra_filters`` and
            per-call. ``raise`` (default): a
            :class:`~llama_index_ext_recursive.filters.FilterError` naming the
            closest key (``extra_filters`` are checked at construction);
            ``warn``: log it and search anyway. A key declared in
            ``vector_store_info`` that no node holds is such a key. With
            ``retriever=``, the wrapped retriever checks by its own policy.
        cache: a :class:`~llama_index_ext_recursive.cache.RetrievalCache` for
            the query vectors of the vector search over ``index`` (a repeated
            search text is not embedded again). With ``retriever=``, pass the
            cache to that retriever instead (a ``RecursiveSummaryRetriever``
            caches its results too). Specs are not cached: an LLM's may differ
            from call to call, and the rules take milliseconds.

    Raises:
        TypeError, ValueError: at construction, for ``similarity_top_k``,
            ``max_top_k`` or ``empty_query_top_k`` that are not integers >= 1,
            a negative ``max_retries``, a ``retriever`` that is not a
            ``BaseRetriever``, or a keyword the vector retriever does not take.
    """

    def __init__(
        self,
        index: VectorStoreIndex | None,
        vector_store_info: VectorStoreInfo,
        llm: LLMType | None = None,
        prompt_template_str: str | BasePromptTemplate | None = None,
        max_top_k: int = 10,
        similarity_top_k: int = DEFAULT_TOP_K,
        empty_query_top_k: int | None = 10,
        vector_store_query_mode: VectorStoreQueryMode = VectorStoreQueryMode.DEFAULT,
        default_empty_query_vector: list[float] | None = None,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
        extra_filters: FiltersLike = None,
        object_map: dict | None = None,
        objects: list[IndexNode] | None = None,
        key_policy: KeyPolicy = "drop",
        vocabulary: dict[str, set[Any]] | None = None,
        today: date | None = None,
        synonyms: dict[str, dict[str, Any]] | None = None,
        spec_generator: SpecGenerator | RuleBasedSpecGenerator | None = None,
        retriever: BaseRetriever | None = None,
        filter_policy: FilterPolicy | str = FilterPolicy.MERGE,
        max_retries: int = 1,
        unknown_filter_key: UnknownFilterPolicy | str = UnknownFilterPolicy.RAISE,
        cache: RetrievalCache | None = None,
        **kwargs: Any,
    ) -> None:
        if index is None and retriever is None:
            raise ValueError("pass an index, or retriever= to search with")
        check_cache(cache)
        if cache is not None and retriever is not None:
            raise ValueError(
                "cache= caches the vector search over index=; with retriever=, pass the cache to that "
                "retriever (e.g. RecursiveSummaryRetriever(..., cache=cache))"
            )
        if retriever is not None and not isinstance(retriever, BaseRetriever):
            raise TypeError(
                f"retriever= is a {type(retriever).__name__}, not a BaseRetriever: pass a "
                "retriever (e.g. a RecursiveSummaryRetriever), or index= alone"
            )
        check_count("similarity_top_k", similarity_top_k)
        check_count("max_top_k", max_top_k)
        check_count("empty_query_top_k", empty_query_top_k, allow_none=True)
        check_count("max_retries", max_retries, minimum=0)
        check_vector_keywords(kwargs)
        resolved_llm = (
            None
            if llm is None
            else resolve_llm(
                llm,
                needed_for="ValidatedAutoRetriever(llm=...)",
                offline_alternative="leave llm=None: the rule-based generator writes the specs",
                callback_manager=callback_manager,
            )
        )
        super().__init__(
            # DEFERRED stands in for what upstream reads eagerly (see _Deferred); set below
            index if index is not None else DEFERRED,  # type: ignore[arg-type]
            vector_store_info,
            llm=resolved_llm or DEFERRED,  # type: ignore[arg-type]
            prompt_template_str=prompt_template_str if isinstance(prompt_template_str, str) else None,
            max_top_k=max_top_k,
            similarity_top_k=similarity_top_k,
            empty_query_top_k=empty_query_top_k,
            vector_store_query_mode=vector_store_query_mode,
            default_empty_query_vector=default_empty_query_vector,
            callback_manager=callback_manager,
            verbose=verbose,
            extra_filters=None,  # upstream refuses OR trees; set below
            object_map=object_map,
            objects=objects,
            **kwargs,
        )
        # upstream types these as always set; here each may be None (no index with retriever=,
        # no LLM, no extra filters), and the upstream code that would read them is overridden
        self._index = index  # type: ignore[assignment]
        self._llm = resolved_llm  # type: ignore[assignment]
        self._extra_filters = to_filters(extra_filters)  # type: ignore[assignment]
        self.filter_policy = FilterPolicy(filter_policy)
        self.unknown_filter_key = UnknownFilterPolicy(unknown_filter_key)
        self.key_policy = key_policy
        self.today = today
        self.synonyms = synonyms
        self.max_retries = max_retries
        self.wrapped_retriever = retriever
        self._given_vocabulary = vocabulary
        self.vocabulary = (
            vocabulary if vocabulary is not None else declared_vocabulary(vector_store_info, index, retriever)
        )
        self._vector_retriever = (
            None
            if retriever is not None or index is None
            else BackfillVectorRetriever(
                index,
                similarity_top_k=similarity_top_k,  # each call passes its own k in the bundle
                vector_store_query_mode=vector_store_query_mode,
                object_map=self.object_map,
                callback_manager=self.callback_manager,
                verbose=verbose,
                unknown_filter_key=self.unknown_filter_key,
                cache=cache,
                **kwargs,
            )
        )
        if self._vector_retriever is not None and self._extra_filters is not None:
            # refuse extra_filters that cannot match now, not at the first query
            known = self._vector_retriever.filter_vocabulary
            if known:
                known.check(self._extra_filters, self.unknown_filter_key)
        self.validator = SpecValidator(
            vector_store_info,
            vocabulary=self.vocabulary,
            key_policy=key_policy,
            max_top_k=max_top_k,
            similarity_top_k=similarity_top_k,
            empty_query_top_k=empty_query_top_k,
            today=today,
        )
        self.spec_generator: SpecGenerator = spec_generator_for(
            spec_generator,
            llm=resolved_llm,
            vector_store_info=vector_store_info,
            vocabulary=self.vocabulary,
            validator=self.validator,
            prompt=prompt_template_str,
            max_retries=max_retries,
            today=today,
            synonyms=synonyms,
        )
        prompt = getattr(self.spec_generator, "prompt", None)
        self._prompt = prompt if isinstance(prompt, BasePromptTemplate) else DEFAULT_SPEC_PROMPT

    # ------------------------------------------------------------------ prompts

    def _get_prompts(self) -> PromptDictType:
        return {"prompt": self._prompt}

    def _update_prompts(self, prompts: PromptDictType) -> None:
        if "prompt" in prompts:
            self._prompt = prompts["prompt"]
            if isinstance(self.spec_generator, LLMSpecGenerator):
                self.spec_generator.prompt = prompts["prompt"]

    # ------------------------------------------------------------------ specs

    def generate_spec(self, query: str) -> tuple[VectorStoreQuerySpec, SpecReport]:
        """The validated spec for ``query`` and its report (no retrieval)."""
        return self.spec_generator.generate(query)

    async def agenerate_spec(self, query: str) -> tuple[VectorStoreQuerySpec, SpecReport]:
        """Same as :meth:`generate_spec`, without blocking the event loop on an LLM."""
        return await self.spec_generator.agenerate(query)

    def generate_retrieval_spec(self, query_bundle: QueryBundle, **kwargs: Any) -> BaseModel:
        """The validated spec (upstream's hook; the report is in :meth:`generate_spec`)."""
        return self.generate_spec(query_bundle.query_str)[0]

    async def agenerate_retrieval_spec(self, query_bundle: QueryBundle, **kwargs: Any) -> BaseModel:
        return (await self.agenerate_spec(query_bundle.query_str))[0]

    def _build_retriever_from_spec(  # type: ignore[override]
        self, spec: VectorStoreQuerySpec, query_bundle: QueryBundle | None = None
    ) -> tuple[BaseRetriever, QueryBundle]:
        """The retriever and bundle that run ``spec`` (upstream's hook)."""
        plan = self._plan(self._resolve(query_bundle or QueryBundle(spec.query)), spec, SpecReport())
        return plan.retriever, plan.bundle

    # ------------------------------------------------------------------ planning

    def _resolve(self, query_bundle: QueryBundle) -> Call:
        """The call's filters in force (``extra_filters`` and per-call, under the policy)."""
        return resolve_call(
            query_bundle,
            filters=self._extra_filters,
            filter_policy=self.filter_policy,
            top_k=self._similarity_top_k,
        )

    def _top_k(self, call: Call, spec: VectorStoreQuerySpec) -> int:
        per_call = top_k_of(call.bundle)
        if per_call is not None:
            return per_call
        k = spec.top_k
        if k is None:
            k = resolve_top_k(None, self._similarity_top_k, self._max_top_k, spec.query, self._empty_query_top_k)
        return min(max(int(k), 1), self._max_top_k)

    def _plan(self, call: Call, spec: VectorStoreQuerySpec, report: SpecReport) -> _Plan:
        caller = call.bundle
        generated = MetadataFilters(filters=list(spec.filters)) if spec.filters else None
        combined = merge_filters(generated, call.filters)
        top_k = self._top_k(call, spec)
        blank = not spec.query.strip()
        text = caller.query_str if blank else spec.query
        embedding: list[float] | None
        strs: list[str] | None
        if blank and self._default_empty_query_vector is not None:
            embedding, strs, text = self._default_empty_query_vector, None, ""
        elif text == caller.query_str:
            embedding, strs = caller.embedding, caller.custom_embedding_strs
        else:
            embedding, strs = None, None
        retriever = self.wrapped_retriever if self.wrapped_retriever is not None else self._vector_retriever
        if retriever is None:  # built with retriever=, and wrapped_retriever was set to None since
            raise ValueError(
                "this ValidatedAutoRetriever was built with retriever= and its wrapped_retriever is now "
                "None: it has nothing to search; set wrapped_retriever to a retriever again"
            )
        bundle = call.child_bundle(
            filters=combined, top_k=top_k, query_str=text, embedding=embedding, custom_embedding_strs=strs
        )
        generator = (
            report.generator
            if isinstance(report, GenerationReport)
            else (getattr(self.spec_generator, "name", None) or type(self.spec_generator).__name__)
        )
        explanation = AutoExplanation(
            query=caller.query_str,
            spec=spec,
            generator=generator,
            report=report,
            extra_filters=self._extra_filters,
            per_call_filters=call.per_call_filters,
            filters=combined,
            top_k=top_k,
            search_query=text,
            retriever=type(retriever).__name__,
        )
        # verbose=True raises the level so the explanation shows without logging setup
        logger.log(logging.WARNING if self._verbose else logging.INFO, "auto-retrieval: %s", explanation.describe())
        return _Plan(retriever, bundle, top_k, explanation)

    def _finish(self, hits: list[NodeWithScore], plan: _Plan) -> list[NodeWithScore]:
        if self.wrapped_retriever is not None:
            kept = keep_matching(hits, plan.explanation.filters)
            if len(kept) < len(hits):
                logger.warning(
                    "the wrapped %s returned %d of %d results outside the filters (does it read "
                    "FilteredQueryBundle.filters?); they were removed",
                    type(self.wrapped_retriever).__name__,
                    len(hits) - len(kept),
                    len(hits),
                )
            hits = kept
        return [explained(hit, auto=plan.explanation) for hit in hits[: plan.top_k]]

    # ------------------------------------------------------------------ retrieval

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        call = self._resolve(query_bundle)
        plan = getattr(query_bundle, "plan", None)
        if plan is None:
            plan = self._plan(call, *self.spec_generator.generate(query_bundle.query_str))
        return self._finish(retrieve_from_child(plan.retriever, plan.bundle, "retriever"), plan)

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        call = self._resolve(query_bundle)
        plan = getattr(query_bundle, "plan", None)
        if plan is None:
            plan = self._plan(call, *await self.spec_generator.agenerate(query_bundle.query_str))
        return self._finish(await aretrieve_from_child(plan.retriever, plan.bundle, "retriever"), plan)

    def retrieve_with_explanation(self, str_or_query_bundle: QueryType) -> tuple[list[NodeWithScore], AutoExplanation]:
        """``retrieve`` plus the call's explanation (present even with no results)."""
        call = self._resolve(as_query_bundle(str_or_query_bundle))
        plan = self._plan(call, *self.spec_generator.generate(call.bundle.query_str))
        return self.retrieve(_planned(call.bundle, plan)), plan.explanation

    async def aretrieve_with_explanation(
        self, str_or_query_bundle: QueryType
    ) -> tuple[list[NodeWithScore], AutoExplanation]:
        """``aretrieve`` plus the call's explanation (present even with no results)."""
        call = self._resolve(as_query_bundle(str_or_query_bundle))
        plan = self._plan(call, *await self.spec_generator.agenerate(call.bundle.query_str))
        return await self.aretrieve(_planned(call.bundle, plan)), plan.explanation

    # ------------------------------------------------------------------ saving

    def to_dict(self) -> dict[str, Any]:
        """The query settings as ``{"type": ..., "init_parameters": {...}}`` (see :mod:`~llama_index_ext_recursive.config`).

        What is not a setting is passed again to :meth:`from_dict`: the
        ``index`` or ``retriever``, ``llm``, ``spec_generator``,
        ``callback_manager``, ``object_map``/``objects``. A ``vocabulary`` is
        saved only when one was given (otherwise it is read from the index again).

        Raises:
            ValueError: the prompt is a template object other than a ``PromptTemplate``.
            TypeError: a setting is not JSON (a vector-retriever keyword holding an object).
        """
        vocabulary = self._given_vocabulary
        return component_to_dict(
            self,
            vector_store_info=self._vector_store_info.model_dump(mode="json"),
            prompt_template_str=saving.prompt_template(self._prompt),
            max_top_k=self._max_top_k,
            similarity_top_k=self._similarity_top_k,
            empty_query_top_k=self._empty_query_top_k,
            vector_store_query_mode=VectorStoreQueryMode(self._vector_store_query_mode).value,
            default_empty_query_vector=self._default_empty_query_vector,
            verbose=self._verbose,
            extra_filters=(self._extra_filters.model_dump(mode="json") if self._extra_filters is not None else None),
            key_policy=self.key_policy,
            vocabulary=(
                {key: sorted(values, key=repr) for key, values in vocabulary.items()}
                if vocabulary is not None
                else None
            ),
            today=self.today.isoformat() if self.today is not None else None,
            synonyms=self.synonyms,
            filter_policy=self.filter_policy.value,
            max_retries=self.max_retries,
            unknown_filter_key=self.unknown_filter_key.value,
            **self._kwargs,
        )

    @classmethod
    def from_dict(
        cls,
        data: dict[str, Any],
        index: VectorStoreIndex | None = None,
        **kwargs: Any,
    ) -> ValidatedAutoRetriever:
        """A retriever with the settings of :meth:`to_dict` over ``index`` (or ``retriever=``).

        Args:
            data: what :meth:`to_dict` returned.
            index: the index to search.
            **kwargs: what is not saved (``retriever``, ``llm``,
                ``spec_generator``, ``callback_manager``...) or overrides.
        """
        return cls(index, **{**saving.from_dict(cls, data), **kwargs})

    def persist(self, persist_dir: str | Path) -> None:
        """Write the settings (``config.json``) and the index searched to ``persist_dir``.

        Raises:
            PersistError: ``persist_dir`` holds something else, or the retriever
                wraps ``retriever=`` (persist that retriever, and ``to_dict()``).
            TypeError: the vector store keeps its data itself (PostgreSQL, Chroma...).
        """
        vector = saving.check_savable(self.wrapped_retriever, self._vector_retriever)
        saving.write_folder(persist_dir, self.to_dict(), vector)

    @classmethod
    def from_persist_dir(
        cls, persist_dir: str | Path, embed_model: Any | None = None, **kwargs: Any
    ) -> ValidatedAutoRetriever:
        """Load what :meth:`persist` wrote.

        Args:
            persist_dir: the folder.
            embed_model: the query embedding model (default:
                ``Settings.embed_model``, else the bundled model); another model
                than the persisted one is logged.
            **kwargs: what is not saved (``llm``, ``spec_generator``...) or overrides.
        """
        return saving.read_folder(
            persist_dir, embed_model, lambda config, index: cls.from_dict(config, index, **kwargs)
        )


def _planned(bundle: QueryBundle, plan: _Plan) -> _PlannedBundle:
    """``bundle`` (any ``QueryBundle``) carrying ``plan``."""
    options = with_options(bundle)
    return _PlannedBundle(
        **{f.name: getattr(options, f.name) for f in dataclasses.fields(options) if f.init}, plan=plan
    )
