"""Accuracy of the rule-based auto-retriever spec generator on the labelled query set.

Loads ``llama_index_ext_recursive/sample_data/auto_queries.jsonl`` (queries over
the bundled sample corpus, each with the spec a careful human would want),
builds ``VectorStoreInfo`` for the sample metadata (category, year, language,
source) and the vocabulary from ``load_sample_documents()``, runs
``RuleBasedSpecGenerator`` with each row's ``today`` and reports exact-match
accuracy of the filter set (order-insensitive; key, operator and value must all
agree; ``in`` values compared as sets), overall, per query language (Chinese
if the query contains Han characters) and per split, plus top_k accuracy and
every miss. Split ``dev`` (rows without ``split``) is the set the rules were
designed against; ``holdout`` rows were labelled afterwards, before the
generator was first run on them.

No LLM, no embeddings, no network; runs in about a second.

Usage (repository root)::

    .venv/bin/python benchmarks/auto_accuracy.py            # writes benchmarks/results/auto_accuracy.{json,md}
    .venv/bin/python benchmarks/auto_accuracy.py --no-write # print only
"""

from __future__ import annotations

import argparse
import json
import re
from datetime import date
from importlib import resources
from pathlib import Path
from typing import Any, Dict, FrozenSet, Iterable, List, Tuple

from llama_index.core.vector_stores.types import MetadataFilter, MetadataInfo, VectorStoreInfo

from llama_index_ext_recursive.auto.rules import RuleBasedSpecGenerator
from llama_index_ext_recursive.auto.spec import metadata_vocabulary
from llama_index_ext_recursive.sample import load_sample_documents

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"

SAMPLE_INFO = VectorStoreInfo(
    content_info="Short articles on everyday topics (baking, bees, solar power, history, sport, "
    "software, company policy, tea, recycling, railways, gardening), in English and Chinese",
    metadata_info=[
        MetadataInfo(name="category", type="str",
                     description="Topic area, one of food, biology, energy, history, sports, "
                     "software, policy, environment, transport, gardening"),
        MetadataInfo(name="year", type="int", description="Year the document was published"),
        MetadataInfo(name="language", type="str",
                     description="Language of the document: en (English) or zh (Chinese)"),
        MetadataInfo(name="source", type="str",
                     description="Kind of publication: blog, encyclopedia, manual or handbook"),
    ],
)

FilterKey = Tuple[str, str, Any]


def load_labelled() -> List[Dict[str, Any]]:
    """The labelled queries bundled with the package."""
    text = resources.files("llama_index_ext_recursive").joinpath(
        "sample_data", "auto_queries.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def sample_vocabulary() -> Dict[str, set]:
    """Values present per filterable key in the sample corpus."""
    keys = {m.name for m in SAMPLE_INFO.metadata_info}
    return {k: v for k, v in metadata_vocabulary(load_sample_documents()).items() if k in keys}


def filter_set(filters: Iterable[Any]) -> FrozenSet[FilterKey]:
    """Order-insensitive form of a filter list (``MetadataFilter``s or dicts)."""
    out = set()
    for f in filters:
        if isinstance(f, MetadataFilter):
            key, op, value = f.key, f.operator.value, f.value
        else:
            key, op, value = f["key"], f["operator"], f["value"]
        if isinstance(value, list):
            value = tuple(sorted(value, key=str))
        out.add((key, op, value))
    return frozenset(out)


def language_of(query: str) -> str:
    return "zh" if re.search(r"[\u4e00-\u9fff]", query) else "en"


def evaluate(rows: List[Dict[str, Any]]) -> Dict[str, Any]:
    """Run the generator on every row; accuracy per language and the misses."""
    vocabulary = sample_vocabulary()
    generators: Dict[str, RuleBasedSpecGenerator] = {}
    counts: Dict[str, Dict[str, int]] = {}
    misses = []
    for row in rows:
        today = row.get("today") or date.today().isoformat()
        if today not in generators:
            generators[today] = RuleBasedSpecGenerator(
                SAMPLE_INFO, vocabulary, today=date.fromisoformat(today))
        spec, matches = generators[today].generate_with_matches(row["query"])
        expected = row["expected"]
        filters_ok = filter_set(spec.filters) == filter_set(expected["filters"])
        top_k_ok = spec.top_k == expected.get("top_k")
        split = row.get("split", "dev")
        for group in ("overall", language_of(row["query"]), f"split:{split}"):
            c = counts.setdefault(group, {"n": 0, "filters": 0, "top_k": 0, "both": 0})
            c["n"] += 1
            c["filters"] += filters_ok
            c["top_k"] += top_k_ok
            c["both"] += filters_ok and top_k_ok
        if not (filters_ok and top_k_ok):
            misses.append({
                "query": row["query"],
                "split": split,
                "expected_filters": sorted(map(list, filter_set(expected["filters"])), key=str),
                "got_filters": sorted(map(list, filter_set(spec.filters)), key=str),
                "expected_top_k": expected.get("top_k"),
                "got_top_k": spec.top_k,
                "got_query": spec.query,
                "matched": [m.text for m in matches],
            })
    summary = {
        group: {**c, "filter_accuracy": c["filters"] / c["n"], "top_k_accuracy": c["top_k"] / c["n"],
                "spec_accuracy": c["both"] / c["n"]}
        for group, c in counts.items()
    }
    return {"summary": summary, "misses": misses}


def markdown(result: Dict[str, Any]) -> str:
    lines = [
        "# Rule-based auto-retriever specs: accuracy on the labelled set",
        "",
        "`RuleBasedSpecGenerator` (no LLM) on `llama_index_ext_recursive/sample_data/auto_queries.jsonl`.",
        "Filter accuracy = exact match of the filter set (key, operator, value; order-insensitive).",
        "",
        "Command: `.venv/bin/python benchmarks/auto_accuracy.py`",
        "",
        "| queries | n | filters exact | top_k exact | both |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for group in ("overall", "en", "zh", "split:dev", "split:holdout"):
        s = result["summary"].get(group)
        if s:
            lines.append(f"| {group} | {s['n']} | {s['filter_accuracy']:.3f} ({s['filters']}) | "
                         f"{s['top_k_accuracy']:.3f} | {s['spec_accuracy']:.3f} |")
    lines += [
        "",
        "Splits: `dev` (96 queries) is the set the rules were designed against, so its figure is in-sample.",
        "`holdout` (36) was labelled after the rules were written and before the generator first ran on it;",
        "that first run scored 35/36 filter sets exact (0.972) and 34/36 full specs; the two misses",
        "(\"give me five blog posts about bread\": top_k; \"documents up to and including 2020\": filter) were",
        "then fixed by general rules, so holdout is no longer unseen either.",
        "",
        f"## Misses ({len(result['misses'])})",
        "",
    ]
    if not result["misses"]:
        lines.append("None.")
    for miss in result["misses"]:
        lines.append(f"- [{miss['split']}] `{miss['query']}`: expected {miss['expected_filters']} "
                     f"top_k={miss['expected_top_k']}, got {miss['got_filters']} top_k={miss['got_top_k']} "
                     f"(matched {miss['matched']})")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--no-write", action="store_true", help="print only, write no result files")
    args = parser.parse_args()
    result = evaluate(load_labelled())
    report = markdown(result)
    print(report)
    if not args.no_write:
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / "auto_accuracy.json").write_text(
            json.dumps(result, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
        (RESULTS / "auto_accuracy.md").write_text(report, encoding="utf-8")


if __name__ == "__main__":
    main()
