"""What ``ValidatedAutoRetriever.__init__`` reads from its arguments besides upstream's own.

Its keywords for the vector retriever (checked, because upstream's would
swallow a misspelt one unread), the values present in the index (the
vocabulary the validator and the rules read), and the spec generator
(rules, an LLM with the rules as fallback, or the caller's own).
"""

from __future__ import annotations

import inspect
import logging
from datetime import date
from typing import Any

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.indices.vector_store.base import VectorStoreIndex
from llama_index.core.indices.vector_store.retrievers import VectorIndexRetriever
from llama_index.core.indices.vector_store.retrievers.auto_retriever.auto_retriever import (
    VectorIndexAutoRetriever,
)
from llama_index.core.prompts.base import BasePromptTemplate
from llama_index.core.schema import BaseNode
from llama_index.core.vector_stores.types import VectorStoreInfo

from llama_index_ext_recursive.auto.generator import RuleSpecGenerator, SpecGenerator
from llama_index_ext_recursive.auto.llm import LLMSpecGenerator
from llama_index_ext_recursive.auto.rules import RuleBasedSpecGenerator
from llama_index_ext_recursive.auto.spec import SpecValidator
from llama_index_ext_recursive.corpus import corpus_nodes
from llama_index_ext_recursive.retrievers.vector import BackfillVectorRetriever
from llama_index_ext_recursive.schema import metadata_vocabulary
from llama_index_ext_recursive.validation import closest

logger = logging.getLogger(__name__)


class _Deferred:
    """Stands in for what upstream's constructor reads eagerly but ``ValidatedAutoRetriever`` sets itself.

    ``VectorIndexAutoRetriever.__init__`` evaluates ``llm or Settings.llm``
    (which resolves OpenAI when no LLM is configured) and ``object_map or
    index._object_map`` (which fails for ``index=None``). Passing this truthy
    object short-circuits both; the subclass sets the real values right after
    the parent's constructor returns.
    """

    _object_map: dict[str, Any] = {}


DEFERRED = _Deferred()

# what the vector retriever takes besides what ValidatedAutoRetriever passes it
_SET_HERE = {
    "self",
    "index",
    "kwargs",
    "similarity_top_k",
    "vector_store_query_mode",
    "object_map",
    "callback_manager",
    "verbose",
    "unknown_filter_key",
    "filters",
    "filter_policy",
}
_VECTOR_KEYWORDS = frozenset(
    (
        set(inspect.signature(BackfillVectorRetriever.__init__).parameters)
        | set(inspect.signature(VectorIndexRetriever.__init__).parameters)
        | {"vector_store_kwargs"}
    )
    - _SET_HERE
)
_OWN_KEYWORDS = frozenset(inspect.signature(VectorIndexAutoRetriever.__init__).parameters) | {
    "key_policy",
    "vocabulary",
    "today",
    "synonyms",
    "spec_generator",
    "retriever",
    "filter_policy",
    "max_retries",
    "unknown_filter_key",
}


def check_vector_keywords(kwargs: dict[str, Any]) -> None:
    """Refuse a misspelt keyword now: upstream's vector retriever would swallow it unread."""
    for name in kwargs:
        if name == "filters":
            raise TypeError("ValidatedAutoRetriever takes extra_filters=, not filters=")
        if name not in _VECTOR_KEYWORDS:
            raise TypeError(
                f"ValidatedAutoRetriever got an unexpected keyword {name!r} "
                f"({closest(name, _VECTOR_KEYWORDS | _OWN_KEYWORDS)})"
            )


def _vocabulary_nodes(index: VectorStoreIndex | None, retriever: BaseRetriever | None) -> list[BaseNode]:
    if index is not None:
        nodes = list(index.docstore.docs.values())
    elif retriever is not None:
        nodes = corpus_nodes(retriever)
    else:
        logger.warning(
            "no index to read metadata values from: filter values are not checked and "
            "the rules cannot match value words; pass vocabulary= (metadata_vocabulary(nodes))"
        )
        return []
    if not nodes:
        logger.warning(
            "no nodes to read metadata values from (a store that keeps text?): filter values "
            "are not checked; pass vocabulary= (metadata_vocabulary(nodes))"
        )
    return nodes


def declared_vocabulary(
    info: VectorStoreInfo, index: VectorStoreIndex | None, retriever: BaseRetriever | None
) -> dict[str, set[Any]]:
    """The values present per declared key: in ``index``'s docstore, or a wrapped recursive retriever's chunks."""
    keys = {meta.name for meta in info.metadata_info}
    nodes = _vocabulary_nodes(index, retriever)
    return {key: values for key, values in metadata_vocabulary(nodes).items() if key in keys}


def spec_generator_for(
    spec_generator: SpecGenerator | RuleBasedSpecGenerator | None,
    *,
    llm: Any | None,
    vector_store_info: VectorStoreInfo,
    vocabulary: dict[str, set[Any]],
    validator: SpecValidator,
    prompt: str | BasePromptTemplate | None,
    max_retries: int,
    today: date | None,
    synonyms: dict[str, dict[str, Any]] | None,
) -> SpecGenerator:
    """The caller's generator (a ``RuleBasedSpecGenerator`` is wrapped), else the rules, with an LLM in front when given."""
    if isinstance(spec_generator, RuleBasedSpecGenerator):
        return RuleSpecGenerator(spec_generator, validator)
    if spec_generator is not None:
        if not (hasattr(spec_generator, "generate") and hasattr(spec_generator, "agenerate")):
            raise TypeError(
                "spec_generator needs generate(query) and agenerate(query) returning "
                f"(spec, report); got {type(spec_generator).__name__}"
            )
        return spec_generator
    rules = RuleSpecGenerator(
        RuleBasedSpecGenerator(vector_store_info, vocabulary, today=today, synonyms=synonyms), validator
    )
    if llm is None:
        if prompt is not None:
            logger.warning("prompt_template_str is ignored without llm=: the rules write the specs")
        logger.info("no llm= given: query specs come from the rule-based generator")
        return rules
    return LLMSpecGenerator(llm, vector_store_info, validator, rules, prompt=prompt, max_retries=max_retries)
