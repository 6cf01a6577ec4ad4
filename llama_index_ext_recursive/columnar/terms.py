"""The raw term statistics under a BM25 index, so that it can change without a rebuild.

bm25s keeps, per (token, row), a score computed from the corpus statistics
(row count N, document frequencies, average length) at indexing time, and no
term frequencies: adding or removing one row changes N and the average, so
every stored score is stale and bm25s can only index everything again
(re-tokenising it). :class:`Terms` keeps what those scores are computed
from (term frequencies aligned with bm25s' CSC matrix, row lengths) and adds
Lucene's segments on top: removed rows are tombstones, added rows a delta
segment. A changed index is scored at query time, for the query's tokens
only, with the statistics of the live rows and bm25s' own formulas in bm25s'
own arithmetic (float32 idf, float64 term-frequency part, float32 score and
sum, query-token order), so its scores are identical to those of a fresh
build on the live rows; :meth:`Terms.compacted` merges the segments into one
index from the kept frequencies, never from text.

The index built here is an ordinary ``bm25s.BM25`` (saved and loaded by bm25s),
built by :func:`index_tokens` in vectorised NumPy: the same scores as
``bm25s.BM25().index(tokens)``, without its per-row Python loops.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import bm25s
import numpy as np
from bm25s.scoring import _select_idf_scorer, _select_tfc_scorer

# the one scoring method built here: bm25s' default, with no score for absent terms
METHOD = "lucene"
_INT = np.int32
_NONE = np.zeros(0, dtype=_INT)


@dataclass(frozen=True)
class Terms:
    """Term frequencies and row lengths of a bm25s index, plus segments.

    Immutable: an update returns a new ``Terms`` sharing the arrays it does
    not change, so a query reading the old one is never disturbed.

    Attributes:
        vocab: token -> id of the main segment (bm25s' ``vocab_dict``).
        indptr: per main token id, its slice of ``rows``/``tf`` (bm25s' CSC indptr).
        rows: row of each main posting (bm25s' CSC indices).
        tf: term frequency of each main posting.
        lengths: token count of every row, main then delta.
        main_rows: rows of the main segment (the bm25s index); later rows are the delta.
        extra: token -> id of tokens only the delta holds (ids after ``vocab``'s).
        delta_tokens, delta_rows, delta_tf: the delta's postings, sorted by token then row.
        dead: removed rows (``None``: none).
    """

    vocab: dict[str, int]
    indptr: np.ndarray
    rows: np.ndarray
    tf: np.ndarray
    lengths: np.ndarray
    main_rows: int
    extra: dict[str, int]
    delta_tokens: np.ndarray = field(default_factory=lambda: _NONE)
    delta_rows: np.ndarray = field(default_factory=lambda: _NONE)
    delta_tf: np.ndarray = field(default_factory=lambda: _NONE)
    dead: np.ndarray | None = None

    @property
    def changed(self) -> bool:
        """Whether rows were added or removed since the bm25s index was built."""
        return self.dead is not None or len(self.lengths) > self.main_rows

    def changes(self) -> int:
        """Rows added plus rows removed since the bm25s index was built."""
        return len(self.lengths) - self.main_rows + (0 if self.dead is None else int(self.dead.sum()))

    # -- updates -------------------------------------------------------
    def with_rows(self, added: Sequence[list[str]], removed: Sequence[int]) -> Terms:
        """These statistics with rows ``removed`` marked dead and ``added`` appended
        as delta rows. Cost: the added tokens and the delta, never the main segment.

        Args:
            added: the token list of each added row.
            removed: rows (live ones) to mark removed.
        """
        extra = self.extra
        tokens: list[int] = []
        rows: list[int] = []
        counts: list[int] = []
        first = len(self.lengths)
        for offset, row_tokens in enumerate(added):
            for token, count in Counter(row_tokens).items():
                token_id = self.vocab.get(token)
                if token_id is None:
                    if token not in extra:
                        if extra is self.extra:
                            extra = dict(extra)  # copied once: the old Terms keeps its own
                        extra[token] = len(self.vocab) + len(extra)
                    token_id = extra[token]
                tokens.append(token_id)
                rows.append(first + offset)
                counts.append(count)
        delta_tokens = np.concatenate([self.delta_tokens, np.asarray(tokens, dtype=_INT)])
        delta_rows = np.concatenate([self.delta_rows, np.asarray(rows, dtype=_INT)])
        delta_tf = np.concatenate([self.delta_tf, np.asarray(counts, dtype=_INT)])
        order = np.argsort(delta_tokens, kind="stable")  # rows ascend within a token: appended in row order
        lengths = np.concatenate([self.lengths, np.asarray([len(t) for t in added], dtype=_INT)])
        dead = np.zeros(len(lengths), dtype=bool)
        if self.dead is not None:
            dead[: len(self.dead)] = self.dead
        dead[np.asarray(removed, dtype=np.int64)] = True
        return replace(
            self,
            lengths=lengths,
            extra=extra,
            delta_tokens=delta_tokens[order],
            delta_rows=delta_rows[order],
            delta_tf=delta_tf[order],
            dead=dead if dead.any() else None,
        )

    def compacted(self) -> tuple[bm25s.BM25, Terms]:
        """One bm25s index over the live rows (renumbered in order) from the kept
        frequencies: what a fresh build on those rows holds, without tokenising."""
        main_tokens = np.repeat(np.arange(len(self.indptr) - 1, dtype=_INT), np.diff(self.indptr))
        tokens = np.concatenate([main_tokens, self.delta_tokens])
        rows = np.concatenate([self.rows, self.delta_rows])
        tf = np.concatenate([self.tf, self.delta_tf])
        lengths = self.lengths
        if self.dead is not None:
            live = ~self.dead[rows]
            tokens, rows, tf = tokens[live], rows[live], tf[live]
            renumber = np.cumsum(~self.dead, dtype=np.int64) - 1
            rows = renumber[rows].astype(_INT)
            lengths = lengths[~self.dead]
        order = np.argsort(tokens, kind="stable")  # main rows precede delta rows: (token, row) order
        vocab = {**self.vocab, **self.extra}
        return build_index(vocab, tokens[order], rows[order], tf[order], lengths)

    # -- scoring -------------------------------------------------------
    def scores(self, bm25: bm25s.BM25, query_tokens: Sequence[str]) -> np.ndarray:
        """Scores of every row (dead ones 0) for ``query_tokens``, with the live
        rows' statistics: bm25s' ``get_scores`` on a fresh build, bit for bit.

        Args:
            bm25: the main segment's index (its method, ``k1``, ``b`` and ``delta``).
            query_tokens: the query's tokens, repeats included (each one counts, as in bm25s).
        """
        dead = self.dead
        live_rows = len(self.lengths) - (0 if dead is None else int(dead.sum()))
        live_length = int(self.lengths.sum() if dead is None else self.lengths[~dead].sum())
        scores = np.zeros(len(self.lengths), dtype=np.float32)
        if not live_rows:
            return scores
        average = np.float64(live_length) / np.float64(live_rows)  # np.mean's arithmetic
        main_tokens = len(self.indptr) - 1
        for token in query_tokens:
            token_id = self.vocab.get(token, self.extra.get(token))
            if token_id is None:
                continue
            parts_rows, parts_tf = [], []
            if token_id < main_tokens:
                start, end = self.indptr[token_id], self.indptr[token_id + 1]
                parts_rows.append(self.rows[start:end])
                parts_tf.append(self.tf[start:end])
            start, end = np.searchsorted(self.delta_tokens, [token_id, token_id + 1])
            parts_rows.append(self.delta_rows[start:end])
            parts_tf.append(self.delta_tf[start:end])
            rows, tf = np.concatenate(parts_rows), np.concatenate(parts_tf)
            if dead is not None:
                live = ~dead[rows]
                rows, tf = rows[live], tf[live]
            if not len(rows):
                continue
            idf = np.float32(idf_of(bm25)(len(rows), N=live_rows))
            scores[rows] += posting_scores(bm25, idf, tf, self.lengths[rows], average)
        return scores


def idf_of(bm25: bm25s.BM25) -> Callable[..., Any]:
    """bm25s' idf function for ``bm25``'s method."""
    return _select_idf_scorer(bm25.idf_method)


def posting_scores(
    bm25: bm25s.BM25, idf: np.ndarray, tf: np.ndarray, lengths: np.ndarray, average: np.float64
) -> np.ndarray:
    """bm25s' stored score of postings: float32 idf times the float64 term-frequency
    part (as ``_build_scores_and_indices_for_matrix`` computes it), as float32.

    Args:
        bm25: the index whose method and parameters score.
        idf: the float32 idf of each posting's token (or one for all).
        tf: term frequency of each posting.
        lengths: token count of each posting's row.
        average: the average row length (float64, as ``np.mean`` gives it).
    """
    tfc = _select_tfc_scorer(bm25.method)(
        tf_array=tf.astype(np.float32),
        l_d=lengths.astype(np.float64),
        l_avg=average,
        k1=bm25.k1,
        b=bm25.b,
        delta=bm25.delta,
    )
    return (idf * tfc).astype(np.float32)


def count_tokens(
    corpus_tokens: Sequence[list[str]],
) -> tuple[dict[str, int], np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Vocabulary (first-seen order) and the postings of ``corpus_tokens``:
    token ids, rows and term frequencies sorted by token then row, and row lengths.

    Args:
        corpus_tokens: the token list of each row.
    """
    vocab: dict[str, int] = {}
    flat = [vocab.setdefault(token, len(vocab)) for tokens in corpus_tokens for token in tokens]
    lengths = np.fromiter((len(tokens) for tokens in corpus_tokens), dtype=_INT, count=len(corpus_tokens))
    rows = np.repeat(np.arange(len(corpus_tokens), dtype=np.int64), lengths)
    keys, tf = np.unique(np.asarray(flat, dtype=np.int64) * max(len(corpus_tokens), 1) + rows, return_counts=True)
    width = max(len(corpus_tokens), 1)
    return vocab, (keys // width).astype(_INT), (keys % width).astype(_INT), tf.astype(_INT), lengths


def index_tokens(corpus_tokens: Sequence[list[str]]) -> tuple[bm25s.BM25, Terms]:
    """The bm25s index of ``corpus_tokens`` (as ``bm25s.BM25().index`` builds it) and its :class:`Terms`.

    Args:
        corpus_tokens: the token list of each row.
    """
    return build_index(*count_tokens(corpus_tokens))


def build_index(
    vocab: dict[str, int], tokens: np.ndarray, rows: np.ndarray, tf: np.ndarray, lengths: np.ndarray
) -> tuple[bm25s.BM25, Terms]:
    """A bm25s index from postings sorted by token then row (bm25s' CSC order),
    and its :class:`Terms`: one function for a fresh build and a merge of segments.

    Args:
        vocab: token -> id (ids ``0..len(vocab)-1``).
        tokens, rows, tf: the postings' token ids, rows and term frequencies.
        lengths: token count of each row.
    """
    bm25 = bm25s.BM25(method=METHOD)
    n_rows, n_tokens = len(lengths), len(vocab)
    indptr = np.zeros(n_tokens + 1, dtype=np.int64)
    np.cumsum(np.bincount(tokens, minlength=n_tokens), out=indptr[1:])
    idf_function = idf_of(bm25)
    df = np.diff(indptr)
    idf = np.zeros(n_tokens, dtype=np.float32)  # bm25s' _build_idf_array: a float per token, stored as float32
    for token_id in np.flatnonzero(df):
        idf[token_id] = idf_function(int(df[token_id]), N=n_rows)
    average = np.asarray(lengths, dtype=np.int64).mean() if n_rows else np.float64(0)
    data = posting_scores(bm25, idf[tokens], tf, lengths[rows], average)
    bm25.scores = {"data": data, "indices": rows, "indptr": indptr, "num_docs": n_rows}
    bm25.vocab_dict = vocab
    bm25.unique_token_ids_set = set(vocab.values())
    bm25.nonoccurrence_array = None
    terms = Terms(
        vocab=vocab,
        indptr=indptr,
        rows=rows,
        tf=tf,
        lengths=np.asarray(lengths, dtype=_INT),
        main_rows=n_rows,
        extra={},
    )
    return bm25, terms
