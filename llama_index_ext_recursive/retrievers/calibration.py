"""The result of calibrating fusion weights: what was measured, per query script.

A :class:`Calibration` is what :func:`~llama_index_ext_recursive.retrievers.calibrate.calibrate_children`
returns and what a hybrid keeps, saves (:meth:`Calibration.to_dict`, JSON-safe)
and applies again (``calibration=``) without measuring again.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from llama_index_ext_recursive.text import QueryScript


@dataclass
class ScriptCalibration:
    """What was measured for queries in one script.

    Args:
        samples: pseudo-queries (pairs) measured.
        child_mrr: each child's MRR alone (as the fusion ranks it).
        weights: the chosen weights (``None``: too few samples, the default
            weights apply).
        grid: every weight vector tried, with its fused MRR.
    """

    samples: int
    child_mrr: list[float]
    weights: list[float] | None
    grid: list[tuple[list[float], float]] = field(default_factory=list)

    @property
    def mrr(self) -> float | None:
        """The fused MRR of the chosen weights (``None`` when none were chosen)."""
        for weights, mrr in self.grid:
            if self.weights is not None and weights == self.weights:
                return mrr
        return None


@dataclass
class Calibration:
    """Per-script fusion weights fitted on pseudo-queries, for children ``names``.

    Save it with :meth:`to_dict` (JSON-safe) and apply it again with
    ``HybridFusionRetriever(..., calibration=Calibration.from_dict(data))``:
    no recalibration.

    Args:
        scripts: script name (``"latin"``, ``"cjk"``) -> what was measured.
        names: the children's names, in order.
        fusion: the fusion mode the weights were fitted for (a
            ``FUSION_MODES`` value), when known.
    """

    scripts: dict[str, ScriptCalibration]
    names: list[str]
    fusion: str | None = None

    VERSION = 1

    def lacks_text_in(self, script: str | QueryScript) -> bool:
        """Whether the calibrated nodes had no text at all in ``script`` (zero
        pseudo-queries: English questions over a Chinese corpus, say)."""
        entry = self.scripts.get(getattr(script, "value", script))
        return entry is not None and entry.samples == 0

    def weights_for(self, script: str | QueryScript) -> list[float] | None:
        """The fitted weights for ``script`` (``None``: none fitted)."""
        entry = self.scripts.get(getattr(script, "value", script))
        return None if entry is None or entry.weights is None else list(entry.weights)

    def ranking(self) -> dict[str, dict[str, Any]]:
        """Per script, what ranking reads of this calibration (the fitted weights, and whether
        the nodes had text in it), not the measurements behind them: a cache key's part."""
        return {
            script: {"weights": self.weights_for(script), "no_text": self.lacks_text_in(script)}
            for script in sorted(self.scripts)
        }

    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe dict; :meth:`from_dict` reads it back."""
        return {
            "version": self.VERSION,
            "names": list(self.names),
            "fusion": self.fusion,
            "scripts": {
                script: {
                    "samples": entry.samples,
                    "child_mrr": list(entry.child_mrr),
                    "weights": None if entry.weights is None else list(entry.weights),
                    "grid": [{"weights": list(w), "mrr": m} for w, m in entry.grid],
                }
                for script, entry in self.scripts.items()
            },
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Calibration:
        """Read :meth:`to_dict`'s output back.

        Raises:
            ValueError: a missing or malformed field, named by its path
                (e.g. ``scripts.cjk.weights``).
        """
        if not isinstance(data, Mapping):
            raise ValueError(f"calibration must be a dict (from Calibration.to_dict()), got {type(data).__name__}")
        version = data.get("version", cls.VERSION)
        if version != cls.VERSION:
            raise ValueError(
                f"calibration field 'version' is {version!r}; this release reads version "
                f"{cls.VERSION}: recalibrate (HybridFusionRetriever.calibrate) and save again"
            )
        names = data.get("names")
        if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
            raise ValueError(f"calibration field 'names' must be a non-empty list of strings, got {names!r}")
        fusion = data.get("fusion")
        if fusion is not None and not isinstance(fusion, str):
            raise ValueError(f"calibration field 'fusion' must be a string or null, got {fusion!r}")
        scripts = data.get("scripts")
        if not isinstance(scripts, Mapping):
            raise ValueError(f"calibration field 'scripts' must be a dict of script -> entry, got {scripts!r}")
        known = [s.value for s in QueryScript]
        parsed: dict[str, ScriptCalibration] = {}
        for script, entry in scripts.items():
            where = f"scripts.{script}"
            if script not in known:
                raise ValueError(f"calibration field {where!r}: unknown script {script!r}, use one of {known}")
            if not isinstance(entry, Mapping):
                raise ValueError(f"calibration field {where!r} must be a dict, got {entry!r}")
            samples = entry.get("samples")
            if isinstance(samples, bool) or not isinstance(samples, int) or samples < 0:
                raise ValueError(f"calibration field '{where}.samples' must be an integer >= 0, got {samples!r}")
            child_mrr = _numbers(entry.get("child_mrr"), f"{where}.child_mrr", None)
            if child_mrr and len(child_mrr) != len(names):
                raise ValueError(
                    f"calibration field '{where}.child_mrr' has {len(child_mrr)} values for "
                    f"{len(names)} names: give one per child"
                )
            weights = entry.get("weights")
            if weights is not None:
                weights = _numbers(weights, f"{where}.weights", len(names))
            grid = []
            raw_grid = entry.get("grid", [])
            if not isinstance(raw_grid, list):
                raise ValueError(f"calibration field '{where}.grid' must be a list, got {raw_grid!r}")
            for i, point in enumerate(raw_grid):
                if not isinstance(point, Mapping) or "weights" not in point or "mrr" not in point:
                    raise ValueError(
                        f"calibration field '{where}.grid[{i}]' must be {{'weights': [...], 'mrr': x}}, got {point!r}"
                    )
                w = _numbers(point["weights"], f"{where}.grid[{i}].weights", len(names))
                m = _numbers([point["mrr"]], f"{where}.grid[{i}].mrr", 1)[0]
                grid.append((w, m))
            parsed[script] = ScriptCalibration(samples, child_mrr, weights, grid)
        return cls(scripts=parsed, names=list(names), fusion=fusion)


def _numbers(value: Any, where: str, count: int | None) -> list[float]:
    if not isinstance(value, list):
        raise ValueError(f"calibration field {where!r} must be a list of numbers, got {value!r}")
    if count is not None and len(value) != count:
        raise ValueError(f"calibration field {where!r} has {len(value)} values, expected {count} (one per child)")
    out = []
    for v in value:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise ValueError(f"calibration field {where!r} holds {v!r}: values must be finite numbers >= 0")
        out.append(float(v))
    return out


def script_key(name: Any) -> QueryScript:
    """``name`` (a key of ``script_weights``) as a :class:`QueryScript`, or a
    ``ValueError`` listing the scripts."""
    try:
        return QueryScript(name)
    except ValueError:
        raise ValueError(
            f"script_weights has an unknown script {name!r}: use one of {[s.value for s in QueryScript]}"
        ) from None
