"""What a retriever needs from a spec writer, and the rule-based writer behind that interface.

Every generator returns ``(validated spec, report)`` (:class:`SpecGenerator`);
:class:`RuleSpecGenerator` puts
:class:`~llama_index_ext_recursive.auto.rules.RuleBasedSpecGenerator` behind
the same interface as :class:`~llama_index_ext_recursive.auto.llm.LLMSpecGenerator`,
so a retriever treats both alike. The report is a :class:`GenerationReport`:
a ``SpecReport`` that also names the generator that produced the spec
(``rules``, ``llm`` or ``fallback``) and keeps each LLM attempt's output and problems.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, runtime_checkable

from llama_index.core.vector_stores.types import FilterOperator, VectorStoreQuerySpec

from llama_index_ext_recursive.auto.report import SpecReport
from llama_index_ext_recursive.auto.rules import RuleBasedSpecGenerator
from llama_index_ext_recursive.auto.spec import SpecValidator

__all__ = ["Attempt", "GenerationReport", "RuleSpecGenerator", "SpecGenerator"]


@dataclass
class Attempt:
    """One LLM answer, what was wrong with it, and whether its spec was used."""

    output: str
    problems: list[str] = field(default_factory=list)
    used: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class GenerationReport(SpecReport):
    """A :class:`SpecReport` that also says where the spec came from.

    Args:
        generator: ``"rules"`` (rule-based), ``"llm"`` (the LLM's spec, validated)
            or ``"fallback"`` (the LLM's answers were unusable; rule-based spec).
        attempts: each LLM answer with its problems, in order (empty for rules).
        matches: for rule-based specs, the query phrases that became filters
            (``text``, ``rule``, ``key``, ``operator``, ``value``).
        notes: for rule-based specs, what the rules left out because they were
            unsure (a negation of unclear reach, "or" across keys, a phrase
            that names values of two keys), in words.
    """

    generator: str = "rules"
    attempts: list[Attempt] = field(default_factory=list)
    matches: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def fell_back(self) -> bool:
        """True when the LLM's answers were unusable and the rules wrote the spec."""
        return self.generator == "fallback"

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        out.update(
            generator=self.generator,
            attempts=[attempt.to_dict() for attempt in self.attempts],
            matches=list(self.matches),
            notes=list(self.notes),
        )
        return out


@runtime_checkable
class SpecGenerator(Protocol):
    """What a retriever needs from a spec generator: a validated spec and its report.

    ``generate`` and ``agenerate`` give the same result for the same query;
    ``agenerate`` never blocks the event loop on I/O.
    """

    def generate(self, query: str) -> tuple[VectorStoreQuerySpec, SpecReport]: ...

    async def agenerate(self, query: str) -> tuple[VectorStoreQuerySpec, SpecReport]: ...


class RuleSpecGenerator:
    """:class:`RuleBasedSpecGenerator` behind the :class:`SpecGenerator` interface.

    The rule-based spec goes through ``validator`` (which resolves ``top_k``
    and, under ``key_policy="reject"``, refuses what it would drop), and the
    report lists the query phrases that became filters.

    Args:
        rules: the rule-based generator.
        validator: the validator for the same ``VectorStoreInfo``.
    """

    name = "rules"

    def __init__(self, rules: RuleBasedSpecGenerator, validator: SpecValidator) -> None:
        self.rules = rules
        self.validator = validator

    def generate(self, query: str) -> tuple[VectorStoreQuerySpec, GenerationReport]:
        """The validated rule-based spec for ``query`` and its report."""
        reading = self.rules.read(query)
        validated, report = self.validator.validate(reading.spec)
        return validated, GenerationReport(
            repairs=list(report.repairs),
            errors=list(report.errors),
            generator="rules",
            matches=[_match_dict(m) for m in reading.matches],
            notes=list(reading.notes),
        )

    async def agenerate(self, query: str) -> tuple[VectorStoreQuerySpec, GenerationReport]:
        """Same as :meth:`generate` (rules are fast CPU work; nothing to await)."""
        return self.generate(query)


def _match_dict(match: Any) -> dict[str, Any]:
    operator = match.operator.value if isinstance(match.operator, FilterOperator) else match.operator
    return {"text": match.text, "rule": match.rule, "key": match.key, "operator": operator, "value": match.value}
