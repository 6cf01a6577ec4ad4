"""Persistence that only ever replaces its own index (issue 11, items 1 and 5).

Covers both persisting retrievers (``RecursiveSummaryRetriever`` and
``MultilingualBM25Retriever``): refusal of anything that is not our index,
permissions, a failure injected at every step of a persist, a real SIGKILL,
two writer processes and a reader process on one folder, every file damaged
in every way, folders of the previous release, and a hypothesis round trip.
"""

from __future__ import annotations

import builtins
import errno
import hashlib
import io
import json
import os
import random
import shutil
import signal
import stat
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import TOPICS, LexicalEmbedding, topic_nodes
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from llama_index.core.schema import TextNode

from llama_index_ext_recursive import MultilingualBM25Retriever, PersistError, RecursiveSummaryRetriever
from llama_index_ext_recursive import persist as persist_module
from llama_index_ext_recursive.persist import (
    MANIFEST,
    ROWS_DATABASE,
    NoIndexError,
    check_persist_target,
    current_generation,
    published_generation,
    read_index,
    write_index,
)
from llama_index_ext_recursive.recursive.build import DOCUMENT_CONTEXT_KEY, ChunkContext
from llama_index_ext_recursive.recursive.persist import load_summary_cache

TESTS = Path(__file__).resolve().parent
QUERIES = ("queen bee hive eggs", "solar inverter current", "sourdough starter yeast", "nectar flowers")
LOCKS = {".llama-index.lock", ".llama-index.rwlock"}

# Two versions of the corpus: "new" changes one document and adds one.
NEW_TOPICS = {
    **TOPICS,
    "bees": (
        "Honeybees",
        "biology",
        2024,
        [
            "A honeybee colony winters in a cluster around the queen.",
            "Guard bees defend the hive entrance from wasps.",
        ],
    ),
    "tea": (
        "Green tea",
        "food",
        2022,
        [
            "Green tea leaves are steamed or pan fired to stop oxidation.",
            "Brew green tea below boiling so it does not turn bitter.",
        ],
    ),
}
VERSIONS = {"old": TOPICS, "new": NEW_TOPICS}


def lexical_model() -> LexicalEmbedding:
    return LexicalEmbedding(model_name="lexical-test")


def big_topics(version: str, documents: int = 40) -> dict[str, Any]:
    """A larger corpus (for the process tests, so a persist takes a while)."""
    words = "queen hive nectar solar panel inverter bread yeast flour steam tea leaf".split()
    topics = {}
    for d in range(documents):
        sentences = [
            " ".join(words[(d + s + k) % len(words)] for k in range(8)) + f" {version} {d} {s}." for s in range(6)
        ]
        topics[f"doc{d:03d}"] = (f"Doc {d}", "cat" + str(d % 3), 2000 + d, sentences)
    return topics


@dataclass(frozen=True)
class Kind:
    name: str
    build: Callable[[dict[str, Any]], Any]
    load: Callable[[Path], Any]


KINDS = {
    "recursive": Kind(
        "RecursiveSummaryRetriever",
        lambda topics: RecursiveSummaryRetriever.from_nodes(
            topic_nodes(topics), embed_model=lexical_model(), similarity_top_k=4
        ),
        lambda path: RecursiveSummaryRetriever.from_persist_dir(path, embed_model=lexical_model()),
    ),
    "bm25": Kind(
        "MultilingualBM25Retriever",
        lambda topics: MultilingualBM25Retriever.from_defaults(nodes=topic_nodes(topics), similarity_top_k=4),
        MultilingualBM25Retriever.from_persist_dir,
    ),
}


def signature(retriever) -> list[list[list[Any]]]:
    """What a retriever answers: ids, scores and metadata for fixed queries (JSON-comparable)."""
    return [
        [[hit.node.node_id, round(float(hit.score), 9), hit.node.get_content()] for hit in retriever.retrieve(q)]
        for q in QUERIES
    ]


def snapshot(path: Path) -> dict[str, Any]:
    """Everything at ``path``: names, kinds, bytes and modes (to prove nothing changed)."""
    if path.is_file():
        return {".": (path.read_bytes(), path.stat().st_mode)}
    found = {}
    for item in sorted(path.rglob("*")):
        key = item.relative_to(path).as_posix()
        found[key] = (item.read_bytes() if item.is_file() else "dir", item.stat().st_mode)
    return found


def own_entries(path: Path) -> list[str]:
    """Entries of an index folder besides the lock files."""
    return sorted(name for name in os.listdir(path) if name not in LOCKS)


def assert_clean(path: Path) -> None:
    """Exactly one generation and its manifest: no staging, temp or old generation left."""
    generation = current_generation(path).name
    assert own_entries(path) == [MANIFEST, generation]


def rehash(path: Path) -> None:
    """Rewrite the manifest so it matches the files (to test the content checks behind it)."""
    manifest = json.loads((path / MANIFEST).read_text())
    generation = path / manifest["directory"]
    for name in manifest["files"]:
        data = (generation / name).read_bytes()
        manifest["files"][name] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (path / MANIFEST).write_text(json.dumps(manifest))


@pytest.fixture(scope="module")
def built():
    """Each kind built over each corpus version once, with its signature."""
    out = {}
    for key, kind in KINDS.items():
        for version, topics in VERSIONS.items():
            retriever = kind.build(topics)
            out[key, version] = (retriever, signature(retriever))
    return out


# ------------------------------------------------------------------ refusals
def _user_folder(base: Path) -> Path:
    folder = base / "docs"
    folder.mkdir()
    (folder / "thesis.txt").write_text("three years of work")
    return folder


def _project_folder(base: Path) -> Path:
    folder = base / "project"
    (folder / "src").mkdir(parents=True)
    (folder / ".git").mkdir()
    (folder / "pyproject.toml").write_text("[project]\nname = 'app'\n")
    (folder / "src" / "app.py").write_text("print('hello')\n")
    (folder / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    return folder


def _regular_file(base: Path) -> Path:
    path = base / "index"
    path.write_text("not a folder")
    return path


TARGETS = {"user-folder": _user_folder, "project-dot": _project_folder, "regular-file": _regular_file}


@pytest.mark.parametrize("target", sorted(TARGETS))
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_persist_refuses_what_is_not_our_index_and_leaves_it_untouched(kind, target, built, tmp_path, monkeypatch):
    path = TARGETS[target](tmp_path)
    before = snapshot(path)
    retriever = built[kind, "old"][0]
    if target == "project-dot":
        monkeypatch.chdir(path)
        destination = Path(".")
    else:
        destination = path
    expected = {
        "user-folder": "thesis.txt",
        "project-dot": r"\.git/, pyproject.toml, src/",
        "regular-file": "is a file, not a folder",
    }[target]
    with pytest.raises(PersistError, match=rf"refusing to persist to {path}.*{expected}"):
        retriever.persist(destination)
    with pytest.raises(PersistError, match="refusing"):
        check_persist_target(destination, KINDS[kind].name)
    assert snapshot(path) == before  # not even a lock file was created
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_persist_refuses_an_index_of_another_kind(kind, built, tmp_path):
    other = next(k for k in KINDS if k != kind)
    built[other, "old"][0].persist(tmp_path / "idx")
    before = snapshot(tmp_path / "idx")
    with pytest.raises(PersistError, match=rf"holds a {KINDS[other].name} index"):
        built[kind, "old"][0].persist(tmp_path / "idx")
    assert snapshot(tmp_path / "idx") == before
    with pytest.raises(PersistError, match=rf"not a {KINDS[kind].name}; load it with {KINDS[other].name}"):
        KINDS[kind].load(tmp_path / "idx")


def test_a_folder_like_a_previous_index_but_with_a_user_file_is_refused(built, tmp_path):
    legacy = tmp_path / "legacy"
    built["recursive", "old"][0].persist(tmp_path / "idx")
    as_previous_format(current_generation(tmp_path / "idx"), legacy)
    (legacy / "notes.md").write_text("mine")
    before = snapshot(legacy)
    with pytest.raises(PersistError, match="notes.md"):
        built["recursive", "old"][0].persist(legacy)
    assert snapshot(legacy) == before


# --------------------------------------------------------- allowed targets
def _modes_follow_umask(root: Path) -> None:
    umask = os.umask(0)
    os.umask(umask)
    for path in [root, *root.rglob("*")]:
        if path.name == ".llama-index.rwlock":  # filelock's lock database, private by design
            continue
        wanted = (0o777 if path.is_dir() else 0o666) & ~umask
        assert stat.S_IMODE(path.stat().st_mode) == wanted, path


@pytest.mark.parametrize("umask", [0o022, 0o002])
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_persist_into_missing_empty_and_own_folders_with_normal_permissions(kind, umask, built, tmp_path):
    saved = os.umask(umask)
    try:
        (old, old_sig), (new, new_sig) = built[kind, "old"], built[kind, "new"]
        missing = tmp_path / "a" / "b" / "idx"
        old.persist(missing)
        assert signature(KINDS[kind].load(missing)) == old_sig
        empty = tmp_path / "empty"
        empty.mkdir()
        old.persist(empty)
        new.persist(empty)  # over our own index: replaced
        assert signature(KINDS[kind].load(empty)) == new_sig
        assert_clean(empty)
        _modes_follow_umask(tmp_path / "a")
        _modes_follow_umask(empty)
    finally:
        os.umask(saved)


def test_user_files_inside_our_index_folder_are_never_touched(built, tmp_path):
    (old, _), (new, new_sig) = built["recursive", "old"], built["recursive", "new"]
    target = tmp_path / "idx"
    old.persist(target)
    (target / "README.txt").write_text("what this index is")
    (target / "config.json").write_text("a user's file that happens to share a legacy name")
    new.persist(target)
    new.persist(target)
    assert (target / "README.txt").read_text() == "what this index is"
    assert (target / "config.json").read_text().startswith("a user's file")
    assert signature(KINDS["recursive"].load(target)) == new_sig


def test_previous_format_folder_loads_and_the_next_persist_migrates_it(built, tmp_path):
    (old, old_sig), (new, new_sig) = built["recursive", "old"], built["recursive", "new"]
    old.persist(tmp_path / "idx")
    legacy = tmp_path / "legacy"
    # the previous release wrote exactly these files at the top level
    as_previous_format(current_generation(tmp_path / "idx"), legacy)
    assert sorted(os.listdir(legacy)) == ["chunks", "config.json", "summaries", "summary_cache.json"]
    assert json.loads((legacy / "config.json").read_text())["format_version"] == 1
    assert signature(KINDS["recursive"].load(legacy)) == old_sig
    assert load_summary_cache(legacy).entries == old.index.summary_cache.entries

    new.persist(legacy)
    assert_clean(legacy)
    assert signature(KINDS["recursive"].load(legacy)) == new_sig


def test_load_summary_cache_and_check_persist_target(built, tmp_path):
    old = built["recursive", "old"][0]
    assert load_summary_cache(tmp_path / "nothing").entries == {}
    assert load_summary_cache(_user_folder(tmp_path)).entries == {}
    old.persist(tmp_path / "idx")
    cache = load_summary_cache(tmp_path / "idx")
    assert cache.entries == old.index.summary_cache.entries and len(cache.entries) == 3
    assert cache.path is None
    check_persist_target(tmp_path / "idx", "RecursiveSummaryRetriever")
    check_persist_target(tmp_path / "new", "RecursiveSummaryRetriever")
    assert not (tmp_path / "new").exists()


def test_loading_nothing_says_what_is_there(tmp_path):
    with pytest.raises(NoIndexError, match="nowhere does not exist"):
        RecursiveSummaryRetriever.from_persist_dir(tmp_path / "nowhere", embed_model=lexical_model())
    user = _user_folder(tmp_path)
    with pytest.raises(NoIndexError, match=r"holds no index written by persist\(\) \(thesis.txt\)"):
        MultilingualBM25Retriever.from_persist_dir(user)
    assert os.listdir(user) == ["thesis.txt"]  # loading creates no lock file in a user's folder
    (tmp_path / "empty").mkdir()
    with pytest.raises(NoIndexError, match="holds nothing"):
        MultilingualBM25Retriever.from_persist_dir(tmp_path / "empty")
    assert os.listdir(tmp_path / "empty") == []


# ---------------------------------------------------- failure at every step
class Injector:
    """Counts calls to file-system functions and fails the ``fail_at``-th (0: never)."""

    def __init__(self, fail_at: int = 0) -> None:
        self.fail_at = fail_at
        self.calls = 0

    def _tick(self, what: str) -> None:
        self.calls += 1
        if self.calls == self.fail_at:
            raise OSError(errno.EIO, f"injected failure in {what} (call {self.calls})")

    def wrap(self, name: str, function: Callable) -> Callable:
        def wrapper(*args, **kwargs):
            self._tick(name)
            result = function(*args, **kwargs)
            if name == "open" and hasattr(result, "write"):
                return _FailingWrites(result, self)
            return result

        return wrapper

    def install(self, monkeypatch) -> None:
        monkeypatch.setattr(builtins, "open", self.wrap("open", builtins.open))
        monkeypatch.setattr(io, "open", self.wrap("open", io.open))
        for name in ("replace", "rename", "fsync", "mkdir", "open", "unlink", "rmdir"):
            monkeypatch.setattr(os, name, self.wrap(name, getattr(os, name)))


class _FailingWrites:
    """A file whose first two ``write`` calls count as steps too.

    A failure at the first leaves an empty file, at the second a partial one
    (a full disk); later writes of the same file add nothing new to test.
    """

    def __init__(self, handle, injector: Injector) -> None:
        self._handle, self._injector, self._writes = handle, injector, 0

    def write(self, data):
        self._writes += 1
        if self._writes <= 2:
            self._injector._tick("write")
        return self._handle.write(data)

    def __enter__(self):
        self._handle.__enter__()
        return self

    def __exit__(self, *exc):
        return self._handle.__exit__(*exc)

    def __iter__(self):
        return iter(self._handle)

    def __getattr__(self, name):
        return getattr(self._handle, name)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_failure_at_any_step_leaves_the_old_or_the_new_index(kind, built, tmp_path, monkeypatch):
    target = tmp_path / "idx"
    sigs = {v: built[kind, v][1] for v in VERSIONS}
    current, other = "old", "new"
    built[kind, current][0].persist(target)

    counter = Injector()
    with monkeypatch.context() as patch:
        counter.install(patch)
        built[kind, other][0].persist(target)
    steps = counter.calls
    assert steps > 20  # every open, write, fsync, mkdir and rename of a persist counts
    current, other = other, current
    outcomes = {"raised": 0, "returned": 0}
    for fail_at in range(1, steps + 1):
        injector = Injector(fail_at)
        with monkeypatch.context() as patch:
            injector.install(patch)
            try:
                built[kind, other][0].persist(target)
                outcomes["returned"] += 1  # the failure hit the cleanup after publishing
            except OSError as exc:
                assert "injected failure" in str(exc)
                outcomes["raised"] += 1
        loaded = signature(KINDS[kind].load(target))
        assert loaded in (sigs[current], sigs[other]), f"failure at step {fail_at}"
        built[kind, other][0].persist(target)  # the next persist succeeds and cleans up
        assert_clean(target)
        current, other = other, current
    assert outcomes["raised"] > 0 and sum(outcomes.values()) == steps
    assert signature(KINDS[kind].load(target)) == sigs[current]


# ------------------------------------------------------- other processes
CHILD = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path
    sys.path.insert(0, sys.argv[1])
    import test_persist as t

    mode, target = sys.argv[2], Path(sys.argv[3])
    if mode == "write":  # write a version N times (forever with N = 0) once the go file exists
        retriever = t.KINDS["recursive"].build(t.big_topics(sys.argv[4]))
        print("ready", flush=True)
        count, go = int(sys.argv[5]), Path(sys.argv[6]) if len(sys.argv) > 6 else None
        deadline = time.monotonic() + 300
        while go is not None and not go.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        done = 0
        while count == 0 or done < count:
            retriever.persist(target)
            done += 1
            print("persisted", flush=True)
    elif mode == "read":  # load until the stop file appears; one JSON line per load
        stop, deadline = Path(sys.argv[4]), time.monotonic() + 120
        for _ in range(500):
            if stop.exists() or time.monotonic() > deadline:
                break
            try:
                loaded = t.KINDS["recursive"].load(target)
                print(json.dumps({"signature": t.signature(loaded)}), flush=True)
            except Exception as exc:
                print(json.dumps({"error": repr(exc)}), flush=True)
    """
)


def _child(tmp_path: Path, *args: str) -> subprocess.Popen:
    script = tmp_path / "child.py"
    if not script.exists():
        script.write_text(CHILD)
    return subprocess.Popen(
        [sys.executable, str(script), str(TESTS), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )


def _wait_for(process: subprocess.Popen, line: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = process.stdout.readline()
        if got.strip() == line:
            return
        if not got and process.poll() is not None:
            break
    process.kill()
    raise AssertionError(f"child never printed {line!r}: {process.stderr.read()[-2000:]}")


def _big(version: str):
    retriever = KINDS["recursive"].build(big_topics(version))
    return retriever, signature(retriever)


@pytest.mark.integration  # a real Python process
def test_sigkill_in_the_middle_of_persisting_leaves_the_old_or_the_new_index(tmp_path):
    target = tmp_path / "idx"
    (a, sig_a), (_, sig_b) = _big("a"), _big("b")
    a.persist(target)
    rng = random.Random(11)
    rounds = 4
    # all children start (and import) at once; each persists only when told to
    children = [
        _child(tmp_path, "write", str(target), "ab"[(i + 1) % 2], "0", str(tmp_path / f"go{i}")) for i in range(rounds)
    ]
    try:
        for child in children:
            _wait_for(child, "ready")
        for i, child in enumerate(children):
            (tmp_path / f"go{i}").write_text("")
            _wait_for(child, "persisted")  # it persists in a loop now
            time.sleep(rng.uniform(0.0, 0.5))
            os.kill(child.pid, signal.SIGKILL)
            child.wait(timeout=30)
            # the folder as the kill left it (the next child waits for its go file)
            assert signature(KINDS["recursive"].load(target)) in (sig_a, sig_b), f"round {i}"
    finally:
        for child in children:
            child.kill()
            child.communicate(timeout=30)
    a.persist(target)  # leftovers of the killed persists are cleaned
    assert_clean(target)
    assert signature(KINDS["recursive"].load(target)) == sig_a


@pytest.mark.integration  # a real Python process
def test_two_processes_persisting_while_a_third_loads(tmp_path):
    target, stop = tmp_path / "idx", tmp_path / "stop"
    (a, sig_a), (_, sig_b) = _big("a"), _big("b")
    a.persist(target)
    reader = _child(tmp_path, "read", str(target), str(stop))
    writers = [_child(tmp_path, "write", str(target), version, "4") for version in ("a", "b")]
    try:
        for writer in writers:
            out, err = writer.communicate(timeout=300)
            assert writer.returncode == 0, err[-2000:]
            assert out.count("persisted") == 4
    finally:
        stop.write_text("")
        out, err = reader.communicate(timeout=300)
    assert reader.returncode == 0, err[-2000:]
    loads = [json.loads(line) for line in out.splitlines()]
    errors = [load["error"] for load in loads if "error" in load]
    assert errors == []
    assert len(loads) >= 2
    assert all(load["signature"] in (sig_a, sig_b) for load in loads)
    assert signature(KINDS["recursive"].load(target)) in (sig_a, sig_b)
    assert_clean(target)


def test_a_reader_holding_a_generation_keeps_it_until_it_is_done(built, tmp_path, monkeypatch):
    (old, _), (new, new_sig) = built["recursive", "old"], built["recursive", "new"]
    target = tmp_path / "idx"
    old.persist(target)
    monkeypatch.setattr(persist_module, "CLEANUP_WAIT", 0.2)
    entered, release = threading.Event(), threading.Event()
    result: dict[str, Any] = {}

    def slow_load(folder: Path):
        entered.set()
        release.wait(60)
        return sorted(json.loads((folder / "index.json").read_text())["init_parameters"]["documents"])

    thread = threading.Thread(
        target=lambda: result.update(docs=read_index(target, "RecursiveSummaryRetriever", slow_load))
    )
    thread.start()
    assert entered.wait(30)
    held = current_generation(target)
    new.persist(target)  # publishes; the generation being read cannot be deleted yet
    assert held.is_dir() and current_generation(target) != held
    release.set()
    thread.join(30)
    assert result["docs"] == sorted(TOPICS)  # the reader finished on the files it started with
    assert signature(KINDS["recursive"].load(target)) == new_sig
    new.persist(target)  # no reader now: the old generation goes
    assert_clean(target)


def test_a_load_without_the_shared_lock_retries_on_the_new_generation(built, tmp_path, monkeypatch):
    """A reader that cannot open the lock (another account's folder) still never mixes generations."""
    old, new = built["recursive", "old"][0], built["recursive", "new"][0]
    target = tmp_path / "idx"
    old.persist(target)
    real = persist_module._shared_lock

    class ReadOnlyLock:
        """What a reader without write access gets: no shared lock (writers still lock)."""

        def __init__(self, root: Path) -> None:
            self.lock = real(root)

        def acquire_read(self, timeout):
            raise PermissionError(errno.EACCES, "attempt to write a readonly database")

        def close(self):
            self.lock.close()

        def write_lock(self, timeout):
            return self.lock.write_lock(timeout=timeout)

    monkeypatch.setattr(persist_module, "_shared_lock", ReadOnlyLock)
    seen = []

    def load(folder: Path):
        seen.append(folder.name)
        if len(seen) == 1:
            new.persist(target)  # a writer replaces (and deletes) this generation mid-load
        return sorted(json.loads((folder / "index.json").read_text())["init_parameters"]["documents"])

    assert read_index(target, "RecursiveSummaryRetriever", load) == sorted(NEW_TOPICS)
    assert len(seen) == 2 and seen[0] != seen[1]


# ------------------------------------------------- damaged files name themselves
DAMAGES = {
    "delete": lambda path: path.unlink(),
    "truncate": lambda path: path.write_bytes(path.read_bytes()[: path.stat().st_size // 2]),
    "empty-object": lambda path: path.write_text("{}"),
    "wrong-shape": lambda path: path.write_text("[1, 2]"),
}


@pytest.mark.parametrize("damage", sorted(DAMAGES))
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_damaged_file_of_an_index_names_itself(kind, damage, built, tmp_path):
    retriever = built[kind, "old"][0]
    retriever.persist(tmp_path / "probe")
    names = sorted(json.loads((tmp_path / "probe" / MANIFEST).read_text())["files"])
    assert len(names) >= 7  # every file the retriever wrote is in the manifest
    for i, name in enumerate([*names, MANIFEST]):
        target = tmp_path / f"idx{i}"
        retriever.persist(target)
        path = target / MANIFEST if name == MANIFEST else current_generation(target) / name
        DAMAGES[damage](path)
        with pytest.raises(PersistError) as info:
            KINDS[kind].load(target)
        message = str(info.value)
        assert (MANIFEST in message) if name == MANIFEST else (str(path) in message), message


def _edit_json(path: Path, edit: Callable[[Any], Any]) -> None:
    path.write_text(json.dumps(edit(json.loads(path.read_text()))))


def _drop_first(mapping: dict[str, Any]) -> dict[str, Any]:
    return dict(list(mapping.items())[1:])


def _drop_vector(data: dict[str, Any]) -> dict[str, Any]:
    gone = next(iter(data["embedding_dict"]))
    return {key: {k: v for k, v in value.items() if k != gone} for key, value in data.items()}


def _params(edit: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """An edit of a configuration file's init parameters."""
    return lambda data: {**data, "init_parameters": edit(data["init_parameters"])}


def as_previous_format(generation: Path, target: Path) -> None:
    """Copy a persisted generation to ``target`` as the previous release wrote it:
    those files at the top level, and one flat ``config.json`` (format 1)."""
    shutil.copytree(generation, target)
    config = json.loads((target / "config.json").read_text())["init_parameters"]
    index = json.loads((target / "index.json").read_text())["init_parameters"]
    (target / "index.json").unlink()
    steps = index.pop("transformations")
    flat = {"format_version": 1, **config, **index, "node_parser": steps[0] if steps else None}
    flat["doc_id_key"] = flat["doc_id_key"] or "doc_id"
    (target / "config.json").write_text(json.dumps(flat))


# (file, edit, expected message) with the manifest rewritten to match, so the
# content checks behind the checksums are what is tested (as for a folder of the
# previous release, which has no manifest)
CONTENT_CASES = {
    "recursive": [
        *[
            (name, lambda _, v=value: v, rf"{name}")
            for name in (
                "config.json",
                "index.json",
                "chunks/docstore.json",
                "chunks/index_store.json",
                "chunks/default__vector_store.json",
                "summaries/docstore.json",
                "summaries/index_store.json",
                "summaries/default__vector_store.json",
            )
            for value in ({}, [1, 2])
        ],
        ("summary_cache.json", lambda _: [1, 2], "summary_cache.json"),
        ("summary_cache.json", lambda _: {"key": 1}, r"summary_cache.json: the value of 'key'"),
        (
            "chunks/docstore.json",
            lambda d: {**d, "docstore/data": _drop_first(d["docstore/data"])},
            r"chunks/docstore.json lacks 1 nodes that default__vector_store.json has",
        ),
        (
            "chunks/default__vector_store.json",
            _drop_vector,
            r"chunks/default__vector_store.json lacks 1 nodes that index_store.json has",
        ),
        (
            "index.json",
            _params(
                lambda c: {
                    **c,
                    "documents": {**c["documents"], "bees": {**c["documents"]["bees"], "chunk_ids": ["ghost"]}},
                }
            ),
            r"index.json lists chunks \['ghost'\] of document 'bees' that .*chunks/docstore.json lacks",
        ),
        (
            "index.json",
            _params(lambda c: {**c, "documents": {"bees": {"doc_id": 3}}}),
            r"index.json: the record of document 'bees' is malformed",
        ),
        ("index.json", _params(lambda c: {**c, "documents": [1]}), r"index.json: the record of document None"),
        (
            "index.json",
            _params(lambda c: {k: v for k, v in c.items() if k != "documents"}),
            r"index.json lacks \['documents'\]",
        ),
        (
            "index.json",
            _params(lambda c: {**c, "summarizer": {"type": "extractive"}}),
            r"index.json holds an invalid setting",
        ),
        ("config.json", _params(lambda c: {**c, "similarity_top_k": "x"}), r"config.json holds an invalid setting"),
        ("config.json", _params(lambda c: {**c, "filters": 5}), r"config.json holds an invalid setting"),
        (
            "config.json",
            _params(lambda c: {**c, "similarity_topk": 3}),
            r"config.json holds an invalid setting .*did you mean 'similarity_top_k'",
        ),
        ("config.json", lambda c: {"format_version": 99}, r"config.json has format_version 99"),
    ],
    "bm25": [
        *[
            (name, lambda _, v=value: v, rf"{name}")
            for name in ("config.json", "nodes.json", "params.index.json", "vocab.index.json")
            for value in ({}, [1, 2])
        ],
        (
            "params.index.json",
            lambda p: {**p, "num_docs": 99},
            r"params.index.json indexes 99 documents but .*nodes.json holds 9 nodes",
        ),
        (
            "config.json",
            _params(lambda r: {**r, "tokenizer": {"language": "klingon"}}),
            r"config.json holds invalid settings",
        ),
        ("nodes.json", lambda n: [{"bad": "node"}], r"nodes.json holds an invalid node"),
        ("nodes.json", lambda n: [n[0], *n[:-1]], r"nodes.json is damaged: .*share the node id 'bees-0'"),
        ("config.json", _params(lambda r: {**r, "similarity_top_k": 0}), r"config.json holds invalid settings"),
        ("config.json", _params(lambda r: {**r, "unknown_filter_key": "shout"}), r"config.json holds invalid settings"),
    ],
}


@pytest.mark.parametrize("kind", sorted(CONTENT_CASES))
def test_malformed_or_inconsistent_contents_name_the_file(kind, built, tmp_path):
    retriever = built[kind, "old"][0]
    for i, (name, edit, expected) in enumerate(CONTENT_CASES[kind]):
        target = tmp_path / f"idx{i}"
        retriever.persist(target)
        _edit_json(current_generation(target) / name, edit)
        rehash(target)
        with pytest.raises(PersistError, match=expected):
            KINDS[kind].load(target)
    target = tmp_path / "matrix"
    if kind == "bm25":
        retriever.persist(target)
        (current_generation(target) / "data.csc.index.npy").write_bytes(b"garbage")
        rehash(target)
        with pytest.raises(PersistError, match=r"data.csc.index.npy.*corrupted"):
            KINDS[kind].load(target)


def test_bm25_settings_survive_a_round_trip(tmp_path):
    retriever = MultilingualBM25Retriever.from_defaults(
        nodes=topic_nodes(), similarity_top_k=2, unknown_filter_key="warn", filters={"category": "food"}
    )
    retriever.persist(tmp_path / "idx")
    loaded = MultilingualBM25Retriever.from_persist_dir(tmp_path / "idx")
    assert loaded.get_persist_args() == retriever.get_persist_args()
    assert loaded.unknown_filter_key.value == "warn" and loaded.similarity_top_k == 2
    # a settings file from before the policy existed keeps the constructor's default
    path = current_generation(tmp_path / "idx") / "config.json"
    _edit_json(path, _params(lambda r: {k: v for k, v in r.items() if k != "unknown_filter_key"}))
    rehash(tmp_path / "idx")
    assert MultilingualBM25Retriever.from_persist_dir(tmp_path / "idx").unknown_filter_key.value == "raise"


def test_an_emptied_store_in_a_previous_format_folder_is_an_error_not_empty_results(built, tmp_path):
    """The issue's repro: ``{}`` as the vector store used to load and answer []."""
    built["recursive", "old"][0].persist(tmp_path / "idx")
    legacy = tmp_path / "legacy"
    as_previous_format(current_generation(tmp_path / "idx"), legacy)
    (legacy / "chunks" / "default__vector_store.json").write_text("{}")
    with pytest.raises(PersistError, match=r"legacy/chunks/default__vector_store.json is not a usable"):
        KINDS["recursive"].load(legacy)


# ------------------------------------------------------------ properties
metadata_values = st.one_of(
    st.text(max_size=12),
    st.integers(min_value=-(2**53), max_value=2**53),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
)
metadata_dicts = st.dictionaries(
    st.text(min_size=1, max_size=8).filter(lambda key: key != "doc_id"), metadata_values, max_size=4
)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(metadata=st.lists(metadata_dicts, min_size=3, max_size=3))
def test_round_trip_with_random_metadata_keeps_results_and_metadata(metadata, tmp_path_factory):
    nodes = [
        TextNode(id_=f"{doc_id}-{i}", text=sentence, metadata={"doc_id": doc_id, **meta})
        for (doc_id, (_, _, _, sentences)), meta in zip(TOPICS.items(), metadata)
        for i, sentence in enumerate(sentences)
    ]
    folder = tmp_path_factory.mktemp("roundtrip")
    for name, retriever, load in (
        (
            "recursive",
            RecursiveSummaryRetriever.from_nodes(nodes, embed_model=lexical_model(), similarity_top_k=4),
            KINDS["recursive"].load,
        ),
        ("bm25", MultilingualBM25Retriever.from_defaults(nodes=nodes, similarity_top_k=4), KINDS["bm25"].load),
    ):
        retriever.persist(folder / name)
        loaded = load(folder / name)
        assert signature(loaded) == signature(retriever)
        for query in QUERIES:
            got, want = loaded.retrieve(query), retriever.retrieve(query)
            assert [h.node.metadata for h in got] == [h.node.metadata for h in want]
    chunks = RecursiveSummaryRetriever.from_persist_dir(folder / "recursive", embed_model=lexical_model())
    for node in nodes:
        assert chunks.index.chunk_index.docstore.get_node(node.node_id).metadata == node.metadata


def test_round_trip_with_the_real_model(real_model, tmp_path):
    retriever = RecursiveSummaryRetriever.from_nodes(topic_nodes(), embed_model=real_model, similarity_top_k=4)
    retriever.persist(tmp_path / "idx")
    loaded = RecursiveSummaryRetriever.from_persist_dir(tmp_path / "idx", embed_model=real_model)
    assert signature(loaded) == signature(retriever)
    assert loaded.retrieve("Who lays the eggs in a hive?")[0].node.node_id == "bees-0"
    with pytest.raises(PersistError, match="thesis.txt"):
        loaded.persist(_user_folder(tmp_path))
    assert (tmp_path / "docs" / "thesis.txt").read_text() == "three years of work"


# ------------------------------------------------- carrying files over (segments)
def _publish(path: Path, files: dict[str, bytes], carry_over: bool = True, fail: bool = False) -> None:
    with write_index(path, "Segments", carry_over=carry_over) as staging:
        for name, data in files.items():
            target = staging / name
            target.parent.mkdir(parents=True, exist_ok=True)
            temp = target.with_name(target.name + ".new")
            temp.write_bytes(data)
            os.replace(temp, target)  # replace, never write into a carried file
        if fail:
            raise RuntimeError("the writer failed")


def _files(generation: Path) -> dict[str, bytes]:
    return {p.relative_to(generation).as_posix(): p.read_bytes() for p in sorted(generation.rglob("*")) if p.is_file()}


def _contents(path: Path) -> dict[str, bytes]:
    return _files(current_generation(path))


def test_carry_over_links_the_previous_files_and_hashes_only_what_changed(tmp_path, monkeypatch):
    _publish(tmp_path / "idx", {"seg/a.npy": b"A" * 1000, "state.json": b"{}"})
    first = current_generation(tmp_path / "idx")
    hashed: list[int] = []
    real_sha256 = hashlib.sha256
    monkeypatch.setattr(persist_module.hashlib, "sha256", lambda: hashed.append(1) or real_sha256())
    _publish(tmp_path / "idx", {"seg/b.npy": b"B" * 10, "state.json": b'{"n": 2}'})
    second = current_generation(tmp_path / "idx")
    assert _contents(tmp_path / "idx") == {"seg/a.npy": b"A" * 1000, "seg/b.npy": b"B" * 10, "state.json": b'{"n": 2}'}
    assert len(hashed) == 2  # b.npy and the replaced state.json; a.npy's hash is carried with it
    assert not first.exists()  # the old generation is cleaned up as before
    monkeypatch.undo()
    assert read_index(tmp_path / "idx", "Segments", _files) == _contents(tmp_path / "idx")  # verifies every sha256
    manifest = json.loads((tmp_path / "idx" / "MANIFEST.json").read_text())
    assert manifest["files"]["seg/a.npy"]["sha256"] == hashlib.sha256(b"A" * 1000).hexdigest()
    assert second.name == manifest["directory"]


def test_a_failed_carry_over_persist_leaves_the_previous_generation_byte_for_byte(tmp_path):
    _publish(tmp_path / "idx", {"seg/a.npy": b"A" * 100, "state.json": b"{}"})
    before = _contents(tmp_path / "idx")
    with pytest.raises(RuntimeError, match="the writer failed"):
        _publish(tmp_path / "idx", {"seg/a.npy": b"changed", "state.json": b'{"n": 2}'}, fail=True)
    assert _contents(tmp_path / "idx") == before
    assert [p.name for p in (tmp_path / "idx").iterdir() if p.name.startswith(".gen")] == []


def test_without_carry_over_the_staging_folder_starts_empty(tmp_path):
    _publish(tmp_path / "idx", {"a": b"1"}, carry_over=False)
    _publish(tmp_path / "idx", {"b": b"2"}, carry_over=False)
    assert _contents(tmp_path / "idx") == {"b": b"2"}


def test_where_links_are_refused_the_files_are_copied_and_hashed(tmp_path, monkeypatch):
    _publish(tmp_path / "idx", {"a": b"1", "b": b"2"})

    def no_links(*args: Any) -> None:
        raise OSError(errno.EXDEV, "cross-device link")

    monkeypatch.setattr(persist_module.os, "link", no_links)
    _publish(tmp_path / "idx", {"c": b"3"})
    assert _contents(tmp_path / "idx") == {"a": b"1", "b": b"2", "c": b"3"}
    monkeypatch.undo()
    assert read_index(tmp_path / "idx", "Segments", _files) == {"a": b"1", "b": b"2", "c": b"3"}


def test_loading_reads_no_file_again_until_one_is_touched(tmp_path, monkeypatch):
    _publish(tmp_path / "idx", {"seg/a.npy": b"A" * 1000, "state.json": b"{}"})
    hashed: list[int] = []
    real_sha256 = hashlib.sha256
    monkeypatch.setattr(persist_module.hashlib, "sha256", lambda: hashed.append(1) or real_sha256())
    read_index(tmp_path / "idx", "Segments", _files)
    assert hashed == []  # each file is still the inode, with the mtime, the writer sealed
    shutil.copytree(tmp_path / "idx", tmp_path / "copy")  # new inodes: every file is hashed, and loads
    assert read_index(tmp_path / "copy", "Segments", _files) == _contents(tmp_path / "idx")
    assert len(hashed) == 2
    state = current_generation(tmp_path / "idx") / "state.json"
    state.write_bytes(b"[]")  # same size, rewritten in place
    with pytest.raises(PersistError, match="state.json was modified after it was persisted"):
        read_index(tmp_path / "idx", "Segments", _files)


def test_the_rows_database_beside_the_generations_is_part_of_the_index_folder(tmp_path):
    """An index that keeps its rows in SQLite (columnar.rows) persists again into its folder, and the
    database survives every persist: only generations and leftovers are cleaned up."""
    root = tmp_path / "index"
    assert published_generation(root) == 0
    for expected in (1, 2):
        with write_index(root, "ColumnarVectorStore", carry_over=True) as staging:
            assert published_generation(root) == expected - 1
            (staging / "state.json").write_text(json.dumps({"generation": expected}))
            for suffix in ("", "-wal", "-shm"):
                (root / f"{ROWS_DATABASE}{suffix}").write_text(f"rows {expected}")
        assert published_generation(root) == expected
    assert (root / ROWS_DATABASE).read_text() == "rows 2"
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / ROWS_DATABASE.replace(".sqlite3", ".db")).write_text("a user's file")
    with pytest.raises(PersistError, match="not empty"), write_index(tmp_path / "mine", "ColumnarVectorStore"):
        pass


def test_chunk_context_survives_a_round_trip_and_an_index_from_before_it_keeps_none(tmp_path):
    nodes = topic_nodes()
    for node in nodes:  # titles kept out of the embedded text, as many readers do
        node.excluded_embed_metadata_keys = ["title"]
    retriever = RecursiveSummaryRetriever.from_nodes(nodes, embed_model=lexical_model(), similarity_top_k=4)
    assert retriever.index.chunk_context == ChunkContext.TITLE
    retriever.persist(tmp_path / "idx")
    loaded = KINDS["recursive"].load(tmp_path / "idx")
    assert loaded.index.chunk_context == ChunkContext.TITLE
    hit = loaded.retrieve("queen eggs")[0].node
    assert hit.metadata[DOCUMENT_CONTEXT_KEY] == hit.metadata["title"]
    # an index persisted before the setting existed was built without context, and its updates stay so
    path = current_generation(tmp_path / "idx") / "index.json"
    _edit_json(path, _params(lambda r: {k: v for k, v in r.items() if k != "chunk_context"}))
    rehash(tmp_path / "idx")
    older = KINDS["recursive"].load(tmp_path / "idx")
    assert older.index.chunk_context == ChunkContext.NONE
    added = TextNode(id_="new-0", text="Drones mate with the queen.", metadata={"doc_id": "new", "title": "Drones"})
    added.excluded_embed_metadata_keys = ["title"]
    older.add_nodes([added])
    assert DOCUMENT_CONTEXT_KEY not in older.index.docstore.get_node("new-0").metadata
