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

__all__ = [
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
