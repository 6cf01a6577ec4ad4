"""A rebuild of an unchanged folder with the build cache: what `llama-recursive build` embeds and how long it takes.

The first ``--n`` passages of a BEIR corpus are written as ``.txt`` files to a
temporary folder, which is built twice with a new, empty cache file
(``--embedding-cache``), each time into a new index folder, in separate
processes. The model is the one the build chooses for the corpus (the
multilingual model for ``xquad_zh``).

    .venv/bin/python benchmarks/build_cache.py --data ../shared/data/xquad_zh --n 40
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--n", type=int, default=40)
    args = parser.parse_args()
    cli = str(REPO / ".venv" / "bin" / "llama-recursive")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "docs"
        folder.mkdir()
        with open(Path(args.data) / "corpus.jsonl", encoding="utf-8") as corpus:
            for i, line in zip(range(args.n), corpus):
                (folder / f"{i:04d}.txt").write_text(json.loads(line)["text"], encoding="utf-8")
        cache = Path(tmp) / "embeddings.sqlite"
        env = {**os.environ, "HF_HUB_OFFLINE": "1"}
        print("| build | wall s | embedded | from the cache | model |")
        print("|---|---:|---:|---:|---|")
        for run in ("first", "rebuild"):
            started = time.perf_counter()
            out = subprocess.run(
                [cli, "build", str(folder), "--persist", str(Path(tmp) / run), "--embedding-cache", str(cache)],
                capture_output=True, text=True, env=env, check=True,
            ).stdout
            wall = time.perf_counter() - started
            counts = re.search(r"Embedded (\d+) texts, (\d+) taken from the cache", out)
            model = re.search(r"Embedding model: (\S+)", out)
            print(f"| {run} | {wall:.1f} | {counts.group(1)} | {counts.group(2)} | {model.group(1)} |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
