"""Indexing throughput of the two bundled embedding models, in the same run (issue 14).

Passages per second for all-MiniLM-L6-v2 (``bundled_embed_model``, torch) and
multilingual-e5-small (``MultilingualE5Embedding``, 4-bit C engine) on short
chunks (the first N of ``xquad_zh_fine``, ~116 Chinese characters) and long ones
(the first N SciFact abstracts, ~1400 characters), and one query's latency.
Each model embeds each set once after a warm-up batch; the models alternate, so
machine noise hits both alike.

Usage (repository root)::

    .venv/bin/python benchmarks/embedding_throughput.py --data-root ../shared/data --n 96
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from llama_index_ext_recursive.models import bundled_embed_model  # noqa: E402
from llama_index_ext_recursive.multilingual import MultilingualE5Embedding  # noqa: E402


def texts(path: Path, n: int) -> list:
    out = []
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            out.append(json.loads(line)["text"])
            if len(out) == n:
                break
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-root", default="../shared/data")
    parser.add_argument("--n", type=int, default=96)
    args = parser.parse_args()
    root = Path(args.data_root)
    sets = {
        "short (xquad_zh_fine)": texts(root / "xquad_zh_fine" / "corpus.jsonl", args.n),
        "long (scifact)": texts(root / "scifact" / "corpus.jsonl", args.n),
    }
    models = {"all-MiniLM-L6-v2": bundled_embed_model(), "multilingual-e5-small-q4": MultilingualE5Embedding()}
    for model in models.values():
        model.get_text_embedding_batch(["warm-up text"] * 4)
    print("| set | mean chars | model | passages/s | query ms (median of 20) |")
    print("|---|---:|---|---:|---:|")
    for set_name, batch in sets.items():
        chars = statistics.mean(len(t) for t in batch)
        for name, model in models.items():
            started = time.perf_counter()
            model.get_text_embedding_batch(batch)
            rate = len(batch) / (time.perf_counter() - started)
            query_ms = []
            for text in batch[:20]:
                started = time.perf_counter()
                model.get_query_embedding(text[:60])
                query_ms.append((time.perf_counter() - started) * 1000)
            print(f"| {set_name} | {chars:.0f} | {name} | {rate:.1f} | {statistics.median(query_ms):.1f} |")


if __name__ == "__main__":
    main()
