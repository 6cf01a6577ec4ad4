"""The explanation of one auto-retrieval call: the ``auto`` part of every result's explanation."""

from __future__ import annotations

from llama_index.core.bridge.pydantic import BaseModel, ConfigDict
from llama_index.core.vector_stores.types import MetadataFilters, VectorStoreQuerySpec

from llama_index_ext_recursive.auto.generator import GenerationReport
from llama_index_ext_recursive.auto.report import Repair, SpecReport

__all__ = ["AutoExplanation"]


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
        top_k: the k used: the caller's per-call ``top_k`` when given, else the
            spec's (clamped to ``max_top_k``), else ``similarity_top_k``.
        search_query: the text searched (the spec's query, or the caller's
            when the spec's is empty).
        retriever: what searched (``BackfillVectorRetriever`` or the wrapped
            retriever's class name).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    query: str
    spec: VectorStoreQuerySpec
    generator: str
    report: GenerationReport | SpecReport
    extra_filters: MetadataFilters | None = None
    per_call_filters: MetadataFilters | None = None
    filters: MetadataFilters | None = None
    top_k: int
    search_query: str
    retriever: str

    @property
    def repairs(self) -> list[Repair]:
        """What validation (or the fallback) changed, in order."""
        return list(self.report.repairs)

    @property
    def notes(self) -> list[str]:
        """What the rules left out because they were unsure, in words (empty for LLM specs)."""
        return list(getattr(self.report, "notes", ()))

    @property
    def fell_back(self) -> bool:
        """True when an LLM's answers were unusable and the rules wrote the spec."""
        return self.generator == "fallback"

    def describe(self) -> str:
        """A few lines for people: spec, filters applied, repairs."""
        generated = [f"{f.key} {f.operator.value} {f.value!r}" for f in self.spec.filters]
        lines = [
            f"query {self.query!r} -> search {self.search_query!r} (spec by {self.generator}, top_k={self.top_k})",
            f"  generated filters: {', '.join(generated) if generated else 'none'}",
        ]
        if self.extra_filters is not None or self.per_call_filters is not None:
            lines.append(f"  applied filters: {_tree_text(self.filters)}")
        for repair in self.report.repairs:
            lines.append(f"  [{repair.kind}] {repair.message}")
        for note in getattr(self.report, "notes", ()):
            lines.append(f"  [unsure] {note}")
        return "\n".join(lines)


def _tree_text(filters: MetadataFilters | None) -> str:
    if filters is None or not filters.filters:
        return "none"
    parts = [
        f"({_tree_text(item)})"
        if isinstance(item, MetadataFilters)
        else f"{item.key} {item.operator.value} {item.value!r}"
        for item in filters.filters
    ]
    condition = getattr(filters.condition, "value", filters.condition) or "and"
    if condition == "not":
        return "not (" + " or ".join(parts) + ")"
    return f" {condition} ".join(parts)
