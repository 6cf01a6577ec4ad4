"""Term segments: a PostgreSQL level's BM25 postings packed by term, so a BM25 search of the
whole level reads each query term's postings as a few values and scores them in the client.

Why: such a search reads every posting of the query's terms, and their number grows with the
level (2M chunks, an 8-word query: 194k postings). Summed by row in one SQL statement that took
140 ms of the server's CPU, most of it in the hash table of 186k rows; the same postings read
packed (16 bytes each, 3 MB) and summed by numpy took about 20 ms, most of it in the client,
which app servers scale out while the database server is shared (docs/BENCHMARKS.md).

The postings table stays the truth: a routed search reads it by document, and segments are
rebuilt from it. Beside it a level keeps:

* ``name_segments``: per (term, segment), the term's postings of the segment's rows packed in
  ``seq`` order, each as ``seq`` (int8), ``tf`` and ``length`` (int4), big-endian: PostgreSQL's
  own ``int8send`` / ``int4send``, so the server packs them (:data:`POSTING`).
* in the state row, ``compacted_seq``: rows up to it are in segments, and later rows (the tail)
  are read from the postings table by its ``(term, seq)`` index at query time; ``segments``:
  each segment's id and rows, oldest first; ``dead_rows``: rows deleted since they were packed.
  Their postings stay in the segments as tombstones: a hit whose ``seq`` has no row any more is
  dropped when hits are looked up.

Upkeep runs at the end of every write, in its transaction (writers take turns on the state
row; readers see the segments before or after, whole): the tail is packed into a new segment
once it holds :data:`TAIL_ROWS` rows; :data:`MERGE_FAN` newest segments of one size tier are
concatenated into one, so over a build each posting is rewritten a few times (Lucene's log
merge policy); once dead rows pass a quarter of the live ones the segments are rebuilt from
the postings, which drops them.
"""

from __future__ import annotations

import io
import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
from sqlalchemy import (
    Column,
    Integer,
    LargeBinary,
    MetaData,
    Table,
    Text,
    bindparam,
    delete,
    func,
    insert,
    literal,
    literal_column,
    select,
    union_all,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY, aggregate_order_by
from sqlalchemy.engine import Connection

__all__ = [
    "MERGE_FAN",
    "POSTING",
    "TAIL_ROWS",
    "Found",
    "Segments",
    "best_first",
    "bm25_by_row",
    "read_found",
    "segments_table",
]

TAIL_ROWS = 20_000  # rows added since the last segment that a write packs into a new one
MERGE_FAN = 8  # segments of one size tier merged into one
POSTING = np.dtype([("seq", ">i8"), ("tf", ">i4"), ("length", ">i4")])  # one packed posting
_TAIL = 2**31 - 1  # the segment number the tail's rows carry in a search's answer (after every segment)


def segments_table(meta: MetaData, name: str) -> Table:
    """The ``name_segments`` table (see the module docstring)."""
    return Table(
        f"{name}_segments",
        meta,
        Column("term", Text, primary_key=True),
        Column("segment", Integer, primary_key=True),
        Column("postings", LargeBinary, nullable=False),
    )


@dataclass(frozen=True)
class Segments:
    """The segments of one level: its rows, postings, terms and state tables, and its segments."""

    level: Table
    postings: Table
    terms: Table
    state: Table
    segments: Table

    # ------------------------------------------------------------------ reads
    def search(self) -> Any:
        """The statement a BM25 search of the whole level runs (parameters ``terms`` and
        ``counts``): per query term with live rows, its count in the query ``n``, its ``df``, and
        its postings, a row per segment and one for the tail (``postings`` ``NULL`` when the tail
        has none), each row with the level's ``live_rows`` and ``total_length``; in (term,
        segment) order. One statement: one snapshot of segments, tail and statistics."""
        s, p = self.state, self.postings
        asked = (
            func.unnest(bindparam("terms", type_=ARRAY(Text)), bindparam("counts", type_=ARRAY(Integer)))
            .table_valued("term", "n")
            .render_derived(name="asked")
        )
        known = (
            select(asked.c.term, asked.c.n, self.terms.c.df)
            .select_from(asked.join(self.terms, self.terms.c.term == asked.c.term))
            .where(self.terms.c.df > 0)
            .cte("known")
            .prefix_with("MATERIALIZED")
        )
        stats = select(s.c.live_rows, s.c.total_length, s.c.compacted_seq).cte("stats").prefix_with("MATERIALIZED")
        packed = select(
            known.c.term, known.c.n, known.c.df, self.segments.c.segment, self.segments.c.postings
        ).select_from(known.join(self.segments, self.segments.c.term == known.c.term))
        tail = (
            select(_packed(p))
            .where(p.c.term == known.c.term, p.c.seq > select(stats.c.compacted_seq).scalar_subquery())
            .scalar_subquery()
        )
        tails = select(
            known.c.term, known.c.n, known.c.df, literal(_TAIL, Integer).label("segment"), tail.label("postings")
        )
        found = union_all(packed, tails).subquery("found")
        return (
            select(found, stats.c.live_rows, stats.c.total_length)
            .select_from(found.join(stats, literal(True)))
            .order_by(found.c.term, found.c.segment)  # the same sums in the same order, every time
        )

    # ------------------------------------------------------------------ writes
    def deleted(self, conn: Connection, seqs: Sequence[int]) -> None:
        """Count the rows of ``seqs``, just deleted, that segments still hold."""
        s = self.state
        compacted = conn.execute(select(s.c.compacted_seq)).scalar_one()
        dead = sum(1 for seq in seqs if seq <= compacted)
        if dead:
            conn.execute(update(s).values(dead_rows=s.c.dead_rows + dead))

    def upkeep(self, conn: Connection) -> None:
        """After a write: rebuild when dead rows are many, else pack a long tail and merge."""
        s = self.state
        state = conn.execute(select(s.c.compacted_seq, s.c.segments, s.c.dead_rows, s.c.live_rows)).one()
        if state.dead_rows >= max(TAIL_ROWS, state.live_rows // 4):
            self.rebuild(conn)
            return
        level = self.level
        tail, last = conn.execute(
            select(func.count(), func.max(level.c.seq)).where(level.c.seq > state.compacted_seq)
        ).one()
        if tail < TAIL_ROWS:
            return
        listed = [dict(segment) for segment in state.segments]
        number = _next_number(listed)
        p = self.postings
        # the tail's postings by document (the postings' key starts with doc_id; their (term, seq)
        # index would be read whole to find the recent rows of every term)
        recent = select(level.c.doc_id).where(level.c.seq > state.compacted_seq).distinct().subquery("recent")
        packed = (
            select(p.c.term, literal(number, Integer), _packed(p))
            .select_from(recent.join(p, p.c.doc_id == recent.c.doc_id))
            .where(p.c.seq > state.compacted_seq)
            .group_by(p.c.term)
        )
        conn.execute(insert(self.segments).from_select(["term", "segment", "postings"], packed))
        listed.append({"id": number, "rows": int(tail)})
        listed = self._merged(conn, listed)
        conn.execute(update(s).values(compacted_seq=last, segments=listed))

    def _merged(self, conn: Connection, listed: list[dict[str, int]]) -> list[dict[str, int]]:
        """``listed`` after merging its newest :data:`MERGE_FAN` segments while they share a tier."""
        while len(listed) >= MERGE_FAN and len({_tier(s["rows"]) for s in listed[-MERGE_FAN:]}) == 1:
            merging, listed = listed[-MERGE_FAN:], listed[:-MERGE_FAN]
            number = _next_number(merging + listed)
            numbers = bindparam("numbers", [m["id"] for m in merging], type_=ARRAY(Integer))
            g = self.segments
            joined = (
                select(
                    g.c.term,
                    literal(number, Integer),
                    func.string_agg(g.c.postings, aggregate_order_by(literal_column("''::bytea"), g.c.segment)),
                )
                .where(g.c.segment == func.any(numbers))
                .group_by(g.c.term)
            )
            conn.execute(insert(g).from_select(["term", "segment", "postings"], joined))
            conn.execute(delete(g).where(g.c.segment == func.any(numbers)))
            listed.append({"id": number, "rows": sum(m["rows"] for m in merging)})
        return listed

    def rebuild(self, conn: Connection) -> None:
        """All segments made again as one from the postings table: what deleted rows left in them
        is gone. Readers meanwhile read the old ones (a ``DELETE``, not a ``TRUNCATE``, which
        would make them wait). Minutes at millions of rows."""
        g, p, s = self.segments, self.postings, self.state
        number = _next_number(list(conn.execute(select(s.c.segments)).scalar_one()))
        conn.execute(delete(g))
        packed = select(p.c.term, literal(number, Integer), _packed(p)).group_by(p.c.term)
        conn.execute(insert(g).from_select(["term", "segment", "postings"], packed))
        rows, last = conn.execute(select(func.count(), func.max(self.level.c.seq))).one()
        listed = [{"id": number, "rows": int(rows)}] if rows else []
        conn.execute(
            update(s).values(compacted_seq=func.greatest(s.c.compacted_seq, last or 0), segments=listed, dead_rows=0)
        )


def _packed(postings: Table) -> Any:
    """The aggregate packing a group of postings in ``seq`` order (:data:`POSTING`)."""
    p = postings.c
    one = func.int8send(p.seq).op("||")(func.int4send(p.tf)).op("||")(func.int4send(p.length))
    return func.string_agg(one, aggregate_order_by(literal_column("''::bytea"), p.seq))


def _tier(rows: int) -> int:
    """A segment's size tier: 0 up to :data:`MERGE_FAN` times :data:`TAIL_ROWS` rows, then 1 ..."""
    return max(0, int(math.log(max(rows, 1) / TAIL_ROWS, MERGE_FAN)))


def _next_number(listed: list[dict[str, int]]) -> int:
    return max((s["id"] for s in listed), default=-1) + 1


class Found(NamedTuple):
    """A row of :meth:`Segments.search`: one query term's postings of one segment, or of the tail."""

    term: str
    n: int
    df: int
    postings: memoryview | None
    live_rows: int
    total_length: int


_COPY_SIGNATURE = b"PGCOPY\n\xff\r\n\x00"


def read_found(conn: Connection, sql: str, params: dict[str, Any]) -> list[Found]:
    """The rows of the search statement (``sql`` compiled for the driver, with ``params``), read
    by ``COPY (...) TO STDOUT (FORMAT binary)``: psycopg2 reads ``bytea`` as hex text, which took
    20 of the 23 ms of reading a 2M-chunk search's 3 MB of postings; binary, 2 to 3 ms. The
    parameters are bound by the driver (``mogrify``: its own quoting, as for any statement)."""
    cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    try:
        query = cursor.mogrify(sql, params)
        out = io.BytesIO()
        cursor.copy_expert(b"COPY (" + query + b") TO STDOUT (FORMAT binary)", out)
    finally:
        cursor.close()
    return [
        Found(
            term=_text(term),
            n=_integer(n),
            df=_integer(df),
            postings=postings,
            live_rows=_integer(live),
            total_length=_integer(total),
        )
        for term, n, df, _segment, postings, live, total in _binary_rows(out.getbuffer())
    ]


def _integer(field: memoryview | None) -> int:
    return int.from_bytes(_present(field), "big", signed=True)


def _text(field: memoryview | None) -> str:
    return bytes(_present(field)).decode()


def _present(field: memoryview | None) -> memoryview:
    if field is None:
        raise ValueError("a BM25 search read NULL where a term or the level's statistics should be")
    return field


def _binary_rows(data: memoryview) -> list[list[memoryview | None]]:
    """The fields of each row of PostgreSQL's binary COPY format (``None``: NULL)."""
    if bytes(data[: len(_COPY_SIGNATURE)]) != _COPY_SIGNATURE:
        raise ValueError("not PostgreSQL's binary COPY format")
    position = len(_COPY_SIGNATURE) + 4  # the flags
    (extension,) = struct.unpack_from(">i", data, position)
    position += 4 + extension
    rows: list[list[memoryview | None]] = []
    while True:
        (count,) = struct.unpack_from(">h", data, position)
        position += 2
        if count == -1:
            return rows
        row: list[memoryview | None] = []
        for _ in range(count):
            (size,) = struct.unpack_from(">i", data, position)
            position += 4
            if size == -1:
                row.append(None)
            else:
                row.append(data[position : position + size])
                position += size
        rows.append(row)


def bm25_by_row(found: Sequence[Found], k1: float, b: float) -> tuple[np.ndarray, np.ndarray]:
    """BM25 of each row the postings in ``found`` (:meth:`Segments.search`'s rows) match:
    ``(seqs, scores)``, ``seqs`` ascending, in bm25s' arithmetic (method ``lucene``) in double
    precision, as the SQL of a routed search computes it."""
    if not found:
        return np.zeros(0, np.int64), np.zeros(0, np.float64)
    live, total = float(found[0].live_rows), float(found[0].total_length)
    fixed, per_token = k1 * (1 - b), k1 * b / (total / live)
    seqs, weights = [], []
    for row in found:
        if row.postings is None:
            continue
        postings = np.frombuffer(row.postings, POSTING)
        idf = row.n * math.log(1.0 + (live - row.df + 0.5) / (float(row.df) + 0.5))
        tf = postings["tf"].astype(np.float64)
        seqs.append(postings["seq"].astype(np.int64))
        weights.append(idf * tf / (tf + fixed + per_token * postings["length"]))
    if not seqs:
        return np.zeros(0, np.int64), np.zeros(0, np.float64)
    seq, weight = np.concatenate(seqs), np.concatenate(weights)
    # each term's postings come in seq order: a stable sort merges the runs (5 ms for 194k)
    order = np.argsort(seq, kind="stable")
    seq = seq[order]
    starts = np.flatnonzero(np.r_[True, seq[1:] != seq[:-1]])
    return seq[starts], np.add.reduceat(weight[order], starts)


def best_first(seqs: np.ndarray, scores: np.ndarray, count: int) -> np.ndarray:
    """Positions of the ``count`` best rows (all when ``count`` reaches their number) by score,
    equal scores to the earlier row (the smaller ``seq``)."""
    pick = np.arange(len(scores))
    if count < len(scores):
        cut = np.partition(scores, len(scores) - count)[len(scores) - count]
        pick = np.flatnonzero(scores >= cut)  # ties at the cut included, then ordered by seq
    return pick[np.lexsort((seqs[pick], -scores[pick]))][:count]
