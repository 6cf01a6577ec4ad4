"""A rebuild of an unchanged folder with the build cache: what `llama-recursive build` embeds and how long it takes.

The first ``--n`` passages of a BEIR corpus are written as ``.txt`` files to a
temporary folder, which is built twice with a new, empty cache file
(``--embedding-cache``), each time into a new index folder, in separate
processes. The model is the one the build chooses for the corpus (the
multilingual model for ``xquad_zh``).

    .venv/bin/python benchmarks/build_cache.py --data ../shared/data/xquad_zh --n 40
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

from harness import cli, data
from harness.memory import run_child
from harness.report import Table
from harness.versions import llama_recursive


def main(argv: list[str] | None = None) -> None:
    p = cli.parser(__doc__)
    cli.add_data(p)
    p.add_argument("--n", type=int, default=40, help="passages to build from")
    args = p.parse_args(argv)
    command = str(llama_recursive())
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "docs"
        folder.mkdir()
        for i, text in enumerate(data.first_texts(args.data, args.n)):
            (folder / f"{i:04d}.txt").write_text(text, encoding="utf-8")
        cache = Path(tmp) / "embeddings.sqlite"
        table = Table(["build", "wall s", "embedded", "from the cache", "model"], align="lrrrl")
        print(table.header())
        for run in ("first", "rebuild"):
            done = run_child(
                [command, "build", str(folder), "--persist", str(Path(tmp) / run), "--embedding-cache", str(cache)],
                env=os.environ,
            )
            if done.returncode != 0:
                raise SystemExit(f"llama-recursive build failed:\n{done.stderr[-3000:]}")
            counts = re.search(r"Embedded (\d+) texts, (\d+) taken from the cache", done.stdout)
            model = re.search(r"Embedding model: (\S+)", done.stdout)
            print(table.row(run, f"{done.wall_s:.1f}", counts.group(1), counts.group(2), model.group(1)), flush=True)


if __name__ == "__main__":
    main()
