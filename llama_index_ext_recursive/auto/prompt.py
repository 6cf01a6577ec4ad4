"""The prompt an LLM writes specs from: upstream's layout, corrected examples, the values present.

Same variables as upstream's ``DEFAULT_VECTOR_STORE_QUERY_PROMPT_TMPL``
(``schema_str``, ``info_str``, ``query_str``), so upstream templates work here,
plus ``values_str`` (the values present per key), ``today_str`` and
``feedback_str`` (the problems of the previous answer, on a retry).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from llama_index.core.prompts.base import PromptTemplate
from llama_index.core.vector_stores.types import VectorStoreInfo

from llama_index_ext_recursive.schema import FieldType

__all__ = [
    "DEFAULT_SPEC_PROMPT",
    "DEFAULT_SPEC_PROMPT_TMPL",
    "FEEDBACK_HEADER",
    "operators_text",
    "values_text",
]

_MAX_VALUES_IN_PROMPT = 25  # known values listed per key


# Modelled on upstream's DEFAULT_VECTOR_STORE_QUERY_PROMPT_TMPL (same variables
# schema_str, info_str, query_str, so upstream templates work here too) with
# its examples corrected: upstream's first example ANDs two values of one key
# (no song has two artists) and its second writes the year 1813 as a string.
_PREFIX = """\
Your goal is to structure the user's query to match the request schema provided below.

<< Structured Request Schema >>
When responding use a markdown code snippet with a JSON object formatted in the \
following schema:

{schema_str}

The query string should contain only text that is expected to match the contents of \
documents. Any conditions in the filter should not be mentioned in the query as well.

Make sure that filters only refer to attributes that exist in the data source, spelled \
exactly as declared.
Make sure that filters take into account the descriptions of attributes.
Make sure that filter values have the declared type: numbers for int and float \
attributes (2023, not "2023").
Use only these operators: ==, !=, >, >=, <, <=, in, nin (the value of in and nin is \
a list), contains, any, all (for list attributes), text_match.
Several filters are all applied (AND). To accept any of several values of one \
attribute, use a single filter with the operator in.
Make sure that filters are only used as needed. If there are no filters that should be \
applied return [] for the filter value.
If the user's query explicitly mentions number of documents to retrieve, set top_k to \
that number, otherwise do not set top_k.
Answer with the JSON object only.

"""

_EXAMPLE_INFO_1 = """\
{
    "metadata_info": [
        {"name": "artist", "type": "str", "description": "Name of the song artist"},
        {"name": "genre", "type": "str", "description": "The song genre, one of \\"pop\\", \\"rock\\" or \\"rap\\""}
    ],
    "content_info": "Lyrics of a song"
}"""
_EXAMPLE_OUTPUT_1 = (
    '{"query": "teenager love", "filters": [{"key": "artist", "value": ["Taylor Swift", '
    '"Katy Perry"], "operator": "in"}, {"key": "genre", "value": "pop", "operator": "=="}], '
    '"top_k": null}'
)
_EXAMPLE_INFO_2 = """\
{
    "metadata_info": [
        {"name": "author", "type": "str", "description": "Author name"},
        {"name": "book_title", "type": "str", "description": "Book title"},
        {"name": "year", "type": "int", "description": "Year Published"},
        {"name": "pages", "type": "int", "description": "Number of pages"}
    ],
    "content_info": "Classic literature"
}"""
_EXAMPLE_OUTPUT_2 = (
    '{"query": "Books related to theme of marriage for social standing", "filters": '
    '[{"key": "year", "value": 1813, "operator": ">"}, {"key": "author", "value": '
    '"Jane Austen", "operator": "=="}], "top_k": 3}'
)
_EXAMPLES = f"""\
<< Example 1. >>
Data Source:
```json
{_EXAMPLE_INFO_1}
```

User Query:
What are songs by Taylor Swift or Katy Perry in the dance pop genre

Structured Request:
```json
{_EXAMPLE_OUTPUT_1}
```

<< Example 2. >>
Data Source:
```json
{_EXAMPLE_INFO_2}
```

User Query:
Give me three books by Jane Austen published after 1813 that explore the theme of \
marriage for social standing

Structured Request:
```json
{_EXAMPLE_OUTPUT_2}
```
""".replace("{", "{{").replace("}", "}}")

_SUFFIX = """
<< Example 3. >>
Data Source:
```json
{info_str}
```
{values_str}
Today is {today_str}.

User Query:
{query_str}
{feedback_str}
Structured Request:
"""

#: The default prompt template (variables: ``schema_str``, ``info_str``,
#: ``query_str``, ``values_str``, ``today_str``, ``feedback_str``; a custom
#: template needs only the first three, as upstream's).
DEFAULT_SPEC_PROMPT_TMPL = _PREFIX + _EXAMPLES + _SUFFIX
DEFAULT_SPEC_PROMPT = PromptTemplate(DEFAULT_SPEC_PROMPT_TMPL)
#: Starts the retry section of a prompt.
FEEDBACK_HEADER = "<< Your previous answer could not be used >>"


def values_text(info: VectorStoreInfo, vocabulary: Mapping[str, set[Any]]) -> str:
    """The prompt's list of values present per declared key (empty when none is known)."""
    lines = []
    for meta in info.metadata_info:
        values = vocabulary.get(meta.name)
        if not values:
            continue
        shown = sorted(values, key=lambda v: (str(type(v)), str(v)))
        listed = ", ".join(json.dumps(v, ensure_ascii=False) for v in shown[:_MAX_VALUES_IN_PROMPT])
        more = f" (and {len(shown) - _MAX_VALUES_IN_PROMPT} more)" if len(shown) > _MAX_VALUES_IN_PROMPT else ""
        lines.append(f"- {meta.name}: {listed}{more}")
    if not lines:
        return ""
    return "Values present in the data source:\n" + "\n".join(lines) + "\n"


def operators_text(info: VectorStoreInfo) -> str:
    """Every operator valid for some declared key, for the retry prompt."""
    names = set()
    for meta in info.metadata_info:
        names |= {op.value for op in FieldType.of(meta).operators}
    return ", ".join(sorted(names))
