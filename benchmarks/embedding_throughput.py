"""Indexing throughput of the bundled embedding models, in the same run (issues 14 and 29).

Passages per second for all-MiniLM-L6-v2 as the package runs it
(``bundled_embed_model``: ONNX Runtime, texts batched by length), the same
weights as upstream runs them (LlamaIndex's ``HuggingFaceEmbedding``:
sentence-transformers on torch, the package's model before issue 29) and
multilingual-e5-small (``MultilingualE5Embedding``, 4-bit C engine) on short
chunks (the first N of ``xquad_zh_fine``, ~116 Chinese characters) and long ones
(the first N SciFact abstracts, ~1400 characters), and one query's latency
(median of 20). Each model embeds each set once after a warm-up batch; the
models alternate, so machine noise hits both alike. No embedding cache: the
models themselves are timed.

Usage (repository root)::

    .venv/bin/python benchmarks/embedding_throughput.py --data-root ../shared/data --n 96
"""

from __future__ import annotations

import statistics

from harness import cli, data, timing
from harness.models import real_model
from harness.report import Table
from llama_index.core.base.embeddings.base import BaseEmbedding

SETS = {"short (xquad_zh_fine)": "xquad_zh_fine", "long (scifact)": "scifact"}
MODELS = {
    "all-MiniLM-L6-v2 (ONNX Runtime)": "minilm",
    "all-MiniLM-L6-v2 (HuggingFaceEmbedding, torch)": "minilm-torch",
    "multilingual-e5-small-q4": "multilingual",
}


def load(name: str) -> BaseEmbedding:
    """A model by its ``MODELS`` value, uncached (the models themselves are timed)."""
    if name == "minilm-torch":
        from llama_index.embeddings.huggingface import HuggingFaceEmbedding

        from llama_index_ext_recursive.minilm import weights_folder

        return HuggingFaceEmbedding(model_name=str(weights_folder()), device="cpu")
    return real_model(name, cache=None)


def main(argv: list[str] | None = None) -> None:
    p = cli.parser(__doc__)
    cli.add_data_root(p)
    p.add_argument("--n", type=int, default=96, help="passages per set")
    args = p.parse_args(argv)
    sets = {label: data.first_texts(name, args.n, root=args.data_root) for label, name in SETS.items()}
    models = {label: load(name) for label, name in MODELS.items()}
    for model in models.values():
        model.get_text_embedding_batch(["warm-up text"] * 4)
    table = Table(["set", "mean chars", "model", "passages/s", "query ms (median of 20)"], align="lrlrr")
    print(table.header())
    for set_name, batch in sets.items():
        chars = statistics.mean(len(t) for t in batch)
        for name, model in models.items():
            rate = len(batch) / timing.seconds(lambda: model.get_text_embedding_batch(batch))
            query_ms = timing.latencies_ms(model.get_query_embedding, [text[:60] for text in batch[:20]])
            print(
                table.row(set_name, f"{chars:.0f}", name, f"{rate:.1f}", f"{timing.median(query_ms):.1f}"), flush=True
            )


if __name__ == "__main__":
    main()
