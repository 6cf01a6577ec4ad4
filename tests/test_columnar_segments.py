"""Segment files: written once, opened memory-mapped, state versioned."""

from __future__ import annotations

import numpy as np
import pytest

from llama_index_ext_recursive.columnar.segments import open_array, read_state, segment_name, write_array, write_state
from llama_index_ext_recursive.persist import PersistError


def test_an_array_round_trips_memory_mapped_and_read_only(tmp_path):
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    write_array(tmp_path, segment_name("vectors", 0), data)
    opened = open_array(tmp_path, "vectors-000000")
    assert isinstance(opened, np.memmap)
    assert np.array_equal(opened, data) and opened.dtype == np.float32
    with pytest.raises(ValueError, match="read-only"):
        opened[0, 0] = 1.0
    assert not isinstance(open_array(tmp_path, "vectors-000000", mmap=False), np.memmap)


def test_a_segment_file_is_never_overwritten(tmp_path):
    write_array(tmp_path, "rows-000000", np.zeros(3))
    with pytest.raises(FileExistsError, match="never overwritten"):
        write_array(tmp_path, "rows-000000", np.ones(3))
    assert np.array_equal(open_array(tmp_path, "rows-000000"), np.zeros(3))
    assert [p.name for p in tmp_path.iterdir()] == ["rows-000000.npy"]  # no temporary left


def test_object_arrays_are_refused_and_never_unpickled(tmp_path):
    with pytest.raises(ValueError, match="Python objects"):
        write_array(tmp_path, "bad", np.array([{"a": 1}], dtype=object))
    np.save(tmp_path / "pickled.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(PersistError, match="pickled.npy is not a readable array file"):
        open_array(tmp_path, "pickled", mmap=False)


def test_missing_or_damaged_array_files_are_named(tmp_path):
    with pytest.raises(PersistError, match="vectors-000001.npy is missing"):
        open_array(tmp_path, "vectors-000001")
    (tmp_path / "torn.npy").write_bytes(b"\x93NUMPY garbage")
    with pytest.raises(PersistError, match="torn.npy is not a readable array file"):
        open_array(tmp_path, "torn")


def test_state_is_versioned_and_another_version_is_refused_with_the_fix(tmp_path):
    write_state(tmp_path, "vectors", 1, {"segments": ["vectors-000000"], "dim": 4})
    assert read_state(tmp_path, "vectors", 1)["segments"] == ["vectors-000000"]
    with pytest.raises(PersistError, match=r"format version 1; this version reads version 2: rebuild"):
        read_state(tmp_path, "vectors", 2)
    write_state(tmp_path, "vectors", 3, {})
    with pytest.raises(PersistError, match=r"version 3; this version reads version 2: upgrade"):
        read_state(tmp_path, "vectors", 2)
    (tmp_path / "postings.state.json").write_text('{"component": "vectors", "version": 1}')
    with pytest.raises(PersistError, match="describes 'vectors', not 'postings'"):
        read_state(tmp_path, "postings", 1)


def test_segment_names_sort_in_segment_order():
    names = [segment_name("postings", n) for n in (10, 2, 0)]
    assert sorted(names) == ["postings-000000", "postings-000002", "postings-000010"]
    with pytest.raises(ValueError, match="start at 0"):
        segment_name("postings", -1)
