"""Summarizers: extractive offline default, LLM with validation and fallback, cache."""

from __future__ import annotations

import re
import time

import pytest
from llama_index.core.llms import CompletionResponse, CustomLLM, LLMMetadata
from llama_index.core.llms.callbacks import llm_completion_callback

from llama_index_ext_recursive import ExtractiveSummarizer, LLMSummarizer, SummaryCache
from llama_index_ext_recursive.summarize import SummaryRejected

DOC = " ".join(
    [f"Honeybees live in colonies with one queen and many workers (part {i})." for i in range(20)]
    + ["The conclusion: beekeepers harvest honey in late summer."]
)
ZH_DOC = "蜜蜂以蜂群为单位生活。蜂王负责产卵。工蜂采集花蜜和花粉。养蜂人在夏末采收蜂蜜。"


class ScriptedLLM(CustomLLM):
    """Replies from a script; records prompts. Offline stand-in for a real LLM."""

    replies: list = []
    prompts: list = []
    delay: float = 0.0

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="scripted")

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs) -> CompletionResponse:
        self.prompts.append(prompt)
        time.sleep(self.delay)
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return CompletionResponse(text=reply)

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs):
        raise NotImplementedError


def test_extractive_is_bounded_starts_with_title_and_keeps_order():
    summary = ExtractiveSummarizer(max_chars=200).summarize("Bees", DOC)
    assert summary.startswith("Bees. ") and len(summary) <= 200
    sentences = summary[len("Bees. "):].split(". ")
    assert len(sentences) >= 2


def test_extractive_handles_chinese_and_empty_text():
    summary = ExtractiveSummarizer(max_chars=60).summarize("蜜蜂", ZH_DOC)
    assert summary.startswith("蜜蜂") and len(summary) <= 60 and "蜂" in summary[3:]
    assert ExtractiveSummarizer().summarize("", "") == ""


def test_llm_input_covers_the_whole_document_within_budget():
    llm = ScriptedLLM(replies=["Bee colonies and honey harvest."], prompts=[])
    summarizer = LLMSummarizer(llm=llm, max_input_chars=300)
    assert summarizer.summarize("Bees", DOC) == "Bee colonies and honey harvest."
    prompt = llm.prompts[0]
    parts = [int(p) for p in re.findall(r"part (\d+)", prompt)]
    assert min(parts) < 10 and (max(parts) >= 10 or "late summer" in prompt)  # both halves
    assert len(prompt) < len(DOC)


@pytest.mark.parametrize(
    "reply,reason",
    [("   ", "empty"), ("x" * 2000, "2000 characters"), ("这是中文摘要，讲蜜蜂。", "different language")],
)
def test_invalid_llm_output_falls_back_to_extractive(reply, reason, caplog):
    summarizer = LLMSummarizer(llm=ScriptedLLM(replies=[reply], prompts=[]), max_chars=800)
    with pytest.raises(SummaryRejected, match=reason):
        summarizer.validate(reply, DOC)
    summary = summarizer.summarize("Bees", DOC)
    assert summary == ExtractiveSummarizer().summarize("Bees", DOC)
    assert summarizer.fallbacks == 1 and "rejected" in caplog.text


def test_llm_error_and_timeout_fall_back():
    failing = LLMSummarizer(llm=ScriptedLLM(replies=[RuntimeError("quota")], prompts=[]))
    assert failing.summarize("Bees", DOC) == ExtractiveSummarizer().summarize("Bees", DOC)
    slow = LLMSummarizer(llm=ScriptedLLM(replies=["late"], prompts=[], delay=2.0), timeout=0.05)
    assert slow.summarize("Bees", DOC) == ExtractiveSummarizer().summarize("Bees", DOC)
    assert failing.fallbacks == slow.fallbacks == 1


def test_llm_chinese_summary_accepted_for_chinese_document():
    summarizer = LLMSummarizer(llm=ScriptedLLM(replies=["蜂群、蜂王和采蜜。"], prompts=[]))
    assert summarizer.summarize("蜜蜂", ZH_DOC) == "蜂群、蜂王和采蜜。"


def test_llm_summarizer_without_llm_is_a_clear_error():
    with pytest.raises(ValueError, match="needs an LLM.*ExtractiveSummarizer"):
        LLMSummarizer()


def test_cache_reuses_by_content_and_persists(tmp_path):
    cache = SummaryCache(tmp_path / "cache.json")
    summarizer = ExtractiveSummarizer()
    first = cache.get_or_create(summarizer, "Bees", DOC)
    assert cache.get_or_create(summarizer, "Bees", DOC) == first and cache.hits == 1
    cache.get_or_create(summarizer, "Bees", DOC + " New sentence.")
    assert cache.misses == 2
    cache.save()
    reloaded = SummaryCache(tmp_path / "cache.json")
    reloaded.get_or_create(summarizer, "Bees", DOC)
    assert reloaded.hits == 1 and reloaded.misses == 0


def test_sentences_do_not_split_inside_abbreviations_or_decimals():
    from llama_index_ext_recursive.summarize import split_sentences

    text = 'The U.S. economy grew 3.5 percent. Next one. 第一句。第二句！ "Quoted." (Aside) ends.'
    assert split_sentences(text) == [
        "The U.S. economy grew 3.5 percent.", "Next one.", "第一句。", "第二句！", '"Quoted."', "(Aside) ends.",
    ]


def test_chinese_summaries_fit_the_embedding_window():
    summarizer = ExtractiveSummarizer(max_chars=600, max_chars_cjk=240)
    assert len(summarizer.summarize("蜜蜂", ZH_DOC * 30)) <= 240
    assert len(summarizer.summarize("Bees", DOC * 3)) > 240  # English keeps its own budget
