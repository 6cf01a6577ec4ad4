"""Auto-retrieval: query specs checked against the declared metadata schema."""

from llama_index_ext_recursive.auto.spec import (
    FieldType,
    PartialDate,
    Repair,
    SpecError,
    SpecReport,
    SpecValidator,
    combine_filters,
    metadata_vocabulary,
    parse_date,
    parse_operator,
    resolve_top_k,
)
from llama_index_ext_recursive.auto.rules import (
    BUILTIN_SYNONYMS,
    Match,
    RuleBasedSpecGenerator,
)
from llama_index_ext_recursive.auto.llm import (
    DEFAULT_SPEC_PROMPT,
    DEFAULT_SPEC_PROMPT_TMPL,
    Attempt,
    GenerationReport,
    LLMSpecGenerator,
    RuleSpecGenerator,
    SpecGenerator,
    SpecParseError,
    parse_spec_output,
)
from llama_index_ext_recursive.auto.retriever import AutoExplanation, ValidatedAutoRetriever
from llama_index_ext_recursive.results import AutoNodeWithScore

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
    "combine_filters",
    "metadata_vocabulary",
    "parse_date",
    "parse_operator",
    "resolve_top_k",
]
