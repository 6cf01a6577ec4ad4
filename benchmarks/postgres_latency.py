"""Per-query latency of pgvector_store against upstream PGVectorStore, on a throw-away PostgreSQL.

One measurement, three cases (``--case``): both stores answer the same queries
over the same table, after a warm-up query; each store's batch of queries is
timed in turn, for ``--rounds`` interleaved rounds, and the median ms per query
is reported.

- ``vector`` (default): ``--rows`` (2,000) random unit vectors x 64 dims, exact
  scan, top-10, sync and async: ``pgvector_store`` (timeouts, pre-ping,
  per-loop engines), the same without pre-ping, and
  ``PGVectorStore.from_params``.
- ``filters``: 20,000 rows in 400 documents, filters bound as parameters
  (``pgvector_store``) against upstream's pasted SQL text. Binding changes the
  SQL the planner sees (psycopg2 still inlines values client-side; asyncpg
  sends ``metadata_ ->> $1`` and lets the server choose custom or generic
  plans), so this checks that the routed-documents filter still uses the
  ref_doc_id index and no filter got slower. Both must return the same rows.
- ``text``: text search by query length, 20,000 rows of 12 words from a
  5,000-word vocabulary (GIN-indexed tsvector): ``pgvector_store``'s balanced
  OR tree against upstream's chain (same rows and ts_rank, checked), how the
  cost grows with the number of distinct words (which sets
  ``max_text_query_words``), and what a 20,000-word query does to each.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/postgres_latency.py
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/postgres_latency.py --case filters
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/postgres_latency.py --case text
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import numpy as np
from harness import cli, postgres, timing
from harness.corpus import random_unit_vectors, vocabulary, word_nodes
from llama_index.core.schema import NodeRelationship, RelatedNodeInfo, TextNode
from llama_index.core.vector_stores.types import (
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryMode,
)

DEFAULT_ROWS = {"vector": 2_000, "filters": 20_000, "text": 20_000}
DIM, DOCS, TEXT_DIM, TEXT_VOCABULARY = 64, 400, 8, 5_000
QUERY_WORDS = {3: 50, 30: 20, 256: 3, 1_000: 2}  # text case: distinct words -> queries per round


def compare(
    stores: dict[str, object], queries: Sequence[VectorStoreQuery], rounds: int, loop: asyncio.AbstractEventLoop | None
) -> dict[str, tuple[float, float | None]]:
    """Median ms/query of each store, sync (and async in ``loop``), interleaved rounds after a warm-up."""
    contestants = {}
    for name, store in stores.items():
        store.query(queries[0])
        contestants[(name, "sync")] = lambda s=store: timing.ms_per_call(s.query, queries)
        if loop is not None:  # upstream's async engine works from one event loop only
            loop.run_until_complete(store.aquery(queries[0]))
            contestants[(name, "async")] = lambda s=store: timing.in_loop(loop, s.aquery)(queries)
    figures = {key: timing.median(values) for key, values in timing.interleaved(contestants, rounds).items()}
    return {name: (figures[(name, "sync")], figures.get((name, "async"))) for name in stores}


def vector_case(server, args, loop) -> None:
    from llama_index.vector_stores.postgres import PGVectorStore

    from llama_index_ext_recursive.stores.postgres import pgvector_store

    rng = np.random.default_rng(0)
    vectors = random_unit_vectors(rng, args.rows, DIM)
    queries = [
        VectorStoreQuery(query_embedding=q.tolist(), similarity_top_k=10)
        for q in random_unit_vectors(rng, args.queries, DIM)
    ]
    params = dict(**server.params(), table_name="bench", embed_dim=DIM)
    ours = pgvector_store(**params, hnsw=False, iterative_scan=None)
    ours.add([TextNode(id_=f"n{i}", text=f"row {i}", embedding=v.tolist()) for i, v in enumerate(vectors)])
    no_ping = pgvector_store(**params, hnsw=False, iterative_scan=None, create_engine_kwargs={"pool_pre_ping": False})
    stores = {
        "pgvector_store": ours,
        "pgvector_store, no pre-ping": no_ping,
        "PGVectorStore.from_params": PGVectorStore.from_params(**params),
    }
    print(
        f"{args.rows} rows x {DIM} dims, exact scan, top-10, {args.queries} sequential queries x "
        f"{args.rounds} rounds; median ms/query"
    )
    for name, (sync, asynchronous) in compare(stores, queries, args.rounds, loop).items():
        print(f"{name:28s} sync {sync:.2f}  async {asynchronous:.2f}")
    loop.run_until_complete(ours.close())
    loop.run_until_complete(no_ping.close())


def filters_case(server, args, loop) -> None:
    from llama_index.vector_stores.postgres import PGVectorStore

    from llama_index_ext_recursive.stores.postgres import pgvector_store

    rng = np.random.default_rng(0)
    nodes = []
    for i, v in enumerate(random_unit_vectors(rng, args.rows, DIM)):
        node = TextNode(
            id_=f"n{i}",
            text=f"row {i}",
            embedding=v.tolist(),
            metadata={"year": 2000 + i % 25, "lang": "en" if i % 4 else "de"},
        )
        node.relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id=f"doc-{i % DOCS}")
        nodes.append(node)
    vectors = [q.tolist() for q in random_unit_vectors(rng, args.queries, DIM)]
    filters = {
        "ref_doc_id IN 5 docs": lambda i: MetadataFilters(
            filters=[
                MetadataFilter(
                    key="ref_doc_id", value=[f"doc-{(i * 7 + j) % DOCS}" for j in range(5)], operator=FilterOperator.IN
                )
            ]
        ),
        "year > 2015 AND lang = en": lambda i: MetadataFilters(
            filters=[
                MetadataFilter(key="year", value=2015, operator=FilterOperator.GT),
                MetadataFilter(key="lang", value="en"),
            ]
        ),
    }
    ours = pgvector_store(**server.params(), table_name="bench", embed_dim=DIM, hnsw=False, iterative_scan=None)
    ours.add(nodes)
    server.execute("ANALYZE data_bench")
    stores = {
        "pgvector_store (bound)": ours,
        "PGVectorStore (pasted)": PGVectorStore.from_params(**server.params(), table_name="bench", embed_dim=DIM),
    }
    print(
        f"{args.rows} rows x {DIM} dims in {DOCS} documents, exact scan, top-10, {args.queries} sequential "
        f"queries x {args.rounds} rounds; median ms/query"
    )
    for label, make in filters.items():
        queries = [
            VectorStoreQuery(query_embedding=q, similarity_top_k=10, filters=make(i)) for i, q in enumerate(vectors)
        ]
        for store in stores.values():  # the same rows from both
            assert store.query(queries[0]).ids == ours.query(queries[0]).ids
        for name, (sync, asynchronous) in compare(stores, queries, args.rounds, loop).items():
            print(f"{label:28s} {name:24s} sync {sync:.2f}  async {asynchronous:.2f}")
    loop.run_until_complete(ours.close())


def text_case(server, args, loop) -> None:  # noqa: ARG001 - text search is timed sync only
    from llama_index.vector_stores.postgres import PGVectorStore

    from llama_index_ext_recursive.stores.postgres import pgvector_store

    words = vocabulary(TEXT_VOCABULARY, "w")
    rng = np.random.default_rng(1)

    def query(text: str) -> VectorStoreQuery:
        return VectorStoreQuery(query_str=text, similarity_top_k=10, mode=VectorStoreQueryMode.TEXT_SEARCH)

    def outcome(store, q) -> str:
        try:
            return f"{timing.seconds(lambda: store.query(q)):.1f} s"
        except Exception as exc:  # noqa: BLE001 - the failure is the figure
            return f"{type(exc).__name__}: {str(exc).splitlines()[0][:60]}"

    params = dict(**server.params(), table_name="tsbench", embed_dim=TEXT_DIM, hybrid_search=True)
    ours = pgvector_store(**params, hnsw=False, max_text_query_words=1_000)
    ours.add(list(word_nodes(args.rows, 1, vocabulary=words, words=12, dim=TEXT_DIM)))
    server.execute("ANALYZE data_tsbench")
    upstream = PGVectorStore.from_params(**params)
    stores = {"pgvector_store (tree)": ours, "PGVectorStore (chain)": upstream}
    print(
        f"{args.rows} rows of 12 words from {TEXT_VOCABULARY}, GIN-indexed tsvector, top-10, median ms/query "
        f"of {args.rounds} rounds"
    )
    for count, per_round in QUERY_WORDS.items():
        queries = [query(" ".join(rng.choice(words, count, replace=False))) for _ in range(per_round)]
        same, theirs = ours.query(queries[0]), upstream.query(queries[0])
        assert sorted(zip(theirs.ids, theirs.similarities)) == sorted(zip(same.ids, same.similarities))
        medians = compare(stores, queries, args.rounds, None)
        print(f"{count:6d} words  " + "  ".join(f"{name} {sync:9.1f}" for name, (sync, _) in medians.items()))
    huge = query(" ".join(f"x{i}" for i in range(20_000)))
    default = pgvector_store(**params, hnsw=False)
    print(
        f"20,000 words (~120 kB): PGVectorStore {outcome(upstream, huge)} | pgvector_store (default limit) "
        f"{outcome(default, huge)}"
    )
    for store in (ours, upstream, default):
        store.client.dispose()


CASES = {"vector": vector_case, "filters": filters_case, "text": text_case}


def main(argv: list[str] | None = None) -> None:
    p = cli.parser(__doc__)
    p.add_argument("--case", choices=list(CASES), default="vector")
    p.add_argument("--rows", type=int, default=None, help="rows in the table (default: 2,000 for vector, else 20,000)")
    p.add_argument("--queries", type=int, default=200, help="queries per batch (vector and filters)")
    cli.add_rounds(p)
    args = p.parse_args(argv)
    args.rows = args.rows or DEFAULT_ROWS[args.case]
    loop = asyncio.new_event_loop()  # upstream's async engine works from one loop only
    with postgres.server() as server:
        CASES[args.case](server, args, loop)


if __name__ == "__main__":
    main()
