"""Dense vectors of one level (chunks, or documents) as rows of unit float32.

A :class:`VectorColumn` holds the embeddings of one level, addressed by row id
(``0, 1, 2, ...`` in the order they were appended, never reused). It answers
"the ``k`` live rows most similar to this query", over every row or over given
rows (the chunks of routed documents, the rows a filter allows), and it keeps
no Python object per row, so 2M rows cost their arrays and nothing else.

Why it is built the way it is:

- Each :meth:`~VectorColumn.append` is a segment: an immutable float32 array,
  written once by :mod:`.segments` and memory-mapped after that, so a reopened
  2M x 384 column (3 GB) costs RSS only for the pages a query touches, and a
  persist after a one-document change writes that document's segment, a small
  tombstone file and the state file.
- Scores are exact on every row returned: a row's score is the float32
  rounding of the float64 dot product of its stored float32 unit vector with
  the float64 unit query, summed in dimension order, whichever path computed
  it, so ties (broken by ascending row id) and results do not depend on the path.
- Below ``approximate_threshold`` live rows every search is exact. Above it a
  full float32 scan would read the whole 3 GB column per query, so a FAISS
  inverted file over 8-bit scalar-quantized codes (IVF-SQ8: a quarter of the
  float32 size, held in RAM) proposes candidates and only the candidates'
  float32 rows are read from the map for the exact rescoring. Without FAISS
  installed every search is exact (logged once).
- ``rows=`` searches are always exact: they gather the given rows from the
  map, costing what those rows cost, never a full scan.
- Queries share a reader-writer lock with appends, deletes and compactions,
  whose expensive part (normalising, encoding, training) runs before they
  take the lock alone: a query sees the column before or after a change,
  never a mix.

One writer at a time per column and per folder: two columns written into one
folder need different ``name``s (e.g. ``chunk_vectors``, ``document_vectors``).
"""

from __future__ import annotations

import logging
import math
import os
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from llama_index_ext_recursive.columnar.segments import (
    KEEP_SEGMENT_ROWS,
    open_array,
    read_state,
    segment_name,
    write_array,
    write_state,
)
from llama_index_ext_recursive.persist import PathLike, PersistError
from llama_index_ext_recursive.rwlock import ReadWriteLock

__all__ = ["FORMAT_VERSION", "VectorColumn"]

logger = logging.getLogger(__name__)

FORMAT_VERSION = 1

# rows scored per block in an exact scan: 16k x 384 float64 is 48 MB of scratch
_SCAN_BLOCK_ROWS = 16_384
# exact scores of this many rows or fewer are one cumulative sum (_exact_scores)
_FEW_ROWS = 256
# a restriction to fewer than 1/_DENSE_SHARE of the rows gathers them; more are scanned in place
_DENSE_SHARE = 8
# a compaction leaves clean segments of KEEP_SEGMENT_ROWS rows or more as they are and
# merges the others (dirty ones, runs of small ones) into segments of at most
# _MAX_SEGMENT_ROWS rows
_MAX_SEGMENT_ROWS = 262_144
# the approximate index is trained again when the live rows have grown this many
# times since it was trained, so its lists stay about sqrt(rows) long
_RETRAIN_GROWTH = 4
# k-means sees at most this many training rows per list (FAISS warns above 256)
_TRAIN_ROWS_PER_LIST = 64
# without a given nprobe, a search scans one list in _LISTS_PER_PROBE, and at least _MIN_NPROBE
_LISTS_PER_PROBE = 16
_MIN_NPROBE = 16
_NAME_PATTERN = re.compile(r"[a-z][a-z0-9_]*")

_faiss_missing_logged = False


def _faiss() -> Any:
    """The ``faiss`` module, or ``None`` (logged once) when it is not installed."""
    global _faiss_missing_logged
    try:
        import faiss
    except ImportError:
        if not _faiss_missing_logged:
            _faiss_missing_logged = True
            logger.info("faiss is not installed: vector searches are exact scans (pip install faiss-cpu)")
        return None
    return faiss


@dataclass
class _Segment:
    """One appended block of rows: ``vectors`` (float32 unit rows) from row ``start`` on.

    ``vectors`` and ``codes`` (the approximate index's codes of the same rows,
    ``None`` while there is no approximate index) are in RAM until written,
    memory-mapped after.
    """

    number: int
    start: int
    vectors: np.ndarray
    codes: np.ndarray | None

    @property
    def rows(self) -> int:
        return len(self.vectors)


@dataclass
class _Approximate:
    """A trained IVF-SQ8 index holding the live rows' codes, and how to rebuild it."""

    generation: int  # numbers the quantizer file and the codes files made with it
    trained_rows: int  # live rows when it was trained
    template: np.ndarray  # the trained, empty index as FAISS serialises it (uint8)
    index: Any  # the template with every live row's codes added, ids = row ids


def _norms(matrix: np.ndarray) -> np.ndarray:
    """Euclidean norms of float64 rows, squares summed in dimension order (as scores are):
    a cumulative sum adds them one after the other, as a loop over the dimensions would."""
    if not matrix.size:
        return np.zeros(len(matrix))
    return np.sqrt(np.cumsum(matrix * matrix, axis=1)[:, -1])


def _unit_rows(matrix: np.ndarray, dim: int, first_row: int) -> np.ndarray:
    """``matrix`` as float32 unit rows, refusing a wrong width and zero or non-finite rows.

    Args:
        matrix: ``[n, dim]`` real numbers.
        dim: the column's width.
        first_row: the row id the first row would get (named in errors).
    """
    array = np.asarray(matrix)
    if array.ndim != 2:
        raise ValueError(f"vectors must be a matrix [rows, {dim}], got an array of shape {array.shape}")
    if array.shape[1] != dim:
        raise ValueError(
            f"vectors have width {array.shape[1]} but this column holds width {dim}: "
            "embed with the model the column was built with"
        )
    if not (np.issubdtype(array.dtype, np.floating) or np.issubdtype(array.dtype, np.integer)):
        raise ValueError(f"vectors must be real numbers, got dtype {array.dtype}")
    unit = np.empty(array.shape, dtype=np.float32)
    for start in range(0, len(array), _SCAN_BLOCK_ROWS):
        block = array[start : start + _SCAN_BLOCK_ROWS].astype(np.float64)
        with np.errstate(all="ignore"):
            norms = _norms(block)
        bad = ~np.isfinite(norms) | (norms == 0)
        if bad.any():
            position = start + int(np.flatnonzero(bad)[0])
            what = "is all zeros" if norms[position - start] == 0 else "holds a NaN or infinite value"
            raise ValueError(
                f"vector {position} of the batch (it would be row {first_row + position}) {what}: "
                "a cosine similarity needs a finite, non-zero vector; drop or re-embed it"
            )
        unit[start : start + len(block)] = block / norms[:, None]
    return unit


def _unit_queries(queries: np.ndarray, dim: int) -> np.ndarray:
    """``queries`` ``[m, dim]`` as float64 unit rows (zero or non-finite ones refused)."""
    array = np.asarray(queries, dtype=np.float64)
    if array.ndim != 2 or array.shape[1] != dim:
        raise ValueError(
            f"queries must have width {dim} (the column's), got an array of shape {array.shape}: "
            "embed the query with the model the column was built with"
        )
    with np.errstate(all="ignore"):
        norms = _norms(array)
    bad = ~np.isfinite(norms) | (norms == 0)
    if bad.any():
        raise ValueError(f"query {int(np.flatnonzero(bad)[0])} is zero or not finite: it has no cosine similarity")
    return array / norms[:, None]


def _exact_scores(vectors: np.ndarray, unit_queries: np.ndarray) -> np.ndarray:
    """Scores ``[rows, m]``: each row's dot product with each query, defined to the last bit.

    The float64 products of the float32 row and the float64 unit query are
    summed in dimension order (no BLAS, whose summation order depends on the
    shape of the call), then rounded to float32. So a row gets the same score
    from every path (full scan, ``rows=``, rescoring, one query or many) and
    from an independent reference, and ties are real ties.
    """
    out = np.empty((len(vectors), unit_queries.shape[0]), dtype=np.float32)
    if len(vectors) <= _FEW_ROWS:
        # a cumulative sum adds the products one after the other, as the loop below does
        # (the same bits): for the few candidates of a search, one NumPy call instead of one
        # per dimension (0.2 instead of 0.9 ms for 100 rows; slower from about a thousand)
        products = np.empty((len(vectors), unit_queries.shape[1]))
        block = np.asarray(vectors, dtype=np.float64)
        for q, query in enumerate(unit_queries):
            np.multiply(block, query, out=products)
            out[:, q] = np.cumsum(products, axis=1, out=products)[:, -1]
        return out
    for start in range(0, len(vectors), _SCAN_BLOCK_ROWS):
        by_dimension = np.asarray(vectors[start : start + _SCAN_BLOCK_ROWS], dtype=np.float64).T.copy()
        total = np.zeros((by_dimension.shape[1], unit_queries.shape[0]))
        for column, weights in zip(by_dimension, unit_queries.T):
            total += column[:, None] * weights[None, :]
        out[start : start + by_dimension.shape[1]] = total
    return out


def _rows_of(vectors: np.ndarray, local: np.ndarray) -> np.ndarray:
    """``vectors[local]``; rows of a memory-mapped segment are read with ``pread``.

    A row read through the map stays in the process's resident memory, with
    the pages the kernel maps around it, so the candidates of many queries
    grew a serving process's RSS towards the whole vector file (2.9 GB of
    file pages at 2M rows, benchmarks/columnar_components.py). Read into a
    buffer, they pass through the page cache only.
    """
    if not isinstance(vectors, np.memmap) or vectors.filename is None:
        return vectors[local]
    width = vectors.shape[1] * vectors.itemsize
    out = np.empty((len(local), vectors.shape[1]), dtype=vectors.dtype)
    buffer = out.data.cast("B")
    wanted = local.tolist()
    # runs of consecutive rows (a document's chunks are appended together) are one read each
    breaks = [0, *(i for i in range(1, len(wanted)) if wanted[i] != wanted[i - 1] + 1), len(wanted)]
    try:
        with open(vectors.filename, "rb", buffering=0) as handle:
            for first, end in zip(breaks, breaks[1:]):
                size = (end - first) * width
                if (
                    os.preadv(
                        handle.fileno(), [buffer[first * width : end * width]], vectors.offset + wanted[first] * width
                    )
                    != size
                ):
                    raise OSError(f"{vectors.filename} is shorter than its map")
    except OSError:  # the file was retired (a compaction wrote new segments): the map still holds it
        return vectors[local]
    return out


def _block(vectors: np.ndarray, start: int, stop: int) -> np.ndarray:
    """``vectors[start:stop]`` as a contiguous array; of a memory-mapped segment, read from its
    file into a buffer, as :func:`_rows_of` reads rows: encoding every row at the end of a build
    through the map left the whole vector file in the build's resident memory."""
    stop = min(stop, len(vectors))
    if not isinstance(vectors, np.memmap) or vectors.filename is None:
        return np.ascontiguousarray(vectors[start:stop])
    width = vectors.shape[1]
    try:
        block = np.fromfile(
            vectors.filename,
            dtype=vectors.dtype,
            count=(stop - start) * width,
            offset=vectors.offset + start * width * vectors.itemsize,
        )
    except OSError:  # the file was retired (a compaction wrote new segments): the map still holds it
        return np.ascontiguousarray(vectors[start:stop])
    if len(block) != (stop - start) * width:
        raise OSError(f"{vectors.filename} is shorter than its map")
    return block.reshape(stop - start, width)


def _screen_bound(dim: int) -> float:
    """A bound on ``|float32 product - exact score|`` for a unit float32 row and a unit query.

    The float32 dot product of ``dim`` terms errs by at most ``dim * u`` times
    the product of the norms (``u = 2**-24``, any summation order), rounding
    the query to float32 adds at most ``sqrt(dim) * u``, and the exact score is
    itself rounded to float32 (``u``); twice their sum leaves room for rows
    whose float32 norm is a few ``u`` above 1.
    """
    unit_roundoff = float(np.finfo(np.float32).eps) / 2
    return 2.0 * (dim + math.sqrt(dim) + 1) * unit_roundoff


def _top(rows: np.ndarray, scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best ``(rows, scores)``: highest score first, ties by ascending row id."""
    if len(rows) > k:
        threshold = np.partition(scores, len(scores) - k)[len(scores) - k]
        keep = scores >= threshold  # every row tied with the k-th stays for the tie-break
        rows, scores = rows[keep], scores[keep]
    order = np.lexsort((rows, -scores))[:k]
    return rows[order], scores[order]


def _nlist(live_rows: int) -> int:
    """Inverted lists for ``live_rows`` rows: 4 sqrt(rows) (FAISS's advice is 4 to 16).

    With sqrt(rows), a list of a corpus whose documents point in unrelated
    directions held about 20 of them, and its centroid, their mean, told a
    query little: recall@10 at 128 probes was 0.987 at 200k rows; with four
    times as many lists it is 1.0 at 16 probes (benchmarks, issue 25). At
    500k rows, scanning the same share of the codes, 2 sqrt(rows) lists gave
    recall@10 0.928 where 4 sqrt(rows) gave 0.995; more lists would cost a
    training whose k-means work grows as the square of the lists
    (benchmarks/results/vector_recall.md).
    """
    return max(16, int(4 * math.sqrt(live_rows)))


def _nprobe(nlist: int) -> int:
    """Lists an approximate search scans when the caller set no ``nprobe``: one in
    ``_LISTS_PER_PROBE`` of the ``nlist`` trained (at least ``_MIN_NPROBE``, at most all).

    The lists grow as 4 sqrt(rows) (:func:`_nlist`), so a fixed nprobe scans a
    shrinking share of them as a column grows, and on the issue-25 corpus
    (every document a random direction, queries far from their chunk) recall
    fell with it: nprobe 64 gave recall@10 1.0 at 200k rows, 0.986 at 500k
    (2828 lists) and 0.862 at 2M (5656 lists). One list in 16 (177 and 354)
    gives 0.960 at 2M (p95 15 ms a search, against 4 ms at 64), and at 500k
    lies between the 0.995 of 128 probes and the 0.996 of 192. It does not
    reach 0.99 at 2M, where a list mixes about 18 documents' directions: 0.987
    at 1024 probes (p95 47 ms), 0.995 at 1536 (p95 71 ms), over the query's
    whole budget (benchmarks/results/vector_recall.md). The candidates
    rescored are not what is missing: twice as many changed no recall figure.
    """
    return min(nlist, max(_MIN_NPROBE, math.ceil(nlist / _LISTS_PER_PROBE)))


class VectorColumn:
    """Unit float32 vectors of one level, addressed by row id, searched by cosine similarity.

    Args:
        dim: the vectors' width (384 for MiniLM-sized embeddings).
        name: the component name: the state file is ``<name>.state.json`` and
            the segment files start with ``<name>-``; two columns written to
            one folder need different names.
        approximate_threshold: live rows from which an unrestricted search uses
            the approximate candidate step (FAISS IVF-SQ8) before exact
            rescoring; below it every search is an exact scan.
        nprobe: inverted lists (of about 4 sqrt(rows)) the approximate step
            scans per query (more: higher recall, slower). ``None``: one in 16
            of the lists trained (:func:`_nprobe`, :attr:`probes`): recall@10
            against exact search on ``benchmarks/scale_columnar.py``'s corpus
            0.995 or more at 500k rows and 0.960 at 2M, where a fixed 64 gave
            0.986 and 0.862 (benchmarks/results/vector_recall.md, issue 25).
        candidates: how many candidates per requested result the approximate
            step proposes for exact rescoring (at least 100 in all).
    """

    def __init__(
        self,
        dim: int,
        *,
        name: str = "vectors",
        approximate_threshold: int = 50_000,
        nprobe: int | None = None,
        candidates: int = 10,
    ) -> None:
        if not isinstance(dim, int) or isinstance(dim, bool) or dim < 1:
            raise ValueError(f"dim must be a positive integer, got {dim!r}")
        if not _NAME_PATTERN.fullmatch(name):
            raise ValueError(f"name {name!r} must be lower-case letters, digits and '_', starting with a letter")
        if approximate_threshold < 1 or (nprobe is not None and nprobe < 1) or candidates < 1:
            raise ValueError("approximate_threshold, nprobe and candidates must be positive")
        self.dim = dim
        self.name = name
        self.approximate_threshold = approximate_threshold
        self.nprobe = nprobe
        self.candidates = candidates
        self._segments: list[_Segment] = []
        self._alive = np.zeros(0, dtype=bool)
        self._live = 0
        self._next_segment = 0
        self._tombstones = 0  # numbers the tombstone files; bumped by every change of the dead rows
        self._approximate: _Approximate | None = None
        # appends train the approximate step when due; a build that trains once at its end
        # (retrain) turns this off: at 2M rows the trainings on the way cost 10 of 21 minutes
        self.train_on_append = True
        self._lock = ReadWriteLock()  # queries read; a change swaps its prepared state in alone
        self._writer = threading.Lock()  # one change (append, delete, compact, write) at a time

    # ------------------------------------------------------------ properties
    @property
    def row_count(self) -> int:
        """Row ids handed out so far (live and tombstoned): the next append starts here."""
        return len(self._alive)

    @property
    def live_count(self) -> int:
        """Rows not deleted."""
        return self._live

    @property
    def approximate(self) -> bool:
        """Whether an unrestricted search now uses the approximate candidate step."""
        return self._approximate is not None and self._live >= self.approximate_threshold

    @property
    def probes(self) -> int | None:
        """Inverted lists the approximate step scans per query: ``nprobe``, or when it is
        ``None`` the rule's share of the trained index's lists; ``None`` while there is no index."""
        approximate = self._approximate
        if approximate is None:
            return None
        return self.nprobe if self.nprobe is not None else _nprobe(int(approximate.index.nlist))

    def alive(self, rows: np.ndarray) -> np.ndarray:
        """Which of ``rows`` are live (``bool`` per row; out-of-range ids are an error)."""
        with self._lock.reading():
            return self._alive[self._checked_rows(rows)]

    def vectors(self, rows: np.ndarray) -> np.ndarray:
        """The stored (unit float32) vectors of ``rows``, in their order (deleted rows too:
        the row still holds its vector until :meth:`compact`)."""
        with self._lock.reading():
            wanted = self._checked_rows(rows)
            order = np.argsort(wanted, kind="stable")
            out = np.empty((len(wanted), self.dim), dtype=np.float32)
            out[order] = self._gather(wanted[order])
        return out

    # --------------------------------------------------------------- changes
    def append(self, matrix: np.ndarray) -> np.ndarray:
        """Append ``matrix`` ``[n, dim]`` as one segment; returns the new row ids (consecutive, int64).

        Rows are stored unit-normalised in float32.

        Args:
            matrix: real numbers, one vector per row.

        Raises:
            ValueError: a wrong width (naming both), or a zero or non-finite
                vector (naming its position and the row id it would get).
        """
        with self._writer:
            start = self.row_count
            unit = _unit_rows(matrix, self.dim, start)
            new_rows = np.arange(start, start + len(unit), dtype=np.int64)
            if not len(unit):
                return new_rows
            approximate = self._approximate
            codes = None if approximate is None else approximate.index.sa_encode(unit)
            segment = _Segment(self._next_segment, start, unit, codes)
            with self._lock.writing():
                self._segments.append(segment)
                self._alive = np.concatenate([self._alive, np.ones(len(unit), dtype=bool)])
                self._live += len(unit)
                self._next_segment += 1
                if approximate is not None and codes is not None:
                    approximate.index.add_sa_codes(codes, new_rows)
            if self.train_on_append and self._should_train():
                self._train()
            return new_rows

    def delete(self, rows: np.ndarray) -> int:
        """Tombstone ``rows``; returns how many were live (deleting a dead row again does nothing).

        Args:
            rows: row ids.

        Raises:
            ValueError: a row id that was never handed out (naming it).
        """
        with self._writer:
            checked = np.unique(self._checked_rows(rows))
            gone = checked[self._alive[checked]]
            if not len(gone):
                return 0
            alive = self._alive.copy()
            alive[gone] = False
            with self._lock.writing():
                self._alive = alive
                self._live -= len(gone)
                self._tombstones += 1
                if self._approximate is not None:
                    self._approximate.index.remove_ids(gone)
            return len(gone)

    def compact(self) -> np.ndarray:
        """Drop the tombstoned rows, renumbering the live ones in order.

        Large clean segments stay as they are; dirty and small ones are merged
        into new segments (new file names: the old files stay valid for
        whoever still reads them).

        Returns:
            ``int64`` array over the old row ids: the new row id, ``-1`` for a dropped row.
        """
        with self._writer:
            alive = self._alive
            mapping = np.full(len(alive), -1, dtype=np.int64)
            mapping[alive] = np.arange(self._live, dtype=np.int64)
            segments: list[_Segment] = []
            run: list[_Segment] = []
            next_segment = self._next_segment

            def merge_run() -> None:
                nonlocal next_segment
                kept = [(s, alive[s.start : s.start + s.rows]) for s in run]
                total = sum(int(mask.sum()) for _, mask in kept)
                vectors = np.concatenate([s.vectors[mask] for s, mask in kept]) if total else None
                codes = None
                if total and all(s.codes is not None for s, _ in kept):
                    codes = np.concatenate([np.asarray(s.codes)[mask] for s, mask in kept])
                for offset in range(0, total, _MAX_SEGMENT_ROWS):
                    assert vectors is not None
                    start = sum(s.rows for s in segments)
                    piece = slice(offset, offset + _MAX_SEGMENT_ROWS)
                    part_codes = None if codes is None else codes[piece]
                    segments.append(_Segment(next_segment, start, vectors[piece], part_codes))
                    next_segment += 1
                run.clear()

            for segment in self._segments:
                clean = bool(alive[segment.start : segment.start + segment.rows].all())
                if clean and segment.rows >= KEEP_SEGMENT_ROWS:
                    merge_run()
                    start = sum(s.rows for s in segments)
                    segments.append(_Segment(segment.number, start, segment.vectors, segment.codes))
                else:
                    run.append(segment)
            merge_run()
            approximate = self._approximate
            rebuilt = None
            if approximate is not None:
                rebuilt = _Approximate(
                    approximate.generation,
                    approximate.trained_rows,
                    approximate.template,
                    self._index_from_codes(approximate.template, segments, None),
                )
            with self._lock.writing():
                self._segments = segments
                self._alive = np.ones(self._live, dtype=bool)
                self._next_segment = next_segment
                self._tombstones += 1
                self._approximate = rebuilt
            return mapping

    def retrain(self, min_growth: float = 1.25) -> bool:
        """Train the approximate step again, on all live rows, if they grew by ``min_growth``
        times since it was trained.

        Appends retrain it only when the rows have grown fourfold, so a
        column filled in batches keeps lists trained on its first rows; where
        later rows point elsewhere (the documents of a stream met after the
        training), their lists are arbitrary: recall@10 was 0.71 at 500k rows
        trained on the first 200k (benchmarks/scale_columnar.py, issue 25). A
        build calls this once at its end.

        A column whose appends did not train (:attr:`train_on_append` off)
        is trained here once it holds ``approximate_threshold`` rows.

        Returns:
            Whether it trained.
        """
        with self._writer:
            approximate = self._approximate
            if approximate is None:  # never trained (appends deferred it): when it is due
                if not self._should_train():
                    return False
            elif self._live < min_growth * approximate.trained_rows:
                return False
            self._train()
            return True

    # --------------------------------------------------------------- queries
    def search(self, query: np.ndarray, k: int, rows: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The top-``k`` live rows by cosine similarity to ``query``.

        Args:
            query: ``[dim]`` real numbers (normalised here).
            k: results wanted; fewer come back when fewer rows are live.
            rows: restrict the search to these row ids (dead ones are skipped).
                Fewer than ``approximate_threshold`` rows are searched exactly
                (gathered, or scanned in place when they are more than an eighth
                of the column); more are searched as the whole column is, the
                approximate step skipping the other rows.

        Returns:
            ``(rows int64, scores float32)``, best first, ties by ascending row id.
        """
        found_rows, found_scores = self.search_many(np.asarray(query)[None, :], k, rows)
        return found_rows[0], found_scores[0]

    def search_many(
        self, queries: np.ndarray, k: int, rows: np.ndarray | None = None
    ) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """:meth:`search` for each row of ``queries`` ``[m, dim]`` (one scan of the rows for all).

        Args:
            queries: ``[m, dim]`` real numbers.
            k: results wanted per query.
            rows: as in :meth:`search`, the same for every query.

        Returns:
            per query, ``(rows, scores)`` as :meth:`search` returns them.
        """
        if not isinstance(k, (int, np.integer)) or isinstance(k, bool) or k < 1:
            raise ValueError(f"k must be a positive integer, got {k!r}")
        k = int(k)
        unit = _unit_queries(queries, self.dim)
        with self._lock.reading():
            allowed = None if rows is None else self._checked_rows(rows)
            # a restriction to many rows (a broad filter) is searched like the whole column:
            # approximately above the threshold, else by one scan that skips the other rows
            if self.approximate and (allowed is None or len(allowed) >= self.approximate_threshold):
                found = self._search_approximate(unit, k, allowed)
                if found is not None:
                    return found
            if allowed is not None and len(allowed) * _DENSE_SHARE < len(self._alive):
                return self._search_rows(unit, k, allowed)
            return self._search_all(unit, k, allowed)

    def _checked_rows(self, rows: np.ndarray) -> np.ndarray:
        array = np.asarray(rows)
        if array.size == 0:
            return np.zeros(0, dtype=np.int64)
        if array.ndim != 1 or not np.issubdtype(array.dtype, np.integer):
            raise ValueError(f"rows must be a 1-d array of integer row ids, got shape {array.shape} {array.dtype}")
        array = array.astype(np.int64, copy=False)
        wrong = (array < 0) | (array >= len(self._alive))
        if wrong.any():
            raise ValueError(
                f"row {int(array[np.flatnonzero(wrong)[0]])} does not exist: row ids run from 0 to "
                f"{len(self._alive) - 1}; after compact() use the ids it returned"
            )
        return array

    def _gather(self, rows: np.ndarray) -> np.ndarray:
        """The float32 vectors of ``rows`` (sorted ascending), read per segment from the map."""
        out = np.empty((len(rows), self.dim), dtype=np.float32)
        if not len(rows):
            return out
        starts = np.fromiter((s.start for s in self._segments), dtype=np.int64, count=len(self._segments))
        owner = np.searchsorted(starts, rows, side="right") - 1
        bounds = np.flatnonzero(np.diff(owner)) + 1
        for begin, end in zip(np.r_[0, bounds], np.r_[bounds, len(rows)]):
            segment = self._segments[int(owner[begin])]
            out[begin:end] = _rows_of(segment.vectors, rows[begin:end] - segment.start)
        return out

    def _search_rows(self, unit: np.ndarray, k: int, rows: np.ndarray) -> tuple[list[np.ndarray], list[np.ndarray]]:
        rows = np.unique(rows)
        rows = rows[self._alive[rows]]

        def blocks() -> Iterator[tuple[np.ndarray, np.ndarray]]:
            for start in range(0, len(rows), _SCAN_BLOCK_ROWS):
                part = rows[start : start + _SCAN_BLOCK_ROWS]
                yield part, self._gather(part)

        return self._screened(unit, k, blocks())

    def _search_all(
        self, unit: np.ndarray, k: int, allowed: np.ndarray | None = None
    ) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Every live row (of ``allowed`` only, when given) scanned in place, segment by segment."""
        wanted = self._alive
        if allowed is not None:
            wanted = np.zeros_like(self._alive)
            wanted[allowed] = True
            wanted &= self._alive

        def blocks() -> Iterator[tuple[np.ndarray, np.ndarray]]:
            for segment in self._segments:
                for start in range(0, segment.rows, _SCAN_BLOCK_ROWS):
                    stop = min(start + _SCAN_BLOCK_ROWS, segment.rows)
                    alive = wanted[segment.start + start : segment.start + stop]
                    local = np.flatnonzero(alive)
                    if not len(local):
                        continue
                    vectors = segment.vectors[start:stop]
                    if len(local) < len(alive):
                        vectors = vectors[local]
                    yield local.astype(np.int64) + segment.start + start, vectors

        return self._screened(unit, k, blocks())

    def _screened(
        self, unit: np.ndarray, k: int, blocks: Iterator[tuple[np.ndarray, np.ndarray]]
    ) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """The ``k`` best of the blocks' ``(row ids, float32 vectors)`` per query, by exact score.

        A float32 matrix product (BLAS) screens each block: a row is kept
        when its product is within twice :func:`_screen_bound` of the block's
        ``k``-th best product, which every row of the true top ``k`` is (its
        exact score is at least the block's exact ``k``-th, and each product
        is within the bound of its exact score). Only the kept rows are scored
        exactly (:func:`_exact_scores`), so the result is the exact one, ties
        included, at the cost of one BLAS pass instead of a per-dimension loop.
        """
        margin = 2 * _screen_bound(self.dim)
        queries = unit.astype(np.float32)
        kept: list[list[np.ndarray]] = [[] for _ in range(len(unit))]
        for rows, vectors in blocks:
            products = np.asarray(vectors, dtype=np.float32) @ queries.T
            for q in range(len(unit)):
                column = products[:, q]
                if len(column) > k:
                    kth = np.partition(column, len(column) - k)[len(column) - k]
                    kept[q].append(rows[column >= kth - margin])
                else:
                    kept[q].append(rows)
        found_rows, found_scores = [], []
        for q in range(len(unit)):
            rows = np.unique(np.concatenate(kept[q])) if kept[q] else np.zeros(0, dtype=np.int64)
            scores = _exact_scores(self._gather(rows), unit[q : q + 1])[:, 0]
            top_rows, top_scores = _top(rows, scores, k)
            found_rows.append(top_rows)
            found_scores.append(top_scores)
        return found_rows, found_scores

    def _search_approximate(
        self, unit: np.ndarray, k: int, allowed: np.ndarray | None = None
    ) -> tuple[list[np.ndarray], list[np.ndarray]] | None:
        """Candidates from the IVF-SQ8 index (among ``allowed`` rows only, when given: FAISS
        skips the others while it scans), rescored exactly; ``None`` if a query got too few."""
        faiss = _faiss()
        assert self._approximate is not None and faiss is not None
        available = self._live if allowed is None else int(self._alive[allowed].sum())
        wanted = min(available, max(100, k * self.candidates))
        if wanted == 0:
            return [np.zeros(0, dtype=np.int64)] * len(unit), [np.zeros(0, dtype=np.float32)] * len(unit)
        selector = None
        if allowed is not None:
            bits = np.zeros(len(self._alive), dtype=bool)
            bits[allowed] = True
            packed = np.packbits(bits, bitorder="little")
            selector = faiss.IDSelectorBitmap(len(bits), faiss.swig_ptr(packed))
        params = faiss.SearchParametersIVF(nprobe=self.probes, sel=selector)
        _, ids = self._approximate.index.search(unit.astype(np.float32), wanted, params=params)
        found_rows, found_scores = [], []
        for q in range(len(unit)):
            candidates = np.unique(ids[q][ids[q] >= 0])
            if len(candidates) < min(k, available):
                return None
            scores = _exact_scores(self._gather(candidates), unit[q : q + 1])[:, 0]
            rows, top_scores = _top(candidates, scores, k)
            found_rows.append(rows)
            found_scores.append(top_scores)
        return found_rows, found_scores

    # ----------------------------------------------------- approximate index
    def _should_train(self) -> bool:
        if self._live < self.approximate_threshold or _faiss() is None:
            return False
        return self._approximate is None or self._live >= _RETRAIN_GROWTH * self._approximate.trained_rows

    def _train(self) -> None:
        """Train an IVF-SQ8 index on a sample of the live rows and encode every segment with it.

        Runs with the writer lock only: queries go on with the old index until
        the new one is swapped in.
        """
        faiss = _faiss()
        live = self._live
        nlist = _nlist(live)
        sample_size = min(live, nlist * _TRAIN_ROWS_PER_LIST)
        generator = np.random.default_rng(live)
        sample_rows = np.sort(generator.choice(np.flatnonzero(self._alive), size=sample_size, replace=False))
        logger.info(
            "training the approximate index of %s: %d lists on %d of %d rows", self.name, nlist, sample_size, live
        )
        quantizer = faiss.IndexFlatIP(self.dim)
        index = faiss.IndexIVFScalarQuantizer(
            quantizer, self.dim, nlist, faiss.ScalarQuantizer.QT_8bit, faiss.METRIC_INNER_PRODUCT, False
        )
        index.cp.spherical = True
        index.train(self._gather(sample_rows))
        template = faiss.serialize_index(index)
        segments = [_Segment(s.number, s.start, s.vectors, self._encode(index, s.vectors)) for s in self._segments]
        generation = 0 if self._approximate is None else self._approximate.generation + 1
        approximate = _Approximate(generation, live, template, self._index_from_codes(template, segments, self._alive))
        with self._lock.writing():
            self._segments = segments
            self._approximate = approximate

    @staticmethod
    def _encode(index: Any, vectors: np.ndarray) -> np.ndarray:
        """The index's codes of ``vectors``, encoded block by block, each block read into a
        buffer (:func:`_block`): a mapped segment is neither read whole nor left resident."""
        parts = [
            index.sa_encode(_block(vectors, start, start + _SCAN_BLOCK_ROWS))
            for start in range(0, len(vectors), _SCAN_BLOCK_ROWS)
        ]
        return np.concatenate(parts)

    @staticmethod
    def _index_from_codes(template: np.ndarray, segments: list[_Segment], alive: np.ndarray | None) -> Any:
        """The trained ``template`` with the codes of every live row of ``segments`` added.

        Args:
            template: a serialised trained, empty index.
            segments: segments whose ``codes`` are set.
            alive: the live mask over all rows; ``None`` when every row is live.
        """
        faiss = _faiss()
        index = faiss.deserialize_index(template)
        for segment in segments:
            assert segment.codes is not None
            ids = np.arange(segment.start, segment.start + segment.rows, dtype=np.int64)
            for begin in range(0, segment.rows, _MAX_SEGMENT_ROWS):
                piece = slice(begin, begin + _MAX_SEGMENT_ROWS)
                codes, piece_ids = np.asarray(segment.codes[piece]), ids[piece]
                if alive is not None:
                    keep = alive[piece_ids]
                    codes, piece_ids = codes[keep], piece_ids[keep]
                index.add_sa_codes(np.ascontiguousarray(codes), piece_ids)
        return index

    # ----------------------------------------------------------- persistence
    def _codes_name(self, generation: int, number: int) -> str:
        return segment_name(f"{self.name}-codes{generation}", number)

    def write(self, folder: PathLike) -> None:
        """Persist into ``folder``: the segment files it lacks, the tombstones, the state file.

        Segment files are immutable, so a write after one more append writes
        that segment (and its codes), and the state file. Afterwards the
        column reads its segments memory-mapped from ``folder``.

        Args:
            folder: a folder (made if missing) holding no other column of this ``name``.
        """
        target = Path(folder)
        target.mkdir(parents=True, exist_ok=True)
        with self._writer:
            approximate = self._approximate
            entries: list[dict[str, Any]] = []
            for segment in self._segments:
                vectors_name = segment_name(self.name, segment.number)
                if not (target / f"{vectors_name}.npy").exists():
                    write_array(target, vectors_name, segment.vectors)
                entry: dict[str, Any] = {"number": segment.number, "rows": segment.rows}
                if approximate is not None and segment.codes is not None:
                    codes_name = self._codes_name(approximate.generation, segment.number)
                    if not (target / f"{codes_name}.npy").exists():
                        write_array(target, codes_name, segment.codes)
                entries.append(entry)
            quantizer_name = None
            if approximate is not None:
                quantizer_name = segment_name(f"{self.name}-quantizer", approximate.generation)
                if not (target / f"{quantizer_name}.npy").exists():
                    write_array(target, quantizer_name, approximate.template)
            tombstones_name = None
            if self._live < self.row_count:
                tombstones_name = segment_name(f"{self.name}-tombstones", self._tombstones)
                if not (target / f"{tombstones_name}.npy").exists():
                    write_array(target, tombstones_name, np.flatnonzero(~self._alive).astype(np.int64))
            write_state(
                target,
                self.name,
                FORMAT_VERSION,
                {
                    "dim": self.dim,
                    "rows": self.row_count,
                    "segments": entries,
                    "next_segment": self._next_segment,
                    "tombstones": tombstones_name,
                    "tombstone_number": self._tombstones,
                    "approximate": None
                    if approximate is None
                    else {
                        "generation": approximate.generation,
                        "trained_rows": approximate.trained_rows,
                        "quantizer": quantizer_name,
                    },
                },
            )
            mapped = [self._mapped_segment(target, segment, approximate) for segment in self._segments]
            with self._lock.writing():
                self._segments = mapped
        logger.debug("wrote %s (%d segments, %d live rows) to %s", self.name, len(mapped), self._live, target)

    def _mapped_segment(self, folder: Path, segment: _Segment, approximate: _Approximate | None) -> _Segment:
        vectors = open_array(folder, segment_name(self.name, segment.number))
        codes = None
        if approximate is not None and segment.codes is not None:
            codes = open_array(folder, self._codes_name(approximate.generation, segment.number))
        return _Segment(segment.number, segment.start, vectors, codes)

    @classmethod
    def open(
        cls,
        folder: PathLike,
        *,
        name: str = "vectors",
        approximate_threshold: int = 50_000,
        nprobe: int | None = None,
        candidates: int = 10,
    ) -> VectorColumn:
        """Open a column written by :meth:`write`, its segments memory-mapped (nothing copied into RAM).

        The approximate index (its codes, a quarter of the float32 size) is
        rebuilt in RAM from the codes files; without FAISS searches are exact.

        Args:
            folder: the folder given to :meth:`write`.
            name, approximate_threshold, nprobe, candidates: as for the constructor.

        Raises:
            PersistError: the state file is missing, damaged or of another
                format version, or a segment file is missing or of the wrong shape.
        """
        state = read_state(folder, name, FORMAT_VERSION)
        column = cls(
            int(state["dim"]),
            name=name,
            approximate_threshold=approximate_threshold,
            nprobe=nprobe,
            candidates=candidates,
        )
        target = Path(folder)
        approximate_state = state["approximate"]
        faiss = _faiss() if approximate_state is not None else None
        generation = None if faiss is None else int(approximate_state["generation"])
        start = 0
        for entry in state["segments"]:
            number, rows = int(entry["number"]), int(entry["rows"])
            vectors = open_array(target, segment_name(name, number))
            if vectors.shape != (rows, column.dim) or vectors.dtype != np.float32:
                raise PersistError(
                    f"{target / segment_name(name, number)}.npy holds {vectors.dtype} {vectors.shape}, "
                    f"the state file says float32 ({rows}, {column.dim}): the folder is damaged; rebuild the index"
                )
            codes = None if generation is None else open_array(target, column._codes_name(generation, number))
            column._segments.append(_Segment(number, start, vectors, codes))
            start += rows
        if start != int(state["rows"]):
            raise PersistError(f"{target}: the segments hold {start} rows, the state file says {state['rows']}")
        column._alive = np.ones(start, dtype=bool)
        if state["tombstones"] is not None:
            column._alive[open_array(target, state["tombstones"], mmap=False)] = False
        column._live = int(column._alive.sum())
        column._next_segment = int(state["next_segment"])
        column._tombstones = int(state["tombstone_number"])
        if generation is not None:
            template = np.array(open_array(target, approximate_state["quantizer"], mmap=False))
            index = cls._index_from_codes(template, column._segments, column._alive)
            column._approximate = _Approximate(generation, int(approximate_state["trained_rows"]), template, index)
            # maps opened afresh: the pages read into the index are no longer counted as this process's
            column._segments = [column._mapped_segment(target, s, column._approximate) for s in column._segments]
        return column
