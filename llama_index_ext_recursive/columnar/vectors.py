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
  full float32 scan would read the whole 3 GB column per query, so an
  approximate step proposes candidates and only the candidates' float32 rows
  are read from the map for the exact rescoring. Its partition is the
  documents where rows come in documents: an append names the rows of each
  list (a document's chunks, appended together, so a list is a run of
  consecutive rows), a list's centroid is the unit mean of its rows, a flat
  index over the centroids' 8-bit codes (in RAM: 38 MB for 100k documents)
  picks the lists to probe, and every live row of a probed list is scored
  exactly. Nothing is trained on the rows, nothing is retrained as
  documents come and go, and the probed rows are read as one run per list.
  Where lists are single rows (one row per document: the summary level), a
  FAISS inverted file over k-means lists of 8-bit codes (IVF-SQ8, a quarter
  of the float32 size, in RAM) proposes the candidates instead. Without FAISS
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
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from llama_index_ext_recursive.columnar.rowsets import RowSet, checked_ids
from llama_index_ext_recursive.columnar.segments import (
    KEEP_SEGMENT_ROWS,
    open_array,
    previous_state,
    read_state,
    retire,
    segment_name,
    write_array,
    write_state,
)
from llama_index_ext_recursive.persist import PathLike, PersistError
from llama_index_ext_recursive.rwlock import ReadWriteLock

__all__ = ["FORMAT_VERSION", "VectorColumn"]

logger = logging.getLogger(__name__)

# 2: segments name their lists (files <name>-lists*, <name>-centroids*) and the state the
# approximate step's kind; a version-1 folder reads as one list per row (k-means lists)
FORMAT_VERSION = 2
_READABLE_VERSIONS = (1, 2)

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
# the rows' own lists (documents) partition the approximate step when the live lists hold this
# many live rows on average; fewer (one row per document) and k-means lists do
_MIN_LIST_ROWS = 4
# without a given nprobe, a search of document lists probes this many
_LIST_PROBES = 32
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


@contextmanager
def _one_thread(faiss: Any) -> Iterator[None]:
    """Within this block, FAISS calls of this thread use one OpenMP thread.

    A query is one vector: FAISS's flat scans still open an OpenMP team per
    call, and with the other threads of a retriever running, its spinning
    threads took the 200k-row coarse scan from 0.6 to 9 ms (recursive p95 36
    against 15 ms, issue 25). The setting is the calling thread's own
    (OpenMP keeps it per thread), so it is put back and touches no other thread.
    """
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        yield
    finally:
        faiss.omp_set_num_threads(before)


@dataclass
class _Segment:
    """One appended block of rows: ``vectors`` (float32 unit rows) from row ``start`` on.

    ``vectors`` and ``codes`` (the k-means approximate index's codes of the
    same rows, ``None`` without one) are in RAM until written, memory-mapped
    after. The rows are cut into lists (the rows of one document):
    ``list_starts`` holds each list's first row, counted from ``start``, and
    ``centroids`` each list's unit mean row (``None`` when every list is one
    row: its centroid is the row).
    """

    number: int
    start: int
    vectors: np.ndarray
    codes: np.ndarray | None
    list_starts: np.ndarray
    centroids: np.ndarray | None

    @property
    def rows(self) -> int:
        return len(self.vectors)

    @property
    def lists(self) -> int:
        return len(self.list_starts)

    def list_centroids(self) -> np.ndarray:
        """Every list's centroid, read into a buffer (:func:`_block`)."""
        return _block(self.vectors if self.centroids is None else self.centroids, 0, self.lists)


@dataclass
class _Approximate:
    """A trained approximate index and how to rebuild it.

    ``kind`` is ``"lists"`` (``index`` is a flat SQ8 index over every list's
    centroid, its ids the list numbers) or ``"kmeans"`` (``index`` is an
    IVF-SQ8 index holding every live row's codes, its ids the row ids).
    """

    kind: str
    generation: int  # numbers the quantizer file and the codes files made with it
    trained_rows: int  # live rows when it was trained
    template: np.ndarray  # the trained, empty index as FAISS serialises it (uint8)
    index: Any


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


def _checked_list_starts(lists: np.ndarray | None, rows: int) -> np.ndarray:
    """``lists`` (each list's first row among ``rows``) checked, as int64; ``None``: one list per row."""
    if lists is None:
        return np.arange(rows, dtype=np.int64)
    starts = np.asarray(lists)
    if starts.ndim != 1 or not len(starts) or not np.issubdtype(starts.dtype, np.integer):
        raise ValueError(f"lists must be a 1-d array of integer row positions, got shape {starts.shape} {starts.dtype}")
    starts = starts.astype(np.int64)
    if starts[0] != 0 or (np.diff(starts) <= 0).any() or starts[-1] >= rows:
        raise ValueError(
            f"lists must give each list's first row: 0 first, ascending, below the {rows} rows appended; "
            f"got {starts[:5].tolist()}{' ...' if len(starts) > 5 else ''}"
        )
    return starts


def _unit_means(unit: np.ndarray, list_starts: np.ndarray) -> np.ndarray:
    """Each list's centroid: the unit mean of its unit rows (a list whose rows cancel out takes its first row)."""
    sums = np.add.reduceat(unit.astype(np.float64), list_starts, axis=0)
    norms = np.linalg.norm(sums, axis=1)
    flat = ~(norms > 1e-6)
    sums[flat], norms[flat] = unit[list_starts[flat]], 1.0
    return (sums / norms[:, None]).astype(np.float32)


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
    return min(live_rows, max(16, int(4 * math.sqrt(live_rows))))  # k-means needs a row per list


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


def _ivf_template(training: np.ndarray, dim: int, nlist: int) -> np.ndarray:
    """An IVF-SQ8 index of ``nlist`` lists (spherical k-means on ``training``), serialised empty."""
    faiss = _faiss()
    quantizer = faiss.IndexFlatIP(dim)
    index = faiss.IndexIVFScalarQuantizer(
        quantizer, dim, nlist, faiss.ScalarQuantizer.QT_8bit, faiss.METRIC_INNER_PRODUCT, False
    )
    index.cp.spherical = True
    index.train(training)
    return faiss.serialize_index(index)


def _global_list_starts(segments: list[_Segment]) -> np.ndarray:
    """Every list's first row id, over ``segments`` in order."""
    if not segments:
        return np.zeros(0, dtype=np.int64)
    return np.concatenate([s.list_starts + s.start for s in segments])


def _merged_lists(
    kept: list[tuple[_Segment, np.ndarray]],
) -> tuple[np.ndarray, np.ndarray | None, np.ndarray, np.ndarray | None] | None:
    """The live rows of segments, given with their live masks, as one block: ``(vectors, codes,
    list_starts, centroids)``, a list with no live row dropped and the others keeping their
    centroids; ``None`` when no row is live. Codes only when every segment has them;
    centroids ``None`` when every list left is one row."""
    vectors, codes, starts, centroids = [], [], [], []
    offset = 0
    for segment, mask in kept:
        count = int(mask.sum())
        if not count:
            continue
        sizes = np.diff(np.r_[segment.list_starts, segment.rows])
        list_of_row = np.repeat(np.arange(segment.lists), sizes)[mask]
        first = np.r_[True, list_of_row[1:] != list_of_row[:-1]]
        starts.append(np.flatnonzero(first) + offset)
        centroids.append(segment.list_centroids()[list_of_row[first]])
        vectors.append(np.asarray(segment.vectors[mask]))
        codes.append(None if segment.codes is None else np.asarray(segment.codes)[mask])
        offset += count
    if not offset:
        return None
    list_starts = np.concatenate(starts)
    return (
        np.concatenate(vectors),
        None if any(c is None for c in codes) else np.concatenate(codes),  # type: ignore[arg-type]
        list_starts,
        None if len(list_starts) == offset else np.concatenate(centroids),
    )


def _cuts_at_lists(list_starts: np.ndarray, rows: int, most: int) -> list[int]:
    """Where to cut ``rows`` rows into pieces of at most ``most`` rows, at list starts only
    (a list longer than ``most`` is a piece of its own)."""
    cuts = [0]
    while cuts[-1] < rows:
        limit = cuts[-1] + most
        if limit >= rows:
            cuts.append(rows)
            break
        last = int(list_starts[np.searchsorted(list_starts, limit, side="right") - 1])
        if last <= cuts[-1]:  # one list runs past the limit
            following = np.searchsorted(list_starts, cuts[-1], side="right")
            last = int(list_starts[following]) if following < len(list_starts) else rows
        cuts.append(last)
    return cuts


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
        nprobe: lists the approximate step probes per query (more: higher
            recall, slower). ``None``: 32 document lists, every row of them
            scored exactly; or, under k-means lists, one in 16 of the lists
            trained (:func:`_nprobe`, :attr:`probes`).
        candidates: how many candidates per requested result the k-means
            approximate step proposes for exact rescoring (at least 100 in all).
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
        self._list_starts = np.zeros(0, dtype=np.int64)  # every list's first row id, ascending
        self._live_lists_cache: tuple[int, int, np.ndarray] | None = None  # (tombstones, lists, mask)
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
    def list_count(self) -> int:
        """Lists (documents) the rows are cut into, dead ones included."""
        return len(self._list_starts)

    @property
    def approximate(self) -> bool:
        """Whether an unrestricted search now uses the approximate candidate step."""
        return self._approximate is not None and self._live >= self.approximate_threshold

    @property
    def approximate_kind(self) -> str | None:
        """``"lists"`` (the rows' own lists), ``"kmeans"`` (k-means lists) or ``None`` (no index)."""
        approximate = self._approximate
        return None if approximate is None else approximate.kind

    @property
    def probes(self) -> int | None:
        """Lists the approximate step probes per query: ``nprobe``, or when it is ``None``
        ``_LIST_PROBES`` document lists, or the rule's share of the k-means lists
        (:func:`_nprobe`); ``None`` while there is no index.

        32 document lists: on the benchmark corpus 8 lists of 20 rows already
        find the exact top 10 at 2M rows; probing enough lists to score 4096
        rows (205 at 2M) added 4 ms to the chunk search and about 15 ms to a
        recursive query there. On the shared datasets' real embeddings, whose
        neighbours spread over documents, lists scoring 4% of the rows gave
        recall@10 0.958 and 0.99 needed 15.6%
        (``benchmarks/results/ann_real_lists.md``): a real corpus of that size
        may want a larger ``nprobe``, which the column takes."""
        approximate = self._approximate
        if approximate is None:
            return None
        if self.nprobe is not None:
            return self.nprobe
        if approximate.kind == "kmeans":
            return _nprobe(int(approximate.index.nlist))
        return _LIST_PROBES

    def alive(self, rows: np.ndarray) -> np.ndarray:
        """Which of ``rows`` are live (``bool`` per row; out-of-range ids are an error)."""
        with self._lock.reading():
            return self._alive[checked_ids(rows, len(self._alive), self.name)]

    def vectors(self, rows: np.ndarray) -> np.ndarray:
        """The stored (unit float32) vectors of ``rows``, in their order (deleted rows too:
        the row still holds its vector until :meth:`compact`)."""
        with self._lock.reading():
            wanted = checked_ids(rows, len(self._alive), self.name)
            order = np.argsort(wanted, kind="stable")
            out = np.empty((len(wanted), self.dim), dtype=np.float32)
            out[order] = self._gather(wanted[order])
        return out

    # --------------------------------------------------------------- changes
    def append(self, matrix: np.ndarray, lists: np.ndarray | None = None) -> np.ndarray:
        """Append ``matrix`` ``[n, dim]`` as one segment; returns the new row ids (consecutive, int64).

        Rows are stored unit-normalised in float32.

        Args:
            matrix: real numbers, one vector per row.
            lists: the position in ``matrix`` of each list's first row (``0``
                first, ascending): the rows of one document, which the
                approximate step probes together. ``None``: each row is its
                own list.

        Raises:
            ValueError: a wrong width (naming both), a zero or non-finite
                vector (naming its position and the row id it would get), or
                ``lists`` that do not cut the rows into runs.
        """
        with self._writer:
            start = self.row_count
            unit = _unit_rows(matrix, self.dim, start)
            new_rows = np.arange(start, start + len(unit), dtype=np.int64)
            if not len(unit):
                return new_rows
            list_starts = _checked_list_starts(lists, len(unit))
            centroids = None if len(list_starts) == len(unit) else _unit_means(unit, list_starts)
            approximate = self._approximate
            codes = None
            if approximate is not None and approximate.kind == "kmeans":
                codes = approximate.index.sa_encode(unit)
            segment = _Segment(self._next_segment, start, unit, codes, list_starts, centroids)
            with self._lock.writing():
                self._segments.append(segment)
                self._alive = np.concatenate([self._alive, np.ones(len(unit), dtype=bool)])
                self._live += len(unit)
                self._next_segment += 1
                self._list_starts = np.concatenate([self._list_starts, list_starts + start])
                if approximate is not None and codes is not None:
                    approximate.index.add_sa_codes(codes, new_rows)
                elif approximate is not None:
                    approximate.index.add(segment.list_centroids())  # ids continue: the new list numbers
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
            checked = np.unique(checked_ids(rows, len(self._alive), self.name))
            gone = checked[self._alive[checked]]
            if not len(gone):
                return 0
            alive = self._alive.copy()
            alive[gone] = False
            with self._lock.writing():
                self._alive = alive
                self._live -= len(gone)
                self._tombstones += 1
                if self._approximate is not None and self._approximate.kind == "kmeans":
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
                merged = _merged_lists([(s, alive[s.start : s.start + s.rows]) for s in run])
                run.clear()
                if merged is None:
                    return
                vectors, codes, list_starts, centroids = merged
                cuts = _cuts_at_lists(list_starts, len(vectors), _MAX_SEGMENT_ROWS)
                for first, stop in zip(cuts, cuts[1:]):
                    lists = slice(*np.searchsorted(list_starts, [first, stop]))
                    segments.append(
                        _Segment(
                            next_segment,
                            sum(s.rows for s in segments),
                            vectors[first:stop],
                            None if codes is None else codes[first:stop],
                            list_starts[lists] - first,
                            None if centroids is None else centroids[lists],
                        )
                    )
                    next_segment += 1

            for segment in self._segments:
                clean = bool(alive[segment.start : segment.start + segment.rows].all())
                if clean and segment.rows >= KEEP_SEGMENT_ROWS:
                    merge_run()
                    start = sum(s.rows for s in segments)
                    segments.append(
                        _Segment(
                            segment.number,
                            start,
                            segment.vectors,
                            segment.codes,
                            segment.list_starts,
                            segment.centroids,
                        )
                    )
                else:
                    run.append(segment)
            merge_run()
            approximate = self._approximate
            rebuilt = None
            if approximate is not None:
                rebuilt = _Approximate(
                    approximate.kind,
                    approximate.generation,
                    approximate.trained_rows,
                    approximate.template,
                    self._index_of(approximate.kind, approximate.template, segments, None),
                )
            with self._lock.writing():
                self._segments = segments
                self._alive = np.ones(self._live, dtype=bool)
                self._list_starts = _global_list_starts(segments)
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
    def search(
        self, query: np.ndarray, k: int, rows: np.ndarray | RowSet | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """The top-``k`` live rows by cosine similarity to ``query``.

        Args:
            query: ``[dim]`` real numbers (normalised here).
            k: results wanted; fewer come back when fewer rows are live.
            rows: restrict the search to these row ids (dead ones are skipped), or to a
                :class:`~.rowsets.RowSet` of them (a store's filter, selected once).
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
        self, queries: np.ndarray, k: int, rows: np.ndarray | RowSet | None = None
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
            allowed = None if rows is None else self._row_set(rows)
            # a restriction to many rows (a broad filter) is searched like the whole column:
            # approximately above the threshold, else by one scan that skips the other rows
            if self.approximate and (allowed is None or len(allowed) >= self.approximate_threshold):
                if self._approximate is not None and self._approximate.kind == "lists":
                    return self._search_lists(unit, k, allowed)
                found = self._search_approximate(unit, k, allowed)
                if found is not None:
                    return found
            if allowed is not None and len(allowed) * _DENSE_SHARE < len(self._alive):
                return self._search_rows(unit, k, allowed.rows)
            return self._search_all(unit, k, allowed)

    def _row_set(self, rows: np.ndarray | RowSet) -> RowSet:
        if isinstance(rows, RowSet):
            rows.check_row_count(len(self._alive), self.name)
            return rows
        return RowSet.checked(rows, len(self._alive), self.name)

    def _wanted_rows(self, allowed: RowSet) -> np.ndarray:
        """Live rows of ``allowed`` as a mask, made once per set and column state."""
        return allowed.derived("live", self, self._alive, lambda: allowed.mask & self._alive)

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
        """The distinct, ascending ``rows`` that are live, gathered and scored."""
        rows = rows[self._alive[rows]]

        def blocks() -> Iterator[tuple[np.ndarray, np.ndarray]]:
            for start in range(0, len(rows), _SCAN_BLOCK_ROWS):
                part = rows[start : start + _SCAN_BLOCK_ROWS]
                yield part, self._gather(part)

        return self._screened(unit, k, blocks())

    def _search_all(
        self, unit: np.ndarray, k: int, allowed: RowSet | None = None
    ) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Every live row (of ``allowed`` only, when given) scanned in place, segment by segment."""
        wanted = self._alive if allowed is None else self._wanted_rows(allowed)

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
        kept: list[list[tuple[np.ndarray, np.ndarray]]] = [[] for _ in range(len(unit))]
        for rows, vectors in blocks:  # blocks hold distinct rows
            block = np.asarray(vectors, dtype=np.float32)
            products = block @ queries.T
            for q in range(len(unit)):
                column = products[:, q]
                if len(column) > k:
                    kth = np.partition(column, len(column) - k)[len(column) - k]
                    keep = column >= kth - margin
                    kept[q].append((rows[keep], block[keep]))  # the kept vectors, not read again
                else:
                    kept[q].append((rows, block))
        found_rows, found_scores = [], []
        for q in range(len(unit)):
            rows = np.concatenate([r for r, _ in kept[q]]) if kept[q] else np.zeros(0, dtype=np.int64)
            vectors = np.concatenate([v for _, v in kept[q]]) if kept[q] else np.zeros((0, self.dim), np.float32)
            top_rows, top_scores = _top(rows, _exact_scores(vectors, unit[q : q + 1])[:, 0], k)
            found_rows.append(top_rows)
            found_scores.append(top_scores)
        return found_rows, found_scores

    def _search_approximate(
        self, unit: np.ndarray, k: int, allowed: RowSet | None = None
    ) -> tuple[list[np.ndarray], list[np.ndarray]] | None:
        """Candidates from the IVF-SQ8 index (among ``allowed`` rows only, when given: FAISS
        skips the others while it scans), rescored exactly; ``None`` if a query got too few."""
        faiss = _faiss()
        assert self._approximate is not None and faiss is not None
        available = self._live if allowed is None else int(np.count_nonzero(self._wanted_rows(allowed)))
        wanted = min(available, max(100, k * self.candidates))
        if wanted == 0:
            return [np.zeros(0, dtype=np.int64)] * len(unit), [np.zeros(0, dtype=np.float32)] * len(unit)
        selector = None
        if allowed is not None:
            packed = allowed.derived("bits", self, None, lambda: np.packbits(allowed.mask, bitorder="little"))
            selector = faiss.IDSelectorBitmap(len(self._alive), faiss.swig_ptr(packed))
        params = faiss.SearchParametersIVF(nprobe=self.probes, sel=selector)
        with _one_thread(faiss):
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

    def _search_lists(
        self, unit: np.ndarray, k: int, allowed: RowSet | None = None
    ) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """The best of the rows of the lists whose centroids are nearest each query, scored exactly.

        Only lists holding a wanted row (live, and among ``allowed`` when given)
        are probed: the coarse step skips the others. A query whose probed lists
        hold fewer than ``k`` wanted rows probes twice as many, until it has them
        or has probed every such list, so a restriction costs probes, not results.
        """
        faiss = _faiss()
        approximate = self._approximate
        assert approximate is not None and faiss is not None
        if allowed is None:
            wanted_rows, wanted_lists = self._alive, self._live_lists()
        else:
            wanted_rows = self._wanted_rows(allowed)
            wanted_lists = allowed.derived(
                "lists", approximate, self._alive, lambda: np.logical_or.reduceat(wanted_rows, self._list_starts)
            )
        probable = int(wanted_lists.sum())
        if not probable:
            return [np.zeros(0, dtype=np.int64)] * len(unit), [np.zeros(0, dtype=np.float32)] * len(unit)
        selector = None
        if probable < self.list_count:
            packed = np.packbits(wanted_lists, bitorder="little")
            selector = faiss.IDSelectorBitmap(self.list_count, faiss.swig_ptr(packed))
        params = faiss.SearchParameters(sel=selector)
        ends = np.r_[self._list_starts[1:], self.row_count]
        queries = unit.astype(np.float32)
        first_probes = min(self.probes or _LIST_PROBES, probable)
        found_rows, found_scores = [], []
        for q in range(len(unit)):
            probes = first_probes
            while True:
                with _one_thread(faiss):
                    _, lists = approximate.index.search(queries[q : q + 1], probes, params=params)
                chosen = np.sort(lists[0][lists[0] >= 0])
                sizes = ends[chosen] - self._list_starts[chosen]
                rows = np.repeat(self._list_starts[chosen] - np.cumsum(sizes) + sizes, sizes) + np.arange(sizes.sum())
                rows = rows[wanted_rows[rows]]
                if len(rows) >= k or probes >= probable:
                    break
                probes = min(2 * probes, probable)
            top_rows, top_scores = self._screened(unit[q : q + 1], k, iter([(rows, self._gather(rows))]))
            found_rows.append(top_rows[0])
            found_scores.append(top_scores[0])
        return found_rows, found_scores

    # ----------------------------------------------------- approximate index
    def _should_train(self) -> bool:
        if self._live < self.approximate_threshold or _faiss() is None:
            return False
        return self._approximate is None or self._live >= _RETRAIN_GROWTH * self._approximate.trained_rows

    def _train(self) -> None:
        """Make the approximate index for the live rows: over their own lists when these
        hold ``_MIN_LIST_ROWS`` live rows on average, else over k-means lists.

        Runs with the writer lock only: queries go on with the old index until
        the new one is swapped in.
        """
        live = self._live
        live_lists = int(self._live_lists().sum())
        generation = 0 if self._approximate is None else self._approximate.generation + 1
        if live >= _MIN_LIST_ROWS * live_lists:
            logger.info("the approximate index of %s: %d document lists of %d rows", self.name, live_lists, live)
            template = self._coarse_template()
            segments = [
                _Segment(s.number, s.start, s.vectors, None, s.list_starts, s.centroids) for s in self._segments
            ]
            index = self._index_of("lists", template, segments, self._alive)
            approximate = _Approximate("lists", generation, live, template, index)
        else:
            template = self._kmeans_template(live)
            index = _faiss().deserialize_index(template)
            segments = [
                _Segment(s.number, s.start, s.vectors, self._encode(index, s.vectors), s.list_starts, s.centroids)
                for s in self._segments
            ]
            approximate = _Approximate(
                "kmeans", generation, live, template, self._index_of("kmeans", template, segments, self._alive)
            )
        with self._lock.writing():
            self._segments = segments
            self._approximate = approximate

    def _kmeans_template(self, live: int) -> np.ndarray:
        """An IVF-SQ8 index of :func:`_nlist` lists trained on a sample of the live rows."""
        nlist = _nlist(live)
        sample_size = min(live, nlist * _TRAIN_ROWS_PER_LIST)
        generator = np.random.default_rng(live)
        sample_rows = np.sort(generator.choice(np.flatnonzero(self._alive), size=sample_size, replace=False))
        logger.info(
            "training the approximate index of %s: %d lists on %d of %d rows", self.name, nlist, sample_size, live
        )
        return _ivf_template(self._gather(sample_rows), self.dim, nlist)

    def _coarse_template(self) -> np.ndarray:
        """The index that picks the lists a search probes, serialised empty: a flat scan of
        the centroids as signed bytes, scaled so that the largest component of a live
        list's centroid is 127 (the scale is a transform inside the index).

        Bytes read as they are take 3.1 ms a query for 100k centroids, where
        codes of per-dimension ranges (``QT_8bit``) took 6.9; the exact scores
        of the probed lists' rows make up for the coarser codes. Flat, not an
        inverted file over the centroids: at 100k documents of the benchmark
        corpus (centroids in unrelated directions) one probed at 1/16 of its
        k-means lists reached recall@10 0.89, and 0.99 only at a quarter of
        them (issue 25).
        """
        faiss = _faiss()
        centroids = np.concatenate([s.list_centroids() for s in self._segments])[self._live_lists()]
        scale = np.float32(127.0 / max(float(np.abs(centroids).max()), 1e-30))
        transform = faiss.LinearTransform(self.dim, self.dim, False)
        faiss.copy_array_to_vector((np.eye(self.dim, dtype=np.float32) * scale).ravel(), transform.A)
        transform.is_trained = True
        codes = faiss.IndexScalarQuantizer(
            self.dim, faiss.ScalarQuantizer.QT_8bit_direct_signed, faiss.METRIC_INNER_PRODUCT
        )
        return faiss.serialize_index(faiss.IndexPreTransform(transform, codes))

    def _index_of(self, kind: str, template: np.ndarray, segments: list[_Segment], alive: np.ndarray | None) -> Any:
        """The ``template`` index holding ``segments``: every list's centroid, in list order
        (``"lists"``), or the codes of every live row (``"kmeans"``, :meth:`_index_from_codes`)."""
        if kind == "kmeans":
            return self._index_from_codes(template, segments, alive)
        index = _faiss().deserialize_index(template)
        for segment in segments:
            index.add(segment.list_centroids())
        return index

    def _live_lists(self) -> np.ndarray:
        """Which lists hold a live row (``bool`` per list), kept until the rows or lists change."""
        cached = self._live_lists_cache
        if cached is not None and cached[:2] == (self._tombstones, self.list_count):
            return cached[2]
        if not self.list_count:
            mask = np.zeros(0, dtype=bool)
        else:
            mask = np.logical_or.reduceat(self._alive, self._list_starts)
        self._live_lists_cache = (self._tombstones, self.list_count, mask)
        return mask

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
        that segment (its vectors, its lists and their centroids unless every
        list is one row, its codes under k-means lists), and the state file.
        Afterwards the column reads its segments memory-mapped from ``folder``.

        Args:
            folder: a folder (made if missing) holding no other column of this ``name``.
        """
        target = Path(folder)
        target.mkdir(parents=True, exist_ok=True)
        with self._writer:
            approximate = self._approximate
            entries: list[dict[str, Any]] = []
            for segment in self._segments:
                arrays = {segment_name(self.name, segment.number): segment.vectors}
                if segment.centroids is not None:
                    arrays[segment_name(f"{self.name}-lists", segment.number)] = segment.list_starts
                    arrays[segment_name(f"{self.name}-centroids", segment.number)] = segment.centroids
                if approximate is not None and segment.codes is not None:
                    arrays[self._codes_name(approximate.generation, segment.number)] = segment.codes
                for name, array in arrays.items():
                    if not (target / f"{name}.npy").exists():
                        write_array(target, name, array)
                entries.append({"number": segment.number, "rows": segment.rows, "lists": segment.lists})
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
            previous = previous_state(target, self.name)
            state = {
                "dim": self.dim,
                "rows": self.row_count,
                "segments": entries,
                "next_segment": self._next_segment,
                "tombstones": tombstones_name,
                "tombstone_number": self._tombstones,
                "approximate": None
                if approximate is None
                else {
                    "kind": approximate.kind,
                    "generation": approximate.generation,
                    "trained_rows": approximate.trained_rows,
                    "quantizer": quantizer_name,
                },
            }
            write_state(target, self.name, FORMAT_VERSION, state)
            if previous is not None:
                retire(target, self._files_of(previous), self._files_of(state))
            mapped = [self._mapped_segment(target, segment, approximate) for segment in self._segments]
            with self._lock.writing():
                self._segments = mapped
        logger.debug("wrote %s (%d segments, %d live rows) to %s", self.name, len(mapped), self._live, target)

    def _files_of(self, state: dict[str, Any]) -> set[str]:
        """The files a state of this column reads (format 1 or 2), as :meth:`open` reads them."""
        approximate = state.get("approximate")
        kmeans_generation = (
            int(approximate["generation"])
            if approximate is not None and approximate.get("kind", "kmeans") == "kmeans"
            else None
        )
        names = set()
        for entry in state.get("segments", []):
            number, rows = int(entry["number"]), int(entry["rows"])
            names.add(segment_name(self.name, number))
            if int(entry.get("lists", rows)) != rows:
                names |= {segment_name(f"{self.name}-lists", number), segment_name(f"{self.name}-centroids", number)}
            if kmeans_generation is not None:
                names.add(self._codes_name(kmeans_generation, number))
        if approximate is not None:
            names.add(str(approximate["quantizer"]))
        if state.get("tombstones") is not None:
            names.add(str(state["tombstones"]))
        return {f"{name}.npy" for name in names}

    def _mapped_segment(self, folder: Path, segment: _Segment, approximate: _Approximate | None) -> _Segment:
        """``segment`` read from its files in ``folder`` (its small list starts into RAM, the rest mapped)."""
        vectors = open_array(folder, segment_name(self.name, segment.number))
        codes = None
        if approximate is not None and segment.codes is not None:
            codes = open_array(folder, self._codes_name(approximate.generation, segment.number))
        centroids = None
        if segment.centroids is not None:
            centroids = open_array(folder, segment_name(f"{self.name}-centroids", segment.number))
        return _Segment(segment.number, segment.start, vectors, codes, segment.list_starts, centroids)

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

        The approximate index is rebuilt in RAM: from the lists' centroids, or
        from the k-means codes files (a quarter of the float32 size); without
        FAISS searches are exact. A column of format version 1 (before lists)
        reads as one list per row, under its k-means index.

        Args:
            folder: the folder given to :meth:`write`.
            name, approximate_threshold, nprobe, candidates: as for the constructor.

        Raises:
            PersistError: the state file is missing, damaged or of another
                format version, or a segment file is missing or of the wrong shape.
        """
        state = read_state(folder, name, _READABLE_VERSIONS)
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
        kind = None if faiss is None else str(approximate_state.get("kind", "kmeans"))
        generation = None if faiss is None else int(approximate_state["generation"])
        start = 0
        for entry in state["segments"]:
            number, rows = int(entry["number"]), int(entry["rows"])
            lists = int(entry.get("lists", rows))
            vectors = open_array(target, segment_name(name, number))
            column._check_shape(target, segment_name(name, number), vectors, (rows, column.dim), np.float32)
            codes = None
            if kind == "kmeans" and generation is not None:
                codes = open_array(target, column._codes_name(generation, number))
            list_starts, centroids = np.arange(rows, dtype=np.int64), None
            if lists != rows:
                list_starts = np.array(open_array(target, segment_name(f"{name}-lists", number), mmap=False))
                column._check_shape(target, segment_name(f"{name}-lists", number), list_starts, (lists,), np.int64)
                centroids = open_array(target, segment_name(f"{name}-centroids", number))
                column._check_shape(
                    target, segment_name(f"{name}-centroids", number), centroids, (lists, column.dim), np.float32
                )
            column._segments.append(_Segment(number, start, vectors, codes, list_starts, centroids))
            start += rows
        if start != int(state["rows"]):
            raise PersistError(f"{target}: the segments hold {start} rows, the state file says {state['rows']}")
        column._alive = np.ones(start, dtype=bool)
        if state["tombstones"] is not None:
            column._alive[open_array(target, state["tombstones"], mmap=False)] = False
        column._live = int(column._alive.sum())
        column._list_starts = _global_list_starts(column._segments)
        column._next_segment = int(state["next_segment"])
        column._tombstones = int(state["tombstone_number"])
        if kind is not None and generation is not None:
            template = np.array(open_array(target, approximate_state["quantizer"], mmap=False))
            index = column._index_of(kind, template, column._segments, column._alive)
            column._approximate = _Approximate(
                kind, generation, int(approximate_state["trained_rows"]), template, index
            )
            # maps opened afresh: the pages read into the index are no longer counted as this process's
            column._segments = [column._mapped_segment(target, s, column._approximate) for s in column._segments]
        return column

    @staticmethod
    def _check_shape(folder: Path, name: str, array: np.ndarray, shape: tuple[int, ...], dtype: type) -> None:
        if array.shape != shape or array.dtype != dtype:
            raise PersistError(
                f"{folder / name}.npy holds {array.dtype} {array.shape}, the state file says "
                f"{np.dtype(dtype).name} {shape}: the folder is damaged; rebuild the index"
            )
