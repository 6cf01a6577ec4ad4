"""Auto-retriever specs written by an LLM, validated, retried once, with a rule-based fallback.

Upstream ``VectorIndexAutoRetriever`` parses the LLM's answer with a strict
JSON parser and, when that fails, silently runs the query with no filters at
all. :class:`LLMSpecGenerator` instead:

1. asks the LLM with a prompt like upstream's (same variables, same layout;
   corrected examples, the valid operators, the values present per key);
2. parses the answer tolerantly (:func:`parse_spec_output`: code fences,
   prose around the object, single quotes, Python literals such as ``None``
   and ``True``, trailing commas, comments);
3. validates and repairs it with :class:`~llama_index_ext_recursive.auto.spec.SpecValidator`;
4. when the answer is unusable (not a spec, or errors under
   ``key_policy="reject"``) or, by default, when the validator had to drop
   something (an invented key, an unknown operator, a value absent from the
   corpus), asks again once with the problems appended to the prompt;
5. when it is still unusable, falls back to the rule-based generator, and
   says so in the report (a :class:`~llama_index_ext_recursive.auto.report.Repair`
   of kind ``"fallback"``): a bad answer never silently means "no filters".

It returns ``(validated spec, GenerationReport)`` like every
:class:`~llama_index_ext_recursive.auto.generator.SpecGenerator`; the prompt
is in :mod:`~llama_index_ext_recursive.auto.prompt`.
"""

from __future__ import annotations

import ast
import json
import logging
import re
from collections.abc import Sequence
from datetime import date
from typing import Any

from llama_index.core.llms.llm import LLM
from llama_index.core.prompts.base import BasePromptTemplate, PromptTemplate
from llama_index.core.vector_stores.types import VectorStoreInfo, VectorStoreQuerySpec

from llama_index_ext_recursive.auto.generator import Attempt, GenerationReport, RuleSpecGenerator
from llama_index_ext_recursive.auto.prompt import (
    DEFAULT_SPEC_PROMPT,
    FEEDBACK_HEADER,
    operators_text,
    values_text,
)
from llama_index_ext_recursive.auto.report import Repair, SpecError, SpecReport
from llama_index_ext_recursive.auto.rules import RuleBasedSpecGenerator
from llama_index_ext_recursive.auto.spec import SpecValidator
from llama_index_ext_recursive.errors import LlamaIndexExtRecursiveError

logger = logging.getLogger(__name__)

__all__ = ["LLMSpecGenerator", "SpecParseError", "parse_spec_output"]

#: Repair kinds that lose part of what the spec asked for (they trigger a retry
#: when ``retry_on_drops`` is on).
DROP_KINDS = frozenset({"dropped_key", "dropped_filter", "dropped_value", "dropped_top_k"})
_MAX_SHOWN_OUTPUT = 2000  # characters of an LLM answer kept in reports and retry prompts
_VERBATIM = PromptTemplate("{prompt_text}")

# --------------------------------------------------------------------------- parsing


class SpecParseError(LlamaIndexExtRecursiveError, ValueError):
    """The LLM's answer contains no JSON object (or Python dict) to read a spec from."""


_FENCE = re.compile(r"```[ \t]*[A-Za-z0-9_-]*[ \t]*\n?(.*?)(?:```|$)", re.DOTALL)
# a quoted string (kept as is) or a JSON literal / comment outside strings
_LEXEME = re.compile(
    r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|(?P<word>\b(?:true|false|null)\b)'
    r"|(?P<comment>//[^\n]*|/\*.*?\*/)",
    re.DOTALL,
)
_PY_WORDS = {"true": "True", "false": "False", "null": "None"}
_SPEC_KEYS = {"query", "query_str", "filters", "top_k"}
_MAX_STARTS = 50


def _balanced_object(text: str, start: int) -> str | None:
    """The ``{...}`` starting at ``start`` (braces inside strings ignored), or ``None``."""
    depth, quote, escaped = 0, "", False
    for i in range(start, len(text)):
        ch = text[i]
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return text[start : i + 1]
    return None


def _python_literal(text: str) -> Any:
    """``text`` read as a Python literal, with JSON's true/false/null and comments mapped."""

    def sub(m: re.Match) -> str:
        if m.group("word"):
            return _PY_WORDS[m.group("word")]
        if m.group("comment"):
            return " "
        return m.group(0)

    return ast.literal_eval(_LEXEME.sub(sub, text))


def _read_object(candidate: str) -> Any | None:
    try:
        return json.loads(candidate)
    except (json.JSONDecodeError, RecursionError):
        pass
    try:
        return _python_literal(candidate)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None


def _spec_in(parsed: dict[Any, Any]) -> dict[str, Any] | None:
    """``parsed`` if it is a spec, or the one spec it wraps (``{"spec": {...}}``)."""
    if _SPEC_KEYS & set(map(str, parsed)):
        return parsed
    inner = [
        v
        for v in parsed.values()
        if isinstance(v, dict)
        and _SPEC_KEYS & set(map(str, v))
        and isinstance(v.get("query", ""), str)
        and isinstance(v.get("filters", []), (list, dict))
    ]
    return inner[0] if len(parsed) == 1 and len(inner) == 1 else None


def parse_spec_output(text: str) -> dict[str, Any]:
    """The spec object in an LLM's answer, read tolerantly.

    Accepts JSON or a Python dict literal, in or out of a markdown code fence,
    with prose before or after, single quotes, ``None``/``True``/``False`` or
    ``null``/``true``/``false``, trailing commas and ``//`` comments. The first
    top-level object that has a spec key (``query``, ``filters``, ``top_k``)
    wins; an object wrapping one spec (``{"spec": {...}}``) is unwrapped.

    Raises:
        SpecParseError: there is no such object (the message says why).
    """
    if not isinstance(text, str):
        raise SpecParseError(f"the answer is not text but {type(text).__name__}")
    if not text.strip():
        raise SpecParseError("the answer is empty")
    candidates = [m.group(1) for m in _FENCE.finditer(text)] + [text]
    other: dict[str, Any] | None = None
    tried = 0
    for candidate in candidates:
        start = candidate.find("{")
        while start != -1 and tried < _MAX_STARTS:
            tried += 1
            block = _balanced_object(candidate, start)
            if block is None:
                break  # unbalanced from here on: truncated output
            parsed = _read_object(block)
            if isinstance(parsed, dict):
                spec = _spec_in(parsed)
                if spec is not None:
                    return spec
                other = other or parsed
                start = candidate.find("{", start + len(block))  # not inside a read object
            else:
                start = candidate.find("{", start + 1)
    if other is not None:
        raise SpecParseError(
            f"the JSON object has none of the keys 'query', 'filters', 'top_k' (keys: {sorted(map(str, other))})"
        )
    if "{" not in text:
        raise SpecParseError("the answer contains no JSON object")
    raise SpecParseError("the answer contains no readable JSON object (unbalanced braces or invalid syntax)")


# --------------------------------------------------------------------------- LLM generator


class LLMSpecGenerator:
    """Query specs from an LLM: tolerant parsing, validation, one retry, rule-based fallback.

    Args:
        llm: any LlamaIndex ``LLM`` (completion or chat); called with
            ``predict`` in :meth:`generate` and ``apredict`` in :meth:`agenerate`.
        vector_store_info: the metadata schema shown to the LLM.
        validator: checks and repairs each answer (same ``vector_store_info``;
            its vocabulary, if any, is listed in the prompt).
        fallback: the rule-based generator used when the answers stay
            unusable (a :class:`RuleBasedSpecGenerator` or a
            :class:`RuleSpecGenerator`; its spec goes through ``validator``).
        prompt: a prompt template (``str`` or ``BasePromptTemplate``) with the
            variables ``schema_str``, ``info_str`` and ``query_str`` (upstream
            templates work); optional ``values_str``, ``today_str`` and
            ``feedback_str``. Default: :data:`DEFAULT_SPEC_PROMPT`.
        max_retries: how many times an unusable answer is asked again, with
            the problems appended to the prompt (``0``: straight to the fallback).
        retry_on_drops: also retry when the validator had to drop part of the
            answer (an invented key, an unknown operator, a value absent from
            the corpus); if the retry drops again, its repaired spec is used
            (the drops are in the report) rather than the fallback.
    """

    name = "llm"

    def __init__(
        self,
        llm: LLM,
        vector_store_info: VectorStoreInfo,
        validator: SpecValidator,
        fallback: RuleBasedSpecGenerator | RuleSpecGenerator,
        prompt: str | BasePromptTemplate | None = None,
        max_retries: int = 1,
        retry_on_drops: bool = True,
    ) -> None:
        if llm is None:
            raise ValueError("LLMSpecGenerator needs an llm; use RuleSpecGenerator for specs without one")
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        self.llm = llm
        self.vector_store_info = vector_store_info
        self.validator = validator
        self.fallback = fallback if isinstance(fallback, RuleSpecGenerator) else RuleSpecGenerator(fallback, validator)
        self.prompt: BasePromptTemplate = (
            PromptTemplate(prompt) if isinstance(prompt, str) else (prompt or DEFAULT_SPEC_PROMPT)
        )
        self.max_retries = max_retries
        self.retry_on_drops = retry_on_drops
        self._info_str = vector_store_info.model_dump_json(indent=4)
        self._schema_str = json.dumps(VectorStoreQuerySpec.model_json_schema(), indent=2)
        self._values_str = values_text(vector_store_info, validator.known_values)

    # ------------------------------------------------------------------ prompt

    def format_prompt(self, query: str, feedback: str = "") -> str:
        """The prompt text sent for ``query`` (``feedback``: the retry section)."""
        today = self.validator.today or date.today()
        text = self.prompt.format(
            llm=self.llm,
            schema_str=self._schema_str,
            info_str=self._info_str,
            query_str=query,
            values_str=self._values_str,
            today_str=today.isoformat(),
            feedback_str=f"\n{feedback}" if feedback else "",
        )
        if feedback and feedback not in text:  # a custom template without {feedback_str}
            text = f"{text.rstrip()}\n\n{feedback}\nStructured Request:\n"
        return text

    def _feedback(self, output: str, problems: Sequence[str]) -> str:
        shown = output if len(output) <= _MAX_SHOWN_OUTPUT else output[:_MAX_SHOWN_OUTPUT] + " ..."
        listed = "\n".join(f"- {p}" for p in problems)
        declared = ", ".join(f"{m.name} ({m.type})" for m in self.vector_store_info.metadata_info)
        return (
            f"{FEEDBACK_HEADER}\n"
            f"Your previous answer was:\n{shown}\n"
            f"Problems:\n{listed}\n"
            'Answer again with one JSON object with the keys "query", "filters" (a list of '
            'objects with "key", "value" and "operator") and "top_k". '
            f"Declared attributes: {declared}. "
            f"Operators: {operators_text(self.vector_store_info)}.\n"
        )

    # ------------------------------------------------------------------ checking

    def _check(self, output: str) -> tuple[tuple[VectorStoreQuerySpec, SpecReport] | None, list[str]]:
        """``(validated spec and report, or None; problems that warrant a retry)``."""
        try:
            data = parse_spec_output(output)
        except SpecParseError as exc:
            return None, [f"could not read a JSON object: {exc}"]
        try:
            spec, report = self.validator.validate(data)
        except SpecError as exc:
            return None, [error.message for error in exc.report.errors] or [str(exc)]
        problems = [r.message for r in report.repairs if r.kind in DROP_KINDS] if self.retry_on_drops else []
        return (spec, report), problems

    @staticmethod
    def _shown(output: Any) -> str:
        text = output if isinstance(output, str) else repr(output)
        return text if len(text) <= _MAX_SHOWN_OUTPUT else text[:_MAX_SHOWN_OUTPUT] + " ..."

    def _accept(
        self, index: int, result: tuple[VectorStoreQuerySpec, SpecReport], attempts: list[Attempt]
    ) -> tuple[VectorStoreQuerySpec, GenerationReport]:
        spec, report = result
        attempts[index].used = True
        repairs = list(report.repairs)
        if len(attempts) > 1:
            earlier = "; ".join(p for a in attempts[:-1] for p in a.problems)
            which = "the last answer" if index == len(attempts) - 1 else f"answer {index + 1} (repaired)"
            repairs.insert(
                0,
                Repair(
                    "retried",
                    None,
                    attempts[0].output[:200],
                    None,
                    f"the LLM was asked {len(attempts)} times ({earlier}); {which} is used",
                ),
            )
        return spec, GenerationReport(repairs=repairs, errors=list(report.errors), generator="llm", attempts=attempts)

    def _fall_back(
        self, query: str, attempts: list[Attempt], reason: str
    ) -> tuple[VectorStoreQuerySpec, GenerationReport]:
        logger.warning("LLM query spec unusable (%s); using the rule-based spec", reason)
        spec, report = self.fallback.generate(query)
        last = attempts[-1].output[:200] if attempts else None
        notice = Repair(
            "fallback",
            None,
            last,
            "rules",
            f"the LLM's spec was unusable ({reason}); the rule-based generator wrote this spec",
        )
        return spec, GenerationReport(
            repairs=[notice, *report.repairs],
            errors=list(report.errors),
            generator="fallback",
            attempts=attempts,
            matches=list(getattr(report, "matches", [])),
            notes=list(getattr(report, "notes", [])),
        )

    def _after(
        self,
        output: Any,
        attempts: list[Attempt],
        best: list[tuple[int, tuple[VectorStoreQuerySpec, SpecReport]]],
    ) -> tuple[tuple[VectorStoreQuerySpec, SpecReport] | None, str]:
        """Record one answer; ``(result to return now or None, feedback for the retry)``."""
        text = output if isinstance(output, str) else str(output)
        result, problems = self._check(text)
        attempts.append(Attempt(self._shown(text), problems))
        if result is not None and not problems:
            return result, ""
        if result is not None:  # usable with drops: kept in case the retry is no better
            best.append((len(attempts) - 1, result))
        return None, self._feedback(text, problems)

    def _final(
        self,
        query: str,
        attempts: list[Attempt],
        best: list[tuple[int, tuple[VectorStoreQuerySpec, SpecReport]]],
    ) -> tuple[VectorStoreQuerySpec, GenerationReport]:
        if best:
            return self._accept(*best[-1], attempts)
        problems = attempts[-1].problems if attempts else ["no answer"]
        return self._fall_back(query, attempts, f"{len(attempts)} answer(s), last: {'; '.join(problems)}")

    # ------------------------------------------------------------------ public

    def generate(self, query: str) -> tuple[VectorStoreQuerySpec, GenerationReport]:
        """The validated spec for ``query`` and the report of how it was obtained.

        An exception from the LLM (network, quota) is logged and leads to the
        fallback, recorded in the report.
        """
        attempts: list[Attempt] = []
        best: list[tuple[int, tuple[VectorStoreQuerySpec, SpecReport]]] = []
        feedback = ""
        for _ in range(self.max_retries + 1):
            text = self.format_prompt(query, feedback)
            try:
                output = self.llm.predict(_VERBATIM, prompt_text=text)
            except Exception as exc:  # the LLM failed, not the spec: no retry
                return self._llm_failed(query, attempts, best, exc)
            result, feedback = self._after(output, attempts, best)
            if result is not None:
                return self._accept(len(attempts) - 1, result, attempts)
        return self._final(query, attempts, best)

    async def agenerate(self, query: str) -> tuple[VectorStoreQuerySpec, GenerationReport]:
        """Same as :meth:`generate`, awaiting ``llm.apredict``."""
        attempts: list[Attempt] = []
        best: list[tuple[int, tuple[VectorStoreQuerySpec, SpecReport]]] = []
        feedback = ""
        for _ in range(self.max_retries + 1):
            text = self.format_prompt(query, feedback)
            try:
                output = await self.llm.apredict(_VERBATIM, prompt_text=text)
            except Exception as exc:
                return self._llm_failed(query, attempts, best, exc)
            result, feedback = self._after(output, attempts, best)
            if result is not None:
                return self._accept(len(attempts) - 1, result, attempts)
        return self._final(query, attempts, best)

    def _llm_failed(
        self,
        query: str,
        attempts: list[Attempt],
        best: list[tuple[int, tuple[VectorStoreQuerySpec, SpecReport]]],
        exc: Exception,
    ) -> tuple[VectorStoreQuerySpec, GenerationReport]:
        attempts.append(Attempt("", [f"the LLM call failed: {type(exc).__name__}: {exc}"]))
        if best:
            return self._accept(*best[-1], attempts)
        return self._fall_back(query, attempts, f"the LLM call failed: {type(exc).__name__}: {exc}")
