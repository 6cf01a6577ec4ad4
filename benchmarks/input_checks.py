"""Cost of BackfillVectorRetriever's input checks (issue 11); figures in benchmarks/results/bad-input.md.

Usage::

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/input_checks.py
"""
# Cost of BackfillVectorRetriever's input checks (issue 11): reading the filter
# vocabulary (once per docstore; again after an unknown key) and the per-query
# checks (check_query + cached filter check + check_vectors) against a retrieve.
import time

import numpy as np
from llama_index.core import MockEmbedding, StorageContext, VectorStoreIndex
from llama_index.core.schema import TextNode

from llama_index_ext_recursive import BackfillVectorRetriever, FilteredQueryBundle, NumpyVectorStore
from llama_index_ext_recursive.filters import FilterVocabulary
from llama_index_ext_recursive.validation import check_query

N, D, REPS = 20_000, 384, 200
rng = np.random.default_rng(0)
vecs = rng.normal(size=(N, D))
vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
nodes = [TextNode(id_=f"n{i}", text=f"t{i}", embedding=list(vecs[i]),
                  metadata={"group": f"g{i % 50}", "year": 2000 + i % 20}) for i in range(N)]
index = VectorStoreIndex(nodes, storage_context=StorageContext.from_defaults(vector_store=NumpyVectorStore()),
                         embed_model=MockEmbedding(embed_dim=D))
r = BackfillVectorRetriever(index, similarity_top_k=10)
q = list(rng.normal(size=D))
bundle = FilteredQueryBundle("query", filters={"group": "g7"}, embedding=q)
r.retrieve(bundle)


def per_call(fn, reps=REPS):
    t = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t) / reps


nodes_read = per_call(lambda: FilterVocabulary.from_nodes(index.docstore.docs.values()), 3)
json_read = per_call(lambda: r.refresh_filter_vocabulary(), 3)
filters = r._resolve(bundle).filters
checks = per_call(lambda: (check_query(bundle), r._check_filters(filters), r._checked_embedding(q, True)))
total = per_call(lambda: r.retrieve(bundle))
print(f"N={N} D={D}: vocabulary from docstore.docs {nodes_read*1e3:.0f} ms, from the stored JSON "
      f"{json_read*1e3:.0f} ms; per-query checks {checks*1e6:.0f} us of a {total*1e6:.0f} us "
      f"filtered retrieve ({100*checks/total:.1f}%)")
