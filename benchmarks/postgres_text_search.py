"""Text search latency by query length: pgvector_store's balanced OR tree vs upstream's chain.

Checks that ordinary queries cost what upstream's do (same rows, same ts_rank), measures how the
cost grows with the number of distinct words (each is looked up in every matching row), which sets
pgvector_store's default max_text_query_words, and shows what a 20,000-word query does to each.
"""
import statistics, time
import numpy as np
from llama_index.core.schema import TextNode
from llama_index.core.vector_stores.types import VectorStoreQuery, VectorStoreQueryMode
from llama_index.vector_stores.postgres import PGVectorStore
from llama_index_ext_recursive.stores.pgserver import start_server
from llama_index_ext_recursive.stores.postgres import pgvector_store

N, DIM, VOCAB, ROUNDS = 20_000, 8, 5_000, 3
rng = np.random.default_rng(0)
words = [f"w{i}" for i in range(VOCAB)]
QUERY_WORDS = {3: 50, 30: 20, 256: 3, 1_000: 2}  # distinct words: queries per round

def query(count):
    return VectorStoreQuery(query_str=" ".join(rng.choice(words, count, replace=False)), similarity_top_k=10,
                            mode=VectorStoreQueryMode.TEXT_SEARCH)

def ms(store, qs):
    t = time.perf_counter()
    for q in qs: store.query(q)
    return (time.perf_counter() - t) / len(qs) * 1000

def outcome(store, q):
    try:
        t = time.perf_counter()
        store.query(q)
        return f"{time.perf_counter() - t:.1f} s"
    except Exception as exc:
        return f"{type(exc).__name__}: {str(exc).splitlines()[0][:60]}"

with start_server() as server:
    params = dict(**server.params(), table_name="tsbench", embed_dim=DIM, hybrid_search=True)
    ours = pgvector_store(**params, hnsw=False, max_text_query_words=1_000)
    ours.add([TextNode(id_=f"n{i}", text=" ".join(rng.choice(words, 12)), embedding=rng.normal(size=DIM).tolist())
              for i in range(N)])
    server.execute("ANALYZE data_tsbench")
    upstream = PGVectorStore.from_params(**params)
    print(f"{N} rows of 12 words from {VOCAB}, GIN-indexed tsvector, top-10, median ms/query of {ROUNDS} rounds")
    for count, per_round in QUERY_WORDS.items():
        qs = [query(count) for _ in range(per_round)]
        same, theirs = ours.query(qs[0]), upstream.query(qs[0])
        assert sorted(zip(theirs.ids, theirs.similarities)) == sorted(zip(same.ids, same.similarities))
        results = {"pgvector_store (tree)": [], "PGVectorStore (chain)": []}
        for _ in range(ROUNDS):  # interleaved, so both see the same machine load
            results["pgvector_store (tree)"].append(ms(ours, qs))
            results["PGVectorStore (chain)"].append(ms(upstream, qs))
        print(f"{count:6d} words  " + "  ".join(f"{name} {statistics.median(r):9.1f}" for name, r in results.items()))
    huge = VectorStoreQuery(query_str=" ".join(f"x{i}" for i in range(20_000)), similarity_top_k=10,
                            mode=VectorStoreQueryMode.TEXT_SEARCH)
    default = pgvector_store(**params, hnsw=False)
    print(f"20,000 words (~120 kB): PGVectorStore {outcome(upstream, huge)} | pgvector_store (default limit) "
          f"{outcome(default, huge)}")
    for store in (ours, upstream, default):
        store.client.dispose()
