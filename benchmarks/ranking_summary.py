"""The issue-28 tables of docs/BENCHMARKS.md, from the ``ranking_sweep.py`` results of one title convention.

Reads ``<prefix>.json`` (the baselines, and any variants), ``<prefix>_default.json``
(the recursive default of this checkout) and ``<prefix>_before.json`` (the default
of the release before, measured with ``PYTHONPATH`` on an extracted copy), and
prints one row per dataset: the recursive default against the release before,
our hybrid, the best upstream flat retriever and the routing oracle, with the
issue's targets.

    .venv/bin/python benchmarks/ranking_summary.py benchmarks/results/ranking/no_embed_title
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from harness.report import table

NDCG = "nDCG@10"
UPSTREAM_FLAT = ("upstream-vector", "upstream-bm25", "upstream-fusion", "upstream-fusion-relative")
TARGETS = {"xquad_en_fine": 0.94, "legalbench_contractnli": 0.50, "xquad_zh_fine": 0.94}


def runs(path: Path) -> dict[str, dict[str, Any]]:
    """dataset -> run label -> run, for one results file (empty when it is missing)."""
    if not path.exists():
        return {}
    return {d["dataset"]: d["runs"] for d in json.loads(path.read_text())["datasets"]}


def ndcg(run: dict[str, Any] | None) -> float | None:
    return None if run is None else run["metrics"][NDCG]


def cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def only_recursive(found: dict[str, Any]) -> dict[str, Any] | None:
    labels = [label for label in found if label.startswith("recursive")]
    return found[labels[0]] if len(labels) == 1 else None


def main(prefix: str) -> None:
    base = runs(Path(f"{prefix}.json"))
    default = runs(Path(f"{prefix}_default.json"))
    before = runs(Path(f"{prefix}_before.json"))
    rows = []
    for dataset, found in base.items():
        now = ndcg(only_recursive(default.get(dataset, {})))
        upstream = max(((ndcg(found.get(n)), n) for n in UPSTREAM_FLAT if n in found), default=(None, ""))
        hybrid = ndcg(found.get("hybrid"))
        target = TARGETS.get(dataset)
        checks = [v for v in (hybrid, upstream[0], target) if v is not None]
        met = "-" if now is None else "yes" if all(now >= v for v in checks) else "NO"
        rows.append(
            [
                dataset,
                cell(now),
                cell(ndcg(only_recursive(before.get(dataset, {})))),
                cell(hybrid),
                f"{upstream[1]} {cell(upstream[0])}",
                cell(ndcg(found.get("oracle-routing"))),
                cell(target),
                met,
            ]
        )
    print(
        table(
            [
                "dataset",
                "recursive (default)",
                "recursive before (1253e4a)",
                "hybrid",
                "best upstream flat",
                "oracle-routing",
                "target",
                "at least hybrid, best upstream, target",
            ],
            rows,
        )
    )


if __name__ == "__main__":
    main(sys.argv[1])
