"""Build time and peak RSS for one 5 MB and one 50 MB document, before and after (issue 11, item 4).

Each case runs in a fresh subprocess limited to ``--memory-gib`` (6) GiB of
address space (``RLIMIT_AS``) and ``--timeout`` seconds, so the old dense
summarizer fails with ``MemoryError`` instead of taking the machine down. A
case's peak RSS is the child's ``ru_maxrss`` as the parent reads it from
``wait4`` (``harness.memory``), so a case killed at its time limit has one too;
the child also reports its peak so far as each stage ends (and when it fails).

Documents (``harness.corpus.large_text``: deterministic, ASCII, so characters = bytes):

* ``prose``: sentences of the bundled English sample corpus, shuffled with
  ``random.Random(0)`` and grouped into paragraphs of 4-8 sentences separated by
  a blank line (``\\n\\n``, like Markdown; the splitter's paragraph separator is
  ``\\n\\n\\n``, so the whole file is one paragraph to it);
* ``oneline``: the same sentences on a single line (no newline at all);
* ``code``: a generated Python module (functions with varied identifiers,
  attribute access, numbers and comments);
* ``terse``: one line of 2-6 word sentences over the sample corpus's
  vocabulary: dense sentence ends, which is what makes NLTK's punkt tokenizer
  exceed its 5 s regex limit on 5 MB (the ``oneline`` sentences are long enough
  for it to finish in time on this machine);
* ``words``: random pseudo-words (a vocabulary of 200,000, letters drawn with
  ``random.Random(0)``) in sentences of 5-20 words and paragraphs of 4-8
  sentences: the vocabulary that made the dense matrix 52.6 GiB for 5 MB.

Tasks, per document:

* ``build``: ``RecursiveSummaryRetriever.from_documents([doc], embed_model=...)``,
  timed per stage by wrapping the builder functions ``recursive.py`` calls
  (chunking, grouping, summarizing, embedding, indexing). Embedding uses a cheap
  deterministic hashed bag-of-words (384 dimensions, crc32 buckets), not the
  bundled model: 5 MB is about 5,000 chunks, which the bundled model embeds at
  a few chunks per second on these 2 shared cores;
* ``summarize``: ``ExtractiveSummarizer().summarize(title, text)`` alone on the
  whole text, so the summarizer's own cost shows even where the old code fails
  earlier, in chunking;
* ``embed`` (5 MB prose only): the bundled all-MiniLM-L6-v2 on the first
  ``--real-chunks`` chunks of the document, as chunks per second and the
  projected time for all of them.

At 50 MB only ``--large-build-kinds`` (``prose``) are built; every kind is
summarized.

"before" is the package at ``--before-rev`` (extracted with ``git archive`` to a
temporary folder that goes first on ``PYTHONPATH``; the child checks it imported
that copy); "after" is the working tree. Times are indicative: four other
engineers share the machine's 2 cores.

    python benchmarks/large_documents.py --before-rev 1048e37 \\
        --out benchmarks/results/large_documents.md

``ties`` compares the summaries of the bundled sample corpus and of the shared
datasets' documents at ``--before-rev`` and now, and checks that every
difference starts at an exact tie between two sentences:

    python benchmarks/large_documents.py ties --before-rev 1048e37
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from harness import RESULTS, cli, memory, timing
from harness.corpus import large_text
from harness.data import DATA_ROOT
from harness.models import hashed_words, real_model
from harness.report import Table, write
from harness.versions import extract_package, head, old_package

MB = 1_000_000


# ------------------------------------------------------------------ child
def emit(event: dict[str, Any]) -> None:
    event["peak_rss_mib"] = round(memory.peak_rss_mib())
    print(json.dumps(event), flush=True)


def module_with(attribute: str, *names: str):
    """The first of the modules ``names`` that defines ``attribute``: the package's layout
    moves between the revisions measured (``recursive.py`` became ``recursive/...``)."""
    for name in names:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if hasattr(module, attribute):
            return module
    raise ImportError(f"none of {names} defines {attribute}")


PIPELINE = (
    "llama_index_ext_recursive.recursive.index",
    "llama_index_ext_recursive.recursive.retriever",
    "llama_index_ext_recursive.recursive",
)


def child(args: argparse.Namespace) -> None:
    memory.limit_address_space(args.memory_gib)
    text = large_text(args.kind, args.mb * MB)
    import llama_index_ext_recursive as package

    if args.source and not Path(package.__file__).resolve().is_relative_to(Path(args.source).resolve()):
        raise SystemExit(f"imported {package.__file__}, not the copy in {args.source}")
    from llama_index.core import Document

    document = Document(id_=f"{args.kind}-{args.mb}mb", text=text, metadata={"title": args.kind})
    emit({"stage": "generate", "chars": len(text)})
    stage = {"name": "import"}
    try:
        if args.task == "summarize":
            summarizer = module_with(
                "ExtractiveSummarizer",
                "llama_index_ext_recursive.recursive.summarize",
                "llama_index_ext_recursive.summarize",
            ).ExtractiveSummarizer()
            stage["name"] = "summarizing"
            clock = timing.Stopwatch()
            summary = summarizer.summarize(args.kind, text)
            emit({"stage": "summarizing", "seconds": clock.seconds(), "summary": summary[:160]})
        elif args.task == "embed":
            from llama_index.core.schema import MetadataMode

            stage["name"] = "chunking"
            nodes = module_with("chunk_documents", *PIPELINE).chunk_documents([document])
            model = real_model("minilm", cache=None)
            model.get_text_embedding_batch(["warm up"])
            stage["name"] = "embedding"
            texts = [n.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes[: args.real_chunks]]
            seconds = timing.seconds(lambda: model.get_text_embedding_batch(texts))
            emit(
                {
                    "stage": "embedding",
                    "seconds": seconds,
                    "chunks": len(texts),
                    "all_chunks": len(nodes),
                    "projected_seconds": seconds / len(texts) * len(nodes),
                }
            )
        else:
            build(document, stage)
    except BaseException as exc:  # report where it failed, with the peak so far
        emit({"stage": stage["name"], "error": f"{type(exc).__name__}: {str(exc)[:160]}"})
        raise SystemExit(1) from exc


def build(document, stage: dict[str, str]) -> None:
    """Build one retriever, each step of the pipeline timed by wrapping the function the build calls."""
    from llama_index_ext_recursive import RecursiveSummaryRetriever

    pipeline = module_with("chunk_documents", *PIPELINE)
    stages = {
        "chunk_documents": "chunking",
        "group_nodes": "grouping",
        "build_documents": "summarizing",
        "attach_embeddings": "embedding",
        "new_index": "indexing",
        "_new_index": "indexing",
    }
    for name, label in stages.items():
        original = getattr(pipeline, name, None)
        if original is None:
            continue

        def timed(*a, _original=original, _label=label, **kw):
            stage["name"] = _label
            clock = timing.Stopwatch()
            result = _original(*a, **kw)
            emit({"stage": _label, "seconds": clock.seconds()})
            return result

        setattr(pipeline, name, timed)
    clock = timing.Stopwatch()
    retriever = RecursiveSummaryRetriever.from_documents([document], embed_model=hashed_words(384))
    record = next(iter(retriever.documents.values()))
    summaries = getattr(getattr(retriever, "index", None), "summaries", None) or getattr(retriever, "_summaries", {})
    summary = summaries[record.doc_id].text if record.doc_id in summaries else ""
    emit({"stage": "total", "seconds": clock.seconds(), "chunks": len(record.chunk_ids), "summary": summary[:160]})


# ------------------------------------------------------------------ parent
def run_case(task: str, kind: str, mb: int, source: str | None, args: argparse.Namespace) -> dict[str, Any]:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    if source:
        env["PYTHONPATH"] = source + os.pathsep + env.get("PYTHONPATH", "")
    command = [
        sys.executable,
        __file__,
        "child",
        "--task",
        task,
        "--kind",
        kind,
        "--mb",
        str(mb),
        "--memory-gib",
        str(args.memory_gib),
        "--real-chunks",
        str(args.real_chunks),
    ]
    if source:
        command += ["--source", source]
    done = memory.run_child(command, env=env, timeout=args.timeout)
    error = f"timeout after {args.timeout:.0f} s" if done.timed_out else None
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    result: dict[str, Any] = {
        "task": task,
        "kind": kind,
        "mb": mb,
        "version": "before" if source else "after",
        "wall_seconds": round(done.wall_s, 1),
        "events": events,
    }
    failed = [e for e in events if "error" in e]
    if error or failed:
        last = events[-1]["stage"] if events else "start"
        result["error"] = failed[0]["error"] if failed else f"{error} (last stage finished: {last})"
        result["failed_stage"] = failed[0]["stage"] if failed else last
    elif done.returncode != 0 and not events:
        result["error"] = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "no output"
    result["peak_rss_mib"] = round(done.peak_rss_mib)  # the kernel's, for the whole child
    print(json.dumps({k: v for k, v in result.items() if k != "events"}), flush=True)
    return result


def stage_seconds(result: dict[str, Any], name: str) -> str:
    values = [e["seconds"] for e in result["events"] if e.get("stage") == name and "seconds" in e]
    return f"{sum(values):.1f}" if values else "-"


def report(results: list[dict[str, Any]], args: argparse.Namespace, out: Path) -> None:
    commands = sorted({r.get("command", " ".join(sys.argv[1:])) for r in results})
    lines = [
        "# Large documents: build time and peak RSS (issue 11, item 4)",
        "",
        "Commands: " + "; ".join(f"`python benchmarks/large_documents.py {c}`" for c in commands),
        "",
        f"Before = package at `{args.before_rev}`; after = working tree at `{head()}`. "
        f"Every case in a fresh subprocess with RLIMIT_AS = {args.memory_gib:g} GiB and a "
        f"{args.timeout:.0f} s timeout; peak RSS = the child's ru_maxrss (from wait4). Embedding in `build` rows is a cheap "
        "deterministic hashed bag-of-words (384 dims), **not** the bundled model (see the last table). "
        "Times are indicative: the machine's 2 cores are shared with four other engineers.",
        "",
        "## Build: `RecursiveSummaryRetriever.from_documents([doc])`",
        "",
    ]

    def document(r: dict[str, Any]) -> str:
        return f"{r['kind']} {r['mb']} MB"

    builds = []
    for r in (r for r in results if r["task"] == "build"):
        total = next((e for e in r["events"] if e.get("stage") == "total"), {})
        outcome = f"fails: {r['error']} (in {r['failed_stage']})" if "error" in r else "ok"
        builds.append(
            (
                document(r),
                r["version"],
                outcome,
                total.get("chunks", "-"),
                *(stage_seconds(r, s) for s in ("total", "chunking", "summarizing", "embedding", "indexing")),
                r["peak_rss_mib"],
            )
        )
    lines.append(
        Table(
            [
                "document",
                "version",
                "result",
                "chunks",
                "total s",
                "chunking s",
                "summarizing s",
                "embedding s",
                "indexing s",
                "peak RSS MiB",
            ],
            align="lllrrrrrrr",
        ).render(builds)
    )
    summaries = []
    for r in (r for r in results if r["task"] == "summarize"):
        event = next((e for e in r["events"] if e.get("stage") == "summarizing" and "seconds" in e), {})
        outcome = f"fails: {r['error']}" if "error" in r else "ok"
        summary = event.get("summary", "").replace("|", "\\|").replace("\n", " ")[:90]
        summaries.append(
            (document(r), r["version"], outcome, stage_seconds(r, "summarizing"), r["peak_rss_mib"], summary)
        )
    lines += [
        "",
        "## Summarizer alone: `ExtractiveSummarizer().summarize(title, text)`",
        "",
        Table(["document", "version", "result", "seconds", "peak RSS MiB", "summary (start)"], align="lllrrl").render(
            summaries
        ),
    ]
    embeds = []
    for r in (r for r in results if r["task"] == "embed"):
        e = next((e for e in r["events"] if e.get("stage") == "embedding" and "seconds" in e), None)
        embeds.append(
            (document(r), f"fails: {r.get('error')}", "", "", "", "")
            if e is None
            else (
                document(r),
                e["chunks"],
                f"{e['seconds']:.1f}",
                f"{e['chunks'] / e['seconds']:.1f}",
                e["all_chunks"],
                f"{e['projected_seconds']:.0f}",
            )
        )
    if embeds:
        lines += [
            "",
            "## Bundled model (all-MiniLM-L6-v2) on a subset",
            "",
            Table(["document", "chunks embedded", "seconds", "chunks/s", "all chunks", "projected s for all"]).render(
                embeds
            ),
        ]
    write(out, "\n".join(lines), results)


def main_bench(args: argparse.Namespace) -> None:
    results = []
    with tempfile.TemporaryDirectory(prefix="large-docs-before-") as tmp:
        before = extract_package(args.before_rev, tmp) if args.before_rev else None
        for mb in args.sizes:
            for kind in args.kinds:
                for task in args.tasks:
                    if task == "build" and mb >= 50 and kind not in args.large_build_kinds:
                        continue  # a 50 MB build takes many minutes on the shared machine
                    for source in ([before] if before else []) + [None]:
                        results.append(run_case(task, kind, mb, source, args))
                        results[-1]["command"] = " ".join(sys.argv[1:])
        if args.real_chunks and 5 in args.sizes:
            results.append(run_case("embed", "prose", 5, None, args))
            results[-1]["command"] = " ".join(sys.argv[1:])
    if args.append and args.out.with_suffix(".json").exists():
        results = json.loads(args.out.with_suffix(".json").read_text(encoding="utf-8")) + results
    report(results, args, args.out)


# ------------------------------------------------------------------ ties
def ties(args: argparse.Namespace) -> None:
    """Every before/after difference in summaries must start at an exact tie."""
    import numpy as np

    from llama_index_ext_recursive.recursive import summarize as new

    old = old_package(args.before_rev, "summarize")

    def trace(module, text: str, budget: int, segments: int):
        """``module``'s selection, replayed with each pick's candidate gains recorded."""
        summarizer = module.ExtractiveSummarizer()
        lam = summarizer.diversity_lambda
        picks = []

        def mmr(matrix, centrality, lengths, part_budget, ids):
            redundancy, open_, used, chosen = np.zeros(len(ids)), lengths <= part_budget, 0, []
            while open_.any():
                gains = np.where(open_, lam * centrality - (1 - lam) * redundancy, -np.inf)
                idx = int(np.argmax(gains))
                picks.append((tuple(ids), idx, gains))
                chosen.append(int(ids[idx]))
                used += lengths[idx]
                open_[idx] = False
                open_ &= lengths <= part_budget - used
                row = matrix[idx] if isinstance(matrix, np.ndarray) else new._dense_row(matrix, idx)
                redundancy = np.maximum(redundancy, matrix @ row)
            return chosen

        expected = summarizer.select(text, budget, segments)
        summarizer._mmr = mmr
        assert summarizer.select(text, budget, segments) == expected, "the replay differs from the module"
        return expected, picks

    docs = list(iter_documents())
    same = differ = 0
    widest = 0.0
    for _, text in docs:
        for budget, segments in [(597, 1), (6000, 8), (235, 1)]:
            before, before_picks = trace(old, text, budget, segments)
            after, after_picks = trace(new, text, budget, segments)
            if before == after:
                same += 1
                continue
            differ += 1
            for (ids_a, a, gains_a), (ids_b, b, gains_b) in zip(before_picks, after_picks):
                assert ids_a == ids_b
                if a != b:
                    gap = max(abs(gains_a[a] - gains_a[b]), abs(gains_b[a] - gains_b[b]))
                    assert gap < 1e-12, f"a real difference, not a tie (gap {gap})"
                    widest = max(widest, gap)
                    break
    print(
        f"{len(docs)} documents x 3 budgets: {same} selections identical, {differ} differ, each "
        f"from an exact tie (largest gain gap {widest:.1e})"
    )


def iter_documents() -> Iterator[tuple]:
    """The sample corpus as the builder joins it (chunks with overlap), then the shared datasets."""
    from llama_index.core.schema import MetadataMode

    from llama_index_ext_recursive import load_sample_documents
    from llama_index_ext_recursive.recursive.build import chunk_documents, group_nodes

    for doc_id, chunks in group_nodes(chunk_documents(load_sample_documents())).items():
        yield doc_id, "\n".join(c.get_content(metadata_mode=MetadataMode.NONE) for c in chunks)
    for name in ["xquad_en", "xquad_zh", "cmrc2018", "legalbench_contractnli", "llamaindex_blockchain_solana"]:
        path = DATA_ROOT / name / "documents.jsonl"
        if path.exists():
            for line in path.read_text(encoding="utf-8").splitlines():
                row = json.loads(line)
                yield row["_id"], row["text"]


def main(argv: list[str] | None = None) -> None:
    p = cli.parser(__doc__)
    p.add_argument("mode", nargs="?", default="bench", choices=["bench", "child", "ties"])
    p.add_argument("--before-rev", default=None, help="git revision for the 'before' rows")
    p.add_argument("--sizes", type=cli.csv(int), default=[5, 50])
    p.add_argument("--kinds", type=cli.csv(), default=["prose", "oneline", "code"])
    p.add_argument("--tasks", type=cli.csv(), default=["build", "summarize"])
    p.add_argument(
        "--large-build-kinds",
        type=cli.csv(),
        default=["prose"],
        help="kinds built (task build) at 50 MB and more; the others are only summarized",
    )
    p.add_argument("--memory-gib", type=float, default=6.0)
    p.add_argument("--timeout", type=float, default=900.0)
    p.add_argument("--real-chunks", type=int, default=64, help="chunks for the bundled-model row (0: none)")
    p.add_argument("--append", action="store_true", help="add to the results already in --out's .json")
    cli.add_out(p, RESULTS / "large_documents.md")
    # child only
    p.add_argument("--task", default="build")
    p.add_argument("--kind", default="prose")
    p.add_argument("--mb", type=int, default=5)
    p.add_argument("--source", default=None)
    args = p.parse_args(argv)
    if args.mode == "child":
        child(args)
    elif args.mode == "ties":
        if not args.before_rev:
            p.error("ties needs --before-rev")
        ties(args)
    else:
        main_bench(args)


if __name__ == "__main__":
    main()
