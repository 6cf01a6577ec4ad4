"""Query embeddings in batches (llama_index_ext_recursive/query_embeddings.py)."""

from __future__ import annotations

from conftest import LexicalEmbedding
from llama_index.core.bridge.pydantic import Field

from llama_index_ext_recursive.query_embeddings import embed_queries


class CountingAPI(LexicalEmbedding):
    """An API-like model: one request per call, queries embedded as texts (OpenAI's embeddings
    do so), unless ``query_prefix`` makes it embed queries differently (E5/BGE-style prompts)."""

    query_prefix: str = ""
    requests: list = Field(default_factory=list)

    def _get_query_embedding(self, query: str) -> list[float]:
        self.requests.append(("query", 1))
        return super()._get_text_embedding(self.query_prefix + query)

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        self.requests.append(("texts", len(texts)))
        return [super(CountingAPI, self)._get_text_embedding(t) for t in texts]


def test_queries_of_a_model_that_embeds_them_as_texts_go_in_batches_through_its_text_api():
    queries = [f"question {i} about topic {i % 7}" for i in range(300)]
    api = CountingAPI()
    vectors = embed_queries(api, queries)
    assert vectors == [api._get_text_embedding(q) for q in queries]  # what one call per query gives
    # the identity probe (one query, one batch of texts), then the queries: 256 + 44
    assert api.requests[:2] == [("texts", 3), ("query", 1)]
    assert api.requests[2:] == [("texts", 256), ("texts", 44)]
    # a model with its own query prompt keeps one call per query: the prompt must not be skipped
    prompted = CountingAPI(query_prefix="query: ")
    vectors = embed_queries(prompted, queries[:5])
    assert [kind for kind, _ in prompted.requests[2:]] == ["query"] * 5
    assert vectors[0] == prompted._get_text_embedding("query: " + queries[0])
