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
* **k:** the spec's ``top_k`` may raise or lower k within ``[1, max_top_k]``
  (upstream can only lower it); ``similarity_top_k`` above ``max_top_k`` is
  clamped.
* **Filters combine, never refused:** generated filters AND ``extra_filters``
  (any ``MetadataFilters`` tree: AND, OR, nested) AND per-call filters from a
  :class:`~llama_index_ext_recursive.filters.FilteredQueryBundle`
  (``filter_policy="replace"``: per-call filters replace ``extra_filters``).
* **An empty spec query** (a filters-only request) searches with the
  original query text instead of failing (upstream needs
  ``default_empty_query_vector``; when given, it is still used).
* **Any store:** retrieval goes through
  :class:`~llama_index_ext_recursive.retrievers.vector.BackfillVectorRetriever`, which
  filters on stores that cannot (FAISS) and survives stale ids; or through
  ``retriever=`` (e.g. a ``RecursiveSummaryRetriever``), called with a
  ``FilteredQueryBundle`` so the filters apply at every level it has.
* **Bad input fails early:** a blank query is a ``ValueError``; counts that
  are not integers (``True``, ``2.5``, ``"5"``) are refused at construction;
  a filter no indexed node can match raises
  :class:`~llama_index_ext_recursive.filters.FilterError` by default
  (``unknown_filter_key``).
* **Explanations:** each result is an :class:`AutoNodeWithScore` whose
  ``auto_explanation`` (:class:`AutoExplanation`) holds the spec used, the
  validation report, which generator wrote the spec and the filters applied;
  :meth:`ValidatedAutoRetriever.retrieve_with_explanation` returns it even
  when nothing matched. Each call builds its own objects, so concurrent calls
  never share state.
"""

from __future__ import annotations

import contextvars
import logging
from dataclasses import dataclass
from datetime import date
from typing import Any, Dict, Iterable, List, Optional, Set, Tuple, Union

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.bridge.pydantic import BaseModel, ConfigDict
from llama_index.core.callbacks.base import CallbackManager
from llama_index.core.constants import DEFAULT_SIMILARITY_TOP_K
from llama_index.core.indices.vector_store.base import VectorStoreIndex
from llama_index.core.indices.vector_store.retrievers.auto_retriever.auto_retriever import (
    VectorIndexAutoRetriever,
)
from llama_index.core.llms.llm import LLM
from llama_index.core.prompts.base import BasePromptTemplate
from llama_index.core.prompts.mixin import PromptDictType
from llama_index.core.schema import BaseNode, IndexNode, NodeWithScore, QueryBundle, QueryType
from llama_index.core.settings import Settings
from llama_index.core.vector_stores.types import (
    MetadataFilters,
    VectorStoreInfo,
    VectorStoreQueryMode,
    VectorStoreQuerySpec,
)

from llama_index_ext_recursive.auto.llm import (
    DEFAULT_SPEC_PROMPT,
    GenerationReport,
    LLMSpecGenerator,
    RuleSpecGenerator,
    SpecGenerator,
)
from llama_index_ext_recursive.auto.rules import RuleBasedSpecGenerator
from llama_index_ext_recursive.auto.spec import (
    KeyPolicy,
    Repair,
    SpecReport,
    SpecValidator,
    combine_filters,
    metadata_vocabulary,
    resolve_top_k,
)
from llama_index_ext_recursive.retrievers.vector import BackfillVectorRetriever
from llama_index_ext_recursive.filters import (
    FilterPolicy,
    FiltersLike,
    UnknownFilterPolicy,
    to_filters,
)
from llama_index_ext_recursive.query import filters_of, with_options
from llama_index_ext_recursive.retrievers.fusion import aretrieve_from_child, retrieve_from_child
from llama_index_ext_recursive.validation import check_count, check_query
from llama_index_ext_recursive.results import explained

logger = logging.getLogger(__name__)

__all__ = ["AutoExplanation", "ValidatedAutoRetriever"]


class AutoExplanation(BaseModel):
    """How one auto-retrieval call searched.

    Args:
        query: the caller's query text.
        spec: the validated spec (its ``query``, ``filters`` and ``top_k``).
        generator: who wrote the spec: ``rules``, ``llm``, ``fallback`` (the
            LLM's answers were unusable; rules wrote it) or a custom
            generator's class name.
        report: what validation changed (``repairs``) or refused; a
            :class:`~llama_index_ext_recursive.auto.llm.GenerationReport` for
            the built-in generators (LLM attempts, matched phrases).
        extra_filters: the construction-time filters.
        per_call_filters: the filters of the caller's ``FilteredQueryBundle``.
        filters: everything applied (generated AND extra AND per-call).
        top_k: the k used.
        search_query: the text searched (the spec's query, or the caller's
            when the spec's is empty).
        retriever: what searched (``BackfillVectorRetriever`` or the wrapped
            retriever's class name).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    query: str
    spec: VectorStoreQuerySpec
    generator: str
    report: Union[GenerationReport, SpecReport]
    extra_filters: Optional[MetadataFilters] = None
    per_call_filters: Optional[MetadataFilters] = None
    filters: Optional[MetadataFilters] = None
    top_k: int
    search_query: str
    retriever: str

    @property
    def repairs(self) -> List[Repair]:
        """What validation (or the fallback) changed, in order."""
        return list(self.report.repairs)

    @property
    def fell_back(self) -> bool:
        """True when an LLM's answers were unusable and the rules wrote the spec."""
        return self.generator == "fallback"

    def describe(self) -> str:
        """A few lines for people: spec, filters applied, repairs."""
        generated = [f"{f.key} {f.operator.value} {f.value!r}" for f in self.spec.filters]
        lines = [
            f"query {self.query!r} -> search {self.search_query!r} "
            f"(spec by {self.generator}, top_k={self.top_k})",
            f"  generated filters: {', '.join(generated) if generated else 'none'}",
        ]
        if self.extra_filters is not None or self.per_call_filters is not None:
            lines.append(f"  applied filters: {_tree_text(self.filters)}")
        for repair in self.report.repairs:
            lines.append(f"  [{repair.kind}] {repair.message}")
        return "\n".join(lines)


def _tree_text(filters: Optional[MetadataFilters]) -> str:
    if filters is None or not filters.filters:
        return "none"
    parts = [
        f"({_tree_text(item)})" if isinstance(item, MetadataFilters)
        else f"{item.key} {item.operator.value} {item.value!r}"
        for item in filters.filters
    ]
    condition = getattr(filters.condition, "value", filters.condition) or "and"
    if condition == "not":
        return "not (" + " or ".join(parts) + ")"
    return f" {condition} ".join(parts)


@dataclass
class _Call:
    """One call's plan: where to search, with what, and its explanation."""

    retriever: BaseRetriever
    bundle: QueryBundle
    top_k: int
    cut: bool  # a wrapped retriever's results are cut to top_k
    explanation: AutoExplanation


# set by retrieve_with_explanation for the duration of one call (per thread / task)
_EXPLANATION_SLOT: contextvars.ContextVar[Optional[List[AutoExplanation]]] = contextvars.ContextVar(
    "validated_auto_retriever_explanation", default=None
)


class ValidatedAutoRetriever(VectorIndexAutoRetriever):
    """Auto-retrieval with validated specs, with or without an LLM.

    Arguments as upstream's ``VectorIndexAutoRetriever`` (``index``,
    ``vector_store_info``, ``llm``, ``prompt_template_str``, ``max_top_k``,
    ``similarity_top_k``, ``empty_query_top_k``, ``vector_store_query_mode``,
    ``default_empty_query_vector``, ``callback_manager``, ``verbose``,
    ``extra_filters``, ``object_map``, ``objects``, extra ``kwargs`` for the
    vector retriever; ``similarity_top_k`` defaults to upstream's 2), plus:

    Args:
        llm: writes the specs when given (:class:`LLMSpecGenerator`, with the
            rules as fallback). ``None`` (default): the rules write them and no
            LLM is used; ``Settings.llm`` is never resolved.
        extra_filters: filters always applied: ``MetadataFilters`` (AND, OR,
            NOT, nested) or ``{key: value}``.
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
            a ``FilteredQueryBundle`` carrying the combined filters, and its
            own k applies: the spec's ``top_k`` cuts its results. Build it
            with ``similarity_top_k=max_top_k`` so every k is reachable.
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

    Raises:
        TypeError, ValueError: at construction, for ``similarity_top_k``,
            ``max_top_k`` or ``empty_query_top_k`` that are not integers >= 1,
            a negative ``max_retries``, or a ``retriever`` that is not a
            ``BaseRetriever``.
    """

    def __init__(
        self,
        index: Optional[VectorStoreIndex],
        vector_store_info: VectorStoreInfo,
        llm: Optional[LLM] = None,
        prompt_template_str: Optional[Union[str, BasePromptTemplate]] = None,
        max_top_k: int = 10,
        similarity_top_k: int = DEFAULT_SIMILARITY_TOP_K,
        empty_query_top_k: Optional[int] = 10,
        vector_store_query_mode: VectorStoreQueryMode = VectorStoreQueryMode.DEFAULT,
        default_empty_query_vector: Optional[List[float]] = None,
        callback_manager: Optional[CallbackManager] = None,
        verbose: bool = False,
        extra_filters: FiltersLike = None,
        object_map: Optional[dict] = None,
        objects: Optional[List[IndexNode]] = None,
        key_policy: KeyPolicy = "drop",
        vocabulary: Optional[Dict[str, Set[Any]]] = None,
        today: Optional[date] = None,
        synonyms: Optional[Dict[str, Dict[str, Any]]] = None,
        spec_generator: Optional[Union[SpecGenerator, RuleBasedSpecGenerator]] = None,
        retriever: Optional[BaseRetriever] = None,
        filter_policy: Union[FilterPolicy, str] = FilterPolicy.MERGE,
        max_retries: int = 1,
        unknown_filter_key: Union[UnknownFilterPolicy, str] = UnknownFilterPolicy.RAISE,
        **kwargs: Any,
    ) -> None:
        if index is None and retriever is None:
            raise ValueError("pass an index, or retriever= to search with")
        if retriever is not None and not isinstance(retriever, BaseRetriever):
            raise TypeError(
                f"retriever= is a {type(retriever).__name__}, not a BaseRetriever: pass a "
                "retriever (e.g. a RecursiveSummaryRetriever), or index= alone"
            )
        check_count("similarity_top_k", similarity_top_k)
        check_count("max_top_k", max_top_k)
        check_count("empty_query_top_k", empty_query_top_k, allow_none=True)
        check_count("max_retries", max_retries, minimum=0)
        self.unknown_filter_key = UnknownFilterPolicy(unknown_filter_key)
        # upstream's __init__ resolves Settings.llm (OpenAI by default) even when
        # no LLM is wanted, and refuses OR extra_filters: set its fields here.
        self._index = index
        self._vector_store_info = vector_store_info
        self._default_empty_query_vector = default_empty_query_vector
        self._llm = llm
        self._max_top_k = max_top_k
        self._similarity_top_k = similarity_top_k
        self._empty_query_top_k = empty_query_top_k
        self._vector_store_query_mode = vector_store_query_mode
        self._extra_filters = to_filters(extra_filters)
        self._kwargs = kwargs
        self.filter_policy = FilterPolicy(filter_policy)
        self.wrapped_retriever = retriever
        if vocabulary is None:
            vocabulary = _declared_vocabulary(vector_store_info, self._vocabulary_nodes(index, retriever))
        self.vocabulary = vocabulary
        self._check_extra_filters()
        self.validator = SpecValidator(
            vector_store_info,
            vocabulary=vocabulary,
            key_policy=key_policy,
            max_top_k=max_top_k,
            similarity_top_k=similarity_top_k,
            empty_query_top_k=empty_query_top_k,
            today=today,
        )
        self.spec_generator: SpecGenerator = self._make_generator(
            spec_generator, llm, prompt_template_str, max_retries, today, synonyms
        )
        prompt = getattr(self.spec_generator, "prompt", None)
        self._prompt = prompt if isinstance(prompt, BasePromptTemplate) else DEFAULT_SPEC_PROMPT
        if retriever is not None:
            wrapped_k = getattr(retriever, "similarity_top_k", None)
            if isinstance(wrapped_k, int) and wrapped_k < max_top_k:
                logger.info(
                    "the wrapped %s returns %d results; specs asking for more get %d",
                    type(retriever).__name__, wrapped_k, wrapped_k,
                )
        BaseRetriever.__init__(
            self,
            callback_manager=callback_manager or Settings.callback_manager,
            object_map=object_map or (getattr(index, "_object_map", None) if index is not None else None),
            objects=objects,
            verbose=verbose,
        )

    # ------------------------------------------------------------------ setup

    @staticmethod
    def _vocabulary_nodes(
        index: Optional[VectorStoreIndex], retriever: Optional[BaseRetriever]
    ) -> Iterable[BaseNode]:
        source = index if index is not None else getattr(retriever, "_chunk_index", None)
        if source is None:
            logger.warning(
                "no index to read metadata values from: filter values are not checked and "
                "the rules cannot match value words; pass vocabulary= (metadata_vocabulary(nodes))"
            )
            return []
        nodes = list(source.docstore.docs.values())
        if not nodes:
            logger.warning(
                "the index's docstore holds no nodes (a store that keeps text?): filter values "
                "are not checked; pass vocabulary= (metadata_vocabulary(nodes))"
            )
        return nodes

    def _check_extra_filters(self) -> None:
        """Refuse ``extra_filters`` that cannot match at construction, not at the first query."""
        if self._extra_filters is None or self._index is None or self.wrapped_retriever is not None:
            return
        probe = BackfillVectorRetriever(self._index, unknown_filter_key=self.unknown_filter_key)
        probe._check_filters(self._extra_filters)

    def _make_generator(
        self,
        spec_generator: Optional[Union[SpecGenerator, RuleBasedSpecGenerator]],
        llm: Optional[LLM],
        prompt: Optional[Union[str, BasePromptTemplate]],
        max_retries: int,
        today: Optional[date],
        synonyms: Optional[Dict[str, Dict[str, Any]]],
    ) -> SpecGenerator:
        if isinstance(spec_generator, RuleBasedSpecGenerator):
            return RuleSpecGenerator(spec_generator, self.validator)
        if spec_generator is not None:
            if not (hasattr(spec_generator, "generate") and hasattr(spec_generator, "agenerate")):
                raise TypeError(
                    "spec_generator needs generate(query) and agenerate(query) returning "
                    f"(spec, report); got {type(spec_generator).__name__}"
                )
            return spec_generator
        rules = RuleSpecGenerator(
            RuleBasedSpecGenerator(self._vector_store_info, self.vocabulary, today=today, synonyms=synonyms),
            self.validator,
        )
        if llm is None:
            if prompt is not None:
                logger.warning("prompt_template_str is ignored without llm=: the rules write the specs")
            logger.info("no llm= given: query specs come from the rule-based generator")
            return rules
        return LLMSpecGenerator(
            llm, self._vector_store_info, self.validator, rules, prompt=prompt, max_retries=max_retries
        )

    def _get_prompts(self) -> PromptDictType:
        return {"prompt": self._prompt}

    def _update_prompts(self, prompts: PromptDictType) -> None:
        if "prompt" in prompts:
            self._prompt = prompts["prompt"]
            if isinstance(self.spec_generator, LLMSpecGenerator):
                self.spec_generator.prompt = prompts["prompt"]

    # ------------------------------------------------------------------ specs

    def generate_spec(self, query: str) -> Tuple[VectorStoreQuerySpec, SpecReport]:
        """The validated spec for ``query`` and its report (no retrieval)."""
        return self.spec_generator.generate(query)

    async def agenerate_spec(self, query: str) -> Tuple[VectorStoreQuerySpec, SpecReport]:
        """Same as :meth:`generate_spec`, without blocking the event loop on an LLM."""
        return await self.spec_generator.agenerate(query)

    def generate_retrieval_spec(self, query_bundle: QueryBundle, **kwargs: Any) -> BaseModel:
        """The validated spec (upstream's hook; the report is in :meth:`generate_spec`)."""
        return self.generate_spec(query_bundle.query_str)[0]

    async def agenerate_retrieval_spec(self, query_bundle: QueryBundle, **kwargs: Any) -> BaseModel:
        return (await self.agenerate_spec(query_bundle.query_str))[0]

    def _build_retriever_from_spec(  # type: ignore[override]
        self, spec: VectorStoreQuerySpec, query_bundle: Optional[QueryBundle] = None
    ) -> Tuple[BaseRetriever, QueryBundle]:
        """The retriever and bundle that run ``spec`` (upstream's hook)."""
        call = self._plan(query_bundle or QueryBundle(spec.query), spec, SpecReport())
        return call.retriever, call.bundle

    # ------------------------------------------------------------------ planning

    def _top_k(self, spec: VectorStoreQuerySpec) -> int:
        k = spec.top_k
        if k is None:
            k = resolve_top_k(
                None, self._similarity_top_k, self._max_top_k, spec.query, self._empty_query_top_k
            )
        return min(max(int(k), 1), self._max_top_k)

    def _plan(self, query_bundle: QueryBundle, spec: VectorStoreQuerySpec, report: SpecReport) -> _Call:
        per_call = filters_of(query_bundle)
        combined = combine_filters(list(spec.filters), self._extra_filters, per_call, self.filter_policy)
        top_k = self._top_k(spec)
        blank = not spec.query.strip()
        text = query_bundle.query_str if blank else spec.query
        if blank and self._default_empty_query_vector is not None:
            embedding, strs, text = self._default_empty_query_vector, None, ""
        elif text == query_bundle.query_str:
            embedding, strs = query_bundle.embedding, query_bundle.custom_embedding_strs
        else:
            embedding, strs = None, None
        if self.wrapped_retriever is not None:
            retriever = self.wrapped_retriever
            bundle: QueryBundle = with_options(
                query_bundle, filters=combined, query_str=text, embedding=embedding, custom_embedding_strs=strs
            )
        else:
            assert self._index is not None
            retriever = BackfillVectorRetriever(
                self._index,
                similarity_top_k=top_k,
                filters=combined,
                vector_store_query_mode=self._vector_store_query_mode,
                object_map=self.object_map,
                callback_manager=self.callback_manager,
                verbose=self._verbose,
                unknown_filter_key=self.unknown_filter_key,
                **self._kwargs,
            )
            bundle = QueryBundle(query_str=text, embedding=embedding, custom_embedding_strs=strs)
        generator = report.generator if isinstance(report, GenerationReport) else (
            getattr(self.spec_generator, "name", None) or type(self.spec_generator).__name__
        )
        explanation = AutoExplanation(
            query=query_bundle.query_str,
            spec=spec,
            generator=generator,
            report=report,
            extra_filters=self._extra_filters,
            per_call_filters=per_call,
            filters=combined,
            top_k=top_k,
            search_query=text,
            retriever=type(retriever).__name__,
        )
        # verbose=True raises the level so the explanation shows without logging setup
        logger.log(logging.WARNING if self._verbose else logging.INFO, "auto-retrieval: %s", explanation.describe())
        return _Call(retriever, bundle, top_k, self.wrapped_retriever is not None, explanation)

    def _finish(self, hits: List[NodeWithScore], call: _Call) -> List[NodeWithScore]:
        if call.cut:
            hits = hits[: call.top_k]
        slot = _EXPLANATION_SLOT.get()
        if slot is not None:
            slot.append(call.explanation)
        return [explained(hit, auto=call.explanation) for hit in hits]

    # ------------------------------------------------------------------ retrieval

    def _retrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        check_query(query_bundle)
        spec, report = self.spec_generator.generate(query_bundle.query_str)
        call = self._plan(query_bundle, spec, report)
        return self._finish(retrieve_from_child(call.retriever, call.bundle, "retriever"), call)

    async def _aretrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        check_query(query_bundle)
        spec, report = await self.spec_generator.agenerate(query_bundle.query_str)
        call = self._plan(query_bundle, spec, report)
        return self._finish(
            await aretrieve_from_child(call.retriever, call.bundle, "retriever"), call
        )

    def retrieve_with_explanation(
        self, str_or_query_bundle: QueryType
    ) -> Tuple[List[NodeWithScore], AutoExplanation]:
        """``retrieve`` plus the call's explanation (present even with no results)."""
        slot: List[AutoExplanation] = []
        token = _EXPLANATION_SLOT.set(slot)
        try:
            nodes = self.retrieve(str_or_query_bundle)
        finally:
            _EXPLANATION_SLOT.reset(token)
        return nodes, slot[-1]

    async def aretrieve_with_explanation(
        self, str_or_query_bundle: QueryType
    ) -> Tuple[List[NodeWithScore], AutoExplanation]:
        """``aretrieve`` plus the call's explanation (present even with no results)."""
        slot: List[AutoExplanation] = []
        token = _EXPLANATION_SLOT.set(slot)
        try:
            nodes = await self.aretrieve(str_or_query_bundle)
        finally:
            _EXPLANATION_SLOT.reset(token)
        return nodes, slot[-1]


def _declared_vocabulary(info: VectorStoreInfo, nodes: Iterable[BaseNode]) -> Dict[str, Set[Any]]:
    keys = {meta.name for meta in info.metadata_info}
    return {key: values for key, values in metadata_vocabulary(nodes).items() if key in keys}
