"""columnar.rowsets: a filter's rows, checked once, in every form a search needs, made once per
owner and state."""

import numpy as np
import pytest

from llama_index_ext_recursive.columnar.rowsets import RowIdError, RowSet, checked_ids


def test_checked_ids_keep_their_order_and_a_missing_row_is_both_an_index_and_a_value_error():
    assert checked_ids([3, 1, 3], 4, "search").tolist() == [3, 1, 3]
    assert RowSet.checked([3, 1, 3], 4, "search").rows.tolist() == [1, 3]
    with pytest.raises(RowIdError, match="search: row 4 does not exist: row ids run from 0 to 3") as raised:
        checked_ids([0, 4], 4, "search")
    assert isinstance(raised.value, IndexError) and isinstance(raised.value, ValueError)
    with pytest.raises(ValueError, match="one-dimensional sequence of integer row ids"):
        checked_ids([[1]], 4, "search")
    with pytest.raises(RowIdError, match="there are no rows"):
        checked_ids([0], 0, "search")


def test_a_row_set_is_read_only_and_its_mask_and_derived_forms_are_made_once_per_state():
    rows = RowSet.checked([5, 0, 2], 6, "t")
    assert rows.mask.tolist() == [True, False, True, False, False, True] and rows.mask is rows.mask
    with pytest.raises(ValueError):
        rows.rows[0] = 1
    made = []
    owner, state = object(), np.zeros(1)

    def make():
        made.append(1)
        return len(made)

    assert rows.derived("live", owner, state, make) == 1
    assert rows.derived("live", owner, state, make) == 1  # kept
    assert rows.derived("lists", owner, state, make) == 2  # another form
    assert rows.derived("live", owner, np.zeros(1), make) == 3  # the owner changed state
    assert RowSet.of_mask(np.array([False, True, True])).rows.tolist() == [1, 2]


def test_among_keeps_the_rows_of_the_set_that_were_named():
    rows = RowSet.checked([2, 5, 9], 12, "t")
    assert rows.among(np.array([9, 1, 2, 9, 11])).rows.tolist() == [2, 9]
    assert rows.among(np.array([], dtype=np.int64)).rows.tolist() == []
    assert RowSet.checked([], 12, "t").among(np.array([3])).rows.tolist() == []
