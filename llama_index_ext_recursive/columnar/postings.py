"""BM25 postings of one level (chunks or documents) as segments of arrays, scored at query time.

Today's BM25 retriever keeps a ``bm25s`` index whose stored scores depend on
the whole corpus, and a reopened index rebuilds it from every node's text.
:class:`Postings` keeps what those scores are computed from instead, the way
Lucene does: each :meth:`Postings.append` adds an immutable segment (a CSC
matrix over the segment's rows: the term ids it holds, their slices of local
row ids and term frequencies, and the rows' token counts), a
:meth:`Postings.delete` adds tombstones, and a query scores only its own
tokens' postings with the statistics of the live rows (row count, document
frequencies, average length) in ``bm25s``' own arithmetic
(:func:`~llama_index_ext_recursive.columnar.terms.posting_scores`), so the
scores equal those of a fresh ``bm25s`` build on the live rows, bit for bit.

Everything is arrays: the vocabulary (token -> term id, ids in first-seen
order) is persisted as UTF-8 blobs of the terms each append introduced, with
their code-point offsets; the segments are ``.npy`` files written once through
:mod:`.segments` and opened memory-mapped, so opening a 2M-row postings reads
the small state and the vocabulary, and nothing is tokenised or rebuilt.

Queries read one immutable snapshot (segments, tombstones, statistics) taken
when they start, so a query running while another thread appends or deletes
sees the postings before or after that change, never a mix. Changes are
serialised by a lock. One writer per folder: two postings written into the
same folder would name their segments alike.
"""

from __future__ import annotations

import itertools
import logging
import threading
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import bm25s
import numpy as np

from llama_index_ext_recursive.columnar.rowsets import RowSet, checked_ids, sorted_unique
from llama_index_ext_recursive.columnar.segments import (
    KEEP_SEGMENT_ROWS,
    open_array,
    read_state,
    retire,
    segment_name,
    write_array,
    write_state,
)
from llama_index_ext_recursive.columnar.terms import METHOD, idf_of, posting_scores
from llama_index_ext_recursive.persist import PathLike, PersistError
from llama_index_ext_recursive.validation import check_count

__all__ = ["FORMAT_VERSION", "Postings"]

logger = logging.getLogger(__name__)

COMPONENT = "postings"
FORMAT_VERSION = 1
# bm25s' default parameters (k1, b, delta) and method: the scores today's retriever gives
_PARAMETERS = bm25s.BM25(method=METHOD)
_IDF = idf_of(_PARAMETERS)
_SEGMENT_ARRAYS = ("terms", "indptr", "rows", "tf", "lengths")
# a query whose postings number at least 1/_DENSE_POSTINGS of the rows sums them in an array over all rows
_DENSE_POSTINGS = 32
# a restriction to fewer than 1/_LOOKUP_SHARE of a term's postings looks its rows up in them
_LOOKUP_SHARE = 8
_NO_ROWS = np.zeros(0, dtype=np.int64)
_NO_SCORES = np.zeros(0, dtype=np.float32)


@dataclass(frozen=True)
class _Segment:
    """The postings of rows ``first_row .. first_row + len(lengths) - 1``, never changed.

    Attributes:
        number: names its files (``postings-000003-rows.npy``, ...).
        first_row: global row id of its row 0.
        terms: the term ids it holds, ascending (int32).
        indptr: per entry of ``terms``, its slice of ``rows``/``tf`` (int64).
        rows: local row of each posting, ascending within a term (int32).
        tf: term frequency of each posting (the smallest unsigned type that holds them).
        lengths: token count of each row (int32).
    """

    number: int
    first_row: int
    terms: np.ndarray
    indptr: np.ndarray
    rows: np.ndarray
    tf: np.ndarray
    lengths: np.ndarray

    def entries(self, term_ids: np.ndarray) -> np.ndarray:
        """The entry of each of ``term_ids`` (int64) in :attr:`terms`, ``-1`` where absent: one
        binary search for all of a query's terms (one per term and segment took 20 us each)."""
        if not len(self.terms):
            return np.full(len(term_ids), -1, dtype=np.int64)
        # in the terms' own type: an int64 key array made NumPy convert the whole terms array
        at = np.searchsorted(self.terms, term_ids.astype(self.terms.dtype))
        present = (at < len(self.terms)) & (self.terms[np.minimum(at, len(self.terms) - 1)] == term_ids)
        return np.where(present, at, -1)

    def postings(self, entry: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Global rows, term frequencies and row lengths of the term at ``entry`` (:meth:`entries`)."""
        start, end = int(self.indptr[entry]), int(self.indptr[entry + 1])
        local = self.rows[start:end]
        return local.astype(np.int64) + self.first_row, self.tf[start:end], self.lengths[local]


@dataclass(frozen=True)
class _Piece:
    """A small immutable array file other than a segment: the terms an append
    introduced (``vocab`` blob and ``vocab_offsets``) or the rows a delete removed (``dead``)."""

    number: int
    arrays: dict[str, np.ndarray]


@dataclass(frozen=True)
class _Snapshot:
    """Everything a query reads, replaced as a whole by every change."""

    segments: tuple[_Segment, ...]
    vocabulary_pieces: tuple[_Piece, ...]
    tombstones: tuple[_Piece, ...]
    vocabulary_size: int
    row_count: int
    dead: np.ndarray | None  # bool per row; None: no row deleted
    live_rows: int
    live_length: int
    next_number: int
    # term id -> its live postings, counted by a search that read them all (not copied by replace)
    live_postings: dict[int, int] = field(default_factory=dict, init=False, compare=False, repr=False)


class Postings:
    """BM25 term frequencies and row lengths of one level, in append-only segments.

    Rows are numbered ``0, 1, 2, ...`` in the order they were appended; a
    deleted row keeps its id (a tombstone) until :meth:`compact` renumbers the
    live ones. Scores are ``bm25s``' (method ``lucene``, its default ``k1``,
    ``b``, ``delta``) on the live rows; a row that matches no query token
    scores 0 and is never returned.
    """

    def __init__(self) -> None:
        self._vocabulary: dict[str, int] = {}
        self._snapshot = _Snapshot(
            segments=(),
            vocabulary_pieces=(),
            tombstones=(),
            vocabulary_size=0,
            row_count=0,
            dead=None,
            live_rows=0,
            live_length=0,
            next_number=0,
        )
        self._identity = uuid.uuid4().hex
        self._lock = threading.Lock()

    # -- sizes ---------------------------------------------------------
    @property
    def row_count(self) -> int:
        """Row ids handed out so far (deleted rows included): the next row's id."""
        return self._snapshot.row_count

    @property
    def live_rows(self) -> int:
        """Rows not deleted."""
        return self._snapshot.live_rows

    @property
    def vocabulary_size(self) -> int:
        """Distinct tokens seen (a token whose rows were all deleted stays known)."""
        return self._snapshot.vocabulary_size

    @property
    def segment_count(self) -> int:
        """Segments a query visits (one per append since the last :meth:`compact`)."""
        return len(self._snapshot.segments)

    def live(self) -> np.ndarray:
        """Boolean mask of the live rows, one per row id."""
        snapshot = self._snapshot
        if snapshot.dead is None:
            return np.ones(snapshot.row_count, dtype=bool)
        return ~snapshot.dead

    # -- changes -------------------------------------------------------
    def append(self, token_lists: Sequence[Sequence[str]]) -> np.ndarray:
        """Add one row per token list, as one new segment; returns their row ids (consecutive).

        Args:
            token_lists: the tokens of each row, repeats included (a row may have none).

        Raises:
            TypeError: a row is a string rather than a list of tokens, or a token is not a string.
            ValueError: a token cannot be stored as UTF-8 (a lone surrogate).
        """
        for row in token_lists:
            if isinstance(row, (str, bytes)):
                raise TypeError(
                    f"append takes a list of tokens per row, got the string {row[:40]!r}; tokenise the text first"
                )
        rows = len(token_lists)
        with self._lock:
            snapshot = self._snapshot
            first_row = snapshot.row_count
            if not rows:
                return _NO_ROWS
            lengths = np.fromiter(map(len, token_lists), dtype=np.int64, count=rows)
            flat = list(itertools.chain.from_iterable(token_lists))
            distinct = dict.fromkeys(flat)  # first-seen order: term ids as bm25s would number them
            new_terms = [token for token in distinct if token not in self._vocabulary]
            piece = _vocabulary_piece(snapshot.next_number, new_terms) if new_terms else None
            for token in new_terms:  # checked by _vocabulary_piece: all strings, all UTF-8
                self._vocabulary[token] = len(self._vocabulary)
            for token in distinct:
                distinct[token] = self._vocabulary[token]
            term_ids = np.fromiter(map(distinct.__getitem__, flat), dtype=np.int64, count=len(flat))
            local_rows = np.repeat(np.arange(rows, dtype=np.int64), lengths)
            segment = _segment(snapshot.next_number, first_row, term_ids, local_rows, lengths.astype(np.int32))
            dead = snapshot.dead
            if dead is not None:
                dead = np.concatenate([dead, np.zeros(rows, dtype=bool)])
            self._snapshot = replace(
                snapshot,
                segments=(*snapshot.segments, segment),
                vocabulary_pieces=snapshot.vocabulary_pieces + ((piece,) if piece else ()),
                vocabulary_size=len(self._vocabulary),
                row_count=first_row + rows,
                dead=dead,
                live_rows=snapshot.live_rows + rows,
                live_length=snapshot.live_length + int(lengths.sum()),
                next_number=snapshot.next_number + 1,
            )
        return np.arange(first_row, first_row + rows, dtype=np.int64)

    def delete(self, rows: Any) -> None:
        """Mark ``rows`` deleted: they score nothing and leave the statistics at once.

        Args:
            rows: row ids (repeats allowed) of live rows.

        Raises:
            ValueError: a row id does not exist or is deleted already (the first few are named).
        """
        with self._lock:
            snapshot = self._snapshot
            removed = np.unique(checked_ids(rows, snapshot.row_count, "delete"))
            if not len(removed):
                return
            if snapshot.dead is not None and snapshot.dead[removed].any():
                again = removed[snapshot.dead[removed]]
                raise ValueError(f"rows {again[:5].tolist()} are deleted already; delete each row once")
            dead = np.zeros(snapshot.row_count, dtype=bool) if snapshot.dead is None else snapshot.dead.copy()
            dead[removed] = True
            removed_length = int(_lengths_of(snapshot.segments, removed).sum())
            self._snapshot = replace(
                snapshot,
                tombstones=(*snapshot.tombstones, _Piece(snapshot.next_number, {"dead": removed})),
                dead=dead,
                live_rows=snapshot.live_rows - len(removed),
                live_length=snapshot.live_length - removed_length,
                next_number=snapshot.next_number + 1,
            )

    def compact(self) -> np.ndarray:
        """Merge the segments into one over the live rows, renumbered in order, from
        the kept term frequencies (nothing is tokenised again).

        Returns:
            The new id of every old row id, ``-1`` for deleted rows.
        """
        with self._lock:
            snapshot = self._snapshot
            live = np.ones(snapshot.row_count, dtype=bool) if snapshot.dead is None else ~snapshot.dead
            new_ids = np.where(live, np.cumsum(live, dtype=np.int64) - 1, -1)
            merged = _merged(snapshot, new_ids, snapshot.next_number)
            self._snapshot = replace(
                snapshot,
                segments=(merged,) if merged is not None else (),
                tombstones=(),
                row_count=snapshot.live_rows,
                dead=None,
                next_number=snapshot.next_number + 1,
            )
            logger.info(
                "postings: %d segments merged into one of %d rows (%d deleted rows dropped)",
                len(snapshot.segments),
                snapshot.live_rows,
                snapshot.row_count - snapshot.live_rows,
            )
        return new_ids

    def merge_small(self, keep_rows: int = KEEP_SEGMENT_ROWS, largest: int | None = None) -> int:
        """Merge each run of consecutive segments of fewer than ``keep_rows`` rows, none of them
        deleted, into one segment, keeping every row id; larger segments stay as they are.

        What a streaming build does at every checkpoint: its batches' segments
        become one, while the segments of earlier checkpoints are not read
        again (:meth:`compact` merges everything, into memory). At its end it
        merges the checkpoints' segments too, into runs of at most ``largest``
        rows: a query reads each segment's postings of each of its terms (20
        segments at 2M rows, 157 reads of a 10 ms search), and a merge holds
        about 40 bytes per posting of its run in memory.

        Args:
            keep_rows: segments of this many rows or more stay as they are.
            largest: a run ends before it would hold more rows (``None``: no limit).

        Returns:
            How many segments were merged.
        """
        with self._lock:
            snapshot = self._snapshot
            dead = snapshot.dead
            segments: list[_Segment] = []
            run: list[_Segment] = []
            number, merged = snapshot.next_number, 0

            def close_run() -> None:
                nonlocal number, merged
                if len(run) > 1:
                    segments.append(_run_merged(snapshot, run, number))
                    number, merged = number + 1, merged + len(run)
                else:
                    segments.extend(run)
                run.clear()

            for segment in snapshot.segments:
                rows = len(segment.lengths)
                clean = dead is None or not dead[segment.first_row : segment.first_row + rows].any()
                if clean and rows < keep_rows:
                    if largest is not None and run and sum(len(s.lengths) for s in run) + rows > largest:
                        close_run()
                    run.append(segment)
                else:
                    close_run()
                    segments.append(segment)
            close_run()
            if merged:
                self._snapshot = replace(snapshot, segments=tuple(segments), next_number=number)
        return merged

    # -- queries -------------------------------------------------------
    def search(self, query_tokens: Sequence[str], k: int, rows: Any = None) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` best live rows for ``query_tokens`` by BM25, best first.

        Ties are broken by row id (the lower first), as the BM25 retriever
        breaks them; rows scoring 0 (no query token) are never returned.

        Args:
            query_tokens: the query's tokens; a repeated token counts each time, as in bm25s.
            k: how many rows at most.
            rows: when given, only these row ids are candidates (the chunks of routed
                documents, the rows a filter allows); the statistics stay those of
                all live rows, so a row's score does not depend on the restriction.

        Returns:
            ``(row ids int64, scores float32)``.

        Raises:
            TypeError: ``query_tokens`` is a string, or ``k`` is not an integer.
            ValueError: ``k < 1`` or a row id in ``rows`` does not exist.
        """
        k = check_count("k", k)
        snapshot = self._snapshot
        restriction = None if rows is None else _row_set(rows, snapshot.row_count, "search")
        touched, scores = _scored(snapshot, self._vocabulary, _tokens(query_tokens), restriction, k)
        return _best(touched, scores, k)

    def scores(self, query_tokens: Sequence[str], rows: Any) -> np.ndarray:
        """BM25 scores of ``rows`` (in their order; deleted or unmatched rows 0) for ``query_tokens``.

        Args:
            query_tokens: the query's tokens.
            rows: row ids (repeats allowed).

        Raises:
            TypeError: ``query_tokens`` is a string.
            ValueError: a row id does not exist.
        """
        snapshot = self._snapshot
        wanted = checked_ids(rows, snapshot.row_count, "scores")
        restriction = RowSet(sorted_unique(wanted), snapshot.row_count)
        touched, scores = _scored(snapshot, self._vocabulary, _tokens(query_tokens), restriction)
        found = np.zeros(len(wanted), dtype=np.float32)
        if len(touched):
            at = np.minimum(np.searchsorted(touched, wanted), len(touched) - 1)
            hit = touched[at] == wanted
            found[hit] = scores[at[hit]]
        return found

    # -- files ---------------------------------------------------------
    def write(self, folder: PathLike) -> None:
        """Persist into ``folder``: the segment files it does not hold yet, then the state.

        After an append, a write adds the new segment's files and replaces the
        small state file; files of segments no longer listed (merged by
        :meth:`compact`) are removed afterwards. The written segments are then
        read from their files, memory-mapped, instead of from memory, so a build
        that writes after each batch holds its postings in the page cache, not
        in its own memory.

        Raises:
            PersistError: ``folder`` holds the postings of another index.
        """
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        with self._lock:
            snapshot = self._snapshot
            previous = self._check_owner(folder)
            for segment in snapshot.segments:
                for array in _SEGMENT_ARRAYS:
                    _write_once(folder, _file(segment.number, array), getattr(segment, array))
            for piece in (*snapshot.vocabulary_pieces, *snapshot.tombstones):
                for array, values in piece.arrays.items():
                    _write_once(folder, _file(piece.number, array), values)
            state = self._state(snapshot)
            write_state(folder, COMPONENT, FORMAT_VERSION, state)
            if previous is not None:
                retire(folder, _files_of(previous), _files_of(state))
            self._snapshot = replace(snapshot, segments=tuple(_mapped(folder, s) for s in snapshot.segments))

    @classmethod
    def open(cls, folder: PathLike) -> Postings:
        """The postings written into ``folder``, segments memory-mapped.

        Raises:
            PersistError: the state or a file is missing, damaged or of another
                format version (the message names it and the fix).
        """
        folder = Path(folder)
        state = read_state(folder, COMPONENT, FORMAT_VERSION)
        try:
            segments = tuple(_mapped(folder, _Segment(n, first, *_EMPTY)) for n, first in state["segments"])
            vocabulary_pieces = tuple(
                _Piece(n, {name: open_array(folder, _file(n, name), mmap=False) for name in ("vocab", "vocab_offsets")})
                for n in state["vocabulary_pieces"]
            )
            tombstones = tuple(_Piece(n, {"dead": open_array(folder, _file(n, "dead"))}) for n in state["tombstones"])
            row_count, live_rows = int(state["row_count"]), int(state["live_rows"])
            live_length, next_number = int(state["live_length"]), int(state["next_number"])
            identity = str(state["identity"])
        except (KeyError, TypeError, ValueError) as exc:
            raise PersistError(
                f"{folder / (COMPONENT + '.state.json')} is damaged ({exc!r}); restore it or build the index again"
            ) from exc
        postings = cls()
        for piece in vocabulary_pieces:
            for token in _decoded(piece):
                postings._vocabulary[token] = len(postings._vocabulary)
        dead = None
        if tombstones:
            dead = np.zeros(row_count, dtype=bool)
            for piece in tombstones:
                dead[piece.arrays["dead"]] = True
        expected = sum(len(s.lengths) for s in segments)
        if expected != row_count or (dead is not None and row_count - int(dead.sum()) != live_rows):
            raise PersistError(f"{folder}: the postings' segments do not add up to their state; restore the folder")
        postings._identity = identity
        postings._snapshot = _Snapshot(
            segments=segments,
            vocabulary_pieces=vocabulary_pieces,
            tombstones=tombstones,
            vocabulary_size=len(postings._vocabulary),
            row_count=row_count,
            dead=dead,
            live_rows=live_rows,
            live_length=live_length,
            next_number=next_number,
        )
        return postings

    def _state(self, snapshot: _Snapshot) -> dict[str, Any]:
        """The small JSON state: which files make the postings, and the live statistics."""
        return {
            "identity": self._identity,
            "segments": [[s.number, s.first_row] for s in snapshot.segments],
            "vocabulary_pieces": [p.number for p in snapshot.vocabulary_pieces],
            "tombstones": [p.number for p in snapshot.tombstones],
            "row_count": snapshot.row_count,
            "live_rows": snapshot.live_rows,
            "live_length": snapshot.live_length,
            "next_number": snapshot.next_number,
        }

    def _check_owner(self, folder: Path) -> dict[str, Any] | None:
        """Refuse a folder holding another postings: its files would be taken for ours.

        Returns:
            The state these postings wrote in ``folder`` before (``None``: none).
        """
        if not (folder / f"{COMPONENT}.state.json").exists():
            return None
        state = read_state(folder, COMPONENT, FORMAT_VERSION)
        if state.get("identity") != self._identity:
            raise PersistError(
                f"{folder} holds the postings of another index; write into an empty folder or remove that one first"
            )
        return state


# -- building and merging segments ---------------------------------------
_EMPTY = tuple(np.zeros(0, dtype=np.int32) for _ in _SEGMENT_ARRAYS)


def _segment(
    number: int, first_row: int, term_ids: np.ndarray, local_rows: np.ndarray, lengths: np.ndarray
) -> _Segment:
    """A segment from one posting per token occurrence (term id, local row): counted into
    term frequencies and sorted by term, then row (bm25s' CSC order)."""
    width = max(len(lengths), 1)
    keys, tf = np.unique(term_ids * width + local_rows, return_counts=True)
    posting_terms = keys // width
    terms, starts = np.unique(posting_terms, return_index=True)
    indptr = np.append(starts, len(keys)).astype(np.int64)
    return _Segment(
        number=number,
        first_row=first_row,
        terms=terms.astype(np.int32),
        indptr=indptr,
        rows=(keys % width).astype(np.int32),
        tf=_smallest_unsigned(tf),
        lengths=lengths,
    )


def _merged(snapshot: _Snapshot, new_ids: np.ndarray, number: int) -> _Segment | None:
    """One segment over the live rows (renumbered by ``new_ids``) of all segments.

    Postings are scattered straight into place: a term's postings from an
    earlier segment precede a later one's, and rows ascend within a segment,
    so the merge is in (term, row) order without sorting all postings.
    """
    if not snapshot.live_rows:
        return None
    dead = snapshot.dead
    kept: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # each segment's posting terms, new rows, tf
    counts = np.zeros(snapshot.vocabulary_size, dtype=np.int64)
    for segment in snapshot.segments:
        posting_terms = np.repeat(segment.terms.astype(np.int64), np.diff(segment.indptr))
        rows = segment.rows.astype(np.int64) + segment.first_row
        tf = np.asarray(segment.tf)
        if dead is not None:
            alive = ~dead[rows]
            posting_terms, rows, tf = posting_terms[alive], rows[alive], tf[alive]
        counts += np.bincount(posting_terms, minlength=snapshot.vocabulary_size)
        kept.append((posting_terms, new_ids[rows], tf))
    indptr_full = np.zeros(snapshot.vocabulary_size + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr_full[1:])
    total = int(indptr_full[-1])
    out_rows = np.empty(total, dtype=np.int32)
    out_tf = np.empty(total, dtype=np.uint32)
    next_free = indptr_full[:-1].copy()
    for posting_terms, rows, tf in kept:
        segment_counts = np.bincount(posting_terms, minlength=snapshot.vocabulary_size)
        starts = np.cumsum(segment_counts) - segment_counts
        destination = next_free[posting_terms] + (np.arange(len(posting_terms)) - starts[posting_terms])
        out_rows[destination] = rows
        out_tf[destination] = tf
        next_free += segment_counts
    present = np.flatnonzero(counts)
    lengths = np.concatenate([segment.lengths for segment in snapshot.segments])
    if dead is not None:
        lengths = lengths[~dead]
    return _Segment(
        number=number,
        first_row=0,
        terms=present.astype(np.int32),
        indptr=np.append(indptr_full[present], total).astype(np.int64),
        rows=out_rows,
        tf=_smallest_unsigned(out_tf),
        lengths=np.asarray(lengths, dtype=np.int32),
    )


def _run_merged(snapshot: _Snapshot, run: list[_Segment], number: int) -> _Segment:
    """One segment holding consecutive segments ``run`` (no row of them deleted), rows kept."""
    first = run[0].first_row
    count = sum(len(segment.lengths) for segment in run)
    local = np.arange(snapshot.row_count, dtype=np.int64) - first  # global row -> row of the merged segment
    part = replace(snapshot, segments=tuple(run), dead=None, live_rows=count)
    merged = _merged(part, local, number)
    assert merged is not None  # the run holds rows
    return replace(merged, first_row=first)


def _smallest_unsigned(values: np.ndarray) -> np.ndarray:
    """``values`` (non-negative counts) in the smallest unsigned type holding them: most
    term frequencies are below 256, so a byte per posting instead of four."""
    top = int(values.max()) if len(values) else 0
    for dtype in (np.uint8, np.uint16):
        if top <= np.iinfo(dtype).max:
            return values.astype(dtype)
    return values.astype(np.uint32)


def _vocabulary_piece(number: int, new_terms: list[str]) -> _Piece:
    """The terms an append introduced as a UTF-8 blob and code-point offsets (no pickle).

    Raises:
        TypeError: a token is not a string.
        ValueError: a token cannot be encoded as UTF-8.
    """
    for token in new_terms:
        if not isinstance(token, str):
            raise TypeError(f"tokens must be strings, got {token!r} ({type(token).__name__}); tokenise the text first")
    text = "".join(new_terms)
    try:
        blob = text.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = next(t for t in new_terms if not _encodable(t))
        raise ValueError(
            f"token {bad!r} cannot be stored as UTF-8 (a lone surrogate); replace it, "
            "as MultilingualTokenizer does with U+FFFD"
        ) from exc
    offsets = np.zeros(len(new_terms) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, new_terms), dtype=np.int64, count=len(new_terms)), out=offsets[1:])
    return _Piece(number, {"vocab": np.frombuffer(blob, dtype=np.uint8), "vocab_offsets": offsets})


def _encodable(token: str) -> bool:
    try:
        token.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _decoded(piece: _Piece) -> list[str]:
    """The terms of a vocabulary piece, in id order."""
    text = piece.arrays["vocab"].tobytes().decode("utf-8")
    offsets = piece.arrays["vocab_offsets"].tolist()
    return [text[start:end] for start, end in zip(offsets[:-1], offsets[1:], strict=True)]


def _lengths_of(segments: Sequence[_Segment], rows: np.ndarray) -> np.ndarray:
    """Token counts of global ``rows`` (sorted, existing)."""
    firsts = np.asarray([s.first_row for s in segments], dtype=np.int64)
    which = np.searchsorted(firsts, rows, side="right") - 1
    lengths = np.empty(len(rows), dtype=np.int64)
    for index in np.unique(which):
        mine = which == index
        segment = segments[int(index)]
        lengths[mine] = segment.lengths[rows[mine] - segment.first_row]
    return lengths


# -- scoring ---------------------------------------------------------------
def _scored(
    snapshot: _Snapshot,
    vocabulary: dict[str, int],
    query_tokens: list[str],
    restriction: RowSet | None,
    k: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Rows matching a query token (ascending, live, allowed by ``restriction``) and their scores;
    with ``k``, only the rows that may be among the ``k`` best (every row tied with the
    ``k``-th best stays).

    Per query token, in query order (repeats included): its live postings in
    every segment give its document frequency, hence its float32 idf; each
    posting's score is bm25s' (:func:`posting_scores`), summed into the row's
    float32 score, so every sum is the one a fresh bm25s build computes.
    """
    if not snapshot.live_rows:
        return _NO_ROWS, _NO_SCORES
    average = np.float64(snapshot.live_length) / np.float64(snapshot.live_rows)  # np.mean's arithmetic
    known = [
        term_id
        for token in query_tokens
        if (term_id := vocabulary.get(token)) is not None and term_id < snapshot.vocabulary_size
    ]  # a term added after this snapshot is unknown to it
    distinct = list(dict.fromkeys(known))
    ids = np.asarray(distinct, dtype=np.int64)
    entries = [segment.entries(ids) for segment in snapshot.segments]
    seen = {
        term_id: _term_scores(snapshot, term_id, [int(found[i]) for found in entries], restriction, average)
        for i, term_id in enumerate(distinct)
    }
    parts = [seen[term_id] for term_id in known if len(seen[term_id][0])]
    if not parts:
        return _NO_ROWS, _NO_SCORES
    if sum(len(rows) for rows, _ in parts) * _DENSE_POSTINGS >= snapshot.row_count:
        # many postings: summed in one array over every row (the same float32 additions in the
        # same order), where sorting them and a binary search per posting cost more at 2M rows
        summed = np.zeros(snapshot.row_count, dtype=np.float32)
        for rows, part in parts:
            summed[rows] += part  # rows are distinct within a term
        matched = np.concatenate([rows for rows, _ in parts])  # a row once per part it is in
        enough = None if k is None else k * len(parts)
        if enough is not None and len(matched) > enough:
            # the rows that may be among the k best, without a pass over every row (2.5 ms at 2M):
            # the (k * parts)-th best entry is at most the k-th best row's sum, since the rows
            # above that sum are fewer than k and each is in at most every part
            values = summed[matched]
            matched = matched[values >= np.partition(values, len(values) - enough)[len(values) - enough]]
        touched = sorted_unique(matched)
        return touched, summed[touched]
    touched = sorted_unique(np.concatenate([rows for rows, _ in parts]))
    scores = np.zeros(len(touched), dtype=np.float32)
    for rows, part in parts:
        scores[np.searchsorted(touched, rows)] += part  # rows are distinct within a term
    return touched, scores


def _term_scores(
    snapshot: _Snapshot, term_id: int, entries: list[int], restriction: RowSet | None, average: np.float64
) -> tuple[np.ndarray, np.ndarray]:
    """Global rows and float32 BM25 scores of one term's live postings (allowed by ``restriction``).

    A restriction to far fewer rows than the term has postings (the chunks of
    routed documents) looks its rows up in the postings, one binary search
    each, instead of reading every posting: 5 of a 2M-row query's 18 ms of
    BM25 went to a routed search of 160 rows. The scores are the same.

    Once rows are deleted, a term's live postings (its document frequency)
    need every posting read; the snapshot keeps the count from then on.

    Args:
        term_id: the term.
        entries: the term's entry in each segment (:meth:`_Segment.entries`, ``-1``: absent).
    """
    present = [(s, entry) for s, entry in zip(snapshot.segments, entries, strict=True) if entry >= 0]
    if not present:
        return _NO_ROWS, _NO_SCORES
    postings = sum(int(s.indptr[entry + 1] - s.indptr[entry]) for s, entry in present)
    if restriction is not None and len(restriction) * _LOOKUP_SHARE < postings:
        live = postings if snapshot.dead is None else snapshot.live_postings.get(term_id)
        if live is not None:
            rows, tf, lengths = _looked_up(present, restriction.rows)
            if snapshot.dead is not None:
                alive = ~snapshot.dead[rows]
                rows, tf, lengths = rows[alive], tf[alive], lengths[alive]
            idf = np.float32(_IDF(live, N=snapshot.live_rows))
            return rows, posting_scores(_PARAMETERS, idf, tf, lengths, average)
    found = [s.postings(entry) for s, entry in present]
    rows = np.concatenate([p[0] for p in found])
    tf = np.concatenate([p[1] for p in found])
    lengths = np.concatenate([p[2] for p in found])
    if snapshot.dead is not None:
        alive = ~snapshot.dead[rows]
        rows, tf, lengths = rows[alive], tf[alive], lengths[alive]
    snapshot.live_postings[term_id] = len(rows)
    if not len(rows):
        return _NO_ROWS, _NO_SCORES
    idf = np.float32(_IDF(len(rows), N=snapshot.live_rows))
    if restriction is not None:
        inside = restriction.mask[rows]
        rows, tf, lengths = rows[inside], tf[inside], lengths[inside]
    return rows, posting_scores(_PARAMETERS, idf, tf, lengths, average)


def _looked_up(present: list[tuple[_Segment, int]], wanted: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows of ``wanted`` (sorted global ids) holding one term, with their term frequencies and
    lengths: per segment, each wanted row of it searched among the term's rows there."""
    rows, tf, lengths = [], [], []
    for segment, entry in present:
        start, end = int(segment.indptr[entry]), int(segment.indptr[entry + 1])
        mine = wanted[
            np.searchsorted(wanted, segment.first_row) : np.searchsorted(
                wanted, segment.first_row + len(segment.lengths)
            )
        ]
        if not len(mine):
            continue
        local = mine - segment.first_row
        term_rows = segment.rows[start:end]
        at = np.minimum(np.searchsorted(term_rows, local), len(term_rows) - 1)
        hit = term_rows[at] == local
        rows.append(mine[hit])
        tf.append(segment.tf[start + at[hit]])
        lengths.append(segment.lengths[local[hit]])
    if not rows:
        return _NO_ROWS, np.zeros(0, dtype=np.uint8), np.zeros(0, dtype=np.int32)
    return np.concatenate(rows), np.concatenate(tf), np.concatenate(lengths)


def _best(rows: np.ndarray, scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best of ``rows`` (ascending) by score, ties by row; scores of 0 left out."""
    positive = scores > 0
    rows, scores = rows[positive], scores[positive]
    if len(scores) > k:
        kth = np.partition(scores, len(scores) - k)[len(scores) - k]  # the k-th largest score
        keep = scores >= kth  # every row tied with it stays, so the row order decides
        rows, scores = rows[keep], scores[keep]
    order = np.argsort(-scores, kind="stable")[:k]
    return rows[order], scores[order]


# -- argument checks ---------------------------------------------------------
def _tokens(query_tokens: Sequence[str]) -> list[str]:
    """``query_tokens`` as a list, refusing a plain string (which would score its characters)."""
    if isinstance(query_tokens, (str, bytes)):
        raise TypeError(
            f"query_tokens must be a list of tokens, got the string {query_tokens[:40]!r}; tokenise the query first"
        )
    return list(query_tokens)


def _file(number: int, array: str) -> str:
    """The file stem of one array of segment or piece ``number``: ``postings-000003-rows``."""
    return f"{segment_name(COMPONENT, number)}-{array}"


def _write_once(folder: Path, name: str, array: np.ndarray) -> None:
    """Write ``array`` unless ``folder`` holds it already (segment files never change)."""
    if not (folder / f"{name}.npy").exists():
        write_array(folder, name, array)


def _mapped(folder: Path, segment: _Segment) -> _Segment:
    """``segment`` read from its files in ``folder``, memory-mapped, checked for shape.

    Raises:
        PersistError: a file is missing or its shape does not fit the others.
    """
    # plain ndarray views of the maps: np.memmap's Python-level __getitem__ and __array_finalize__
    # ran on every slice of every term (400k calls, a fifth of a query's time at 2M rows)
    arrays = {name: open_array(folder, _file(segment.number, name)).view(np.ndarray) for name in _SEGMENT_ARRAYS}
    indptr = arrays["indptr"]
    if (
        len(indptr) != len(arrays["terms"]) + 1
        or len(arrays["rows"]) != len(arrays["tf"])
        or int(indptr[-1]) != len(arrays["rows"])
    ):
        raise PersistError(
            f"{folder / _file(segment.number, 'indptr')}.npy does not fit its segment's other files; "
            "restore the folder or build the index again"
        )
    return replace(
        segment,
        terms=arrays["terms"],
        indptr=indptr,
        rows=arrays["rows"],
        tf=arrays["tf"],
        lengths=arrays["lengths"],
    )


def _files_of(state: dict[str, Any]) -> set[str]:
    """The files a postings state reads."""
    names = [_file(int(number), array) for number, _ in state.get("segments", []) for array in _SEGMENT_ARRAYS]
    names += [_file(int(number), "dead") for number in state.get("tombstones", [])]
    names += [
        _file(int(number), array)
        for number in state.get("vocabulary_pieces", [])
        for array in ("vocab", "vocab_offsets")
    ]
    return {f"{name}.npy" for name in names}


def _row_set(rows: Any, row_count: int, caller: str) -> RowSet:
    """``rows`` as a :class:`RowSet` of these postings' rows: one a store selected, or ids a caller gave."""
    if isinstance(rows, RowSet):
        rows.check_row_count(row_count, caller)
        return rows
    return RowSet.checked(rows, row_count, caller)
