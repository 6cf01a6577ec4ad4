"""Worker processes for a build's text work (workers.py): the same results as in-process work."""

import pytest

from llama_index_ext_recursive.extractive import ExtractiveSummarizer
from llama_index_ext_recursive.recursive.summarize import SummaryCache
from llama_index_ext_recursive.workers import summarize_texts

DOCUMENTS = [
    (
        f"Report {i}",
        " ".join(
            f"Sentence {j} of report {i} covers {topic} and its effect on the {topic} budget."
            for j in range(12)
            for topic in ("water", "energy", "transport")[j % 3 : j % 3 + 1]
        )
        + " 合同终止需要提前通知。违约方承担赔偿责任。",
    )
    for i in range(9)
]


def test_summaries_made_on_worker_processes_equal_those_made_here():
    summarizer = ExtractiveSummarizer(max_chars=200)
    serial = [summarizer.summarize(title, text) for title, text in DOCUMENTS]
    assert summarize_texts(DOCUMENTS, summarizer, workers=2, min_parallel=2) == serial
    assert summarize_texts(DOCUMENTS, summarizer, workers=1) == serial
    with pytest.raises(ValueError, match="workers must be an integer >= 1"):
        summarize_texts(DOCUMENTS, summarizer, workers=0)
    with pytest.raises(TypeError, match="texts must be strings"):
        summarize_texts([("title", 5)], summarizer)  # type: ignore[list-item]


class ShoutingSummarizer(ExtractiveSummarizer):
    """A subclass that summarises otherwise: a worker would run the base class's code."""

    @property
    def fingerprint(self):
        return "shouting"

    def summarize(self, title, text):
        return super().summarize(title, text).upper()


def test_the_cache_makes_what_it_lacks_once_and_keeps_a_subclass_in_process():
    cache = SummaryCache()
    summarizer = ExtractiveSummarizer()
    first = cache.get_or_create_many(summarizer, DOCUMENTS[:3] + DOCUMENTS[:1], workers=2)
    assert first == [summarizer.summarize(t, x) for t, x in DOCUMENTS[:3] + DOCUMENTS[:1]]
    assert (cache.misses, cache.hits) == (3, 1)  # the repeated document is made once
    assert cache.get_or_create(summarizer, *DOCUMENTS[1]) == first[1] and cache.hits == 2
    shouting = cache.get_or_create_many(ShoutingSummarizer(), DOCUMENTS[:2], workers=2)
    assert shouting == [s.upper() for s in first[:2]]
