"""What validating a spec changed: :class:`Repair` records, the :class:`SpecReport`, :class:`SpecError`.

The validator, the generators and the retriever's explanation all carry these
records, so they live apart from the validator's rules.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import date, datetime
from typing import Any

from llama_index.core.vector_stores.types import FilterOperator, MetadataFilter

from llama_index_ext_recursive.errors import LlamaIndexExtRecursiveError

logger = logging.getLogger(__name__)

__all__ = ["Repair", "RepairLog", "SpecError", "SpecReport", "plain"]

Op = FilterOperator


@dataclass
class Repair:
    """One change made to a spec (or, under ``reject``, one refused change).

    Args:
        kind: ``dropped_key``, ``renamed_key``, ``coerced_value``,
            ``dropped_value``, ``repaired_value``, ``mapped_operator``,
            ``changed_operator``, ``dropped_filter``, ``clamped_top_k``,
            ``coerced_top_k``, ``dropped_top_k`` or ``unparseable_spec``.
        key: the metadata key concerned (``"top_k"`` for k; may be ``None``).
        before: what the spec said (JSON-friendly).
        after: what is used instead (``None`` when dropped).
        message: why, in words.
    """

    kind: str
    key: str | None
    before: Any
    after: Any
    message: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class SpecReport:
    """Everything validation changed (``repairs``) or refused (``errors``)."""

    repairs: list[Repair] = field(default_factory=list)
    errors: list[Repair] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when nothing was refused (repairs may still have been made)."""
        return not self.errors

    def kinds(self) -> list[str]:
        """The kinds of the repairs, in order (handy for logs and tests)."""
        return [repair.kind for repair in self.repairs]

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "repairs": [repair.to_dict() for repair in self.repairs],
            "errors": [error.to_dict() for error in self.errors],
        }


class SpecError(LlamaIndexExtRecursiveError, ValueError):
    """A spec that cannot be used as is; the message lists every problem.

    Raised under ``key_policy="reject"`` (instead of dropping anything) and
    for output that is not a spec at all. ``report.errors`` has the details.
    """

    def __init__(self, report: SpecReport) -> None:
        self.report = report
        lines = [f"- {error.message}" for error in report.errors]
        super().__init__(f"{len(report.errors)} problem(s) in the query spec:\n" + "\n".join(lines))

    @property
    def problems(self) -> list[Repair]:
        return list(self.report.errors)


class RepairLog:
    """Collects the repairs and errors of one ``validate`` call under one ``key_policy``."""

    def __init__(self, policy: str) -> None:
        self.policy = policy
        self.repairs: list[Repair] = []
        self.errors: list[Repair] = []

    def repair(self, kind: str, key: str | None, before: Any, after: Any, message: str) -> None:
        logger.info("query spec repair (%s): %s", kind, message)
        self.repairs.append(Repair(kind, key, plain(before), plain(after), message))

    def drop(self, kind: str, key: str | None, before: Any, message: str) -> None:
        """Record a drop; under ``reject`` it becomes an error instead."""
        record = Repair(kind, key, plain(before), None, message)
        if self.policy == "reject":
            self.errors.append(record)
        else:
            logger.warning("query spec repair (%s): %s", kind, message)
            self.repairs.append(record)


def plain(value: Any) -> Any:
    """A JSON-friendly copy of ``value`` for the report."""
    if isinstance(value, Op):
        return value.value
    if isinstance(value, MetadataFilter):
        return {"key": value.key, "operator": value.operator.value, "value": plain(value.value)}
    if isinstance(value, (date, datetime)):
        return value.isoformat()
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [plain(v) for v in value]
    if value is None or isinstance(value, (str, int, bool)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    return repr(value)
