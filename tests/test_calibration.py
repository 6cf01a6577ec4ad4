"""Calibration: pure fusion functions, the weight fit, saving, and quiet, batched measurement."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from conftest import topic_nodes
from hypothesis import given, settings
from hypothesis import strategies as st
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks.base_handler import BaseCallbackHandler
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.schema import NodeWithScore, QueryBundle

from llama_index_ext_recursive.retrievers.calibrate import (
    calibrate_children,
    collect_child_results,
    fit_weights,
    fused_mrr,
    pseudo_queries,
    weight_grid,
)
from llama_index_ext_recursive.retrievers.calibration import Calibration, ScriptCalibration
from llama_index_ext_recursive.retrievers.fusion import HybridFusionRetriever
from llama_index_ext_recursive.retrievers.fusion_scores import (
    distribution_based_fusion,
    reciprocal_rank_fusion,
    relative_score_fusion,
)

# --------------------------------------------------------------- pure fusion


def test_relative_score_fusion_hand_computed():
    a = {"x": 3.0, "y": 2.0, "z": 1.0}  # -> 1, 0.5, 0
    b = {"y": 10.0, "w": 6.0}  # -> 1, 0
    fused = relative_score_fusion([a, b], [1.0, 3.0])
    assert fused == pytest.approx({"x": 0.25, "y": 0.5 * 0.25 + 0.75, "z": 0.0, "w": 0.0})


def test_relative_score_fusion_equal_scores_and_zero_weight():
    assert relative_score_fusion([{"a": 2.0, "b": 2.0}], [1.0]) == {"a": 1.0, "b": 1.0}
    assert relative_score_fusion([{"a": -1.0, "b": -1.0}], [1.0]) == {"a": 0.0, "b": 0.0}
    # a list of weight 0 adds no ids and no score
    assert relative_score_fusion([{"a": 1.0}, {"b": 5.0, "c": 1.0}], [2.0, 0.0]) == {"a": 1.0}


def test_reciprocal_rank_fusion_hand_computed():
    a = {"x": 0.2, "y": 0.9}  # ranks: y 1, x 2
    b = {"x": 5.0}
    fused = reciprocal_rank_fusion([a, b], [1.0, 2.0], k=60.0)
    assert fused == pytest.approx({"y": 1 / 61, "x": 1 / 62 + 2 / 61})


def test_distribution_based_fusion_hand_computed():
    a = {"x": 1.0, "y": 3.0}  # mean 2, std 1: low -1, high 5
    fused = distribution_based_fusion([a], [1.0])
    assert fused == pytest.approx({"x": 2 / 6, "y": 4 / 6})


def test_fusion_functions_refuse_bad_weights():
    with pytest.raises(ValueError, match="weights has 1 values for 2 score lists"):
        relative_score_fusion([{}, {}], [1.0])
    with pytest.raises(ValueError, match="at least one must be positive"):
        reciprocal_rank_fusion([{"a": 1.0}], [0.0])


def test_weight_grid():
    assert weight_grid(2)[0] == [1.0, 0.0] and weight_grid(2)[-1] == [0.0, 1.0]
    assert len(weight_grid(2)) == 11
    three = weight_grid(3)
    assert len(three) == 66 and all(abs(sum(p) - 1) < 1e-9 for p in three)
    assert [1.0, 0.0, 0.0] in three and [0.0, 0.0, 1.0] in three


# --------------------------------------------------------------- fitting


def _fixture_results(n_queries: int, good_rank, other_rank, seed: int = 0):
    """Per child, per query, maps of 5 candidates where the target sits at the given rank (None: absent)."""
    rng = random.Random(seed)
    targets = [f"t{q}" for q in range(n_queries)]
    children = []
    for rank_of in (good_rank, other_rank):
        per_query = []
        for q, target in enumerate(targets):
            rank = rank_of(q, rng)
            ids = [f"n{q}-{j}-{len(children)}" for j in range(5)]
            if rank is not None:
                ids[rank - 1] = target
            per_query.append({node_id: float(10 - j) for j, node_id in enumerate(ids)})
        children.append(per_query)
    return children, targets


def test_useless_child_gets_weight_zero():
    results, targets = _fixture_results(40, lambda q, r: 1, lambda q, r: None)
    weights, grid = fit_weights(results, targets)
    assert weights == [1.0, 0.0]
    assert fused_mrr(results, targets, weights) == fused_mrr(results, targets, [1.0, 0.0]) == 1.0
    assert len(grid) == 11


def test_children_helping_on_different_queries_get_mixed_weights():
    # child 0 finds even queries first and odd ones 3rd; child 1 the reverse
    results, targets = _fixture_results(40, lambda q, r: 1 if q % 2 == 0 else 3, lambda q, r: 1 if q % 2 else 3)
    weights, grid = fit_weights(results, targets)
    alone = [fused_mrr(results, targets, w) for w in ([1.0, 0.0], [0.0, 1.0])]
    chosen = fused_mrr(results, targets, weights)
    assert 0 < weights[0] < 1 and 0 < weights[1] < 1
    assert chosen > max(alone)
    assert chosen == max(m for _, m in grid)


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    queries=st.integers(8, 30),
    tolerance=st.sampled_from([0.0, 0.01, 0.05]),
)
def test_property_chosen_mrr_is_within_tolerance_of_best_and_at_least_best_child_at_zero(seed, queries, tolerance):
    rng = random.Random(seed)
    targets = [f"t{q}" for q in range(queries)]
    results = []
    for child in range(rng.randint(2, 3)):
        per_query = []
        for q in range(queries):
            ids = [f"c{child}-{q}-{j}" for j in range(6)] + [f"shared-{q}-{j}" for j in range(3)]
            if rng.random() < 0.7:
                ids.insert(rng.randint(0, len(ids)), targets[q])
            rng.shuffle(ids)
            per_query.append({node_id: rng.uniform(-1, 5) for node_id in ids[: rng.randint(0, 8)]})
        results.append(per_query)
    count = len(results)
    weights, grid = fit_weights(results, targets, tolerance=tolerance)
    chosen = fused_mrr(results, targets, weights)
    alone = [fused_mrr(results, targets, [float(i == j) for j in range(count)]) for i in range(count)]
    best = max(m for _, m in grid)
    assert chosen >= best - tolerance - 1e-12
    assert chosen >= max(alone) - tolerance - 1e-12
    if tolerance == 0.0:
        assert chosen == best >= max(alone)


# --------------------------------------------------------------- saving


def _calibration() -> Calibration:
    return Calibration(
        scripts={
            "latin": ScriptCalibration(200, [0.7, 0.99], [0.4, 0.6], [([1.0, 0.0], 0.7), ([0.4, 0.6], 0.985)]),
            "cjk": ScriptCalibration(3, [], None, []),
        },
        names=["vector", "bm25"],
        fusion="relative_score",
    )


def test_calibration_round_trips_through_json():
    calibration = _calibration()
    again = Calibration.from_dict(json.loads(json.dumps(calibration.to_dict())))
    assert again == calibration
    assert again.weights_for("latin") == [0.4, 0.6] and again.weights_for("cjk") is None
    assert again.scripts["latin"].mrr == 0.985


@pytest.mark.parametrize(
    "change,match",
    [
        (lambda d: d.pop("names"), "'names'"),
        (lambda d: d.update(version=99), "'version'"),
        (lambda d: d["scripts"].update(greek=d["scripts"]["cjk"]), "scripts.greek"),
        (lambda d: d["scripts"]["latin"].update(weights=[0.5]), "scripts.latin.weights"),
        (lambda d: d["scripts"]["latin"].update(weights=[float("nan"), 1.0]), "scripts.latin.weights"),
        (lambda d: d["scripts"]["latin"].update(samples="200"), "scripts.latin.samples"),
        (lambda d: d["scripts"]["latin"]["grid"].append({"weights": [1.0, 0.0]}), r"scripts.latin.grid\[2\]"),
        (lambda d: d["scripts"]["latin"].update(child_mrr=[0.1]), "scripts.latin.child_mrr"),
    ],
)
def test_calibration_from_dict_names_the_bad_field(change, match):
    data = _calibration().to_dict()
    change(data)
    with pytest.raises(ValueError, match=match):
        Calibration.from_dict(data)


class Counting(BaseRetriever):
    """Delegates to a child and counts the calls."""

    def __init__(self, inner: BaseRetriever) -> None:
        self.inner, self.calls = inner, 0
        super().__init__()

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        self.calls += 1
        return self.inner._retrieve(query_bundle)


def test_saved_calibration_is_applied_without_recalibrating(real_model):
    nodes = topic_nodes()
    built = HybridFusionRetriever.from_nodes(nodes, embed_model=real_model)
    saved = json.loads(json.dumps(built.calibration.to_dict()))
    children = [Counting(child) for child in built._retrievers]
    reloaded = HybridFusionRetriever(
        children,
        retriever_names=["vector", "bm25"],
        mode="relative_score",
        calibration=Calibration.from_dict(saved),
    )
    assert [c.calls for c in children] == [0, 0]  # nothing was asked to calibrate
    assert reloaded.script_weights == built.script_weights
    for query in ("queen bee eggs", "sourdough starter", "inverter current"):
        assert [(n.node.node_id, n.score) for n in reloaded.retrieve(query)] == [
            (n.node.node_id, n.score) for n in built.retrieve(query)
        ]
    again = HybridFusionRetriever.from_nodes(nodes, embed_model=real_model, calibration=Calibration.from_dict(saved))
    assert again.calibration == built.calibration


def test_calibration_for_other_children_is_refused():
    calibration = _calibration()
    children = [Counting(BaseRetrieverStub()), Counting(BaseRetrieverStub())]
    with pytest.raises(ValueError, match=r"fitted for retrievers \['vector', 'bm25'\].*recalibrate"):
        HybridFusionRetriever(children, retriever_names=["a", "b"], mode="relative_score", calibration=calibration)
    with pytest.raises(ValueError, match="fitted for mode 'relative_score'"):
        HybridFusionRetriever(children, retriever_names=["vector", "bm25"], calibration=calibration)
    with pytest.raises(ValueError, match="not both"):
        HybridFusionRetriever(
            children,
            retriever_names=["vector", "bm25"],
            mode="relative_score",
            calibration=calibration,
            script_weights={"latin": [1.0, 1.0]},
        )


class BaseRetrieverStub(BaseRetriever):
    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return []


# --------------------------------------------------------------- quiet and batched


class EventCounter(BaseEventHandler):
    count: int = 0

    @classmethod
    def class_name(cls) -> str:
        return "EventCounter"

    def handle(self, event: Any, **kwargs: Any) -> None:
        self.count += 1


class CallbackCounter(BaseCallbackHandler):
    def __init__(self) -> None:
        super().__init__([], [])
        self.count = 0

    def on_event_start(self, *args: Any, **kwargs: Any) -> str:
        self.count += 1
        return ""

    def on_event_end(self, *args: Any, **kwargs: Any) -> None:
        self.count += 1

    def start_trace(self, trace_id=None) -> None:
        pass

    def end_trace(self, trace_id=None, trace_map=None) -> None:
        pass


def test_no_events_reach_user_handlers_during_calibration(real_model):
    hybrid = HybridFusionRetriever.from_nodes(topic_nodes(), embed_model=real_model, calibrate=False)
    callbacks = CallbackCounter()
    managers = [child.callback_manager for child in hybrid._retrievers] + [real_model.callback_manager]
    events = EventCounter()
    root = get_dispatcher()
    root.add_event_handler(events)
    for manager in managers:
        manager.add_handler(callbacks)
    try:
        hybrid.retrieve("queen bee eggs")  # the handlers do see ordinary retrieval
        seen = (events.count, callbacks.count)
        assert seen[0] > 0 and seen[1] > 0
        calibration = hybrid.calibrate(topic_nodes())
        assert (events.count, callbacks.count) == seen  # calibration added nothing
    finally:
        root.event_handlers.remove(events)
        for manager in managers:
            manager.remove_handler(callbacks)
    assert calibration.scripts["latin"].samples == 9


def test_queries_are_embedded_in_one_batch_with_the_query_prompt(torch_minilm, monkeypatch):
    """A user's HuggingFaceEmbedding: one call for the batch, with its "query" prompt."""
    hybrid = HybridFusionRetriever.from_nodes(topic_nodes(), embed_model=torch_minilm, calibrate=False)
    calls: list[dict[str, Any]] = []
    original = type(torch_minilm)._embed

    def counting(self, inputs, prompt_name=None):
        calls.append({"n": len(inputs), "prompt": prompt_name})
        return original(self, inputs, prompt_name=prompt_name)

    monkeypatch.setattr(type(torch_minilm), "_embed", counting)
    queries = [q for _, q in pseudo_queries(topic_nodes())["latin"]]
    results = collect_child_results(hybrid._retrievers, queries)
    assert calls == [{"n": len(queries), "prompt": "query"}]  # one call, not one per query
    # the same vectors as one query at a time: the vector child ranks the same
    one_by_one = [{h.node.node_id: h.score for h in hybrid._retrievers[0].retrieve(q)} for q in queries]
    assert [list(r) for r in results[0]] == [list(r) for r in one_by_one]
    flat = [v for r in results[0] for v in r.values()]
    assert flat == pytest.approx([v for r in one_by_one for v in r.values()], abs=1e-5)


def test_the_bundled_model_embeds_the_queries_in_one_call(real_model, monkeypatch):
    hybrid = HybridFusionRetriever.from_nodes(topic_nodes(), embed_model=real_model, calibrate=False)
    calls: list[int] = []
    original = type(real_model)._get_query_embeddings

    def counting(self, queries):
        calls.append(len(queries))
        return original(self, queries)

    monkeypatch.setattr(type(real_model), "_get_query_embeddings", counting)
    queries = [q for _, q in pseudo_queries(topic_nodes())["latin"]]
    results = collect_child_results(hybrid._retrievers, queries)
    assert calls == [len(queries)]
    one_by_one = [{h.node.node_id: h.score for h in hybrid._retrievers[0].retrieve(q)} for q in queries]
    assert [list(r) for r in results[0]] == [list(r) for r in one_by_one]


def test_calibrate_children_with_pairs_and_too_few_samples(lexical):
    hybrid = HybridFusionRetriever.from_nodes(topic_nodes(), embed_model=lexical, calibrate=False)
    pairs = [(n.node_id, n.text) for n in topic_nodes()]  # whole sentences: both children find them
    calibration = calibrate_children(hybrid._retrievers, pairs, names=["vector", "bm25"])
    latin = calibration.scripts["latin"]
    assert latin.samples == 9 and latin.mrr == 1.0 and latin.child_mrr == [1.0, 1.0]
    assert latin.weights == [0.5, 0.5]  # both perfect: equal weights
    few = calibrate_children(hybrid._retrievers, {"cjk": [("bees-0", "蜜蜂")]}, names=["vector", "bm25"])
    assert few.scripts["cjk"].weights is None and few.weights_for("cjk") is None
    with pytest.raises(ValueError, match=r"nodes_or_pairs\[0\]"):
        calibrate_children(hybrid._retrievers, [("bees-0",)])


def test_progress_bar_shows_for_long_calibrations(lexical, capsys):
    hybrid = HybridFusionRetriever.from_nodes(topic_nodes(), embed_model=lexical, calibrate=False)
    queries = ["queen bee"] * 3
    collect_child_results(hybrid._retrievers, queries, show_progress=True)
    assert "calibrating fusion weights" in capsys.readouterr().err
    collect_child_results(hybrid._retrievers, queries)  # None: fewer than 500 queries, no bar
    assert "calibrating fusion weights" not in capsys.readouterr().err


def test_pseudo_queries_are_windows_of_their_target_and_deterministic():
    first = pseudo_queries(topic_nodes(), seed=3)
    assert first == pseudo_queries(topic_nodes(), seed=3)
    text = {n.node_id: n.text for n in topic_nodes()}
    assert len(first["latin"]) == 9
    assert all(query in text[target] for target, query in first["latin"])
