"""A newcomer's first hour (issue 29): build, reopen and query a real folder with the CLI.

The folder is the Markdown and Python files of the package's own docs and
source at commit 312a85b (88 files, 1.07 MB: what the issue's tester indexed),
written out with ``git archive``; or ``--folder``. Every step runs in a child process, as a user runs it, with a
fresh embedding cache and the bundled model:

1. ``llama-recursive build`` (wall time and peak RSS), then the same build under
   cProfile for the breakdown (cumulative seconds of the build's stages; the
   profiler adds overhead, so the parts are read against the profiled total);
2. reopening the index in a new process: the import, ``from_persist_dir``, the
   first question (the model and the search levels load) and the second;
3. ``llama-recursive serve``: questions through its HTTP API once it is up
   (the long-lived path), p50/p95 over ``--queries`` questions.

    .venv/bin/python benchmarks/newcomer.py --out benchmarks/results/newcomer.md

An older release is measured by putting its extracted package first on
``PYTHONPATH`` (``harness.versions.extract_package``); every child runs from
the temporary folder, so none imports this checkout instead.
"""

from __future__ import annotations

import json
import os
import pstats
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from harness import REPO, RESULTS, cli, timing
from harness.memory import run_child
from harness.report import table
from harness.versions import head

FOLDER_REV = "312a85b"
FOLDER_PATHS = ("docs", "llama_index_ext_recursive", "README.md")
QUESTIONS = [
    "how do I persist an index?",
    "what does chunk_context do?",
    "which filters does the auto-retriever refuse?",
    "how is BM25 tokenised for Chinese?",
    "what is the document weight?",
    "how are fusion weights calibrated?",
    "where does the embedding cache live?",
    "what happens when a persist is interrupted?",
]
# the build's stages: function name -> what it stands for (cumulative seconds under cProfile)
STAGES = {
    "read_documents": "reading and checking the folder",
    "chunk_documents": "chunking",
    "build_documents": "summarizing",
    "get_text_embedding_batch": "embedding chunks and summaries",
    "calibrate_children": "calibrating fusion (pseudo-queries embedded and searched)",
    "embed_queries": "  of which embedding the pseudo-queries",
    "persist_index": "persisting",
}
REOPEN = """
import sys, time, json
started = time.perf_counter()
from llama_index_ext_recursive import RecursiveSummaryRetriever
imported = time.perf_counter()
retriever = RecursiveSummaryRetriever.from_persist_dir(sys.argv[1])
loaded = time.perf_counter()
retriever.retrieve(sys.argv[2])
first = time.perf_counter()
retriever.retrieve(sys.argv[3])
second = time.perf_counter()
print(json.dumps({"import_s": imported - started, "load_s": loaded - imported,
                  "first_query_s": first - loaded, "second_query_ms": 1000 * (second - first)}))
"""
PROFILED_BUILD = """
import cProfile, sys
from llama_index_ext_recursive.cli import main
cProfile.run("status = main(sys.argv[2:])", sys.argv[1])
sys.exit(status)
"""


def write_folder(into: Path) -> Path:
    into.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", FOLDER_REV, *FOLDER_PATHS], check=True, capture_output=True
    )
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    for path in into.rglob("*"):  # the tester's folder: the Markdown and Python files
        if path.is_file() and path.suffix not in (".md", ".py"):
            path.unlink()
    return into


def cli_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "llama_index_ext_recursive", *args]


def stage_seconds(profile: Path) -> dict[str, float]:
    stats = pstats.Stats(str(profile))
    found: dict[str, float] = {}
    for (_, _, name), (_, _, _, cumulative, _) in stats.stats.items():  # type: ignore[attr-defined]
        if name in STAGES:
            found[name] = max(found.get(name, 0.0), cumulative)
    return found


def serve_latencies(index: Path, queries: int, env: dict[str, str]) -> dict[str, float]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    started = time.perf_counter()
    server = subprocess.Popen(
        cli_command("serve", str(index), "--port", str(port)),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5).read()
                break
            except OSError:
                if server.poll() is not None:
                    raise RuntimeError("serve exited before answering") from None
                time.sleep(0.1)
        ready_s = time.perf_counter() - started

        def ask(question: str) -> None:
            body = json.dumps({"query": question, "top_k": 5}).encode()
            request = urllib.request.Request(f"http://127.0.0.1:{port}/retrieve", data=body, method="POST")
            urllib.request.urlopen(request, timeout=60).read()

        ask(QUESTIONS[0])  # the first question after start
        spent = []
        for i in range(queries):
            t = time.perf_counter()
            ask(QUESTIONS[i % len(QUESTIONS)] + ("" if i < len(QUESTIONS) else f" ({i})"))
            spent.append(1000 * (time.perf_counter() - t))
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)
    return {"ready_s": ready_s, "p50_ms": timing.percentile(spent, 50), "p95_ms": timing.percentile(spent, 95)}


def main(argv: list[str] | None = None) -> None:
    p = cli.parser(__doc__)
    p.add_argument("--folder", type=Path, help=f"default: docs and source at {FOLDER_REV}")
    p.add_argument("--queries", type=int, default=40, help="questions through serve")
    cli.add_out(p, RESULTS / "newcomer.md")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="newcomer-") as tmp:
        root = Path(tmp)
        folder = args.folder or write_folder(root / "folder")
        files = [f for f in folder.rglob("*") if f.is_file()]
        size_mb = sum(f.stat().st_size for f in files) / 1e6
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "XDG_CACHE_HOME": str(root / "xdg")}  # a fresh cache
        build = run_child(cli_command("build", str(folder), "--persist", str(root / "index")), env=env)
        if build.returncode != 0:
            raise RuntimeError(build.stderr[-2000:])
        print(build.stdout, flush=True)
        env_profiled = {**env, "XDG_CACHE_HOME": str(root / "xdg2")}
        profile = root / "build.prof"
        profiled = run_child(
            [
                sys.executable,
                "-c",
                PROFILED_BUILD,
                str(profile),
                "build",
                str(folder),
                "--persist",
                str(root / "index2"),
            ],
            env=env_profiled,
            cwd=root,  # as the reopen below
        )
        stages = stage_seconds(profile) if profiled.returncode == 0 else {}
        # from the temporary folder: a `python -c` child puts its working folder first on sys.path,
        # so run from the repository it would import this checkout over an older one on PYTHONPATH
        reopen = run_child(
            [sys.executable, "-c", REOPEN, str(root / "index"), QUESTIONS[0], QUESTIONS[1]], env=env, cwd=root
        )
        reopened = json.loads(reopen.stdout.strip().splitlines()[-1])
        served = serve_latencies(root / "index", args.queries, env)
    rows = [
        ["build (CLI, one process)", f"{build.wall_s:.1f} s", f"peak RSS {build.peak_rss_mib:.0f} MiB"],
        ["build under cProfile", f"{profiled.wall_s:.1f} s", "the stages below are its cumulative times"],
        *[[f"  {STAGES[name]}", f"{stages[name]:.1f} s", name] for name in STAGES if name in stages],
        ["reopen: import", f"{reopened['import_s']:.2f} s", ""],
        ["reopen: from_persist_dir", f"{reopened['load_s']:.2f} s", "loads the embedding model (identity check)"],
        ["reopen: first question", f"{reopened['first_query_s']:.2f} s", "search levels built"],
        ["reopen: second question", f"{reopened['second_query_ms']:.0f} ms", ""],
        ["serve: ready", f"{served['ready_s']:.1f} s", "start to the first answer of GET /health"],
        ["serve: a question after the first", f"p50 {served['p50_ms']:.1f} ms", f"p95 {served['p95_ms']:.1f} ms"],
    ]
    text = (
        f"Command: `{cli.command(argv)}` (checkout {head()})\n\n"
        f"Folder: {'the package docs and source at ' + FOLDER_REV if args.folder is None else args.folder}: "
        f"{len(files)} files, {size_mb:.2f} MB. Build output:\n\n"
        + "\n".join("    " + line for line in build.stdout.strip().splitlines())
        + "\n\n"
        + table(["step", "time", "note"], rows)
        + "\n"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
