"""Our retrievers inside upstream's RetrieverQueryEngine, with an upstream postprocessor."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from conftest import LexicalEmbedding, topic_nodes
from llama_index.core import VectorStoreIndex
from llama_index.core.base.response.schema import Response
from llama_index.core.llms import CompletionResponse, CompletionResponseGen, CustomLLM, LLMMetadata
from llama_index.core.llms.callbacks import llm_completion_callback
from llama_index.core.postprocessor import SimilarityPostprocessor
from llama_index.core.query_engine import RetrieverQueryEngine

from llama_index_ext_recursive import (
    BackfillVectorRetriever,
    ExplainedNodeWithScore,
    HybridFusionRetriever,
    RecursiveSummaryRetriever,
)

ANSWER = "SCRIPTED ANSWER: the queen lays the eggs."
CUTOFF = 0.05


class ScriptedLLM(CustomLLM):
    """Always gives the same answer and records the prompts it was sent."""

    prompts: list[str] = []

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(context_window=4096, num_output=256)

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        self.prompts.append(prompt)
        return CompletionResponse(text=ANSWER)

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        yield self.complete(prompt, formatted=formatted)


def _recursive(embed):
    return RecursiveSummaryRetriever.from_nodes(topic_nodes(), embed_model=embed, similarity_top_k=3)


def _hybrid(embed):
    return HybridFusionRetriever.from_nodes(topic_nodes(), embed_model=embed, similarity_top_k=3, calibrate=False)


def _backfill(embed):
    index = VectorStoreIndex(topic_nodes(), embed_model=embed)
    return BackfillVectorRetriever(index, similarity_top_k=3, embed_model=embed)


BUILDERS = {"recursive": _recursive, "hybrid": _hybrid, "backfill": _backfill}


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_query_engine(name):
    embed = LexicalEmbedding(model_name="lexical-test")
    retriever = BUILDERS[name](embed)
    llm = ScriptedLLM(prompts=[])
    engine = RetrieverQueryEngine.from_args(
        retriever,
        llm=llm,
        node_postprocessors=[SimilarityPostprocessor(similarity_cutoff=CUTOFF)],
        response_mode="compact",
    )
    question = "Who lays eggs in the hive?"
    expected = [h.node.node_id for h in retriever.retrieve(question) if h.score >= CUTOFF]
    for response in (engine.query(question), asyncio.run(engine.aquery(question))):
        assert isinstance(response, Response)
        assert response.response == ANSWER
        ids = [h.node.node_id for h in response.source_nodes]
        assert ids == expected and ids
        assert "bees-0" in ids
        if name == "recursive":  # our node type, explanation intact, through the engine
            assert all(isinstance(h, ExplainedNodeWithScore) and h.explanation for h in response.source_nodes)
        assert all(h.score >= CUTOFF for h in response.source_nodes)
    assert len(llm.prompts) == 2 and "queen bee lays eggs" in llm.prompts[0]
