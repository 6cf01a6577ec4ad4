"""Indexing throughput of the two bundled embedding models, in the same run (issue 14).

Passages per second for all-MiniLM-L6-v2 (``bundled_embed_model``, torch) and
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

SETS = {"short (xquad_zh_fine)": "xquad_zh_fine", "long (scifact)": "scifact"}
MODELS = {"all-MiniLM-L6-v2": "minilm", "multilingual-e5-small-q4": "multilingual"}


def main(argv: list[str] | None = None) -> None:
    p = cli.parser(__doc__)
    cli.add_data_root(p)
    p.add_argument("--n", type=int, default=96, help="passages per set")
    args = p.parse_args(argv)
    sets = {label: data.first_texts(name, args.n, root=args.data_root) for label, name in SETS.items()}
    models = {label: real_model(name, cache=None) for label, name in MODELS.items()}
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
