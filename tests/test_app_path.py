"""The path of an existing LlamaIndex app, end to end with the real model:
``SimpleDirectoryReader`` -> ``VectorStoreIndex`` -> ``RecursiveSummaryRetriever.from_index``."""

import asyncio

from llama_index.core import SimpleDirectoryReader, VectorStoreIndex

from llama_index_ext_recursive import FilteredQueryBundle, RecursiveSummaryRetriever, load_sample_documents

TEXTS = {
    "bees.txt": "Honeybees live in colonies. The queen bee lays all the eggs of the hive. "
    "Worker bees forage for nectar and pollen, and drones mate with the queen.",
    "solar.txt": "Solar panels turn sunlight into electricity with photovoltaic cells. "
    "An inverter converts the panels' direct current into alternating current for the home.",
    "bread.txt": "A sourdough starter is flour and water fermented by wild yeast. "
    "Bake the loaf in a covered pot so the steam keeps the crust soft while it rises.",
}


def test_simple_directory_reader_to_vector_store_index_to_from_index(real_model, tmp_path, monkeypatch):
    for name, text in TEXTS.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    documents = SimpleDirectoryReader(str(tmp_path)).load_data()
    index = VectorStoreIndex.from_documents(documents, embed_model=real_model)
    embedded = []
    original = type(real_model)._get_text_embeddings

    def counting(self, texts):
        embedded.extend(texts)
        return original(self, texts)

    monkeypatch.setattr(type(real_model), "_get_text_embeddings", counting)
    retriever = RecursiveSummaryRetriever.from_index(index, similarity_top_k=2)
    summaries = [s.get_content() for s in retriever.index.summaries.values()]
    assert sorted(embedded) == sorted(summaries)  # the chunks' stored vectors were reused
    assert len(retriever.documents) == len(TEXTS)  # one document per file, by ref_doc_id

    hits = retriever.retrieve("Who lays the eggs in a beehive?")
    assert hits[0].node.metadata["file_name"] == "bees.txt"
    assert asyncio.run(retriever.aretrieve("Who lays the eggs in a beehive?"))[0].node.node_id == hits[0].node.node_id
    bread = next(d for d in documents if d.metadata["file_name"] == "bread.txt").doc_id
    filtered = retriever.retrieve(FilteredQueryBundle("Who lays the eggs?", filters={"ref_doc_id": bread}))
    assert filtered and all(h.node.metadata["file_name"] == "bread.txt" for h in filtered)


def test_nodes_of_an_index_docstore_build_as_they_are(real_model):
    documents = load_sample_documents()[:4]
    index = VectorStoreIndex.from_documents(documents, embed_model=real_model)
    retriever = RecursiveSummaryRetriever.from_nodes(list(index.docstore.docs.values()), embed_model=real_model)
    assert sorted(retriever.documents) == sorted(d.doc_id for d in documents)
