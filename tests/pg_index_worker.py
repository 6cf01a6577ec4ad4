"""Another app process over a recursive index in PostgreSQL, run by tests/test_recursive_postgres.py.

    python tests/pg_index_worker.py MODE '{"host": ..., "name": ..., ...}'

Modes (each opens the index with ``RecursiveSummaryRetriever.from_postgres``):
- ``answers``: print the index's answers to the shared cases as one JSON line;
- ``add``: add ``count`` documents (``seed``, ``prefix``) after the file ``go`` appears, print ``done``;
- ``die-in-add``: start adding them, print ``inside`` once the chunks and the summaries of the
  change are written (the records not yet, the transaction still open), then wait to be killed.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from recursive_cases import NoTieEmbedding, chunk_parser, make_documents, recursive_answers  # noqa: E402

from llama_index_ext_recursive import RecursiveSummaryRetriever  # noqa: E402
from llama_index_ext_recursive.stores.pg_index import PostgresIndexStore  # noqa: E402
from llama_index_ext_recursive.stores.pg_level import PostgresLevelStore  # noqa: E402


def main() -> None:
    mode, args = sys.argv[1], json.loads(sys.argv[2])
    connection = {k: args[k] for k in ("host", "port", "database", "user", "password")}
    store = PostgresIndexStore.from_params(name=args["name"], **connection)
    retriever = RecursiveSummaryRetriever.from_postgres(store, embed_model=NoTieEmbedding(), node_parser=chunk_parser())
    if mode == "answers":
        print(json.dumps(recursive_answers(retriever)), flush=True)
        return
    documents = make_documents(args["count"], seed=args["seed"], prefix=args["prefix"])
    if mode == "die-in-add":
        summaries = store.summaries
        original = PostgresLevelStore._insert

        def insert_then_hang(self, conn, rows):
            original(self, conn, rows)
            if self is summaries:
                print("inside", flush=True)
                time.sleep(600)  # killed here, its transaction open

        PostgresLevelStore._insert = insert_then_hang  # type: ignore[method-assign]
    go = Path(args["go"]) if args.get("go") else None
    deadline = time.monotonic() + 120
    while go is not None and not go.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    retriever.add_documents(documents)
    print("done", flush=True)


if __name__ == "__main__":
    main()
