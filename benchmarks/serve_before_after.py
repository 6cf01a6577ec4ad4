"""Serve figures of one kept index folder, the package at a base commit against the working tree.

A change to the query path is judged by ratios measured in one run, on one
index, under the same load: this script runs ``scale_columnar.py``'s serve
child (open, the first query, ``--queries`` unfiltered and filtered queries of
the default recursive retriever) alternately with the package as ``--base``
holds it (``git archive`` into a temporary folder, imported ahead of the
editable install) and as the working tree holds it (or commit ``--new``, so
the tree can change while it runs), ``--rounds`` times each,
and reports each side's median p50/p95 over its rounds. The folder comes from
``scale_columnar.py --keep`` and is only read (the base must read its format).

Usage (repository root)::

    .venv/bin/python benchmarks/scale_columnar.py --docs 10000 --baseline 0 --keep /tmp/indexes
    .venv/bin/python benchmarks/serve_before_after.py --folder /tmp/indexes/columnar-10000 --docs 10000 --base main
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from harness import cli, memory
from harness.report import Table, fmt, library_fingerprint, load_average, machine, write

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PACKAGE = "llama_index_ext_recursive"
FIGURES = ("p50_ms", "p95_ms", "filtered_p50_ms", "filtered_p95_ms", "first_ms", "target_in_top10")

# run a script with the package imported from BASE_PACKAGE_ROOT: the editable install's finder
# is dropped from sys.meta_path, so the folder put first on sys.path is the one imported
_LAUNCHER = """
import os, runpy, sys
sys.meta_path = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
sys.path[:0] = [os.environ["BASE_PACKAGE_ROOT"], os.path.dirname(sys.argv[1])]
script, sys.argv = sys.argv[1], sys.argv[1:]
runpy.run_path(script, run_name="__main__")
"""


def serve(args, base_root: Path | None) -> dict[str, float]:
    """One serve child of scale_columnar.py on ``args.folder``, the package imported from
    ``base_root`` (``None``: the working tree's)."""
    child = [
        str(HERE / "scale_columnar.py"),
        "--child",
        "serve",
        "--docs",
        str(args.docs),
        "--queries",
        str(args.queries),
        "--folder",
        str(args.folder),
    ]
    env = dict(os.environ)
    if base_root is None:
        command = [sys.executable, *child]
    else:
        command = [sys.executable, "-c", _LAUNCHER, *child]
        env["BASE_PACKAGE_ROOT"] = str(base_root)
    done = memory.run_child(command, env=env, timeout=args.timeout)
    if done.returncode != 0:
        raise SystemExit(
            f"serve ({'base' if base_root else 'tree'}) failed ({done.returncode}):\n{done.stderr[-4000:]}"
        )
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    figures["peak_rss_mib"] = done.peak_rss_mib
    return figures


def short(ref: str) -> str:
    """The abbreviated commit ``ref`` names."""
    return subprocess.run(
        ["git", "rev-parse", "--short", ref], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout.strip()


def extract(ref: str, folder: Path) -> Path:
    """The package as commit ``ref`` holds it, written under ``folder`` (returned)."""
    folder.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", ref, PACKAGE], cwd=ROOT, check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    return folder


def main(argv: list[str] | None = None) -> None:
    p = cli.parser(__doc__)
    p.add_argument("--folder", type=Path, required=True, help="an index folder kept by scale_columnar.py --keep")
    p.add_argument("--docs", type=int, required=True, help="the documents the folder was built from")
    p.add_argument("--base", default="main", help="the commit whose package is the 'before' side")
    p.add_argument("--new", help="the commit whose package is the 'after' side (default: the working tree)")
    p.add_argument("--queries", type=int, default=300, help="timed queries per serve child")
    p.add_argument("--rounds", type=int, default=2, help="serve children per side, alternated")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds per child")
    cli.add_out(p, None)
    args = p.parse_args(argv)
    runs: dict[str, list[dict[str, float]]] = {"base": [], "new": []}
    load_at_start = load_average()
    with tempfile.TemporaryDirectory(prefix="serve-base-") as tmp:
        roots = {"base": extract(args.base, Path(tmp) / "base")}
        roots["new"] = None if args.new is None else extract(args.new, Path(tmp) / "new")
        for round_number in range(args.rounds):
            for side in ("base", "new"):
                runs[side].append(serve(args, roots[side]))
                print(f"round {round_number + 1} {side}: {json.dumps(runs[side][-1])}", flush=True)
    table = Table(["code", "p50 / p95 ms", "filtered p50 / p95 ms", "first query ms", "target in top 10"], "lrrrr")
    rows = []
    labels = {
        "base": f"base {short(args.base)}",
        "new": f"tree {library_fingerprint()}" if args.new is None else short(args.new),
    }
    for side, label in labels.items():
        median = {key: statistics.median(run[key] for run in runs[side]) for key in FIGURES}
        rows.append(
            [
                label,
                f"{fmt(median['p50_ms'], 1)} / {fmt(median['p95_ms'], 1)}",
                f"{fmt(median['filtered_p50_ms'], 1)} / {fmt(median['filtered_p95_ms'], 1)}",
                fmt(median["first_ms"], 1),
                fmt(median["target_in_top10"], 2),
            ]
        )
    text = "\n".join(
        [
            f"# Serve figures of {args.folder.name}: {labels['base']} against {labels['new']}",
            "",
            f"Command: `{cli.command(argv)}`",
            "",
            machine(),
            f"Load average at the start {load_at_start:.2f}, at the end {load_average():.2f}. Medians of {args.rounds} alternated serve children "
            f"per side, {args.queries} queries each.",
            "",
            table.render(rows),
        ]
    )
    print(text)
    if args.out is not None:
        write(args.out, text + "\n", runs)


if __name__ == "__main__":
    main()
