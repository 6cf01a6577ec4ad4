"""Per-query latency: pgvector_store (timeouts, pre-ping, per-loop engines) vs upstream PGVectorStore.from_params."""
import asyncio, statistics, time
import numpy as np
from llama_index.core.schema import TextNode
from llama_index.core.vector_stores.types import VectorStoreQuery
from llama_index.vector_stores.postgres import PGVectorStore
from llama_index_ext_recursive.stores.pgserver import start_server
from llama_index_ext_recursive.stores.postgres import pgvector_store

N, DIM, QUERIES, ROUNDS = 2000, 64, 200, 3
rng = np.random.default_rng(0)
vectors = rng.normal(size=(N, DIM)).astype(np.float32)
queries = [VectorStoreQuery(query_embedding=q.tolist(), similarity_top_k=10) for q in rng.normal(size=(QUERIES, DIM))]

def sync_ms(store):
    t = time.perf_counter()
    for q in queries: store.query(q)
    return (time.perf_counter() - t) / QUERIES * 1000

async def async_ms(store):
    t = time.perf_counter()
    for q in queries: await store.aquery(q)
    return (time.perf_counter() - t) / QUERIES * 1000

with start_server() as server:
    ours = pgvector_store(**server.params(), table_name="bench", embed_dim=DIM, hnsw=False, iterative_scan=None)
    ours.add([TextNode(id_=f"n{i}", text=f"row {i}", embedding=v.tolist()) for i, v in enumerate(vectors)])
    upstream = PGVectorStore.from_params(**server.params(), table_name="bench", embed_dim=DIM)
    no_ping = pgvector_store(**server.params(), table_name="bench", embed_dim=DIM, hnsw=False, iterative_scan=None,
                             create_engine_kwargs={"pool_pre_ping": False})
    stores = {"pgvector_store": ours, "pgvector_store, no pre-ping": no_ping, "PGVectorStore.from_params": upstream}
    loop = asyncio.new_event_loop()  # upstream's async engine works from one loop only
    for store in stores.values():  # warm: connect, prepare
        store.query(queries[0]); loop.run_until_complete(store.aquery(queries[0]))
    results = {name: {"sync": [], "async": []} for name in stores}
    for _ in range(ROUNDS):  # interleaved, so both see the same machine load
        for name, store in stores.items():
            results[name]["sync"].append(sync_ms(store))
            results[name]["async"].append(loop.run_until_complete(async_ms(store)))
    print(f"{N} rows x {DIM} dims, exact scan, top-10, {QUERIES} sequential queries x {ROUNDS} rounds; median ms/query")
    for name, r in results.items():
        print(f"{name:28s} sync {statistics.median(r['sync']):.2f}  async {statistics.median(r['async']):.2f}")
    loop.run_until_complete(ours.close()); loop.run_until_complete(no_ping.close())
