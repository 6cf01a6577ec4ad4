"""Reproduce every ``llama-recursive eval`` run in ``benchmarks/results/eval/`` with one command.

For each dataset under ``--data-root`` this runs (from the repository root)::

    .venv/bin/llama-recursive eval --data <root>/<dataset> \
        --retrievers upstream-vector,upstream-bm25,upstream-fusion,upstream-fusion-relative,upstream-recursive,vector,bm25,hybrid,recursive-vector,recursive,oracle-routing \
        --cache .cache/embeddings.sqlite \
        --out benchmarks/results/eval/<dataset>.json --plot benchmarks/results/eval/<dataset>.png \
        [--max-queries N] [--no-embed-title]

capturing the CLI's stdout to ``<dataset>.md`` and its stderr (progress bars)
to ``<dataset>.log``. All runs share one embedding cache file, so a text is
embedded at most once across datasets and re-runs. The exact commands, wall
and CPU times and max RSS of the child (``harness.memory.run_child``; runs
before it used ``/usr/bin/time -v``), the machine and the other processes
busy on it at the start and end of every run are appended to
``benchmarks/results/eval/runs.jsonl`` and summarised in ``commands.md``.

Usage (repository root)::

    .venv/bin/python benchmarks/run_eval.py                      # all datasets, warm cache
    .venv/bin/python benchmarks/run_eval.py --fresh-cache --datasets xquad_en_fine
                                                                 # the honest cold-cache timing

``--fresh-cache`` deletes the cache file before the first run (it is
gitignored and only ever holds embeddings recomputable from the data).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from harness import REPO, RESULTS, cli
from harness.memory import run_child
from harness.report import Table, library_fingerprint, machine
from harness.versions import llama_recursive

OUT_DIR = RESULTS / "eval"
# oracle-routing reads the gold documents: the perfect-routing ceiling, not a competitor
RETRIEVERS = (
    "upstream-vector,upstream-bm25,upstream-fusion,upstream-fusion-relative,upstream-recursive,"
    "vector,bm25,hybrid,recursive-vector,recursive,oracle-routing"
)
# dataset -> --max-queries (None: every judged query of the test split)
DATASETS: dict[str, int | None] = {
    "xquad_en_fine": None,
    "xquad_zh_fine": None,
    "xquad_en": None,
    "xquad_zh": None,
    "scifact": None,  # qrels/test.tsv holds the 300 BEIR test queries
    "cmrc2018": 1000,  # 3219 judged queries; capped to the first 1000 (queries.jsonl order)
    "llamaindex_blockchain_solana": None,
    "legalbench_contractnli": None,  # 95 NDAs, 2209 chunks, 977 queries that name their contract
}
# cross-lingual runs (issue 14): name -> (corpus folder, queries folder, extra CLI arguments).
# XQuAD's ids align across languages. The Chinese paragraphs carry their English SQuAD titles,
# so titles are kept out of the embedded and BM25-indexed text; an English corpus asked in
# Chinese needs the multilingual model named (the automatic choice reads the corpus only).
CROSS_LINGUAL: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "xquad_en-to-zh": ("xquad_zh", "xquad_en", ("--no-embed-title",)),
    "xquad_zh-to-en": ("xquad_en", "xquad_zh", ("--no-embed-title", "--embed-model", "multilingual")),
}


def _cpu_ticks() -> dict[int, tuple[int, str]]:
    ticks: dict[int, tuple[int, str]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        ticks[int(entry.name)] = (int(fields[11]) + int(fields[12]), cmd or stat.split()[1])
    return ticks


def busy_processes(exclude: Sequence[int] = (), threshold: float = 20.0) -> list[str]:
    """Processes (other than ours) that used more than ``threshold`` % of a core over 1 s."""
    hz = os.sysconf("SC_CLK_TCK")
    before = _cpu_ticks()
    time.sleep(1.0)
    after = _cpu_ticks()
    mine = {os.getpid(), *exclude}
    busy = []
    for pid, (total, cmd) in after.items():
        if pid in mine or pid not in before:
            continue
        percent = 100.0 * (total - before[pid][0]) / hz
        if percent >= threshold:
            busy.append(f"pid {pid} {percent:.0f}% {cmd[:160]}")
    return busy


def _descendants(pid: int) -> list[int]:
    """``pid`` and its children (``/usr/bin/time`` -> ``llama-recursive``)."""
    out = [pid]
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return out
    for child in children:
        out += _descendants(int(child))
    return out


def _strip_percent(entry: str) -> str:
    pid, number, _, cmd = entry.split(" ", 3)
    return f"{cmd[:120]} (pid {number})"


def run_one(args: argparse.Namespace, dataset: str, max_queries: int | None) -> dict[str, object]:
    out = Path(args.out_dir)
    rel = lambda p: os.path.relpath(p, REPO)  # noqa: E731
    folder, queries_from, extra = CROSS_LINGUAL.get(dataset, (dataset, None, ()))
    command = [
        rel(llama_recursive()),
        "eval",
        "--data",
        str(Path(args.data_root) / folder),
        *(["--queries-from", str(Path(args.data_root) / queries_from)] if queries_from else []),
        "--retrievers",
        args.retrievers,
        "--cache",
        rel(Path(args.cache)),
        "--out",
        rel(out / f"{dataset}.json"),
        "--plot",
        rel(out / f"{dataset}.png"),
    ]
    if max_queries is not None:
        command += ["--max-queries", str(max_queries)]
    if args.no_embed_title and "--no-embed-title" not in extra:
        command += ["--no-embed-title"]
    command += list(extra)
    shown = " ".join(shlex.quote(c) for c in command) + f" > {rel(out / (dataset + '.md'))}"
    print(f"[run_eval] {shown}", file=sys.stderr, flush=True)
    record: dict[str, object] = {
        "dataset": dataset,
        "command": shown,
        "cwd": str(REPO),
        "max_queries": max_queries,
        "embed_title": not args.no_embed_title,
        "cache_existed": Path(args.cache).exists(),
        "started": dt.datetime.now().isoformat(timespec="seconds"),
        "loadavg_before": os.getloadavg(),
        "busy_before": busy_processes(),
        "library_before": library_fingerprint(),
    }
    # sample the other load 15 s into long runs, then every minute
    samples: list[list[str]] = []
    next_sample = [time.perf_counter() + 15]

    def sample(pid: int) -> None:
        if time.perf_counter() >= next_sample[0]:
            samples.append(busy_processes(_descendants(pid)))
            next_sample[0] += 60

    done = run_child(command, cwd=REPO, stdout=out / f"{dataset}.md", stderr=out / f"{dataset}.log", poll=sample)
    record["wall_seconds"] = round(done.wall_s, 1)
    record["returncode"] = done.returncode
    record["loadavg_after"] = os.getloadavg()
    record["library_after"] = library_fingerprint()
    record["busy_during"] = sorted({_strip_percent(p) for s in samples for p in s})
    record["busy_samples"] = len(samples)
    record["rusage"] = done.usage()
    figures_path = out / f"{dataset}.json"
    if done.returncode == 0 and figures_path.exists():
        figures = json.loads(figures_path.read_text(encoding="utf-8"))
        record["texts_embedded"] = figures["texts_embedded"] + figures.get("texts_embedded_in_builds", 0)
        record["embedding_seconds"] = round(figures["embedding_seconds"], 1)
    if done.returncode != 0:
        print(done.stderr[-3000:], file=sys.stderr)
    return record


def write_commands(out: Path) -> None:
    runs = [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines() if line.strip()]
    table = Table(
        [
            "started",
            "dataset",
            "cache existed",
            "new texts embedded",
            "embed s",
            "wall s",
            "user+sys s",
            "max RSS MB",
            "load avg before",
            "other busy processes (during)",
            "library sha256[:12]",
            "command",
        ],
        align="lllrrrrrllll",
    )
    rows = []
    for r in runs:
        usage = r.get("rusage") or r.get("time_v", {})  # time_v: runs measured by /usr/bin/time -v
        cpu = float(usage.get("user_s", "nan")) + float(usage.get("sys_s", "nan"))
        rss = int(usage.get("max_rss_kb", 0)) / 1024
        busy = "; ".join(r.get("busy_during") or []) or "none seen"
        lib = r.get("library_before", "not recorded")
        if r.get("library_after", lib) != lib:
            lib += f" -> {r['library_after']} (CHANGED during the run)"
        wall = f"{r['wall_seconds']}" + (f" ({usage['wall']})" if "wall" in usage else "")
        rows.append(
            (
                r["started"],
                r["dataset"],
                r["cache_existed"],
                r.get("texts_embedded", "-"),
                r.get("embedding_seconds", "-"),
                wall,
                f"{cpu:.0f}",
                f"{rss:.0f}",
                f"{r['loadavg_before'][0]:.2f}",
                busy.replace("|", "/"),
                lib,
                f"`{r['command']}`",
            )
        )
    lines = [
        "# Exact commands of the evaluation runs",
        "",
        "Generated by `benchmarks/run_eval.py` from `runs.jsonl` (every run ever made, oldest first; "
        "the latest run of a dataset is the one whose `.md`/`.json`/`.png` are in this folder).",
        "cwd: the repository root. Wall, CPU and max RSS: the child's, from `wait4` (in parentheses, the "
        "wall clock `/usr/bin/time -v` reported for the runs it measured).",
        "",
        table.render(rows),
        "",
        f"Machine: {machine()}, CPU only, offline",
        "",
    ]
    (out / "commands.md").write_text("\n".join(lines), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    p = cli.parser(__doc__)
    p.add_argument(
        "--datasets",
        default=",".join([*DATASETS, *CROSS_LINGUAL]),
        help="comma-separated; default: all, the cross-lingual runs included",
    )
    cli.add_data_root(p)
    p.add_argument("--retrievers", default=RETRIEVERS)
    cli.add_cache(p)
    p.add_argument("--fresh-cache", action="store_true", help="delete the cache file first")
    p.add_argument("--out-dir", default=str(OUT_DIR))
    p.add_argument(
        "--no-embed-title", action="store_true", help="pass --no-embed-title: titles in chunk metadata, not embedded"
    )
    args = p.parse_args(argv)
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    chosen = [d.strip() for d in args.datasets.split(",") if d.strip()]
    unknown = [d for d in chosen if d not in DATASETS and d not in CROSS_LINGUAL]
    if unknown:
        p.error(f"unknown dataset(s) {unknown}; known: {', '.join([*DATASETS, *CROSS_LINGUAL])}")
    if args.fresh_cache and Path(args.cache).exists():
        Path(args.cache).unlink()
        print(f"[run_eval] deleted {args.cache}", file=sys.stderr)
    failed = 0
    for dataset in chosen:
        record = run_one(args, dataset, DATASETS.get(dataset))
        record["machine"] = machine()
        record["invocation"] = " ".join(shlex.quote(a) for a in [sys.executable, *sys.argv])
        with open(out / "runs.jsonl", "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")
        write_commands(out)
        failed += record["returncode"] != 0
        print(
            f"[run_eval] {dataset}: rc={record['returncode']} wall={record['wall_seconds']}s "
            f"embedded={record.get('texts_embedded')} busy={record['busy_during']}",
            file=sys.stderr,
            flush=True,
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
