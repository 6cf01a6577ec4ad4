"""Summarizers: extractive offline default, LLM with validation and fallback, cache."""

from __future__ import annotations

import re
import time

import pytest
from llama_index.core.llms import CompletionResponse, CustomLLM, LLMMetadata
from llama_index.core.llms.callbacks import llm_completion_callback

from llama_index_ext_recursive import ExtractiveSummarizer, LLMSummarizer, SummaryCache
from llama_index_ext_recursive.recursive.summarize import SummaryRejected

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
    sentences = summary[len("Bees. ") :].split(". ")
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
    from llama_index_ext_recursive.extractive import split_sentences

    text = 'The U.S. economy grew 3.5 percent. Next one. 第一句。第二句！ "Quoted." (Aside) ends.'
    assert split_sentences(text) == [
        "The U.S. economy grew 3.5 percent.",
        "Next one.",
        "第一句。",
        "第二句！",
        '"Quoted."',
        "(Aside) ends.",
    ]


def test_chinese_summaries_fit_the_embedding_window():
    summarizer = ExtractiveSummarizer(max_chars=600, max_chars_cjk=240)
    assert len(summarizer.summarize("蜜蜂", ZH_DOC * 30)) <= 240
    assert len(summarizer.summarize("Bees", DOC * 3)) > 240  # English keeps its own budget


def code_like(lines: int) -> str:
    """Source-code-like text: one statement per line, many distinct identifiers."""
    return "\n".join(
        f"    value_{i % 997}_{i % 13} = compute_{i % 389}(item_{i}, limit={i % 50})  # step {i}" for i in range(lines)
    )


def test_summarizer_never_considers_more_than_max_sentences(monkeypatch):
    from llama_index_ext_recursive import extractive as summarize

    rows = []
    real = summarize._unit_rows
    monkeypatch.setattr(summarize, "_unit_rows", lambda bags, *a: rows.append(len(bags)) or real(bags, *a))
    text = " ".join(f"Sentence {i} talks about topic{i % 40} and item{i}." for i in range(5000))
    summarizer = ExtractiveSummarizer(max_sentences=100)
    candidates = summarizer.candidates(text)
    assert len(candidates) == 100 and candidates == summarizer.candidates(text)  # deterministic
    assert candidates[0].startswith("Sentence 0 ") and candidates[-1].startswith("Sentence 4950 ")
    summary = summarizer.summarize("Topics", text)
    assert rows == [100] and len(summary) <= 600
    parts = ExtractiveSummarizer(max_sentences=100).select(text, 3000, segments=4)
    numbers = [int(re.match(r"Sentence (\d+)", s).group(1)) for s in parts]
    assert min(numbers) < 1250 and max(numbers) >= 3750  # the whole document is covered


def test_documents_under_the_cap_use_every_sentence():
    summarizer = ExtractiveSummarizer(max_sentences=21)
    assert summarizer.candidates(DOC) == ExtractiveSummarizer().candidates(DOC)
    assert len(summarizer.candidates(DOC)) == 21
    assert summarizer.summarize("Bees", DOC) == ExtractiveSummarizer().summarize("Bees", DOC)


def test_summarizing_source_code_allocates_megabytes_not_gigabytes():
    import tracemalloc

    text = code_like(8000)  # 8000 lines x 24,391 terms: a dense float64 matrix is 1.45 GiB
    tracemalloc.start()
    try:
        summary = ExtractiveSummarizer().summarize("module.py", text)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert summary.startswith("module.py. ") and "compute_" in summary
    assert peak < 100 * 2**20, f"peak {peak / 2**20:.0f} MiB"


def test_text_without_sentence_breaks_is_summarized_by_its_opening_words():
    text = " ".join(["word"] * 200_000)  # one 1 MB "sentence": longer than any budget
    summary = ExtractiveSummarizer().summarize("Words", text)
    assert summary.startswith("Words. word word") and summary.endswith(" word")
    assert 550 < len(summary) <= 600  # the budget, cut at a word boundary, not just the title


def test_max_sentences_is_validated_persisted_and_part_of_the_fingerprint():
    with pytest.raises(TypeError, match="max_sentences must be an integer"):
        ExtractiveSummarizer(max_sentences=True)
    with pytest.raises(ValueError, match="max_sentences must be >= 2"):
        ExtractiveSummarizer(max_sentences=1)
    summarizer = ExtractiveSummarizer(max_sentences=500)
    restored = ExtractiveSummarizer.from_dict(summarizer.to_dict())
    assert restored.max_sentences == 500 and restored.fingerprint == summarizer.fingerprint
    assert summarizer.fingerprint != ExtractiveSummarizer().fingerprint
    old = {"type": "extractive", "max_chars": 600, "diversity_lambda": 0.7}  # saved before the cap
    assert ExtractiveSummarizer.from_dict(old).max_sentences == ExtractiveSummarizer().max_sentences


def test_cjk_ratio_counts_characters_and_latin_letters():
    from llama_index_ext_recursive.text import cjk_ratio

    assert cjk_ratio("蜜蜂 bees") == 2 / 6
    assert cjk_ratio("蜜蜂采蜜。") == 1.0 and cjk_ratio("... 123") == 0.0 and cjk_ratio("  ") == 0.0
    assert cjk_ratio("U.S. 3.5 蜜蜂") == 2 / (2 + len("U.S.") + len("3.5"))  # words keep their dots


def test_kana_text_is_cjk_for_the_summary_budget_as_for_every_component():
    """The summarizer reads text.py's one script table: a Japanese document gets the CJK budget."""
    from llama_index_ext_recursive.text import is_cjk

    text = "みつばちはすばこでくらします。じょおうばちはたまごをうみます。はたらきばちはみつをあつめます。" * 20
    assert is_cjk(text)
    summarizer = ExtractiveSummarizer(max_chars=600, max_chars_cjk=60)
    assert 0 < len(summarizer.summarize("", text)) <= 60


def test_llm_summarizer_resolves_its_llm_like_every_component():
    from llama_index.core import Settings
    from llama_index.core.llms import MockLLM

    Settings.llm = MockLLM()
    assert LLMSummarizer().llm is Settings.llm
