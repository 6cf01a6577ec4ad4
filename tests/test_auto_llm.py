"""LLMSpecGenerator: tolerant parsing, validation, one retry with the problems, rule-based fallback.

A scripted fake LLM returns given answers in order and records every prompt;
no network, no API key.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from datetime import date
from typing import Any

import pytest
from llama_index.core.base.llms.types import CompletionResponse, LLMMetadata
from llama_index.core.bridge.pydantic import Field
from llama_index.core.indices.vector_store.retrievers.auto_retriever.prompts import (
    DEFAULT_VECTOR_STORE_QUERY_PROMPT_TMPL,
)
from llama_index.core.llms import CustomLLM
from llama_index.core.vector_stores.types import (
    FilterOperator,
    VectorStoreQuerySpec,
)

from llama_index_ext_recursive import load_sample_documents
from llama_index_ext_recursive.auto import (
    GenerationReport,
    LLMSpecGenerator,
    RuleBasedSpecGenerator,
    RuleSpecGenerator,
    SpecError,
    SpecGenerator,
    SpecParseError,
    SpecReport,
    SpecValidator,
    metadata_vocabulary,
    parse_spec_output,
)
from llama_index_ext_recursive.sample import sample_vector_store_info

Op = FilterOperator
TODAY = date(2025, 6, 1)
INFO = sample_vector_store_info()
KEYS = {m.name for m in INFO.metadata_info}
VOCAB = {k: v for k, v in metadata_vocabulary(load_sample_documents()).items() if k in KEYS}


class ScriptedLLM(CustomLLM):
    """Returns the scripted answers in order (an Exception is raised); records the prompts."""

    responses: list[Any] = Field(default_factory=list)
    prompts: list[str] = Field(default_factory=list)
    chat_model: bool = False

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(is_chat_model=self.chat_model)

    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        self.prompts.append(prompt)
        if not self.responses:
            raise AssertionError("the LLM was called more often than scripted")
        answer = self.responses.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return CompletionResponse(text=answer)

    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any):
        raise NotImplementedError


class AsyncOnlyLLM(ScriptedLLM):
    """Refuses sync calls: proves agenerate awaits the LLM's async API."""

    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        raise AssertionError("agenerate must not call the blocking complete()")

    async def acomplete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        await asyncio.sleep(0)
        return ScriptedLLM.complete(self, prompt, formatted, **kwargs)


def answer(query: str = "", filters: Sequence[dict] = (), top_k: Any = None, fence: bool = True) -> str:
    body = json.dumps({"query": query, "filters": list(filters), "top_k": top_k}, ensure_ascii=False)
    return f"```json\n{body}\n```" if fence else body


def validator(**kwargs: Any) -> SpecValidator:
    kwargs.setdefault("vocabulary", VOCAB)
    kwargs.setdefault("today", TODAY)
    return SpecValidator(INFO, **kwargs)


def generator(responses: list[Any], llm_class=ScriptedLLM, check=None, **kwargs: Any):
    llm = llm_class(responses=list(responses))
    check = check or validator()
    rules = RuleBasedSpecGenerator(INFO, VOCAB, today=TODAY)
    return LLMSpecGenerator(llm, INFO, check, rules, **kwargs), llm


def triples(spec: VectorStoreQuerySpec):
    return {(f.key, f.operator.value, tuple(f.value) if isinstance(f.value, list) else f.value) for f in spec.filters}


# --------------------------------------------------------------------------- parsing

SPEC = {"query": "bees", "filters": [{"key": "year", "value": 2019, "operator": ">="}], "top_k": None}


@pytest.mark.parametrize(
    "text",
    [
        json.dumps(SPEC),
        "```json\n" + json.dumps(SPEC) + "\n```",
        "```\n" + json.dumps(SPEC) + "\n```\nThis filters documents from 2019 on.",
        "Here is the structured request: " + json.dumps(SPEC) + " Let me know if you need {anything} else.",
        "{'query': 'bees', 'filters': [{'key': 'year', 'value': 2019, 'operator': '>='}], 'top_k': None}",
        "{'query': 'bees', 'filters': [{'key': 'year', 'value': 2019, 'operator': '>=',},], 'top_k': null,}",
        '{"query": "bees", // the topic\n "filters": [{"key": "year", "value": 2019, "operator": ">="}], "top_k": null}',
        'The schema uses {braces}. {"spec": ' + json.dumps(SPEC) + "}",
        "```json\n" + json.dumps(SPEC),  # unterminated fence
    ],
    ids=[
        "json",
        "fence",
        "fence+prose",
        "prose-around",
        "single-quotes+None",
        "trailing-commas+null",
        "comment",
        "wrapped-after-prose",
        "open-fence",
    ],
)
def test_tolerant_parsing(text):
    assert parse_spec_output(text) == SPEC


def test_python_literals_true_and_json_literals_inside_strings_are_kept():
    parsed = parse_spec_output("{'query': 'is null true?', 'filters': [{'key': 'flag', 'value': True}]}")
    assert parsed == {"query": "is null true?", "filters": [{"key": "flag", "value": True}]}


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "empty"),
        ("I cannot help with that.", "no JSON object"),
        ('{"query": "bees", "filters": [', "unbalanced"),
        ('{"answer": "bees"}', "none of the keys"),
        ("{query: bees}", "no readable JSON"),
    ],
)
def test_unreadable_answers_are_errors(text, message):
    with pytest.raises(SpecParseError, match=message):
        parse_spec_output(text)


# --------------------------------------------------------------------------- upstream failures


def test_invented_key_is_dropped_with_a_suggestion_not_silently_empty():
    # upstream keeps "categories"; the store then matches nothing and the query returns []
    gen, llm = generator(
        [
            answer(
                "bread",
                [
                    {"key": "categories", "value": "food", "operator": "=="},
                    {"key": "year", "value": 2021, "operator": "=="},
                ],
            )
        ],
        retry_on_drops=False,
    )
    spec, report = gen.generate("food articles about bread from 2021")
    assert triples(spec) == {("year", "==", 2021)}
    dropped = [r for r in report.repairs if r.kind == "dropped_key"]
    assert dropped and "did you mean 'category'" in dropped[0].message
    assert report.generator == "llm" and len(llm.prompts) == 1


def test_dropped_key_is_retried_with_the_problem_and_the_fix_is_used():
    gen, llm = generator(
        [
            answer("bread", [{"key": "categories", "value": "food", "operator": "=="}]),
            answer("bread", [{"key": "category", "value": "food", "operator": "=="}]),
        ]
    )
    spec, report = gen.generate("food articles about bread")
    assert triples(spec) == {("category", "==", "food")}
    assert len(llm.prompts) == 2
    assert "did you mean 'category'" in llm.prompts[1] and "categories" in llm.prompts[1]
    assert report.kinds()[0] == "retried" and report.generator == "llm"
    assert [a.used for a in report.attempts] == [False, True]


def test_drops_again_after_the_retry_keep_the_repaired_spec():
    bad = answer(
        "bread",
        [
            {"key": "first_author", "value": "Ann", "operator": "=="},
            {"key": "category", "value": "food", "operator": "=="},
        ],
    )
    gen, llm = generator([bad, bad])
    spec, report = gen.generate("food articles about bread by Ann")
    assert triples(spec) == {("category", "==", "food")}  # not the fallback, not []
    assert report.generator == "llm" and "dropped_key" in report.kinds()


def test_string_year_is_coerced_without_a_retry():
    # upstream: "2023" > 2019 raises TypeError in the store, "2023" == 2023 matches nothing
    gen, llm = generator([answer("", [{"key": "year", "value": "2023", "operator": "=="}])])
    spec, report = gen.generate("documents from 2023")
    assert triples(spec) == {("year", "==", 2023)}
    assert "coerced_value" in report.kinds() and len(llm.prompts) == 1


@pytest.mark.parametrize("asked, expected", [(8, 8), ("8", 8), (50, 10), (0, 1)])
def test_top_k_from_the_llm_may_raise_k_within_max_top_k(asked, expected):
    # upstream: min(top_k, max_top_k, similarity_top_k) -> never above similarity_top_k (2)
    gen, _ = generator([answer("bees", top_k=asked)], check=validator(similarity_top_k=2, max_top_k=10))
    spec, _ = gen.generate("eight results about bees")
    assert spec.top_k == expected


def test_unknown_operator_drops_one_filter_and_keeps_the_rest():
    # upstream: one unknown operator fails the whole spec -> no filters at all
    gen, _ = generator(
        [
            answer(
                "bees",
                [
                    {"key": "year", "value": 2019, "operator": "approximately"},
                    {"key": "category", "value": "biology", "operator": "equals"},
                ],
            )
        ],
        retry_on_drops=False,
    )
    spec, report = gen.generate("biology around 2019")
    assert triples(spec) == {("category", "==", "biology")}
    assert "dropped_filter" in report.kinds() and "mapped_operator" in report.kinds()


def test_bad_json_is_retried_with_the_problem_in_the_second_prompt():
    gen, llm = generator(
        [
            "Sure! The filters are category=food and year>2019.",
            answer("bread", [{"key": "category", "value": "food"}, {"key": "year", "value": 2019, "operator": ">"}]),
        ]
    )
    spec, report = gen.generate("food articles after 2019 about bread")
    assert triples(spec) == {("category", "==", "food"), ("year", ">", 2019)}
    assert len(llm.prompts) == 2
    assert "could not be used" in llm.prompts[1] and "no JSON object" in llm.prompts[1]
    assert "Sure! The filters are" in llm.prompts[1]
    assert "could not be used" not in llm.prompts[0]
    assert report.generator == "llm" and report.kinds()[0] == "retried"
    assert report.attempts[0].problems and not report.attempts[1].problems


def test_bad_twice_falls_back_to_the_rules_and_says_so():
    gen, llm = generator(["no idea", "```json\n{not json at all\n```"])
    spec, report = gen.generate("food articles after 2019")
    assert len(llm.prompts) == 2
    assert report.generator == "fallback" and report.fell_back
    assert report.kinds()[0] == "fallback"
    assert "rule-based" in report.repairs[0].message and "2 answer(s)" in report.repairs[0].message
    assert triples(spec) == {("category", "==", "food"), ("year", ">", 2019)}  # never silently no filters
    assert report.matches and {m["key"] for m in report.matches} == {"category", "year"}


def test_no_retries_goes_straight_to_the_fallback():
    gen, llm = generator(["garbage"], max_retries=0)
    spec, report = gen.generate("English blog posts")
    assert len(llm.prompts) == 1 and report.generator == "fallback"
    assert triples(spec) == {("language", "==", "en"), ("source", "==", "blog")}


def test_llm_exception_falls_back_and_is_recorded():
    gen, llm = generator([ConnectionError("network down")])
    spec, report = gen.generate("biology encyclopedia entries")
    assert report.generator == "fallback" and len(llm.prompts) == 1
    assert "ConnectionError: network down" in report.repairs[0].message
    assert triples(spec) == {("category", "==", "biology"), ("source", "==", "encyclopedia")}


def test_reject_policy_errors_are_retried_then_fall_back():
    bad = answer("", [{"key": "first_author", "value": "Ann"}])
    gen, llm = generator([bad, bad], check=validator(key_policy="reject"))
    spec, report = gen.generate("manuals from 2024")
    assert len(llm.prompts) == 2 and "first_author" in llm.prompts[1]
    assert report.generator == "fallback"
    assert triples(spec) == {("source", "==", "manual"), ("year", "==", 2024)}


def test_json_object_without_spec_keys_is_not_read_as_no_filters():
    gen, llm = generator(['{"answer": "the bread articles"}', answer("", [{"key": "category", "value": "food"}])])
    spec, report = gen.generate("food articles")
    assert triples(spec) == {("category", "==", "food")} and len(llm.prompts) == 2
    assert "none of the keys" in report.attempts[0].problems[0]


def test_invalid_spec_shape_from_llm_repairs_case_and_or_values():
    gen, _ = generator([answer("", [{"key": "Category", "value": ["Food", "biology"], "operator": "=="}])])
    spec, report = gen.generate("food or biology")
    assert triples(spec) == {("category", "in", ("food", "biology"))}
    assert {"renamed_key", "repaired_value", "changed_operator"} <= set(report.kinds())


# --------------------------------------------------------------------------- prompt


def test_prompt_declares_schema_values_operators_and_today():
    gen, llm = generator([answer("x")])
    gen.generate("bees after 2019")
    prompt = llm.prompts[0]
    assert "bees after 2019" in prompt and '"name": "category"' in prompt
    assert '- category: "biology", "energy"' in prompt and "- year: 2018, 2019" in prompt
    assert "Today is 2025-06-01" in prompt
    assert "nin" in prompt and '"value": 1813' in prompt  # corrected upstream example: int year
    assert '"operator": "in"' in prompt  # corrected upstream example: OR of one key uses in


def test_upstream_prompt_template_works_and_feedback_is_appended():
    gen, llm = generator(["nope", answer("bees")], prompt=DEFAULT_VECTOR_STORE_QUERY_PROMPT_TMPL)
    spec, report = gen.generate("bees")
    assert spec.query == "bees" and report.generator == "llm"
    assert llm.prompts[0].rstrip().endswith("Structured Request:")
    assert "could not be used" in llm.prompts[1] and llm.prompts[1].rstrip().endswith("Structured Request:")


def test_chat_models_are_called_with_one_user_message():
    llm = ScriptedLLM(responses=[answer("bees", [{"key": "language", "value": "en"}])], chat_model=True)
    gen = LLMSpecGenerator(llm, INFO, validator(), RuleBasedSpecGenerator(INFO, VOCAB, today=TODAY))
    spec, _ = gen.generate("English articles about bees")
    assert triples(spec) == {("language", "==", "en")}
    assert "English articles about bees" in llm.prompts[0]


def test_constructor_checks():
    rules = RuleBasedSpecGenerator(INFO, VOCAB, today=TODAY)
    with pytest.raises(ValueError, match="needs an llm"):
        LLMSpecGenerator(None, INFO, validator(), rules)
    with pytest.raises(ValueError, match="max_retries"):
        LLMSpecGenerator(ScriptedLLM(), INFO, validator(), rules, max_retries=-1)


# --------------------------------------------------------------------------- async and interface


async def test_agenerate_awaits_the_llm_and_matches_generate():
    script = ["not json", answer("bread", [{"key": "year", "value": "2021", "operator": "gte"}], top_k=3)]
    agen, allm = generator(script, llm_class=AsyncOnlyLLM)
    sgen, _ = generator(script)
    async_spec, async_report = await agen.agenerate("bread since 2021, three results")
    sync_spec, sync_report = sgen.generate("bread since 2021, three results")
    assert async_spec == sync_spec and async_report.to_dict() == sync_report.to_dict()
    assert triples(async_spec) == {("year", ">=", 2021)} and async_spec.top_k == 3
    assert len(allm.prompts) == 2


async def test_agenerate_fallback_and_exception():
    gen, _ = generator([RuntimeError("quota")], llm_class=AsyncOnlyLLM)
    spec, report = await gen.agenerate("Chinese encyclopedia entries")
    assert report.generator == "fallback" and "quota" in report.repairs[0].message
    assert triples(spec) == {("language", "==", "zh"), ("source", "==", "encyclopedia")}


async def test_concurrent_agenerate_calls_do_not_share_state():
    class Echo(AsyncOnlyLLM):
        async def acomplete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
            self.prompts.append(prompt)
            await asyncio.sleep(0)
            year = 2019 if "User Query:\nfirst" in prompt else 2024
            return CompletionResponse(text=answer("x", [{"key": "year", "value": year}]))

    llm = Echo()
    gen = LLMSpecGenerator(llm, INFO, validator(), RuleBasedSpecGenerator(INFO, VOCAB, today=TODAY))
    (a, _), (b, _) = await asyncio.gather(gen.agenerate("first"), gen.agenerate("second"))
    assert triples(a) == {("year", "==", 2019)} and triples(b) == {("year", "==", 2024)}


async def test_rule_spec_generator_validates_and_reports_matches():
    gen = RuleSpecGenerator(RuleBasedSpecGenerator(INFO, VOCAB, today=TODAY), validator(similarity_top_k=4))
    spec, report = gen.generate("top 3 English blog posts from 2022")
    assert triples(spec) == {("language", "==", "en"), ("source", "==", "blog"), ("year", "==", 2022)}
    assert spec.top_k == 3 and report.generator == "rules"
    assert {m["rule"] for m in report.matches} >= {"top_k", "year"}
    assert await gen.agenerate("top 3 English blog posts from 2022") == (spec, report)
    plain, _ = gen.generate("marathon tapering")
    assert plain.top_k == 4 and plain.filters == []  # the validator resolved k


def test_both_generators_satisfy_the_protocol_and_report_is_a_spec_report():
    gen, _ = generator([answer("x")])
    rules = RuleSpecGenerator(RuleBasedSpecGenerator(INFO, VOCAB, today=TODAY), validator())
    assert isinstance(gen, SpecGenerator) and isinstance(rules, SpecGenerator)
    _, report = gen.generate("x")
    assert isinstance(report, SpecReport) and isinstance(report, GenerationReport)
    data = report.to_dict()
    assert data["generator"] == "llm" and data["attempts"][0]["used"] is True and data["ok"] is True
    json.dumps(data)


def test_fallback_accepts_a_rule_spec_generator():
    rules = RuleSpecGenerator(RuleBasedSpecGenerator(INFO, VOCAB, today=TODAY), validator())
    gen = LLMSpecGenerator(ScriptedLLM(responses=["x", "y"]), INFO, validator(), rules)
    assert gen.fallback is rules
    assert gen.generate("handbooks")[1].generator == "fallback"


def test_spec_error_from_the_rule_fallback_propagates_under_reject():
    class Strict(SpecValidator):
        def validate(self, spec):
            raise SpecError(SpecReport())

    strict = Strict(INFO, vocabulary=VOCAB)
    gen = LLMSpecGenerator(
        ScriptedLLM(responses=["x"]), INFO, strict, RuleBasedSpecGenerator(INFO, VOCAB, today=TODAY), max_retries=0
    )
    with pytest.raises(SpecError):
        gen.generate("food")
