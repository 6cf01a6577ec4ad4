"""Accuracy of the rule-based auto-retriever spec generator on the labelled query sets.

Each labelled set is a schema plus queries, each with the spec a careful human
would want. ``LABELLED_SETS`` lists them, with their role: ``tuning`` sets are
the ones the rules were designed against (their figures are in-sample),
``held-out`` sets were labelled blind and the rules are not tuned on them.
Adding a set is one entry there. A listed file that is absent is skipped.

- ``sample``: ``llama_index_ext_recursive/sample_data/auto_queries.jsonl``,
  queries over the bundled sample corpus. Its schema is
  ``sample_vector_store_info()`` (category, year, language, source), its
  vocabulary comes from ``load_sample_documents()``, each row has its own
  ``today``. Split ``dev`` (rows without ``split``) is the part the rules were
  designed against; ``holdout`` rows were labelled afterwards, before the
  generator was first run on them.
- ``auto_queries_<name>.json`` sets carry their schema: ``content_info`` and
  ``metadata_info`` (-> ``VectorStoreInfo``), ``vocabulary`` (values per key;
  numeric keys' values as numbers), ``synonyms`` (``{key: {phrase: value}}``,
  passed to the generator when non-empty) and a set-level ``today`` (a row's
  own ``today`` wins). Rows may carry ``tags``.

For every set ``RuleBasedSpecGenerator`` runs on each query and the report
gives exact-match accuracy of the filter set (order-insensitive; key, operator
and value must all agree; ``in`` values compared as sets), top_k accuracy and
both, overall, per query language (Chinese if the query contains Han
characters), per split and per tag, plus the queries with a *wrong-polarity*
filter (``wrong_polarity``: a negation read as an assertion or the reverse, or
a lower bound read as an upper bound) and every miss. The terminal copy of the
report lists held-out sets' misses only by count; the written markdown and
JSON list them.

It then scores ``LLMSpecGenerator`` (on the sample set only) driven by a
scripted fake LLM that makes the mistakes real LLMs make, one kind per query
chosen by the query's index (``i % 7``): none (control), invented key names
(``categories``, ``publication_year``, ``lang``, ``source_type``), wrong types
(``"2023"`` for an int, ``"5"`` for top_k), bad JSON (a Python dict repr with
single quotes and ``None`` plus trailing prose), operator spellings (``gte``,
``greater_than``, ``equals``, ``one_of``...), key/value case (``Category``,
``Food``, ``EN``), and unparseable text twice (so the rules must take over).
Asked again (the retry prompt), the fake answers with the correct spec, except
in the unparseable case. Each configuration's filter sets are compared after
validation, repair, retry and fallback; upstream's own parser
(``VectorStoreQueryOutputParser``, no filters when it fails) on the same first
answers is the baseline.

No LLM, no embeddings, no network; runs in a few seconds.

Usage (repository root)::

    .venv/bin/python benchmarks/auto_accuracy.py            # writes benchmarks/results/auto_accuracy.{json,md}
    .venv/bin/python benchmarks/auto_accuracy.py --no-write # print only
    .venv/bin/python benchmarks/auto_accuracy.py --no-write --set sample --set recipes  # only these sets
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date
from importlib import resources
from typing import Any

from harness import RESULTS, cli, timing
from harness.report import Table, write
from llama_index.core.base.llms.types import CompletionResponse, LLMMetadata
from llama_index.core.indices.vector_store.retrievers.auto_retriever.output_parser import (
    VectorStoreQueryOutputParser,
)
from llama_index.core.llms import CustomLLM
from llama_index.core.vector_stores.types import MetadataFilter, MetadataInfo, VectorStoreInfo

from llama_index_ext_recursive.auto import FieldType, SpecValidator, metadata_vocabulary, resolve_top_k
from llama_index_ext_recursive.auto.llm import LLMSpecGenerator
from llama_index_ext_recursive.auto.rules import RuleBasedSpecGenerator
from llama_index_ext_recursive.sample import load_sample_documents, sample_vector_store_info

SAMPLE_INFO = sample_vector_store_info()

TUNING, HELD_OUT = "tuning", "held-out"
# a held-out set whose misses were then looked at and fixed: in-sample since (its blind figure is in docs)
TUNED_AFTER_BLIND = "held-out, then tuned"
# (name, file in llama_index_ext_recursive/sample_data, role); adding a set is one entry here
LABELLED_SETS: list[tuple[str, str, str]] = [
    ("sample", "auto_queries.jsonl", TUNING),
    ("recipes", "auto_queries_recipes.json", TUNING),
    ("films", "auto_queries_films.json", TUNED_AFTER_BLIND),
    ("papers", "auto_queries_papers.json", TUNED_AFTER_BLIND),
    ("listings", "auto_queries_listings.json", TUNED_AFTER_BLIND),
    ("jobs", "auto_queries_jobs.json", TUNED_AFTER_BLIND),
    # issue 30: run blind once before and once after its readings, then their misses were read
    ("music", "auto_queries_music.json", TUNED_AFTER_BLIND),
    ("tickets", "auto_queries_tickets.json", TUNED_AFTER_BLIND),
    ("trials", "auto_queries_trials.json", TUNED_AFTER_BLIND),  # written blind for issue 30
    ("cases", "auto_queries_cases.json", TUNED_AFTER_BLIND),  # written blind for issue 30 (first run 0.200)
    ("advisories", "auto_queries_advisories.json", TUNED_AFTER_BLIND),  # blind for issue 30 (first run 0.360)
    ("filings", "auto_queries_filings.json", TUNED_AFTER_BLIND),  # blind for issue 30 (first run 0.460)
    ("patents", "auto_queries_patents.json", TUNED_AFTER_BLIND),  # blind for issue 30 (first run 0.360)
    ("recalls", "auto_queries_recalls.json", TUNED_AFTER_BLIND),  # blind for issue 30 (first run 0.320)
    ("contracts", "auto_queries_contracts.json", HELD_OUT),  # written blind for issue 30, fourth round
    ("repos", "auto_queries_repos.json", HELD_OUT),  # written blind for issue 30, fourth round
]

FilterKey = tuple[str, str, Any]

POSITIVE_OPS = frozenset({"==", "in", "contains", "any"})
NEGATIVE_OPS = frozenset({"!=", "nin"})
LOWER_OPS = frozenset({">", ">="})
UPPER_OPS = frozenset({"<", "<="})


@dataclass
class LabelledSet:
    """One labelled set, ready to score: schema, vocabulary, synonyms and rows."""

    name: str
    file: str
    role: str
    info: VectorStoreInfo
    vocabulary: dict[str, set]
    synonyms: dict[str, dict[str, Any]]
    today: str | None  # the set's reference date; a row's own ``today`` wins
    rows: list[dict[str, Any]]
    description: str = ""


def _data_file(filename: str):
    return resources.files("llama_index_ext_recursive").joinpath("sample_data", filename)


def load_labelled() -> list[dict[str, Any]]:
    """The sample corpus's labelled queries bundled with the package."""
    text = _data_file("auto_queries.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def sample_vocabulary() -> dict[str, set]:
    """Values present per filterable key in the sample corpus."""
    keys = {m.name for m in SAMPLE_INFO.metadata_info}
    return {k: v for k, v in metadata_vocabulary(load_sample_documents()).items() if k in keys}


def schema_info(schema: dict[str, Any]) -> VectorStoreInfo:
    """``VectorStoreInfo`` from a set file's ``schema`` (content_info, metadata_info)."""
    return VectorStoreInfo(
        content_info=schema.get("content_info", ""),
        metadata_info=[
            MetadataInfo(name=m["name"], type=m["type"], description=m.get("description", ""))
            for m in schema["metadata_info"]
        ],
    )


def schema_vocabulary(info: VectorStoreInfo, vocabulary: dict[str, Iterable[Any]]) -> dict[str, set]:
    """The vocabulary as sets, numeric keys' values as numbers (``"2023"`` -> 2023)."""
    types = {m.name: FieldType.of(m) for m in info.metadata_info}
    out: dict[str, set] = {}
    for key, values in vocabulary.items():
        ftype = types.get(key)
        if ftype is not None and ftype.is_numeric:
            cast = int if ftype.base == "int" else float
            out[key] = {cast(v) if isinstance(v, str) else v for v in values}
        else:
            out[key] = set(values)
    return out


def load_set(name: str, filename: str, role: str) -> LabelledSet | None:
    """A set from ``LABELLED_SETS``; ``None`` if its file is absent.

    A ``.jsonl`` file is the sample corpus's (schema ``sample_vector_store_info()``,
    vocabulary from the sample documents, ``today`` per row); a ``.json`` file
    carries its own schema.
    """
    path = _data_file(filename)
    if not path.is_file():
        return None
    if filename.endswith(".jsonl"):
        return LabelledSet(
            name,
            filename,
            role,
            SAMPLE_INFO,
            sample_vocabulary(),
            {},
            None,
            load_labelled(),
            "queries over the bundled sample corpus",
        )
    data = json.loads(path.read_text(encoding="utf-8"))
    schema = data["schema"]
    info = schema_info(schema)
    return LabelledSet(
        name,
        filename,
        role,
        info,
        schema_vocabulary(info, schema.get("vocabulary", {})),
        schema.get("synonyms") or {},
        data.get("today"),
        list(data["queries"]),
        data.get("description", ""),
    )


def _parts(f: Any) -> tuple[str, str, Any]:
    if isinstance(f, MetadataFilter):
        return f.key, f.operator.value, f.value
    return f["key"], f["operator"], f["value"]


def filter_set(filters: Iterable[Any]) -> frozenset[FilterKey]:
    """Order-insensitive form of a filter list (``MetadataFilter``s or dicts)."""
    out = set()
    for f in filters:
        key, op, value = _parts(f)
        if isinstance(value, list):
            value = tuple(sorted(value, key=str))
        out.add((key, op, value))
    return frozenset(out)


def wrong_polarity(expected_filters: Iterable[Any], got_filters: Iterable[Any]) -> list[tuple[str, str, str, Any]]:
    """Filters whose polarity is the opposite of the label's, as ``(key, expected_op, got_op, value)``.

    - the label excludes value *v* of key *k* (``!=``/``nin``) and a filter
      on *k* asserts *v* (``==``/``in``/``contains``/``any``);
    - the label asserts *v* (``==``/``in``) and a filter on *k* excludes it;
    - the label bounds numeric key *k* from one side only (``>``/``>=`` or
      ``<``/``<=``) and every bound produced on *k* is on the other side
      (``value`` is the label's bound). A label with both bounds (a range) or
      output with both is not judged here: that is a wrong or missing bound,
      not a flipped one.

    Wrong values of the right polarity are not counted (``!= blog`` against
    ``== manual`` is a miss, not a flip). Accepts ``MetadataFilter``s or dicts.
    """
    expected = [_parts(f) for f in expected_filters]
    got = [_parts(f) for f in got_filters]

    def values(value: Any) -> list[Any]:
        return list(value) if isinstance(value, (list, tuple)) else [value]

    found: dict[tuple[str, str, str, Any], None] = {}
    for key, op, value in expected:
        if op in NEGATIVE_OPS:
            opposite = POSITIVE_OPS
        elif op in ("==", "in"):
            opposite = NEGATIVE_OPS
        else:
            continue
        for g_key, g_op, g_value in got:
            if g_key == key and g_op in opposite:
                for v in values(value):
                    if v in values(g_value):
                        found[(key, op, g_op, v)] = None

    def sides(filters: list[tuple[str, str, Any]], key: str) -> set:
        return {
            "lower" if op in LOWER_OPS else "upper" for k, op, _ in filters if k == key and op in LOWER_OPS | UPPER_OPS
        }

    for key in dict.fromkeys(k for k, _, _ in expected):
        want, have = sides(expected, key), sides(got, key)
        if len(want) == 1 and len(have) == 1 and want != have:
            for _, op, value in (f for f in expected if f[0] == key and f[1] in LOWER_OPS | UPPER_OPS):
                for _, g_op, _ in (g for g in got if g[0] == key and g[1] in LOWER_OPS | UPPER_OPS):
                    found[(key, op, g_op, value)] = None
    return list(found)


def language_of(query: str) -> str:
    return "zh" if re.search(r"[\u4e00-\u9fff]", query) else "en"


def evaluate(labelled: LabelledSet) -> dict[str, Any]:
    """Run the generator on every row of a set; accuracy per group and the misses.

    Groups: ``overall``, ``en``/``zh``, ``split:<split>`` (when any row has a
    split; rows without one are ``dev``) and ``tag:<tag>``.
    """
    generators: dict[str, RuleBasedSpecGenerator] = {}
    counts: dict[str, dict[str, int]] = {}
    misses = []
    latencies: list[float] = []  # ms per query, the model loaded
    has_splits = any("split" in row for row in labelled.rows)
    for row in labelled.rows:
        today = row.get("today") or labelled.today or date.today().isoformat()
        if today not in generators:
            extra = {"synonyms": labelled.synonyms} if labelled.synonyms else {}
            generators[today] = RuleBasedSpecGenerator(
                labelled.info, labelled.vocabulary, today=date.fromisoformat(today), **extra
            )
            generators[today].generate("warm-up 预热")  # dictionaries load on a first query, once per process
        started = time.perf_counter()
        spec, matches = generators[today].generate_with_matches(row["query"])
        latencies.append(1000 * (time.perf_counter() - started))
        expected = row["expected"]
        filters_ok = filter_set(spec.filters) == filter_set(expected["filters"])
        top_k_ok = spec.top_k == expected.get("top_k")
        flipped = wrong_polarity(expected["filters"], spec.filters)
        split = row.get("split", "dev") if has_splits else None
        tags = list(row.get("tags", []))
        groups = ["overall", language_of(row["query"])]
        groups += [f"split:{split}"] if split else []
        groups += [f"tag:{t}" for t in tags]
        for group in groups:
            c = counts.setdefault(group, {"n": 0, "filters": 0, "top_k": 0, "both": 0, "wrong_polarity": 0})
            c["n"] += 1
            c["filters"] += filters_ok
            c["top_k"] += top_k_ok
            c["both"] += filters_ok and top_k_ok
            c["wrong_polarity"] += bool(flipped)
        if not (filters_ok and top_k_ok):
            misses.append(
                {
                    "query": row["query"],
                    "split": split,
                    "tags": tags,
                    "expected_filters": sorted(map(list, filter_set(expected["filters"])), key=str),
                    "got_filters": sorted(map(list, filter_set(spec.filters)), key=str),
                    "expected_top_k": expected.get("top_k"),
                    "got_top_k": spec.top_k,
                    "got_query": spec.query,
                    "matched": [m.text for m in matches],
                    "wrong_polarity": [list(f) for f in flipped],
                }
            )
    summary = {
        group: {
            **c,
            "filter_accuracy": c["filters"] / c["n"],
            "top_k_accuracy": c["top_k"] / c["n"],
            "spec_accuracy": c["both"] / c["n"],
        }
        for group, c in counts.items()
    }
    return {
        "file": labelled.file,
        "role": labelled.role,
        "description": labelled.description,
        "today": labelled.today,
        "summary": summary,
        "misses": misses,
        "latency_ms": {"p50": timing.percentile(latencies, 50), "p95": timing.percentile(latencies, 95)},
    }


# --------------------------------------------------------------------------- scripted LLM

MISTAKES = ["none", "invented_keys", "wrong_types", "bad_json", "operator_spellings", "case", "unparseable"]
INVENTED_KEYS = {"category": "categories", "year": "publication_year", "language": "lang", "source": "source_type"}
OPERATOR_SPELLINGS = {
    ">=": "gte",
    ">": "greater_than",
    "<=": "lte",
    "<": "less than",
    "==": "equals",
    "!=": "not_equal",
    "in": "one_of",
    "nin": "not in",
}
UNPARSEABLE = (
    "I'm sorry, I can only describe the filters: the category should be food.",
    "Filters: category is food; year after 2020 (no JSON, sorry)",
)
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


def _fenced(spec: dict[str, Any]) -> str:
    return "```json\n" + json.dumps(spec, ensure_ascii=False) + "\n```"


def mistaken_answers(expected: dict[str, Any], mistake: str) -> tuple[str, str]:
    """(first answer, answer to the retry prompt) for a labelled spec and a mistake kind."""
    spec = {
        "query": expected.get("query", ""),
        "filters": [dict(f) for f in expected["filters"]],
        "top_k": expected.get("top_k"),
    }
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

            def shout(v: str) -> str:
                return v.upper() if len(v) <= 2 else v.capitalize()

            f["value"] = (
                [shout(v) if isinstance(v, str) else v for v in value]
                if isinstance(value, list)
                else shout(value)
                if isinstance(value, str)
                else value
            )
    if mistake == "wrong_types" and spec["top_k"] is not None:
        spec["top_k"] = str(spec["top_k"])
    return _fenced(spec), correct


LLM_CONFIGS = {
    "upstream parser (no validation)": None,
    "LLMSpecGenerator, max_retries=0": {"max_retries": 0},
    "LLMSpecGenerator, retry_on_drops=False": {"retry_on_drops": False},
    "LLMSpecGenerator (default: 1 retry, retry_on_drops)": {},
}


def _upstream_filters(answer: str) -> tuple[list[MetadataFilter], Any]:
    try:
        spec = VectorStoreQueryOutputParser().parse(answer).parsed_output
    except Exception:  # upstream: OutputParserException -> a spec with no filters
        return [], None
    return list(spec.filters), spec.top_k


def evaluate_llm(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Exact filter match of each LLM configuration on the scripted mistakes."""
    vocabulary = sample_vocabulary()
    validators: dict[str, SpecValidator] = {}
    rules: dict[str, RuleBasedSpecGenerator] = {}
    results: dict[str, Any] = {}
    for name, config in LLM_CONFIGS.items():
        counts: dict[str, dict[str, int]] = {}
        misses = []
        for i, row in enumerate(rows):
            today = row.get("today") or date.today().isoformat()
            if today not in validators:
                validators[today] = SpecValidator(
                    SAMPLE_INFO,
                    vocabulary,
                    similarity_top_k=SIMILARITY_TOP_K,
                    max_top_k=MAX_TOP_K,
                    empty_query_top_k=None,
                    today=date.fromisoformat(today),
                )
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
                c = counts.setdefault(
                    group, {"n": 0, "filters": 0, "top_k": 0, "unfiltered": 0, "fallback": 0, "llm_calls": 0}
                )
                c["n"] += 1
                c["filters"] += filters_ok
                c["top_k"] += top_k_ok
                c["unfiltered"] += unfiltered
                c["fallback"] += generator == "fallback"
                c["llm_calls"] += llm.calls if config is not None else 1
            if not filters_ok:
                misses.append(
                    {
                        "query": row["query"],
                        "mistake": mistake,
                        "generator": generator,
                        "expected_filters": sorted(map(list, filter_set(expected["filters"])), key=str),
                        "got_filters": sorted(map(list, filter_set(filters)), key=str),
                    }
                )
        results[name] = {
            "summary": {
                group: {
                    **c,
                    "filter_accuracy": c["filters"] / c["n"],
                    "top_k_accuracy": c["top_k"] / c["n"],
                    "calls_per_query": c["llm_calls"] / c["n"],
                }
                for group, c in counts.items()
            },
            "misses": misses,
        }
    return results


def _cells(s: dict[str, Any]) -> tuple[Any, ...]:
    return (
        s["n"],
        f"{s['filter_accuracy']:.3f} ({s['filters']})",
        f"{s['top_k_accuracy']:.3f}",
        f"{s['spec_accuracy']:.3f}",
        s["wrong_polarity"],
    )


SAMPLE_SPLIT_NOTE = [
    "Splits: `dev` (96 queries) is the set the rules were designed against, so its figure is in-sample.",
    "`holdout` (36) was labelled after the rules were written and before the generator first ran on it;",
    "that first run scored 35/36 filter sets exact (0.972) and 34/36 full specs; the two misses",
    '("give me five blog posts about bread": top_k; "documents up to and including 2020": filter) were',
    "then fixed by general rules, so holdout is no longer unseen either.",
]


def markdown(result: dict[str, Any], held_out_misses: bool = True) -> str:
    """The report; ``held_out_misses=False`` lists held-out sets' misses by count only."""
    sets = result["sets"]
    lines = [
        "# Rule-based auto-retriever specs: accuracy on the labelled sets",
        "",
        "`RuleBasedSpecGenerator` (no LLM) on the labelled sets in `llama_index_ext_recursive/sample_data/`.",
        "Filters exact = exact match of the filter set (key, operator, value; order-insensitive).",
        "Wrong-polarity queries = queries with a filter of the opposite polarity to the label's: an",
        "exclusion (`!=`/`nin`) read as an assertion (`==`/`in`/`contains`/`any`) or the reverse, or a",
        "one-sided numeric bound read as the other side only (`wrong_polarity` in the script).",
        "Role `tuning`: the rules were designed against the set, so its figures are in-sample;",
        "`held-out`: labelled blind, the rules are not tuned on it.",
        "",
        "Command: `.venv/bin/python benchmarks/auto_accuracy.py`",
        "",
        "## Filter-set exact match by labelled set",
        "",
        Table(
            ["set", "role", "n", "zh n", "filters exact", "top_k exact", "wrong-polarity queries", "ms p50 (p95)"],
            align="llrrrrrr",
        ).render(
            (
                name,
                res["role"],
                s["n"],
                res["summary"].get("zh", {"n": 0})["n"],
                f"{s['filter_accuracy']:.3f} ({s['filters']})",
                f"{s['top_k_accuracy']:.3f}",
                s["wrong_polarity"],
                f"{res['latency_ms']['p50']:.1f} ({res['latency_ms']['p95']:.1f})",
            )
            for name, res in sets.items()
            for s in [res["summary"]["overall"]]
        ),
    ]
    if result.get("absent"):
        lines += ["", "Not scored (file absent): " + ", ".join(f"`{n}`" for n in result["absent"]) + "."]
    for name, res in sets.items():
        lines += [
            "",
            f"## {name} ({res['role']}): by language, split and tag",
            "",
            f"`{res['file']}`"
            + (f": {res['description']}" if res["description"] else "")
            + (f" Reference date {res['today']}." if res["today"] else ""),
            "",
        ]
        summary = res["summary"]
        rest = sorted(g for g in summary if g.startswith(("split:", "tag:")))
        lines.append(
            Table(["queries", "n", "filters exact", "top_k exact", "both", "wrong-polarity"]).render(
                (group, *_cells(summary[group])) for group in ["overall", "en", "zh"] + rest if group in summary
            )
        )
        if name == "sample":
            lines += [""] + SAMPLE_SPLIT_NOTE
    lines += ["", "## Misses"]
    for name, res in sets.items():
        misses = res["misses"]
        lines += ["", f"### {name} ({res['role']}): {len(misses)}", ""]
        if not misses:
            lines.append("None.")
        elif res["role"] == HELD_OUT and not held_out_misses:
            lines.append("Held-out set: not listed here (they are in the written markdown and JSON).")
            continue
        for miss in misses:
            label = ", ".join(([miss["split"]] if miss["split"] else []) + miss["tags"])
            flipped = f"; wrong polarity {miss['wrong_polarity']}" if miss["wrong_polarity"] else ""
            lines.append(
                f"- [{label}] `{miss['query']}`: expected {miss['expected_filters']} "
                f"top_k={miss['expected_top_k']}, got {miss['got_filters']} top_k={miss['got_top_k']} "
                f"(matched {miss['matched']}){flipped}"
            )
    if "llm" in result:
        lines += llm_markdown(result["llm"])
    return "\n".join(lines) + "\n"


def llm_markdown(llm: dict[str, Any]) -> list[str]:
    n = next(iter(llm.values()))["summary"]["overall"]["n"]
    lines = [
        "",
        "# LLM-written specs with scripted mistakes",
        "",
        f"`LLMSpecGenerator` driven by a scripted fake LLM (no model, no network) on the sample set's {n}",
        "queries.",
        "For query *i* the fake answers with the labelled spec spoiled by mistake `i % 7`: none (control),",
        'invented keys (`categories`, `publication_year`, `lang`, `source_type`), wrong types (`"2023"`,',
        'top_k `"5"`), bad JSON (Python repr: single quotes, `None`, trailing prose), operator spellings',
        "(`gte`, `greater_than`, `equals`, `one_of`, ...), key/value case (`Category`, `Food`, `EN`), or",
        "unparseable text. Asked again (the retry prompt lists the problems), it answers correctly, except",
        "the unparseable case, which stays unparseable (so the rules take over). Filters exact = the",
        "validated filter set equals the labelled one; unfiltered = filters were expected and none came",
        "back (silent for upstream; for `LLMSpecGenerator` every dropped filter is in the spec report).",
        "Rows are deterministic: they measure the validation, repair, retry and fallback machinery, not any",
        "real LLM. The unparseable rows are scored on the rule-based fallback, whose accuracy on this set",
        "is in-sample (see above), so that row is optimistic for other corpora.",
        "",
        Table(
            ["configuration", "queries", "n", "filters exact", "unfiltered", "fallbacks", "LLM calls / query"],
            align="llrrrrr",
        ).render(
            (
                name,
                group,
                s["n"],
                f"{s['filter_accuracy']:.3f} ({s['filters']})",
                s["unfiltered"],
                s["fallback"],
                f"{s['calls_per_query']:.2f}",
            )
            for name, res in llm.items()
            for group in ("overall", "en", "zh")
            for s in [res["summary"].get(group)]
            if s
        ),
    ]
    first = next(iter(llm.values()))["summary"]
    lines += [
        "",
        "Filters exact by mistake kind:",
        "",
        Table(["mistake", "n", *llm]).render(
            (
                mistake,
                first[f"mistake:{mistake}"]["n"],
                *(f"{res['summary'][f'mistake:{mistake}']['filter_accuracy']:.3f}" for res in llm.values()),
            )
            for mistake in MISTAKES
        ),
    ]
    default = list(llm)[-1]
    lines += ["", f"## Misses of `{default}` ({len(llm[default]['misses'])})", ""]
    if not llm[default]["misses"]:
        lines.append("None.")
    for miss in llm[default]["misses"]:
        lines.append(
            f"- [{miss['mistake']}, {miss['generator']}] `{miss['query']}`: expected "
            f"{miss['expected_filters']}, got {miss['got_filters']}"
        )
    return lines


def main(argv: list[str] | None = None) -> None:
    p = cli.parser(__doc__)
    p.add_argument("--no-write", action="store_true", help="print only, write no result files")
    p.add_argument(
        "--set",
        action="append",
        dest="sets",
        metavar="NAME",
        choices=[name for name, _, _ in LABELLED_SETS],
        help="score only this labelled set (repeatable; default: all)",
    )
    args = p.parse_args(argv)
    # every drop and fallback is logged as a warning; the report lists them instead
    logging.getLogger("llama_index_ext_recursive").setLevel(logging.ERROR)
    result: dict[str, Any] = {"sets": {}, "absent": []}
    for name, filename, role in LABELLED_SETS:
        if args.sets and name not in args.sets:
            continue
        labelled = load_set(name, filename, role)
        if labelled is None:
            result["absent"].append(name)
            continue
        result["sets"][name] = evaluate(labelled)
        if name == "sample":
            result["llm"] = evaluate_llm(labelled.rows)
    print(markdown(result, held_out_misses=False))
    if not args.no_write:
        write(RESULTS / "auto_accuracy.md", markdown(result), result)


if __name__ == "__main__":
    main()
