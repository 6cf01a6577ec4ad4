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

It then scores ``LLMSpecGenerator`` driven by a scripted fake LLM that makes
the mistakes real LLMs make, one kind per query chosen by the query's index
(``i % 7``): none (control), invented key names (``categories``,
``publication_year``, ``lang``, ``source_type``), wrong types (``"2023"`` for
an int, ``"5"`` for top_k), bad JSON (a Python dict repr with single quotes and
``None`` plus trailing prose), operator spellings (``gte``, ``greater_than``,
``equals``, ``one_of``...), key/value case (``Category``, ``Food``, ``EN``),
and unparseable text twice (so the rules must take over). Asked again (the
retry prompt), the fake answers with the correct spec, except in the
unparseable case. Each configuration's filter sets are compared after
validation, repair, retry and fallback; upstream's own parser
(``VectorStoreQueryOutputParser``, no filters when it fails) on the same first
answers is the baseline.

No LLM, no embeddings, no network; runs in a few seconds.

Usage (repository root)::

    .venv/bin/python benchmarks/auto_accuracy.py            # writes benchmarks/results/auto_accuracy.{json,md}
    .venv/bin/python benchmarks/auto_accuracy.py --no-write # print only
"""

from __future__ import annotations

import argparse
import json
import logging
import re
from datetime import date
from importlib import resources
from pathlib import Path
from typing import Any, Dict, FrozenSet, Iterable, List, Tuple

from llama_index.core.base.llms.types import CompletionResponse, LLMMetadata
from llama_index.core.indices.vector_store.retrievers.auto_retriever.output_parser import (
    VectorStoreQueryOutputParser,
)
from llama_index.core.llms import CustomLLM
from llama_index.core.vector_stores.types import MetadataFilter

from llama_index_ext_recursive.auto.llm import LLMSpecGenerator
from llama_index_ext_recursive.auto.rules import RuleBasedSpecGenerator
from llama_index_ext_recursive.auto import SpecValidator, metadata_vocabulary, resolve_top_k
from llama_index_ext_recursive.sample import load_sample_documents, sample_vector_store_info

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"

SAMPLE_INFO = sample_vector_store_info()

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


# --------------------------------------------------------------------------- scripted LLM

MISTAKES = ["none", "invented_keys", "wrong_types", "bad_json", "operator_spellings",
            "case", "unparseable"]
INVENTED_KEYS = {"category": "categories", "year": "publication_year", "language": "lang",
                 "source": "source_type"}
OPERATOR_SPELLINGS = {">=": "gte", ">": "greater_than", "<=": "lte", "<": "less than",
                      "==": "equals", "!=": "not_equal", "in": "one_of", "nin": "not in"}
UNPARSEABLE = ("I'm sorry, I can only describe the filters: the category should be food.",
               "Filters: category is food; year after 2020 (no JSON, sorry)")
SIMILARITY_TOP_K, MAX_TOP_K = 10, 100  # k is compared without clamping


class ScriptedLLM(CustomLLM):
    """First call: ``first``; every later call (the retry prompt): ``retry``."""

    first: str
    retry: str
    calls: int = 0

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata()

    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        self.calls += 1
        return CompletionResponse(text=self.first if self.calls == 1 else self.retry)

    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any):
        raise NotImplementedError


def _fenced(spec: Dict[str, Any]) -> str:
    return "```json\n" + json.dumps(spec, ensure_ascii=False) + "\n```"


def mistaken_answers(expected: Dict[str, Any], mistake: str) -> Tuple[str, str]:
    """(first answer, answer to the retry prompt) for a labelled spec and a mistake kind."""
    spec = {"query": expected.get("query", ""), "filters": [dict(f) for f in expected["filters"]],
            "top_k": expected.get("top_k")}
    correct = _fenced(spec)
    if mistake == "none":
        return correct, correct
    if mistake == "unparseable":
        return UNPARSEABLE
    if mistake == "bad_json":  # a Python repr: single quotes, None; then prose
        return repr(spec) + "\n\nThese filters restrict the search as you asked.", correct
    for f in spec["filters"]:
        if mistake == "invented_keys":
            f["key"] = INVENTED_KEYS.get(f["key"], f["key"])
        elif mistake == "wrong_types":
            value = f["value"]
            f["value"] = [str(v) for v in value] if isinstance(value, list) else str(value)
        elif mistake == "operator_spellings":
            f["operator"] = OPERATOR_SPELLINGS.get(f["operator"], f["operator"])
        elif mistake == "case":
            f["key"] = f["key"].capitalize()
            value = f["value"]
            shout = (lambda v: v.upper() if len(v) <= 2 else v.capitalize())
            f["value"] = ([shout(v) if isinstance(v, str) else v for v in value] if isinstance(value, list)
                          else shout(value) if isinstance(value, str) else value)
    if mistake == "wrong_types" and spec["top_k"] is not None:
        spec["top_k"] = str(spec["top_k"])
    return _fenced(spec), correct


LLM_CONFIGS = {
    "upstream parser (no validation)": None,
    "LLMSpecGenerator, max_retries=0": {"max_retries": 0},
    "LLMSpecGenerator, retry_on_drops=False": {"retry_on_drops": False},
    "LLMSpecGenerator (default: 1 retry, retry_on_drops)": {},
}


def _upstream_filters(answer: str) -> Tuple[List[MetadataFilter], Any]:
    try:
        spec = VectorStoreQueryOutputParser().parse(answer).parsed_output
    except Exception:  # upstream: OutputParserException -> a spec with no filters
        return [], None
    return list(spec.filters), spec.top_k


def evaluate_llm(rows: List[Dict[str, Any]]) -> Dict[str, Any]:
    """Exact filter match of each LLM configuration on the scripted mistakes."""
    vocabulary = sample_vocabulary()
    validators: Dict[str, SpecValidator] = {}
    rules: Dict[str, RuleBasedSpecGenerator] = {}
    results: Dict[str, Any] = {}
    for name, config in LLM_CONFIGS.items():
        counts: Dict[str, Dict[str, int]] = {}
        misses = []
        for i, row in enumerate(rows):
            today = row.get("today") or date.today().isoformat()
            if today not in validators:
                validators[today] = SpecValidator(
                    SAMPLE_INFO, vocabulary, similarity_top_k=SIMILARITY_TOP_K, max_top_k=MAX_TOP_K,
                    empty_query_top_k=None, today=date.fromisoformat(today))
                rules[today] = RuleBasedSpecGenerator(SAMPLE_INFO, vocabulary, today=date.fromisoformat(today))
            expected = row["expected"]
            mistake = MISTAKES[i % len(MISTAKES)]
            first, retry = mistaken_answers(expected, mistake)
            llm = ScriptedLLM(first=first, retry=retry)
            if config is None:
                filters, top_k = _upstream_filters(first)
                generator = "upstream"
                top_k_ok = top_k == expected.get("top_k")
            else:
                gen = LLMSpecGenerator(llm, SAMPLE_INFO, validators[today], rules[today], **config)
                spec, report = gen.generate(row["query"])
                filters, generator = spec.filters, report.generator
                top_k_ok = spec.top_k == resolve_top_k(expected.get("top_k"), SIMILARITY_TOP_K, MAX_TOP_K)
            filters_ok = filter_set(filters) == filter_set(expected["filters"])
            unfiltered = bool(expected["filters"]) and not filters
            for group in ("overall", language_of(row["query"]), f"mistake:{mistake}"):
                c = counts.setdefault(group, {"n": 0, "filters": 0, "top_k": 0, "unfiltered": 0,
                                              "fallback": 0, "llm_calls": 0})
                c["n"] += 1
                c["filters"] += filters_ok
                c["top_k"] += top_k_ok
                c["unfiltered"] += unfiltered
                c["fallback"] += generator == "fallback"
                c["llm_calls"] += llm.calls if config is not None else 1
            if not filters_ok:
                misses.append({
                    "query": row["query"], "mistake": mistake, "generator": generator,
                    "expected_filters": sorted(map(list, filter_set(expected["filters"])), key=str),
                    "got_filters": sorted(map(list, filter_set(filters)), key=str),
                })
        results[name] = {
            "summary": {group: {**c, "filter_accuracy": c["filters"] / c["n"],
                                "top_k_accuracy": c["top_k"] / c["n"],
                                "calls_per_query": c["llm_calls"] / c["n"]}
                        for group, c in counts.items()},
            "misses": misses,
        }
    return results


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
    if "llm" in result:
        lines += llm_markdown(result["llm"])
    return "\n".join(lines) + "\n"


def llm_markdown(llm: Dict[str, Any]) -> List[str]:
    lines = [
        "",
        "# LLM-written specs with scripted mistakes",
        "",
        "`LLMSpecGenerator` driven by a scripted fake LLM (no model, no network) on the same 132 queries.",
        "For query *i* the fake answers with the labelled spec spoiled by mistake `i % 7`: none (control),",
        "invented keys (`categories`, `publication_year`, `lang`, `source_type`), wrong types (`\"2023\"`,",
        "top_k `\"5\"`), bad JSON (Python repr: single quotes, `None`, trailing prose), operator spellings",
        "(`gte`, `greater_than`, `equals`, `one_of`, ...), key/value case (`Category`, `Food`, `EN`), or",
        "unparseable text. Asked again (the retry prompt lists the problems), it answers correctly, except",
        "the unparseable case, which stays unparseable (so the rules take over). Filters exact = the",
        "validated filter set equals the labelled one; unfiltered = filters were expected and none came",
        "back (silent for upstream; for `LLMSpecGenerator` every dropped filter is in the spec report).",
        "Rows are deterministic: they measure the validation, repair, retry and fallback machinery, not any",
        "real LLM. The unparseable rows are scored on the rule-based fallback, whose accuracy on this set",
        "is in-sample (see above), so that row is optimistic for other corpora.",
        "",
        "| configuration | queries | n | filters exact | unfiltered | fallbacks | LLM calls / query |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, res in llm.items():
        for group in ("overall", "en", "zh"):
            s = res["summary"].get(group)
            if s:
                lines.append(f"| {name} | {group} | {s['n']} | {s['filter_accuracy']:.3f} ({s['filters']}) | "
                             f"{s['unfiltered']} | {s['fallback']} | {s['calls_per_query']:.2f} |")
    lines += ["", "Filters exact by mistake kind:", "",
              "| mistake | n | " + " | ".join(llm) + " |",
              "| --- | ---: | " + " | ".join("---:" for _ in llm) + " |"]
    for mistake in MISTAKES:
        group = f"mistake:{mistake}"
        n = next(iter(llm.values()))["summary"][group]["n"]
        cells = [f"{res['summary'][group]['filter_accuracy']:.3f}" for res in llm.values()]
        lines.append(f"| {mistake} | {n} | " + " | ".join(cells) + " |")
    default = list(llm)[-1]
    lines += ["", f"## Misses of `{default}` ({len(llm[default]['misses'])})", ""]
    if not llm[default]["misses"]:
        lines.append("None.")
    for miss in llm[default]["misses"]:
        lines.append(f"- [{miss['mistake']}, {miss['generator']}] `{miss['query']}`: expected "
                     f"{miss['expected_filters']}, got {miss['got_filters']}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--no-write", action="store_true", help="print only, write no result files")
    args = parser.parse_args()
    # every drop and fallback is logged as a warning; the report lists them instead
    logging.getLogger("llama_index_ext_recursive").setLevel(logging.ERROR)
    rows = load_labelled()
    result = evaluate(rows)
    result["llm"] = evaluate_llm(rows)
    report = markdown(result)
    print(report)
    if not args.no_write:
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / "auto_accuracy.json").write_text(
            json.dumps(result, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
        (RESULTS / "auto_accuracy.md").write_text(report, encoding="utf-8")


if __name__ == "__main__":
    main()
