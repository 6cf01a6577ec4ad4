"""Vector column: exact search equals brute force, persistence writes only what is new,
the approximate path rescores exactly and keeps recall, bad input is named."""

from __future__ import annotations

import json
import math
import threading
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llama_index_ext_recursive.columnar import vectors
from llama_index_ext_recursive.columnar.rowsets import RowSet
from llama_index_ext_recursive.columnar.vectors import VectorColumn, _exact_scores
from llama_index_ext_recursive.persist import PersistError


def dot_in_order(row: np.ndarray, unit_query: np.ndarray) -> float:
    """The column's score definition, one Python float at a time: products summed in dimension order."""
    total = 0.0
    for value, weight in zip(row.astype(np.float64).tolist(), unit_query.tolist()):
        total += value * weight
    return total


def unit(vector: np.ndarray) -> np.ndarray:
    """``vector`` (as float64) over its norm, squares summed in dimension order."""
    values = np.asarray(vector, dtype=np.float64)
    return values / math.sqrt(dot_in_order(values, values))


class Reference:
    """Brute force over a plain list of rows: what the column must answer."""

    def __init__(self) -> None:
        self.vectors: list[np.ndarray] = []
        self.alive: list[bool] = []

    def append(self, matrix: np.ndarray) -> None:
        for row in np.asarray(matrix, dtype=np.float64):
            self.vectors.append(unit(row).astype(np.float32))
            self.alive.append(True)

    def delete(self, rows: np.ndarray) -> None:
        for row in rows:
            self.alive[int(row)] = False

    def compact(self) -> None:
        self.vectors = [v for v, a in zip(self.vectors, self.alive) if a]
        self.alive = [True] * len(self.vectors)

    def search(self, query: np.ndarray, k: int, rows: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        unit_query = unit(query)
        allowed = range(len(self.vectors)) if rows is None else sorted(set(int(r) for r in rows))
        live = np.array([r for r in allowed if self.alive[r]], dtype=np.int64)
        if not len(live):
            return live, np.zeros(0, dtype=np.float32)
        scores = np.array([dot_in_order(self.vectors[r], unit_query) for r in live]).astype(np.float32)
        order = np.lexsort((live, -scores))[:k]
        return live[order], scores[order]


def small_integer_rows(count: int, dim: int, seed: int) -> np.ndarray:
    """Rows of small integers: many duplicates after normalising, so ties are common."""
    rows = np.random.default_rng(seed).integers(-2, 3, size=(count, dim)).astype(np.float64)
    rows[~rows.any(axis=1), 0] = 1.0
    return rows


def clustered_rows(count: int, dim: int, centers: np.ndarray, seed: int) -> np.ndarray:
    generator = np.random.default_rng(seed)
    picked = centers[generator.integers(0, len(centers), count)]
    return picked + 0.08 * generator.standard_normal((count, dim))


def assert_same(found: tuple[np.ndarray, np.ndarray], expected: tuple[np.ndarray, np.ndarray]) -> None:
    assert found[0].dtype == np.int64 and found[1].dtype == np.float32
    assert np.array_equal(found[0], expected[0])
    assert np.array_equal(found[1], expected[1])


operations = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(0, 40), st.integers(0, 2**16)),
        st.tuples(st.just("delete"), st.integers(0, 2**16), st.floats(0, 0.6)),
        st.tuples(st.just("compact"), st.just(0), st.just(0)),
    ),
    min_size=1,
    max_size=8,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(operations=operations, k=st.integers(1, 30), seed=st.integers(0, 2**16), restrict=st.floats(0, 1))
def test_exact_search_equals_brute_force_through_appends_deletes_and_compaction(operations, k, seed, restrict):
    dim = 5
    column, reference = VectorColumn(dim), Reference()
    for name, number, extra in operations:
        if name == "append":
            matrix = small_integer_rows(number, dim, number)
            rows = column.append(matrix)
            assert np.array_equal(rows, np.arange(len(reference.vectors), len(reference.vectors) + number))
            reference.append(matrix)
        elif name == "delete" and reference.vectors:
            generator = np.random.default_rng(number)
            doomed = np.flatnonzero(generator.random(len(reference.vectors)) < extra)
            expected = sum(reference.alive[r] for r in doomed)
            assert column.delete(doomed) == expected
            reference.delete(doomed)
        elif name == "compact":
            mapping = column.compact()
            alive = np.array(reference.alive, dtype=bool)
            assert np.array_equal(mapping[~alive], np.full(int((~alive).sum()), -1))
            assert np.array_equal(mapping[alive], np.arange(int(alive.sum())))
            reference.compact()
        assert column.live_count == sum(reference.alive)
        assert column.row_count == len(reference.vectors)
    generator = np.random.default_rng(seed)
    query = small_integer_rows(1, dim, seed)[0]
    assert_same(column.search(query, k), reference.search(query, k))
    rows = np.flatnonzero(generator.random(len(reference.vectors)) < restrict)
    assert_same(column.search(query, k, rows=rows), reference.search(query, k, rows))
    queries = small_integer_rows(3, dim, seed + 1)
    many_rows, many_scores = column.search_many(queries, k)
    for query_row, found_rows, found_scores in zip(queries, many_rows, many_scores):
        assert_same((found_rows, found_scores), reference.search(query_row, k))


def test_ties_go_to_the_lower_row_id():
    column = VectorColumn(3)
    column.append(np.array([[1.0, 0, 0], [0, 1.0, 0], [2.0, 0, 0], [3.0, 0, 0]]))
    rows, scores = column.search(np.array([1.0, 0, 0]), 2)
    assert rows.tolist() == [0, 2] and scores.tolist() == [1.0, 1.0]
    assert column.search(np.array([1.0, 0, 0]), 2, rows=np.array([3, 2, 3]))[0].tolist() == [2, 3]


def state_of(folder: Path) -> dict:
    return json.loads((folder / "vectors.state.json").read_text())


def test_persistence_round_trips_and_writes_only_new_segments(tmp_path):
    column, reference = VectorColumn(6), Reference()
    for seed in range(3):
        matrix = small_integer_rows(30, 6, seed)
        column.append(matrix)
        reference.append(matrix)
    column.delete(np.array([1, 31, 89]))
    reference.delete([1, 31, 89])
    column.write(tmp_path)
    files = {p.name: p.stat().st_mtime_ns for p in tmp_path.iterdir()}
    assert set(files) == {
        "vectors.state.json",
        "vectors-000000.npy",
        "vectors-000001.npy",
        "vectors-000002.npy",
        "vectors-tombstones-000001.npy",
    }
    matrix = small_integer_rows(2, 6, 99)
    column.append(matrix)
    reference.append(matrix)
    column.write(tmp_path)
    after = {p.name: p.stat().st_mtime_ns for p in tmp_path.iterdir()}
    assert set(after) - set(files) == {"vectors-000003.npy"}
    assert {name for name in files if files[name] != after[name]} == {"vectors.state.json"}

    opened = VectorColumn.open(tmp_path)
    assert (opened.dim, opened.row_count, opened.live_count) == (6, 92, 89)
    for seed in range(5):
        query = small_integer_rows(1, 6, 1000 + seed)[0]
        assert_same(opened.search(query, 7), reference.search(query, 7))
        assert_same(opened.search(query, 7), column.search(query, 7))
        assert_same(opened.search(query, 7, rows=np.arange(0, 92, 3)), reference.search(query, 7, np.arange(0, 92, 3)))
    opened.delete(np.array([5]))
    opened.write(tmp_path)
    assert {p.name for p in tmp_path.iterdir()} - set(after) == {"vectors-tombstones-000002.npy"}
    assert VectorColumn.open(tmp_path).alive(np.array([1, 5, 6])).tolist() == [False, False, True]


def mapped_files() -> set[str]:
    return {line.split()[-1] for line in Path("/proc/self/maps").read_text().splitlines() if line.endswith(".npy")}


def test_a_reopened_column_reads_its_segments_memory_mapped(tmp_path):
    column = VectorColumn(4)
    column.append(small_integer_rows(10, 4, 0))
    column.append(small_integer_rows(10, 4, 1))
    column.write(tmp_path)
    opened = VectorColumn.open(tmp_path)
    assert {str(tmp_path / "vectors-000000.npy"), str(tmp_path / "vectors-000001.npy")} <= mapped_files()
    assert opened.search(np.ones(4), 3)[0].shape == (3,)


def test_rows_of_a_mapped_segment_are_read_from_the_file_or_from_the_map_once_it_is_retired(tmp_path):
    """Candidates of a reopened column are read with pread (rows read through the map would stay
    resident); a segment file retired since it was mapped is still read, through the map."""
    column, reference = VectorColumn(8), Reference()
    for seed in range(2):
        matrix = small_integer_rows(40, 8, seed)
        column.append(matrix)
        reference.append(matrix)
    column.write(tmp_path)
    opened = VectorColumn.open(tmp_path)
    rows = np.arange(5, 70, 3)
    query = np.arange(8, dtype=np.float64) - 3
    expected = reference.search(query, 6, rows)
    assert_same(opened.search(query, 6, rows=rows), expected)
    runs = np.array([0, 1, 2, 3, 9, 10, 17, 17, 18, 39, 40, 41, 79])  # consecutive rows are read together
    assert np.array_equal(opened.vectors(runs), column.vectors(runs))
    (tmp_path / "vectors-000000.npy").unlink()  # as a compaction's write retires it
    assert_same(opened.search(query, 6, rows=rows), expected)
    assert np.array_equal(opened.vectors(rows), column.vectors(rows))


def test_a_compacted_column_writes_new_segments_and_reopens(tmp_path):
    column, reference = VectorColumn(4, name="chunk_vectors"), Reference()
    for seed in range(4):
        matrix = small_integer_rows(25, 4, seed)
        column.append(matrix)
        reference.append(matrix)
    column.write(tmp_path)
    column.delete(np.arange(10, 60))
    reference.delete(range(10, 60))
    column.compact()
    reference.compact()
    column.write(tmp_path)
    state = json.loads((tmp_path / "chunk_vectors.state.json").read_text())
    assert [s["number"] for s in state["segments"]] == [4] and state["tombstones"] is None
    opened = VectorColumn.open(tmp_path, name="chunk_vectors")
    assert opened.row_count == 50
    query = np.array([1.0, -1.0, 0.5, 2.0])
    assert_same(opened.search(query, 50), reference.search(query, 50))


def test_the_approximate_path_returns_exact_scores_and_keeps_recall(tmp_path):
    dim = 32
    generator = np.random.default_rng(7)
    centers = generator.standard_normal((60, dim))
    centers /= np.linalg.norm(centers, axis=1, keepdims=True)
    column, reference = VectorColumn(dim, approximate_threshold=3000, nprobe=8), Reference()
    for seed in range(6):
        matrix = clustered_rows(1000, dim, centers, seed)
        column.append(matrix)
        reference.append(matrix)
    assert column.approximate
    doomed = np.arange(0, 6000, 7)
    column.delete(doomed)
    reference.delete(doomed)
    queries = clustered_rows(60, dim, centers, 1234)
    exact = [reference.search(q, 10) for q in queries]
    found_rows, found_scores = column.search_many(queries, 10)
    hits = 0
    for rows, (expected_rows, _) in zip(found_rows, exact):
        assert len(rows) == 10 and not np.isin(rows, doomed).any()
        hits += len(np.intersect1d(rows, expected_rows))
    assert hits / (10 * len(queries)) >= 0.99
    for query, rows, scores in zip(queries, found_rows, found_scores):
        assert_same((rows, scores), reference.search(query, 10, rows))  # exact scores, in exact order

    column.write(tmp_path)
    assert {"vectors-quantizer-000000.npy", "vectors-codes0-000000.npy"} <= {p.name for p in tmp_path.iterdir()}
    opened = VectorColumn.open(tmp_path, approximate_threshold=3000, nprobe=8)
    assert opened.approximate
    reopened_rows, reopened_scores = opened.search_many(queries, 10)
    for a, b, c, d in zip(found_rows, found_scores, reopened_rows, reopened_scores):
        assert_same((c, d), (a, b))
    before = {p.name for p in tmp_path.iterdir()}
    opened.append(clustered_rows(5, dim, centers, 99))
    opened.write(tmp_path)
    assert {p.name for p in tmp_path.iterdir()} - before == {"vectors-000006.npy", "vectors-codes0-000006.npy"}


def test_restricted_search_stays_exact_above_the_threshold():
    """A restriction to fewer rows than the threshold (a routed document's chunks) is exact,
    gathered (a few rows) or scanned in place (a broad one), even with a one-list probe."""
    dim = 16
    generator = np.random.default_rng(3)
    centers = generator.standard_normal((20, dim))
    column, reference = VectorColumn(dim, approximate_threshold=1000, nprobe=1), Reference()
    matrix = clustered_rows(2500, dim, centers, 5)
    column.append(matrix)
    reference.append(matrix)
    assert column.approximate
    for size in (300, 900):  # gathered, then scanned in place (more than 1/8 of the rows)
        rows = generator.choice(2500, size=size, replace=False)
        for query in clustered_rows(10, dim, centers, 6):
            assert_same(column.search(query, 10, rows=rows), reference.search(query, 10, rows))


def test_a_broad_restriction_above_the_threshold_is_searched_approximately_among_its_rows():
    """A filter allowing more rows than the threshold: FAISS scans only those rows, and the hits
    carry exact scores, all within the restriction, with the recall of an unrestricted search."""
    dim = 32
    generator = np.random.default_rng(8)
    centers = generator.standard_normal((60, dim))
    column, reference = VectorColumn(dim, approximate_threshold=2000, nprobe=8), Reference()
    matrix = clustered_rows(6000, dim, centers, 11)
    column.append(matrix)
    reference.append(matrix)
    allowed = np.flatnonzero(generator.random(6000) < 0.5)
    assert column.approximate and len(allowed) >= column.approximate_threshold
    hits = 0
    queries = clustered_rows(50, dim, centers, 12)
    found_rows, found_scores = column.search_many(queries, 10, rows=allowed)
    for query, rows, scores in zip(queries, found_rows, found_scores):
        assert np.isin(rows, allowed).all() and len(rows) == 10
        assert_same((rows, scores), reference.search(query, 10, rows))  # exact scores of those rows
        hits += len(np.intersect1d(rows, reference.search(query, 10, allowed)[0]))
    assert hits / (10 * len(queries)) >= 0.99


def test_retraining_covers_rows_appended_after_the_training():
    """Lists trained on the first batch do not know the clusters of later ones; retraining on
    every live row (a streaming build does it at its end) brings their recall back."""
    dim = 32
    generator = np.random.default_rng(21)
    first, later = generator.standard_normal((30, dim)), generator.standard_normal((30, dim))
    column, reference = VectorColumn(dim, approximate_threshold=2000, nprobe=16), Reference()
    for centers, seed in ((first, 1), (later, 2)):
        matrix = clustered_rows(2500, dim, centers, seed)
        column.append(matrix)
        reference.append(matrix)
    assert column.approximate and not column.retrain(min_growth=2.5)  # 5000 rows, trained at 2500
    assert column.retrain()
    queries = clustered_rows(40, dim, later, 3)
    found, _ = column.search_many(queries, 10)
    hits = sum(len(np.intersect1d(rows, reference.search(q, 10)[0])) for q, rows in zip(queries, found))
    assert hits / (10 * len(queries)) >= 0.99
    assert not column.retrain()  # trained on every row already


def test_without_an_nprobe_a_search_scans_a_share_of_the_trained_lists_that_grows_with_them(tmp_path):
    """Each training makes 4 sqrt(rows) lists; a fixed nprobe scanned a smaller share of them as
    the column grew (recall@10 0.98 at 500k rows, issue 25), so by default a search scans one list
    in 16 of the trained index (at least 16), and an nprobe given still wins."""
    dim = 16
    generator = np.random.default_rng(5)
    column, reference = VectorColumn(dim, approximate_threshold=2000), Reference()
    assert column.probes is None  # nothing trained yet
    matrix = generator.standard_normal((2500, dim))
    column.append(matrix)
    reference.append(matrix)
    assert column.approximate and column.probes == 16  # 200 lists: the floor
    matrix = generator.standard_normal((7500, dim))
    column.append(matrix)  # four times the trained rows: trained again, 400 lists
    reference.append(matrix)
    assert column.probes == 25

    queries = generator.standard_normal((40, dim))
    exact = [reference.search(q, 10)[0] for q in queries]

    def recall(found: list[np.ndarray]) -> float:
        return sum(len(np.intersect1d(a, b)) for a, b in zip(found, exact)) / (10 * len(queries))

    by_rule = column.search_many(queries, 10)[0]
    column.nprobe = 25
    assert all(np.array_equal(a, b) for a, b in zip(column.search_many(queries, 10)[0], by_rule))
    column.nprobe = 1
    assert column.probes == 1 and recall(column.search_many(queries, 10)[0]) < recall(by_rule)
    column.nprobe = None

    column.write(tmp_path)
    assert VectorColumn.open(tmp_path, approximate_threshold=2000).probes == 25  # the rule on the lists read
    assert VectorColumn.open(tmp_path, approximate_threshold=2000, nprobe=3).probes == 3
    with pytest.raises(ValueError, match="must be positive"):
        VectorColumn(dim, nprobe=0)


def test_compaction_keeps_the_approximate_index_in_step():
    dim = 16
    generator = np.random.default_rng(4)
    centers = generator.standard_normal((20, dim))
    column, reference = VectorColumn(dim, approximate_threshold=1000, nprobe=20), Reference()
    for seed in range(3):
        matrix = clustered_rows(800, dim, centers, seed)
        column.append(matrix)
        reference.append(matrix)
    column.delete(np.arange(100, 900))
    reference.delete(range(100, 900))
    column.compact()
    reference.compact()
    assert column.approximate
    for query in clustered_rows(10, dim, centers, 8):
        assert_same(column.search(query, 10), reference.search(query, 10))


def test_a_query_sees_a_change_whole_or_not_at_all():
    column = VectorColumn(8)
    target = np.eye(8)[0]
    column.append(np.eye(8)[1:])
    failures: list[int] = []
    stop = threading.Event()

    def query() -> None:
        while not stop.is_set():
            rows, _ = column.search(target, 10_000)
            matching = len(rows) - 7
            if matching % 50:
                failures.append(matching)

    readers = [threading.Thread(target=query) for _ in range(2)]
    for reader in readers:
        reader.start()
    for _ in range(40):
        added = column.append(np.tile(target, (50, 1)))
        column.delete(added)
        column.append(np.tile(target, (50, 1)))
    stop.set()
    for reader in readers:
        reader.join()
    assert failures == []
    assert column.live_count == 7 + 40 * 50


def test_bad_input_is_refused_with_the_problem_and_the_fix(tmp_path):
    column = VectorColumn(4)
    with pytest.raises(ValueError, match="width 3 but this column holds width 4"):
        column.append(np.ones((2, 3)))
    with pytest.raises(ValueError, match=r"vector 1 of the batch \(it would be row 1\) is all zeros"):
        column.append(np.array([[1.0, 0, 0, 0], [0, 0, 0, 0]]))
    column.append(np.ones((2, 4)))
    with pytest.raises(ValueError, match=r"vector 0 of the batch \(it would be row 2\) holds a NaN"):
        column.append(np.array([[np.nan, 0, 0, 1.0]]))
    with pytest.raises(ValueError, match="row 5 does not exist: row ids run from 0 to 1"):
        column.delete(np.array([0, 5]))
    with pytest.raises(ValueError, match="row -1 does not exist"):
        column.search(np.ones(4), 1, rows=np.array([-1]))
    with pytest.raises(ValueError, match="queries must have width 4"):
        column.search(np.ones(5), 1)
    with pytest.raises(ValueError, match="zero or not finite"):
        column.search(np.zeros(4), 1)
    with pytest.raises(ValueError, match="k must be a positive integer"):
        column.search(np.ones(4), 0)
    with pytest.raises(ValueError, match="name 'Vectors!'"):
        VectorColumn(4, name="Vectors!")
    assert column.row_count == 2  # refused batches took no row ids
    column.write(tmp_path)
    state = state_of(tmp_path)
    (tmp_path / "vectors.state.json").write_text(json.dumps({**state, "version": 99}))
    with pytest.raises(PersistError, match="format version 99; this version reads version 1 or 2: upgrade"):
        VectorColumn.open(tmp_path)
    (tmp_path / "vectors.state.json").write_text(json.dumps(state))
    (tmp_path / "vectors-000000.npy").rename(tmp_path / "moved.npy")
    with pytest.raises(PersistError, match="vectors-000000.npy is missing"):
        VectorColumn.open(tmp_path)


def test_a_block_of_a_mapped_segment_is_read_from_its_file_and_equals_the_slice(tmp_path):
    from llama_index_ext_recursive.columnar.vectors import _block

    matrix = np.arange(40, dtype=np.float32).reshape(10, 4)
    np.save(tmp_path / "v.npy", matrix)
    mapped = np.load(tmp_path / "v.npy", mmap_mode="r")
    for start, stop in ((0, 3), (3, 10), (8, 64)):
        block = _block(mapped, start, stop)
        assert not isinstance(block, np.memmap) and block.flags.c_contiguous
        assert np.array_equal(block, matrix[start:stop])
    assert np.array_equal(_block(matrix, 2, 5), matrix[2:5])


@pytest.mark.parametrize("rows", [1, 100, 256, 257, 1200])
def test_exact_scores_of_few_or_many_rows_are_the_dimension_ordered_sum_to_the_bit(rows):
    """A search's few candidates are scored by one cumulative sum, larger blocks by a loop over
    the dimensions: both are the products summed in dimension order, bit for bit."""
    generator = np.random.default_rng(rows)
    vectors = np.array([unit(v) for v in generator.standard_normal((rows, 48))], dtype=np.float32)
    queries = np.array([unit(q) for q in generator.standard_normal((2, 48))])
    expected = np.array([[dot_in_order(row, q) for q in queries] for row in vectors]).astype(np.float32)
    assert np.array_equal(_exact_scores(vectors, queries).view(np.uint32), expected.view(np.uint32))


def document_rows(docs: int, per_doc: int, dim: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``docs`` documents of ``per_doc`` rows near their own random direction, and each
    document's first row (the ``lists`` an append takes)."""
    generator = np.random.default_rng(seed)
    topics = generator.standard_normal((docs, dim))
    topics /= np.linalg.norm(topics, axis=1, keepdims=True)
    rows = np.repeat(topics, per_doc, axis=0) + 0.3 * generator.standard_normal((docs * per_doc, dim)) / math.sqrt(dim)
    return rows, np.arange(0, docs * per_doc, per_doc)


document_operations = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 12), st.integers(1, 9), st.integers(0, 2**16)),
        st.tuples(st.just("delete"), st.integers(0, 2**16), st.floats(0, 0.8), st.just(0)),
        st.tuples(st.just("compact"), st.just(0), st.just(0), st.just(0)),
    ),
    min_size=1,
    max_size=8,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(operations=document_operations, k=st.integers(1, 20), seed=st.integers(0, 2**16), restrict=st.floats(0, 1))
def test_probing_every_document_list_equals_brute_force_through_appends_deletes_and_compaction(
    operations, k, seed, restrict
):
    """With as many probes as lists, the document-list path must be the exact search: every
    live row of a list is scored exactly, lists without a wanted row are skipped, and the lists
    survive deletes (a list of dead rows is never probed) and compaction (which drops it)."""
    dim = 6
    column = VectorColumn(dim, approximate_threshold=1, nprobe=10_000)
    reference = Reference()
    generator = np.random.default_rng(seed)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(vectors, "_MIN_LIST_ROWS", 1)  # document lists however few rows the deletes leave
        apply_document_operations(operations, column, reference)
    for query in generator.standard_normal((3, dim)):
        assert_same(column.search(query, k), reference.search(query, k))
        if column.row_count:
            rows = np.flatnonzero(generator.random(column.row_count) < restrict)
            assert_same(column.search(query, k, rows=rows), reference.search(query, k, rows))


def apply_document_operations(operations: list, column: VectorColumn, reference: Reference) -> None:
    for name, first, second, number in operations:
        if name == "append":
            matrix, lists = document_rows(first, second, column.dim, number)
            column.append(matrix, lists=lists)
            reference.append(matrix)
        elif name == "delete" and column.row_count:
            doomed = np.flatnonzero(np.random.default_rng(first).random(column.row_count) < second)
            column.delete(doomed)
            reference.delete(doomed)
        elif name == "compact":
            column.compact()
            reference.compact()
    if column.live_count:
        column.retrain(min_growth=1.0)
        assert column.approximate and column.approximate_kind == "lists"


def test_document_lists_find_the_exact_neighbours_with_few_probes_and_persist(tmp_path):
    """Rows appended with their documents: no k-means, the lists are the documents, a few
    probes find the exact top 10 (scores exact), a document added later is found, a deleted
    one never comes back, and the column reopens with the same answers."""
    dim = 32
    column, reference = VectorColumn(dim, approximate_threshold=2000, nprobe=4), Reference()
    for seed in range(3):
        matrix, lists = document_rows(100, 10, dim, seed)
        column.append(matrix, lists=lists)
        reference.append(matrix)
    assert column.approximate and column.approximate_kind == "lists" and column.list_count == 300
    later, later_lists = document_rows(2, 10, dim, 77)
    column.append(later, lists=later_lists)
    reference.append(later)
    doomed = np.arange(1000, 1010)  # a whole document
    column.delete(doomed)
    reference.delete(doomed)
    generator = np.random.default_rng(5)
    near_deleted = np.asarray(reference.vectors[1003], dtype=np.float64)
    assert not np.isin(column.search(near_deleted, 10)[0], doomed).any()
    targets = np.r_[generator.choice(np.r_[0:1000, 1010:3000], 37, replace=False), 3000, 3015]
    rows_near = np.asarray([reference.vectors[t] for t in targets], dtype=np.float64)
    queries = rows_near + 0.02 * generator.standard_normal(rows_near.shape)
    found_rows, found_scores = column.search_many(queries, 10)
    for query, rows, scores in zip(queries, found_rows, found_scores):
        assert_same((rows, scores), reference.search(query, 10))

    column.write(tmp_path)
    names = {p.name for p in tmp_path.iterdir()}
    assert {"vectors-lists-000000.npy", "vectors-centroids-000000.npy", "vectors-quantizer-000000.npy"} <= names
    assert not any(name.startswith("vectors-codes") for name in names)  # no per-row codes
    assert state_of(tmp_path)["approximate"]["kind"] == "lists"
    opened = VectorColumn.open(tmp_path, approximate_threshold=2000, nprobe=4)
    assert opened.approximate_kind == "lists" and opened.list_count == 302
    for query, rows, scores in zip(queries, *opened.search_many(queries, 10)):
        assert_same((rows, scores), reference.search(query, 10))
    mapping = opened.compact()
    assert opened.list_count == 301 and np.all(mapping[doomed] == -1)
    for query, rows in zip(queries, opened.search_many(queries, 10)[0]):
        assert np.array_equal(np.flatnonzero(np.isin(mapping, rows)), np.sort(reference.search(query, 10)[0]))


def test_a_restriction_probes_only_lists_it_allows_and_more_until_it_has_k_rows():
    """A broad filter above the threshold: lists without an allowed row are skipped by the coarse
    step, and a query whose probed lists hold too few allowed rows probes more."""
    dim = 16
    matrix, lists = document_rows(400, 8, dim, 3)
    column, reference = VectorColumn(dim, approximate_threshold=1000, nprobe=1), Reference()
    column.append(matrix, lists=lists)
    reference.append(matrix)
    assert column.approximate_kind == "lists"
    generator = np.random.default_rng(9)
    one_row_each = lists[generator.random(400) < 0.6] + 3  # one row of each of ~240 documents
    allowed = np.r_[one_row_each, np.arange(0, 800)]  # and every row of the first 100 documents
    for query in generator.standard_normal((10, dim)):
        rows, scores = column.search(query, 10, rows=allowed)
        assert len(rows) == 10 and np.isin(rows, allowed).all()
        expected = reference.search(query, 10, allowed)
        assert scores[0] <= expected[1][0] and np.array_equal(scores, reference.search(query, 10, rows)[1])


def test_rows_of_single_row_documents_get_k_means_lists_and_a_version_1_folder_still_opens(tmp_path):
    """One row per document (the summary level) gives no partition to use: k-means lists as
    before, no lists or centroids files; a folder written before lists existed reads as that."""
    dim = 16
    generator = np.random.default_rng(2)
    matrix = generator.standard_normal((2500, dim))
    column = VectorColumn(dim, approximate_threshold=2000, nprobe=8)
    column.append(matrix)
    assert column.approximate_kind == "kmeans" and column.list_count == 2500
    queries = generator.standard_normal((5, dim))
    expected = column.search_many(queries, 10)
    column.write(tmp_path)
    assert not any("-lists-" in p.name or "-centroids-" in p.name for p in tmp_path.iterdir())
    state = state_of(tmp_path)
    del state["approximate"]["kind"]
    for entry in state["segments"]:
        del entry["lists"]
    (tmp_path / "vectors.state.json").write_text(json.dumps({**state, "version": 1}))
    opened = VectorColumn.open(tmp_path, approximate_threshold=2000, nprobe=8)
    assert opened.approximate_kind == "kmeans" and opened.list_count == 2500
    for a, b in zip(zip(*opened.search_many(queries, 10)), zip(*expected)):
        assert_same(a, b)


def test_lists_that_do_not_cut_the_rows_into_runs_are_refused():
    column = VectorColumn(4)
    for bad in ([1, 2], [0, 2, 2], [0, 5], [[0]], [0.0, 1.0]):
        with pytest.raises(ValueError, match="lists must"):
            column.append(np.ones((3, 4)), lists=np.asarray(bad))
    assert column.row_count == 0


def test_without_an_nprobe_a_search_probes_32_document_lists_and_a_given_nprobe_wins():
    dim = 8
    column = VectorColumn(dim, approximate_threshold=100)
    matrix, lists = document_rows(50, 8, dim, 1)
    column.append(matrix, lists=lists)
    assert column.approximate_kind == "lists" and column.probes == 32
    column.nprobe = 2
    assert column.probes == 2


@pytest.mark.parametrize("threshold", [1, 10**9])  # document lists / one scan of the column
def test_a_kept_row_set_searches_the_rows_live_now_and_a_foreign_one_is_refused(threshold):
    """A store keeps a filter's RowSet and the forms the column made of it (its live rows, the
    lists holding one): after a delete they are made again, so a deleted row never comes back."""
    dim = 6
    column = VectorColumn(dim, approximate_threshold=threshold, nprobe=10_000)
    reference = Reference()
    matrix, lists = document_rows(40, 6, dim, 5)
    column.append(matrix, lists=lists)
    reference.append(matrix)
    if threshold == 1:
        column.retrain(min_growth=1.0)
        assert column.approximate_kind == "lists"
    allowed = RowSet(np.arange(0, 240, 2, dtype=np.int64), 240)
    query = np.random.default_rng(1).standard_normal(dim)
    before = column.search(query, 8, rows=allowed)
    assert_same(before, reference.search(query, 8, allowed.rows))
    column.delete(before[0][:3])
    reference.delete(before[0][:3])
    after = column.search(query, 8, rows=allowed)
    assert_same(after, reference.search(query, 8, allowed.rows))
    assert not set(before[0][:3].tolist()) & set(after[0].tolist())
    with pytest.raises(ValueError, match="selected among 10 rows, but the column holds 240"):
        column.search(query, 8, rows=RowSet(np.arange(3, dtype=np.int64), 10))


def test_writes_after_merges_deletes_and_retraining_leave_only_the_files_the_column_reads(tmp_path):
    """Each write retires the files its previous state listed and the new one does not (merged
    segments, older tombstones, a retrained index's codes): the folder ends up holding what a
    first write of the same column holds, and reopens with the same answers."""
    dim = 8
    column = VectorColumn(dim, approximate_threshold=300, nprobe=4)
    folder = tmp_path / "written"
    generator = np.random.default_rng(4)
    for _ in range(4):
        column.append(generator.standard_normal((150, dim)))
        column.write(folder)
    column.delete(np.arange(0, 600, 7))
    column.write(folder)
    column.delete(np.arange(1, 600, 11))
    column.write(folder)
    column.compact()
    column.retrain(min_growth=1.0)
    column.write(folder)
    fresh = tmp_path / "fresh"
    column.write(fresh)
    assert sorted(p.name for p in folder.iterdir()) == sorted(p.name for p in fresh.iterdir())
    query = generator.standard_normal(dim)
    assert_same(
        VectorColumn.open(folder, approximate_threshold=300, nprobe=4).search(query, 5), column.search(query, 5)
    )
