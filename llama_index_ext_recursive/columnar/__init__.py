"""Columnar storage for large indexes: arrays in, arrays out, objects only at the edge.

Rows (chunks, documents) are addressed by integer ids. Dense vectors, BM25
postings and metadata codes are arrays kept in immutable, memory-mapped segment
files (:mod:`.segments`); text, metadata and relationships live in SQLite and
are read for the final top-k only. Nothing here loads a model or holds a
LlamaIndex node per row; the stores and retrievers above turn rows into nodes.
"""
