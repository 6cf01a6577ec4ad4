"""Build time and peak RSS for one 5 MB and one 50 MB document, before and after (issue 11, item 4).

Each case runs in a fresh subprocess limited to ``--memory-gib`` (6) GiB of
address space (``RLIMIT_AS``) and ``--timeout`` seconds, so the old dense
summarizer fails with ``MemoryError`` instead of taking the machine down. Peak
RSS is the child's own ``ru_maxrss``, reported as each stage ends (and when it
fails).

Documents (deterministic, ASCII, so characters = bytes):

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
import json
import os
import random
import re
import resource
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "llama_index_ext_recursive" / "sample_data" / "corpus.jsonl"
SHARED = ROOT.parent / "shared" / "data"
MB = 1_000_000


# ------------------------------------------------------------------ documents
def sample_sentences() -> List[str]:
    sentences = []
    for line in CORPUS.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        if row["doc_id"].startswith("zh-"):
            continue
        for paragraph in row["text"].split("\n"):
            if paragraph.strip() and not paragraph.startswith("#"):
                sentences.extend(s for s in re.split(r"(?<=[.!?])\s+", paragraph.strip()) if s)
    return sentences


def prose(size: int, one_line: bool) -> str:
    rng = random.Random(0)
    pool = sample_sentences()
    parts: List[str] = []
    total = 0
    while total < size:
        rng.shuffle(pool)
        for start in range(0, len(pool), 6):
            paragraph = " ".join(pool[start : start + rng.randint(4, 8)])
            parts.append(paragraph)
            total += len(paragraph) + 2
            if total >= size:
                break
    return (" " if one_line else "\n\n").join(parts)[:size]


def code(size: int) -> str:
    rng = random.Random(0)
    verbs = "load parse compute render fetch store merge split check format update build".split()
    nouns = "user order item record invoice token session cache queue report batch node".split()
    parts: List[str] = []
    total = 0
    i = 0
    while total < size:
        verb, noun, other = rng.choice(verbs), rng.choice(nouns), rng.choice(nouns)
        block = (
            f"def {verb}_{noun}_{i}(request, limit={rng.randint(1, 500)}):\n"
            f'    """{verb.capitalize()} the {noun} of a request (see {other}.{rng.choice(verbs)})."""\n'
            f"    {noun}s = request.{other}_{rng.randint(0, 999)}.get(\"{noun}\", [])\n"
            f"    total = sum(x.value * {rng.random():.3f} for x in {noun}s[:limit])\n"
            f"    if total > {rng.randint(0, 10_000)}:  # {rng.choice(verbs)} before {rng.choice(verbs)}\n"
            f"        return {rng.choice(verbs)}_{other}(total, retries={rng.randint(0, 9)})\n"
            f"    return None\n\n\n"
        )
        parts.append(block)
        total += len(block)
        i += 1
    return "".join(parts)[:size]


def words(size: int) -> str:
    rng = random.Random(0)
    letters = "etaoinshrdlcumwfgypbvkjxqz"
    vocabulary = ["".join(rng.choices(letters, k=rng.randint(3, 10))) for _ in range(200_000)]
    paragraphs: List[str] = []
    total = 0
    while total < size:
        sentences = [" ".join(rng.choices(vocabulary, k=rng.randint(5, 20))).capitalize() + "."
                     for _ in range(rng.randint(4, 8))]
        paragraphs.append(" ".join(sentences))
        total += len(paragraphs[-1]) + 2
    return "\n\n".join(paragraphs)[:size]


def terse(size: int) -> str:
    rng = random.Random(0)
    vocabulary = sorted({w.lower() for s in sample_sentences() for w in re.findall(r"[A-Za-z]+", s)})
    parts: List[str] = []
    total = 0
    while total < size:
        parts.append(" ".join(rng.choices(vocabulary, k=rng.randint(2, 6))).capitalize() + ".")
        total += len(parts[-1]) + 1
    return " ".join(parts)[:size]


def document_text(kind: str, size: int) -> str:
    if kind == "terse":
        return terse(size)
    if kind == "code":
        return code(size)
    if kind == "words":
        return words(size)
    return prose(size, one_line=kind == "oneline")


# ------------------------------------------------------------------ child
def hash_embedding():
    """Deterministic hashed bag of words, 384 dimensions: costs far less than a model."""
    import numpy as np
    from llama_index.core.base.embeddings.base import BaseEmbedding

    class HashEmbedding(BaseEmbedding):
        def _vector(self, text: str) -> List[float]:
            vector = np.zeros(384)
            for word in re.findall(r"\w+", text.lower()):
                vector[zlib.crc32(word.encode()) % 384] += 1.0
            norm = np.linalg.norm(vector)
            return (vector / norm if norm else vector + 1 / np.sqrt(384)).tolist()

        def _get_query_embedding(self, query: str) -> List[float]:
            return self._vector(query)

        def _get_text_embedding(self, text: str) -> List[float]:
            return self._vector(text)

        async def _aget_query_embedding(self, query: str) -> List[float]:
            return self._vector(query)

    return HashEmbedding(model_name="hash-384", embed_batch_size=256)


def emit(event: Dict[str, Any]) -> None:
    event["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    print(json.dumps(event), flush=True)


def child(args: argparse.Namespace) -> None:
    limit = int(args.memory_gib * 2**30)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    text = document_text(args.kind, args.mb * MB)
    import llama_index_ext_recursive as package

    if args.source and not Path(package.__file__).resolve().is_relative_to(Path(args.source).resolve()):
        raise SystemExit(f"imported {package.__file__}, not the copy in {args.source}")
    from llama_index.core import Document

    document = Document(id_=f"{args.kind}-{args.mb}mb", text=text, metadata={"title": args.kind})
    emit({"stage": "generate", "chars": len(text)})
    stage = {"name": "import"}
    try:
        if args.task == "summarize":
            from llama_index_ext_recursive.recursive.summarize import ExtractiveSummarizer

            stage["name"] = "summarizing"
            started = time.perf_counter()
            summary = ExtractiveSummarizer().summarize(args.kind, text)
            emit({"stage": "summarizing", "seconds": time.perf_counter() - started, "summary": summary[:160]})
        elif args.task == "embed":
            from llama_index.core.schema import MetadataMode

            from llama_index_ext_recursive.recursive.build import chunk_documents
            from llama_index_ext_recursive.models import bundled_embed_model

            stage["name"] = "chunking"
            nodes = chunk_documents([document])
            model = bundled_embed_model()
            model.get_text_embedding_batch(["warm up"])
            stage["name"] = "embedding"
            texts = [n.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes[: args.real_chunks]]
            started = time.perf_counter()
            model.get_text_embedding_batch(texts)
            seconds = time.perf_counter() - started
            emit({"stage": "embedding", "seconds": seconds, "chunks": len(texts), "all_chunks": len(nodes),
                  "projected_seconds": seconds / len(texts) * len(nodes)})
        else:
            build(document, stage)
    except BaseException as exc:  # report where it failed, with the peak so far
        emit({"stage": stage["name"], "error": f"{type(exc).__name__}: {str(exc)[:160]}"})
        raise SystemExit(1)


def build(document, stage: Dict[str, str]) -> None:
    from llama_index_ext_recursive.recursive import retriever as recursive

    stages = {
        "chunk_documents": "chunking",
        "group_nodes": "grouping",
        "build_documents": "summarizing",
        "attach_embeddings": "embedding",
        "_new_index": "indexing",
    }
    for name, label in stages.items():
        original = getattr(recursive, name)

        def timed(*a, _original=original, _label=label, **kw):
            stage["name"] = _label
            started = time.perf_counter()
            result = _original(*a, **kw)
            emit({"stage": _label, "seconds": time.perf_counter() - started})
            return result

        setattr(recursive, name, timed)
    started = time.perf_counter()
    retriever = recursive.RecursiveSummaryRetriever.from_documents([document], embed_model=hash_embedding())
    record = next(iter(retriever.documents.values()))
    summary = retriever._summaries[record.doc_id].text
    emit({"stage": "total", "seconds": time.perf_counter() - started, "chunks": len(record.chunk_ids),
          "summary": summary[:160]})


# ------------------------------------------------------------------ parent
def extract(rev: str, into: str) -> str:
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", rev, "llama_index_ext_recursive"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", into], input=archive, check=True)
    return into


def run_case(task: str, kind: str, mb: int, source: Optional[str], args: argparse.Namespace) -> Dict[str, Any]:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    if source:
        env["PYTHONPATH"] = source + os.pathsep + env.get("PYTHONPATH", "")
    command = [sys.executable, __file__, "child", "--task", task, "--kind", kind, "--mb", str(mb),
               "--memory-gib", str(args.memory_gib), "--real-chunks", str(args.real_chunks)]
    if source:
        command += ["--source", source]
    started = time.perf_counter()
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=args.timeout)
        out, error = done.stdout, None
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        error = f"timeout after {args.timeout:.0f} s"
    events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    result: Dict[str, Any] = {"task": task, "kind": kind, "mb": mb, "version": "before" if source else "after",
                              "wall_seconds": round(time.perf_counter() - started, 1), "events": events}
    failed = [e for e in events if "error" in e]
    if error or failed:
        last = events[-1]["stage"] if events else "start"
        result["error"] = failed[0]["error"] if failed else f"{error} (last stage finished: {last})"
        result["failed_stage"] = failed[0]["stage"] if failed else last
        if not events and not error:
            result["error"] = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "no output"
    result["peak_rss_mib"] = max((e["peak_rss_mib"] for e in events), default=None)
    print(json.dumps({k: v for k, v in result.items() if k != "events"}), flush=True)
    return result


def stage_seconds(result: Dict[str, Any], name: str) -> str:
    values = [e["seconds"] for e in result["events"] if e.get("stage") == name and "seconds" in e]
    return f"{sum(values):.1f}" if values else "-"


def report(results: List[Dict[str, Any]], args: argparse.Namespace, out: Path) -> None:
    commands = sorted({r.get("command", " ".join(sys.argv[1:])) for r in results})
    lines = [
        "# Large documents: build time and peak RSS (issue 11, item 4)",
        "",
        "Commands: " + "; ".join(f"`python benchmarks/large_documents.py {c}`" for c in commands),
        "",
        f"Before = package at `{args.before_rev}`; after = working tree at "
        f"`{subprocess.run(['git', '-C', str(ROOT), 'rev-parse', '--short', 'HEAD'], capture_output=True, text=True).stdout.strip()}`. "
        f"Every case in a fresh subprocess with RLIMIT_AS = {args.memory_gib:g} GiB and a "
        f"{args.timeout:.0f} s timeout; peak RSS = the child's ru_maxrss. Embedding in `build` rows is a cheap "
        "deterministic hashed bag-of-words (384 dims), **not** the bundled model (see the last table). "
        "Times are indicative: the machine's 2 cores are shared with four other engineers.",
        "",
        "## Build: `RecursiveSummaryRetriever.from_documents([doc])`",
        "",
        "| document | version | result | chunks | total s | chunking s | summarizing s | embedding s | indexing s | peak RSS MiB |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in (r for r in results if r["task"] == "build"):
        total = next((e for e in r["events"] if e.get("stage") == "total"), {})
        outcome = f"fails: {r['error']} (in {r['failed_stage']})" if "error" in r else "ok"
        lines.append(
            f"| {r['kind']} {r['mb']} MB | {r['version']} | {outcome} | {total.get('chunks', '-')} | "
            f"{stage_seconds(r, 'total')} | {stage_seconds(r, 'chunking')} | {stage_seconds(r, 'summarizing')} | "
            f"{stage_seconds(r, 'embedding')} | {stage_seconds(r, 'indexing')} | {r['peak_rss_mib']} |"
        )
    lines += ["", "## Summarizer alone: `ExtractiveSummarizer().summarize(title, text)`", "",
              "| document | version | result | seconds | peak RSS MiB | summary (start) |", "|---|---|---|---:|---:|---|"]
    for r in (r for r in results if r["task"] == "summarize"):
        event = next((e for e in r["events"] if e.get("stage") == "summarizing" and "seconds" in e), {})
        outcome = f"fails: {r['error']}" if "error" in r else "ok"
        summary = event.get("summary", "").replace("|", "\\|").replace("\n", " ")[:90]
        lines.append(f"| {r['kind']} {r['mb']} MB | {r['version']} | {outcome} | {stage_seconds(r, 'summarizing')} | "
                     f"{r['peak_rss_mib']} | {summary} |")
    embeds = [r for r in results if r["task"] == "embed"]
    if embeds:
        lines += ["", "## Bundled model (all-MiniLM-L6-v2) on a subset", "",
                  "| document | chunks embedded | seconds | chunks/s | all chunks | projected s for all |",
                  "|---|---:|---:|---:|---:|---:|"]
        for r in embeds:
            e = next((e for e in r["events"] if e.get("stage") == "embedding" and "seconds" in e), None)
            if e is None:
                lines.append(f"| {r['kind']} {r['mb']} MB | fails: {r.get('error')} | | | | |")
                continue
            lines.append(f"| {r['kind']} {r['mb']} MB | {e['chunks']} | {e['seconds']:.1f} | "
                         f"{e['chunks'] / e['seconds']:.1f} | {e['all_chunks']} | {e['projected_seconds']:.0f} |")
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out.with_suffix(".json").write_text(json.dumps(results, indent=1), encoding="utf-8")
    print(f"wrote {out}")


def main_bench(args: argparse.Namespace) -> None:
    results = []
    with tempfile.TemporaryDirectory(prefix="large-docs-before-") as tmp:
        before = extract(args.before_rev, tmp) if args.before_rev else None
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
    import importlib.util

    import numpy as np

    with tempfile.TemporaryDirectory(prefix="large-docs-ties-") as tmp:
        extract(args.before_rev, tmp)
        source = (Path(tmp) / "llama_index_ext_recursive" / "summarize.py").read_text(encoding="utf-8")
        source = source.replace("from llama_index_ext_recursive.persist import load_json", "load_json = None")
        path = Path(tmp) / "summarize_before.py"
        path.write_text(source, encoding="utf-8")
        spec = importlib.util.spec_from_file_location("summarize_before", path)
        old = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(old)
    from llama_index_ext_recursive.recursive import summarize as new

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
    print(f"{len(docs)} documents x 3 budgets: {same} selections identical, {differ} differ, each "
          f"from an exact tie (largest gain gap {widest:.1e})")


def iter_documents() -> Iterator[tuple]:
    """The sample corpus as the builder joins it (chunks with overlap), then the shared datasets."""
    from llama_index.core.schema import MetadataMode

    from llama_index_ext_recursive import load_sample_documents
    from llama_index_ext_recursive.recursive.build import chunk_documents, group_nodes

    for doc_id, chunks in group_nodes(chunk_documents(load_sample_documents())).items():
        yield doc_id, "\n".join(c.get_content(metadata_mode=MetadataMode.NONE) for c in chunks)
    for name in ["xquad_en", "xquad_zh", "cmrc2018", "legalbench_contractnli", "llamaindex_blockchain_solana"]:
        path = SHARED / name / "documents.jsonl"
        if path.exists():
            for line in path.read_text(encoding="utf-8").splitlines():
                row = json.loads(line)
                yield row["_id"], row["text"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", nargs="?", default="bench", choices=["bench", "child", "ties"])
    parser.add_argument("--before-rev", default=None, help="git revision for the 'before' rows")
    parser.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")], default=[5, 50])
    parser.add_argument("--kinds", type=lambda s: s.split(","), default=["prose", "oneline", "code"])
    parser.add_argument("--tasks", type=lambda s: s.split(","), default=["build", "summarize"])
    parser.add_argument("--large-build-kinds", type=lambda s: s.split(","), default=["prose"],
                        help="kinds built (task build) at 50 MB and more; the others are only summarized")
    parser.add_argument("--memory-gib", type=float, default=6.0)
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--real-chunks", type=int, default=64, help="chunks for the bundled-model row (0: none)")
    parser.add_argument("--append", action="store_true", help="add to the results already in --out's .json")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "large_documents.md")
    # child only
    parser.add_argument("--task", default="build")
    parser.add_argument("--kind", default="prose")
    parser.add_argument("--mb", type=int, default=5)
    parser.add_argument("--source", default=None)
    args = parser.parse_args()
    if args.mode == "child":
        child(args)
    elif args.mode == "ties":
        if not args.before_rev:
            parser.error("ties needs --before-rev")
        ties(args)
    else:
        main_bench(args)


if __name__ == "__main__":
    main()
