"""Auto-retrieval: query specs checked against the declared metadata schema.

``values`` reads what a spec writer wrote (dates, numbers, operators, k),
``report`` records what validation changed, ``spec`` validates a spec,
``generator`` is the interface every spec writer meets (and the rule-based
one behind it), ``rules``/``lexicon``/``years`` write specs without an LLM,
``prompt``/``llm`` with one; ``retriever`` searches with the result
(``construction`` reads its arguments, ``explanation`` is the ``auto`` part of
each hit's explanation, ``saving`` its ``to_dict``/``persist``).
"""

from llama_index_ext_recursive.auto.generator import (
    Attempt,
    GenerationReport,
    RuleSpecGenerator,
    SpecGenerator,
)
from llama_index_ext_recursive.auto.llm import LLMSpecGenerator, SpecParseError, parse_spec_output
from llama_index_ext_recursive.auto.prompt import DEFAULT_SPEC_PROMPT, DEFAULT_SPEC_PROMPT_TMPL
from llama_index_ext_recursive.auto.report import Repair, SpecError, SpecReport
from llama_index_ext_recursive.auto.retriever import AutoExplanation, ValidatedAutoRetriever
from llama_index_ext_recursive.auto.rules import BUILTIN_SYNONYMS, Match, RuleBasedSpecGenerator
from llama_index_ext_recursive.auto.spec import SpecValidator
from llama_index_ext_recursive.auto.values import PartialDate, parse_date, resolve_top_k
from llama_index_ext_recursive.filters import parse_operator
from llama_index_ext_recursive.results import AutoNodeWithScore
from llama_index_ext_recursive.schema import FieldType, metadata_vocabulary

__all__ = [
    "Attempt",
    "AutoExplanation",
    "AutoNodeWithScore",
    "DEFAULT_SPEC_PROMPT",
    "DEFAULT_SPEC_PROMPT_TMPL",
    "GenerationReport",
    "LLMSpecGenerator",
    "RuleSpecGenerator",
    "SpecGenerator",
    "SpecParseError",
    "ValidatedAutoRetriever",
    "parse_spec_output",
    "BUILTIN_SYNONYMS",
    "Match",
    "RuleBasedSpecGenerator",
    "FieldType",
    "PartialDate",
    "Repair",
    "SpecError",
    "SpecReport",
    "SpecValidator",
    "metadata_vocabulary",
    "parse_date",
    "parse_operator",
    "resolve_top_k",
]
