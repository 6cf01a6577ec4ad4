"""columnar.postings: BM25 scores equal a fresh bm25s build on the live rows after any appends,
deletes and compactions; restrictions keep the global statistics; persistence is incremental and
memory-mapped; tokenising on two processes equals one; bad input is named."""

import json
import os

import bm25s
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llama_index_ext_recursive.columnar.postings import COMPONENT, Postings
from llama_index_ext_recursive.columnar.rowsets import RowSet
from llama_index_ext_recursive.persist import PersistError
from llama_index_ext_recursive.tokenizer import MultilingualTokenizer
from llama_index_ext_recursive.workers import tokenize_texts

WORDS = [f"w{i}" for i in range(30)]
QUERIES = (["w0"], ["w1", "w2", "w1"], ["w3", "w29", "w7"], ["w5", "nowhere"])

rows_of_tokens = st.lists(st.lists(st.sampled_from(WORDS), min_size=0, max_size=12), min_size=1, max_size=8)
operations = st.lists(
    st.one_of(
        st.tuples(st.just("append"), rows_of_tokens),
        st.tuples(st.just("delete"), st.lists(st.integers(0, 10_000), min_size=1, max_size=3)),
        st.tuples(st.just("compact"), st.none()),
        st.tuples(st.just("merge_small"), st.integers(1, 6)),
    ),
    min_size=1,
    max_size=8,
)


def _replay(ops):
    """Apply ``ops`` to a Postings and to a plain list model; return both."""
    postings, model = Postings(), []  # model: [tokens or None] per row id
    for op, arg in ops:
        if op == "append":
            rows = postings.append(arg)
            assert rows.tolist() == list(range(len(model), len(model) + len(arg)))
            model.extend(list(tokens) for tokens in arg)
        elif op == "delete":
            live = [row for row, tokens in enumerate(model) if tokens is not None]
            if not live:
                continue
            chosen = sorted({live[i % len(live)] for i in arg})
            postings.delete(chosen)
            for row in chosen:
                model[row] = None
        elif op == "merge_small":  # row ids kept: the model does not change
            postings.merge_small(keep_rows=arg)
        else:
            mapping = postings.compact()
            kept = [tokens for tokens in model if tokens is not None]
            assert mapping.tolist() == _expected_mapping(model)
            model = kept
    return postings, model


def _expected_mapping(model):
    mapping, next_row = [], 0
    for tokens in model:
        mapping.append(-1 if tokens is None else next_row)
        next_row += tokens is not None
    return mapping


def _reference(model, query):
    """{row id: score} of a fresh bm25s build on the live rows, rows scoring > 0 only."""
    live = [row for row, tokens in enumerate(model) if tokens is not None]
    corpus = [model[row] for row in live]
    known = {token for tokens in corpus for token in tokens}
    asked = [token for token in query if token in known]
    if not asked or not any(corpus):
        return {}
    reference = bm25s.BM25()
    reference.index(corpus, show_progress=False)
    scores = reference.get_scores(asked)
    return {live[i]: float(s) for i, s in enumerate(scores) if s > 0}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(operations)
def test_scores_equal_a_fresh_bm25s_build_on_the_live_rows(ops):
    postings, model = _replay(ops)
    for query in QUERIES:
        expected = _reference(model, query)
        rows, scores = postings.search(query, k=max(1, len(model)))
        assert dict(zip(rows.tolist(), scores.tolist(), strict=True)) == expected
        order = sorted(expected, key=lambda row: (-expected[row], row))
        assert rows.tolist() == order  # ties: the lower row first
        if len(model):
            every = np.arange(len(model))
            assert postings.scores(query, every).tolist() == [expected.get(r, 0.0) for r in range(len(model))]


@settings(max_examples=40, deadline=None)
@given(operations, st.data())
def test_a_restriction_filters_the_ranking_without_changing_any_score(ops, data):
    postings, model = _replay(ops)
    if not model:
        return
    allowed = data.draw(st.lists(st.integers(0, len(model) - 1), max_size=len(model)))
    for query in QUERIES:
        full_rows, full_scores = postings.search(query, k=len(model))
        rows, scores = postings.search(query, k=len(model), rows=allowed)
        kept = [(r, s) for r, s in zip(full_rows.tolist(), full_scores.tolist(), strict=True) if r in set(allowed)]
        assert list(zip(rows.tolist(), scores.tolist(), strict=True)) == kept
        top2 = postings.search(query, k=2, rows=allowed)
        assert top2[0].tolist() == [r for r, _ in kept[:2]]


def test_merge_small_merges_runs_of_small_clean_segments_and_leaves_the_rest_unread(tmp_path):
    postings = Postings()
    for size in (5, 2, 2, 1, 6, 1, 1):
        postings.append([["w1", f"w{size}"]] * size)
    postings.delete([13])  # a row of the 6-row segment (rows 10..15): it is not merged
    large = postings._snapshot.segments[0]
    before = {tuple(q): postings.search(q, k=20) for q in QUERIES}
    assert postings.merge_small(keep_rows=5) == 5  # the runs 2+2+1 and 1+1; the dirty 6 and the 5 stay
    segments = postings._snapshot.segments
    assert [len(s.lengths) for s in segments] == [5, 5, 6, 2]
    assert segments[0] is large  # not read again
    for query, (rows, scores) in before.items():
        found = postings.search(list(query), k=20)
        assert found[0].tolist() == rows.tolist() and found[1].tolist() == scores.tolist()
    postings.write(tmp_path)
    reopened = Postings.open(tmp_path)
    assert [s.tolist() for s in reopened.search(["w1"], k=20)] == [s.tolist() for s in postings.search(["w1"], k=20)]


def test_a_largest_size_ends_each_run_of_merged_segments_before_it_would_pass_it():
    """The end of a build merges its checkpoints' segments into runs of bounded rows: fewer
    segments for a query to read, a bounded merge in memory; answers unchanged."""
    postings = Postings()
    for size in (3, 3, 3, 4, 1, 2, 9):
        postings.append([["w1", f"w{size}"]] * size)
    before = {tuple(q): postings.search(q, k=30) for q in QUERIES}
    assert postings.merge_small(keep_rows=8, largest=6) == 4  # 3+3 and 4+1 merged; 3 and 2 alone; 9 kept
    assert [len(s.lengths) for s in postings._snapshot.segments] == [6, 3, 5, 2, 9]
    for query, (rows, scores) in before.items():
        found = postings.search(list(query), k=30)
        assert found[0].tolist() == rows.tolist() and found[1].tolist() == scores.tolist()


def test_write_and_open_round_trip_and_later_writes_add_only_new_files(tmp_path):
    rng = np.random.default_rng(3)
    postings = Postings()
    postings.append([list(rng.choice(WORDS, 8)) for _ in range(50)])
    postings.write(tmp_path)
    first = set(os.listdir(tmp_path))
    stamps = {name: os.stat(tmp_path / name).st_ino for name in first}
    postings.append([["w1", "fresh"], ["w2"]])
    postings.delete([3, 7])
    postings.write(tmp_path)
    after = set(os.listdir(tmp_path))
    state = f"{COMPONENT}.state.json"
    assert first - {state} <= after
    assert all(os.stat(tmp_path / name).st_ino == stamps[name] for name in first - {state})  # never rewritten
    assert len(after - first) >= 2  # the new segment's files and the tombstones

    reopened = Postings.open(tmp_path)
    assert (reopened.row_count, reopened.live_rows, reopened.vocabulary_size) == (52, 50, postings.vocabulary_size)
    for query in (*QUERIES, ["fresh"]):
        expected = postings.search(query, k=60)
        got = reopened.search(query, k=60)
        assert np.array_equal(got[0], expected[0]) and np.array_equal(got[1], expected[1])
    segment = reopened._snapshot.segments[0]
    assert isinstance(segment.tf, np.memmap) or isinstance(segment.tf.base, np.memmap)


def test_a_reopened_postings_keeps_appending_where_it_stopped(tmp_path):
    postings = Postings()
    postings.append([["w1"], ["w2"]])
    postings.write(tmp_path)
    reopened = Postings.open(tmp_path)
    assert reopened.append([["w1", "w3"]]).tolist() == [2]
    reopened.write(tmp_path)
    again = Postings.open(tmp_path)
    model = [["w1"], ["w2"], ["w1", "w3"]]
    rows, scores = again.search(["w1", "w3"], k=3)
    assert dict(zip(rows.tolist(), scores.tolist(), strict=True)) == _reference(model, ["w1", "w3"])


def test_another_format_version_is_refused_naming_it_and_the_fix(tmp_path):
    postings = Postings()
    postings.append([["w1"]])
    postings.write(tmp_path)
    path = tmp_path / f"{COMPONENT}.state.json"
    state = json.loads(path.read_text())
    state["version"] = 99
    path.write_text(json.dumps(state))
    with pytest.raises(PersistError, match=r"version 99.*upgrade"):
        Postings.open(tmp_path)


def test_a_folder_holding_other_postings_is_refused(tmp_path):
    one, two = Postings(), Postings()
    one.append([["w1"]])
    two.append([["w2"]])
    one.write(tmp_path)
    with pytest.raises(PersistError, match="another index"):
        two.write(tmp_path)
    assert Postings.open(tmp_path).search(["w1"], k=1)[0].tolist() == [0]


def test_bad_input_is_named():
    postings = Postings()
    postings.append([["w1"], ["w2"]])
    with pytest.raises(TypeError, match="list of tokens per row"):
        postings.append(["a whole text"])
    with pytest.raises(ValueError, match="k"):
        postings.search(["w1"], k=0)
    with pytest.raises(ValueError, match="5"):
        postings.search(["w1"], k=1, rows=[5])
    with pytest.raises(ValueError, match="5"):
        postings.delete([5])
    postings.delete([0])
    with pytest.raises(ValueError, match="deleted already"):
        postings.delete([0])
    with pytest.raises(TypeError):
        postings.search("w1", k=1)
    assert postings.row_count == 2 and postings.live_rows == 1


TEXTS = [
    "The court held that the contract was void.",
    "合同无效的法律后果由法院认定。",
    "mixed 中文 and English: getUserName() returns 用户名",
    "",
] * 7


@pytest.mark.parametrize("language", [None, "zh"])
def test_tokenising_on_two_processes_equals_one(language):
    tokenizer = MultilingualTokenizer(language=language) if language else MultilingualTokenizer()
    serial = [tokenizer(text) for text in TEXTS]
    assert tokenize_texts(TEXTS, tokenizer, workers=1) == serial
    assert tokenize_texts(TEXTS, tokenizer, workers=2, min_parallel=4) == serial
    with pytest.raises(ValueError, match="workers"):
        tokenize_texts(TEXTS, tokenizer, workers=0)
    with pytest.raises(TypeError):
        tokenize_texts(["text", 3], tokenizer)  # type: ignore[list-item]


def test_a_script_without_a_main_guard_tokenises_on_two_processes_once(tmp_path):
    """The workers are not multiprocessing's: they do not run the caller's script again, so a
    plain script (no ``if __name__ == "__main__":``) tokenises in parallel, once."""
    import subprocess
    import sys

    marker = tmp_path / "runs"
    script = tmp_path / "plain.py"
    script.write_text(
        "import json, pathlib\n"
        "from llama_index_ext_recursive.tokenizer import MultilingualTokenizer\n"
        "from llama_index_ext_recursive.workers import tokenize_texts\n"
        f"pathlib.Path({str(marker)!r}).open('a').write('run\\n')\n"
        f"texts = {TEXTS!r}\n"
        "tokenizer = MultilingualTokenizer()\n"
        "parallel = tokenize_texts(texts, tokenizer, workers=2, min_parallel=4)\n"
        "print(json.dumps(parallel == [tokenizer(t) for t in texts]))\n",
        encoding="utf-8",
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "true"
    assert marker.read_text() == "run\n"  # the script ran once: no worker re-ran it


def test_writing_into_a_folder_never_removes_files_it_did_not_write(tmp_path):
    theirs = [tmp_path / "postings-000001-notes.npy", tmp_path / "postings-000009-rows.npy"]
    for path in theirs:
        path.write_bytes(b"a user's file")
    postings = Postings()
    postings.append([["w1"], ["w2"]])
    postings.append([["w3"]])
    postings.write(tmp_path)  # no state of ours here yet: nothing is retired
    postings.compact()
    postings.write(tmp_path)  # retires our merged segments only
    assert all(path.read_bytes() == b"a user's file" for path in theirs)
    assert not (tmp_path / "postings-000000-rows.npy").exists()  # our merged segment was retired
    assert Postings.open(tmp_path).search(["w3"], k=1)[0].tolist() == [2]


@pytest.mark.parametrize("dense", [1, 10**9], ids=["sparse-sums", "dense-sums"])
def test_scores_summed_sparse_or_in_one_array_over_every_row_are_the_same(dense):
    """A query with many postings sums them in an array over all rows, one with few in a sorted
    list: both equal a fresh bm25s build, to the bit."""
    from llama_index_ext_recursive.columnar import postings as module

    generator = np.random.default_rng(5)
    batch = [[f"w{int(w)}" for w in generator.integers(0, 30, size=int(generator.integers(1, 9)))] for _ in range(40)]
    ops = [("append", batch[:25]), ("delete", [1, 4, 9, 16]), ("append", batch[25:]), ("merge_small", 64)]
    saved = module._DENSE_POSTINGS
    module._DENSE_POSTINGS = dense if dense > 1 else 0  # 0: never dense; 10**9: always
    try:
        postings, model = _replay(ops)
        for query in [*QUERIES, ["w1", "w2", "w3", "w1", "w4"]]:
            rows, scores = postings.search(query, k=max(1, len(model)))
            expected = _reference(model, query)
            assert dict(zip(rows.tolist(), scores.tolist(), strict=True)) == expected
            order = sorted(expected, key=lambda row: (-expected[row], row))
            for k in (1, 2, 3, 5):  # a top k (ties at the k-th: the lower rows) from the rows that may be in it
                assert postings.search(query, k=k)[0].tolist() == order[:k]
    finally:
        module._DENSE_POSTINGS = saved


@pytest.mark.parametrize("deleted", [False, True])
def test_a_few_allowed_rows_looked_up_in_long_postings_score_as_the_full_ranking(deleted):
    """A routed search allows a few rows of terms with many postings: its rows are looked up
    in the postings instead of reading them all, and every score is still the full ranking's,
    with deleted rows (whose live postings count once a search has read them) or without."""
    generator = np.random.default_rng(3)
    postings = Postings()
    for _ in range(3):  # three segments
        postings.append([list(generator.choice(WORDS[:6], size=int(generator.integers(1, 9)))) for _ in range(150)])
    if deleted:
        postings.delete(np.arange(0, 450, 7))
    allowed = [3, 3, 151, 160, 449, 7, 300]  # repeats and a deleted row (7) too
    for query in (["w0", "w1"], ["w2", "w2", "w5"], ["w4"]):
        for _ in range(2):  # before and after the unrestricted search below counted the live postings
            rows, scores = postings.search(query, k=10, rows=allowed)
            full_rows, full_scores = postings.search(query, k=450)
            full = dict(zip(full_rows.tolist(), full_scores.tolist(), strict=True))
            expected = sorted((r for r in set(allowed) if r in full), key=lambda r: (-full[r], r))
            assert rows.tolist() == expected and scores.tolist() == [full[r] for r in expected]
            assert postings.scores(query, allowed).tolist() == [full.get(r, 0.0) for r in allowed]


def test_a_row_set_restricts_as_its_row_ids_do_and_a_foreign_one_is_refused():
    postings = Postings()
    postings.append([["apple", "pie"], ["apple"], ["pie", "crust"], ["apple", "crust"]])
    allowed = RowSet(np.array([1, 3], dtype=np.int64), 4)
    assert [a.tolist() for a in postings.search(["apple"], 5, rows=allowed)] == [
        a.tolist() for a in postings.search(["apple"], 5, rows=[3, 1, 3])
    ]
    assert postings.search(["apple"], 5, rows=allowed)[0].tolist() == [1, 3]
    with pytest.raises(ValueError, match="selected among 9 rows, but the column holds 4"):
        postings.search(["apple"], 5, rows=RowSet(np.array([1], dtype=np.int64), 9))
