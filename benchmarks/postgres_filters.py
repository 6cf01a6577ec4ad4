"""Filtered query latency: bound filter keys and values (pgvector_store) vs upstream's pasted SQL text.

Binding changes the SQL the planner sees (psycopg2 still inlines values client-side; asyncpg sends
``metadata_ ->> $1`` and lets the server choose custom or generic plans), so this checks that the
routed-documents filter still uses the ref_doc_id index and no filter got slower.
"""
import asyncio, statistics, time
import numpy as np
from llama_index.core.schema import NodeRelationship, RelatedNodeInfo, TextNode
from llama_index.core.vector_stores.types import FilterOperator, MetadataFilter, MetadataFilters, VectorStoreQuery
from llama_index.vector_stores.postgres import PGVectorStore
from llama_index_ext_recursive.stores.pgserver import start_server
from llama_index_ext_recursive.stores.postgres import pgvector_store

N, DOCS, DIM, QUERIES, ROUNDS = 20_000, 400, 64, 200, 3
rng = np.random.default_rng(0)
vectors = rng.normal(size=(N, DIM)).astype(np.float32)
FILTERS = {
    "ref_doc_id IN 5 docs": lambda i: MetadataFilters(filters=[MetadataFilter(
        key="ref_doc_id", value=[f"doc-{(i * 7 + j) % DOCS}" for j in range(5)], operator=FilterOperator.IN)]),
    "year > 2015 AND lang = en": lambda i: MetadataFilters(filters=[
        MetadataFilter(key="year", value=2015, operator=FilterOperator.GT), MetadataFilter(key="lang", value="en")]),
}
queries = [q.tolist() for q in rng.normal(size=(QUERIES, DIM))]

def nodes():
    out = []
    for i, v in enumerate(vectors):
        node = TextNode(id_=f"n{i}", text=f"row {i}", embedding=v.tolist(),
                        metadata={"year": 2000 + i % 25, "lang": "en" if i % 4 else "de"})
        node.relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id=f"doc-{i % DOCS}")
        out.append(node)
    return out

def batch(make):
    return [VectorStoreQuery(query_embedding=q, similarity_top_k=10, filters=make(i)) for i, q in enumerate(queries)]

def sync_ms(store, qs):
    t = time.perf_counter()
    for q in qs: store.query(q)
    return (time.perf_counter() - t) / len(qs) * 1000

async def async_ms(store, qs):
    t = time.perf_counter()
    for q in qs: await store.aquery(q)
    return (time.perf_counter() - t) / len(qs) * 1000

with start_server() as server:
    ours = pgvector_store(**server.params(), table_name="bench", embed_dim=DIM, hnsw=False, iterative_scan=None)
    ours.add(nodes())
    server.execute("ANALYZE data_bench")
    upstream = PGVectorStore.from_params(**server.params(), table_name="bench", embed_dim=DIM)
    stores = {"pgvector_store (bound)": ours, "PGVectorStore (pasted)": upstream}
    loop = asyncio.new_event_loop()  # upstream's async engine works from one loop only
    print(f"{N} rows x {DIM} dims in {DOCS} documents, exact scan, top-10, {QUERIES} sequential queries x "
          f"{ROUNDS} rounds; median ms/query")
    for label, make in FILTERS.items():
        qs = batch(make)
        for store in stores.values():  # warm, and the same rows from both
            assert store.query(qs[0]).ids == ours.query(qs[0]).ids
            loop.run_until_complete(store.aquery(qs[0]))
        results = {name: {"sync": [], "async": []} for name in stores}
        for _ in range(ROUNDS):  # interleaved, so both see the same machine load
            for name, store in stores.items():
                results[name]["sync"].append(sync_ms(store, qs))
                results[name]["async"].append(loop.run_until_complete(async_ms(store, qs)))
        for name, r in results.items():
            print(f"{label:28s} {name:24s} sync {statistics.median(r['sync']):.2f}  "
                  f"async {statistics.median(r['async']):.2f}")
    loop.run_until_complete(ours.close())
