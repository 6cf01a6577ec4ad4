"""Index folders that only ever replace their own index, and JSON reads that name the broken file.

Layout of a folder written by :func:`write_index`::

    path/
      MANIFEST.json          writer, kind, generation, every file with size and sha256
      gen-000007-1a2b3c4d/   the current generation: the files the retriever wrote
      .llama-index.lock      serialises writers (filelock.FileLock)
      .llama-index.rwlock    readers share it while loading; a writer takes it
                             alone only to delete old generations (filelock.ReadWriteLock)
      rows.sqlite3           only for indexes that keep their rows in SQLite
                             (columnar.rows): the one mutable file, outside the
                             generations; each row records the generation that
                             published it, so it follows the manifest

A persist writes a whole new generation under a staging name, fsyncs it,
renames it, then atomically replaces ``MANIFEST.json`` (temp file, fsync,
``os.replace``); only then does it delete older generations and leftovers whose
names match ours. A crash at any instant therefore leaves the old or the new
manifest, each naming a complete generation. Anything else in the folder (a
user's file) is never touched, and a folder that holds no index of ours is
refused before anything is written. Folders written by the previous release
(the files at the top level) are recognised by their exact set of entries,
load as before, and are migrated by the next persist.

One module of ~600 lines on purpose: writing, sealing, locking, verifying and
cleaning are one protocol whose crash-safety argument has to be read whole;
split, each part would be correct only by reference to the others.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import secrets
import shutil
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO, Any, TypeVar

from filelock import FileLock, ReadWriteLock, Timeout

from llama_index_ext_recursive.errors import LlamaIndexExtRecursiveError

logger = logging.getLogger(__name__)

T = TypeVar("T")
PathLike = str | Path

WRITER = "llama-index-ext-recursive"
LAYOUT_VERSION = 1
MANIFEST = "MANIFEST.json"
WRITE_LOCK = ".llama-index.lock"
READ_LOCK = ".llama-index.rwlock"
# Seconds to wait: for another process's persist to finish, for a writer's
# (short) cleanup while loading, and for readers of old generations before
# deleting them (on timeout they are kept and deleted by the next persist).
WRITE_LOCK_TIMEOUT = 600.0
READ_LOCK_TIMEOUT = 120.0
CLEANUP_WAIT = 5.0
_LOAD_ATTEMPTS = 3  # loads without the shared lock retry when a persist replaced the generation

_GENERATION = re.compile(r"gen-(\d{6,})-[0-9a-f]{8}")
_STAGING = re.compile(r"\.gen-\d{6,}-[0-9a-f]{8}\.staging")
_MANIFEST_TEMP = re.compile(r"\.MANIFEST\.json\.[0-9a-f]{8}\.tmp")
_LOCK_FILES = frozenset({WRITE_LOCK, READ_LOCK, READ_LOCK + "-journal"})
ROWS_DATABASE = "rows.sqlite3"
# an index's SQLite rows beside its generations: rows.sqlite3, or <part>.rows.sqlite3 for an
# index of several parts (a summary index's chunks and summaries), with SQLite's side files
_DATABASE_FILE = re.compile(r"(?:[a-z][a-z0-9_]*\.)?rows\.sqlite3(?:-wal|-shm|-journal)?")


def rows_database(part: str | None = None) -> str:
    """The file name of an index's SQLite rows (``part``: one part of an index of several)."""
    name = ROWS_DATABASE if part is None else f"{part}.{ROWS_DATABASE}"
    if not _DATABASE_FILE.fullmatch(name):
        raise ValueError(f"part {part!r} must be lower-case letters, digits and '_', starting with a letter")
    return name


_SHA256 = re.compile(r"[0-9a-f]{64}")


class PersistError(LlamaIndexExtRecursiveError, RuntimeError):
    """A persisted directory is missing, incomplete or corrupted, or cannot be written."""


class NoIndexError(PersistError):
    """Nothing was persisted at the path (it is missing, empty, or holds no index of ours)."""


@dataclass(frozen=True)
class LegacyLayout:
    """The top-level entries a previous release wrote for one kind of index."""

    settings: str  # a JSON object with "format_version": 1
    files: frozenset
    folders: frozenset = frozenset()

    @property
    def entries(self) -> frozenset:
        return self.files | self.folders


LEGACY_LAYOUTS: dict[str, LegacyLayout] = {
    "RecursiveSummaryRetriever": LegacyLayout(
        settings="config.json",
        files=frozenset({"config.json", "summary_cache.json"}),
        folders=frozenset({"summaries", "chunks"}),
    ),
    "MultilingualBM25Retriever": LegacyLayout(
        settings="retriever.json",
        files=frozenset(
            {
                "retriever.json",
                "nodes.json",
                "params.index.json",
                "vocab.index.json",
                "data.csc.index.npy",
                "indices.csc.index.npy",
                "indptr.csc.index.npy",
            }
        ),
    ),
}


# ------------------------------------------------------------------ JSON reads
def load_json(path: PathLike) -> Any:
    """Read a JSON file; a missing or corrupted file raises :class:`PersistError`."""
    path = Path(path)
    if not path.is_file():
        raise PersistError(f"{path} is missing: the directory is incomplete; persist it again")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise PersistError(f"{path} is corrupted ({exc}); restore it or persist the retriever again") from exc


def load_json_object(path: PathLike, required: tuple[str, ...] = ()) -> dict[str, Any]:
    """Read a JSON file that must hold an object with the ``required`` keys.

    Raises:
        PersistError: naming the file when it is missing, corrupted, not an
            object, or lacks a required key.
    """
    data = load_json(path)
    if not isinstance(data, dict):
        raise PersistError(
            f"{path} holds a JSON {type(data).__name__}, not an object: it is damaged; persist the retriever again"
        )
    missing = [key for key in required if key not in data]
    if missing:
        raise PersistError(f"{path} lacks {missing}: it is damaged; persist the retriever again")
    return data


def load_string_map(path: PathLike) -> dict[str, str]:
    """Read a JSON object whose values are all strings (e.g. a summary cache)."""
    data = load_json_object(path)
    bad = next((key for key, value in data.items() if not isinstance(value, str)), None)
    if bad is not None:
        raise PersistError(
            f"{path}: the value of {bad!r} is a {type(data[bad]).__name__}, not a string; "
            "the file is damaged: delete it or persist the retriever again"
        )
    return data


# ------------------------------------------------------------ the user's cache folder
APP_FOLDER = "llama-index-ext-recursive"


def app_cache_dir() -> Path:
    """The package's folder in the user's cache, following the XDG base directories:
    ``$XDG_CACHE_HOME`` (when set to an absolute path, as the spec requires) or
    ``~/.cache``, then ``llama-index-ext-recursive``. Builds cache embeddings there
    and the bundled model keeps its exported graph there; nothing else is written."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    root = Path(base) if base and Path(base).is_absolute() else Path.home() / ".cache"
    return root / APP_FOLDER


# ------------------------------------------------------------ durable writes
def _fsync_dir(path: Path) -> None:
    """Make a rename or a new entry in ``path`` durable (POSIX only)."""
    if os.name == "nt":
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_file_atomically(path: PathLike, write: Callable[[IO[str]], object]) -> None:
    """Write a text file under a temporary name, fsync it, then rename it over ``path``.

    Readers see the old file or the new one, never a part. The file gets the
    usual permissions (``0o666`` less the umask), unlike ``tempfile``'s 0600.

    Args:
        path: The file to create or replace.
        write: Writes the content to the (UTF-8 text) handle it is given.
    """
    _write_atomically(Path(path), lambda fd: open(fd, "w", encoding="utf-8", closefd=True), write)


def write_binary_atomically(path: PathLike, write: Callable[[IO[bytes]], object]) -> None:
    """:func:`write_file_atomically` for a binary file (an array, a sparse matrix)."""
    _write_atomically(Path(path), lambda fd: open(fd, "wb", closefd=True), write)


def _write_atomically(path: Path, opener: Callable[[int], Any], write: Callable[[Any], object]) -> None:
    temp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with opener(fd) as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise
    _fsync_dir(path.parent)


def _seal(staging: Path, carried: dict[str, tuple[int, dict[str, Any]]] | None = None) -> dict[str, dict[str, Any]]:
    """fsync every file and folder under ``staging``; return each file's size and sha256.

    ``carried``: files linked in from the previous generation (path -> (inode,
    manifest entry)); one that is still that inode is the same bytes, already
    durable and hashed, so its entry is reused instead of reading it again.
    """
    files: dict[str, dict[str, Any]] = {}
    folders: list[Path] = []
    for root, _, names in os.walk(staging):
        folders.append(Path(root))
        for name in names:
            path = Path(root) / name
            relative = path.relative_to(staging).as_posix()
            known = (carried or {}).get(relative)
            if known is not None and os.stat(path).st_ino == known[0]:
                files[relative] = dict(known[1])
                continue
            digest = hashlib.sha256()
            size = 0
            with open(path, "rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
                    size += len(block)
                os.fsync(handle.fileno())
            status = os.stat(path)
            files[relative] = {
                "size": size,
                "sha256": digest.hexdigest(),
                "inode": status.st_ino,
                "mtime_ns": status.st_mtime_ns,
            }
    for folder in reversed(folders):
        _fsync_dir(folder)
    return files


def _carry_over(root: Path, previous: dict[str, Any], staging: Path) -> dict[str, tuple[int, dict[str, Any]]]:
    """Hard-link every file of the current generation into ``staging``.

    A link costs nothing however large the file, and the previous generation
    stays intact as long as the writer replaces a carried file (a new file
    under the name, ``os.replace``) instead of writing into it. Where the file
    system cannot link, the file is copied.
    """
    current = root / str(previous.get("directory", ""))
    carried: dict[str, tuple[int, dict[str, Any]]] = {}
    for name, entry in previous.get("files", {}).items():
        source, target = current / name, staging / name
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(source, target)
        except OSError:
            shutil.copy2(source, target)
            continue  # a copy is another inode: sealed (hashed) like a new file
        carried[name] = (os.stat(target).st_ino, entry)
    return carried


# ------------------------------------------------------------ folder checks
@dataclass
class _Folder:
    """What a persist target holds."""

    root: Path
    state: str  # missing | file | empty | manifest | legacy | foreign
    entries: list[str] = field(default_factory=list)
    manifest: dict[str, Any] | None = None
    kind: str | None = None  # of the index found (manifest or legacy)
    problem: str | None = None  # why MANIFEST.json is not usable


def _is_ours(root: Path, name: str) -> bool:
    """Entries our persists create in an index folder, besides MANIFEST.json."""
    path = root / name
    if name in _LOCK_FILES or _DATABASE_FILE.fullmatch(name) or _MANIFEST_TEMP.fullmatch(name):
        return path.is_file() and not path.is_symlink()
    if _GENERATION.fullmatch(name) or _STAGING.fullmatch(name):
        return path.is_dir() and not path.is_symlink()
    return False


def _describe(root: Path, names: list[str], limit: int = 5) -> str:
    shown = [name + ("/" if (root / name).is_dir() else "") for name in sorted(names)[:limit]]
    more = len(names) - len(shown)
    return ", ".join(shown) + (f" and {more} more" if more > 0 else "")


def _manifest_problem(manifest: Any) -> str | None:
    """Why ``manifest`` is not a manifest this version can use (``None``: it is)."""
    if not isinstance(manifest, dict):
        return f"it holds a JSON {type(manifest).__name__}, not an object"
    if manifest.get("writer") != WRITER:
        return f"its writer is {manifest.get('writer')!r}, not {WRITER!r}"
    layout = manifest.get("layout_version")
    if not isinstance(layout, int) or isinstance(layout, bool):
        return "it has no layout_version"
    if layout > LAYOUT_VERSION:
        return f"it has layout_version {layout}; this version reads {LAYOUT_VERSION}: upgrade {WRITER}"
    if not isinstance(manifest.get("kind"), str):
        return "it names no kind of index"
    generation = manifest.get("generation")
    if not isinstance(generation, int) or isinstance(generation, bool) or generation < 1:
        return "it has no valid generation number"
    directory = manifest.get("directory")
    if not isinstance(directory, str) or not _GENERATION.fullmatch(directory):
        return f"its directory {directory!r} is not a generation folder name"
    files = manifest.get("files")
    if not isinstance(files, dict) or not files:
        return "it lists no files"
    for name, entry in files.items():
        parts = PurePosixPath(name).parts
        if not parts or PurePosixPath(name).is_absolute() or ".." in parts or "\\" in name:
            return f"it lists an unsafe file name {name!r}"
        if not (
            isinstance(entry, dict)
            and isinstance(entry.get("size"), int)
            and isinstance(entry.get("sha256"), str)
            and _SHA256.fullmatch(entry["sha256"])
        ):
            return f"its entry for {name!r} has no valid size and sha256"
    legacy = manifest.get("legacy", [])
    if not isinstance(legacy, list) or not all(isinstance(n, str) for n in legacy):
        return "its legacy list is not a list of names"
    return None


def _harmless(path: Path) -> bool:
    """A file people or desktops put in any folder: a dotfile or a README."""
    return (
        path.is_file()
        and not path.is_symlink()
        and (path.name.startswith(".") or path.name.lower().startswith("readme"))
    )


def _legacy_kind(root: Path, names: list[str]) -> str | None:
    """The kind of a previous-release index whose entries are ``names``.

    Besides the layout's own entries, the folder may hold what people and
    desktops add to a folder (``.DS_Store``, ``.gitkeep``, ``README.md``); those
    are kept by every later persist (only the layout's entries are retired).
    """
    present = set(names)
    for kind, layout in LEGACY_LAYOUTS.items():
        extra = present - layout.entries
        if not layout.entries <= present or not all(_harmless(root / n) for n in extra):
            continue
        if not all((root / n).is_file() and not (root / n).is_symlink() for n in layout.files):
            continue
        if not all((root / n).is_dir() and not (root / n).is_symlink() for n in layout.folders):
            continue
        try:
            settings = json.loads((root / layout.settings).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(settings, dict) and settings.get("format_version") == 1:
            return kind
    return None


def _inspect(path: PathLike) -> _Folder:
    root = Path(path)
    if not root.exists():
        return _Folder(root, "missing")
    if not root.is_dir():
        return _Folder(root, "file")
    names = sorted(os.listdir(root))
    others = [n for n in names if n != MANIFEST and not _is_ours(root, n)]
    if MANIFEST in names:
        try:  # other read errors (EIO, EACCES) propagate: they say nothing about the folder
            manifest = json.loads((root / MANIFEST).read_text(encoding="utf-8"))
        except (IsADirectoryError, ValueError) as exc:
            return _Folder(root, "manifest", others, problem=f"it cannot be parsed ({exc})")
        problem = _manifest_problem(manifest)
        if problem is not None:
            return _Folder(root, "manifest", others, problem=problem)
        return _Folder(root, "manifest", others, manifest=manifest, kind=manifest["kind"])
    if not others:
        return _Folder(root, "empty")
    kind = _legacy_kind(root, others)
    if kind is not None:
        return _Folder(root, "legacy", others, kind=kind)
    return _Folder(root, "foreign", others)


def _writable(folder: _Folder, kind: str) -> None:
    """Raise :class:`PersistError` unless ``kind`` may be persisted into ``folder``."""
    root = folder.root
    if folder.state == "file":
        raise PersistError(
            f"refusing to persist to {root}: it is a file, not a folder (left untouched); choose a new or empty folder"
        )
    if folder.state == "foreign":
        raise PersistError(
            f"refusing to persist to {root}: the folder is not empty and holds no index written "
            f"by persist() ({_describe(root, folder.entries)}); nothing was changed: persist into "
            "a new or empty folder, or into one an earlier persist() wrote"
        )
    if folder.state == "manifest" and folder.problem is not None:
        raise PersistError(
            f"refusing to persist to {root}: {root / MANIFEST} is not a manifest this version "
            f"can replace: {folder.problem}; nothing was changed: choose another folder, or "
            "delete this one if it held a broken index"
        )
    if folder.kind is not None and folder.kind != kind:
        raise PersistError(
            f"refusing to persist a {kind} to {root}: it holds a {folder.kind} index; "
            "nothing was changed: choose another folder, or delete that index first"
        )


def check_persist_target(path: PathLike, kind: str) -> None:
    """Raise :class:`PersistError` now if ``persist(path)`` of a ``kind`` would be refused.

    Lets callers (the CLI) reject a target before any expensive work. The
    target may be missing, an empty folder, or a folder holding an index of
    ``kind`` written by this package (current or previous format).
    """
    _writable(_inspect(path), kind)


# ------------------------------------------------------------------ writing
@contextmanager
def write_index(path: PathLike, kind: str, carry_over: bool = False) -> Iterator[Path]:
    """Yield a staging folder that becomes the index at ``path`` on success.

    Writers of one folder are serialised by a lock file; the new generation is
    published by replacing ``MANIFEST.json`` atomically, then old generations,
    migrated previous-format files and leftovers of interrupted persists (only
    entries whose names match ours) are deleted. An exception inside the block
    leaves the folder as it was.

    Args:
        path: The index folder (created with normal permissions if missing).
        kind: The kind of index (the retriever's class name); a folder holding
            another kind is refused.
        carry_over: Start the staging folder with the current generation's
            files, hard-linked (an index of large immutable segments writes only
            what changed); the writer must replace a file it changes, never
            write into it. ``False``: the staging folder starts empty.

    Raises:
        PersistError: ``path`` is a file, a folder holding other things, or an
            index of another kind (nothing is changed); or another process kept
            the folder locked for ``WRITE_LOCK_TIMEOUT`` seconds.
    """
    root = Path(path).absolute()
    _writable(_inspect(root), kind)  # refuse before creating anything
    root.mkdir(parents=True, exist_ok=True)
    try:
        lock = FileLock(str(root / WRITE_LOCK), timeout=WRITE_LOCK_TIMEOUT)
        lock.acquire()
    except Timeout as exc:
        raise PersistError(
            f"another process has been persisting to {root} for {WRITE_LOCK_TIMEOUT:.0f} s "
            f"(lock file {root / WRITE_LOCK}); retry when it is done"
        ) from exc
    try:
        folder = _inspect(root)  # again: another writer may have run meanwhile
        _writable(folder, kind)
        previous = folder.manifest or {}
        number = int(previous.get("generation", 0)) + 1
        token = secrets.token_hex(4)
        staging = root / f".gen-{number:06d}-{token}.staging"
        final = root / f"gen-{number:06d}-{token}"
        os.mkdir(staging)
        try:
            carried = _carry_over(root, previous, staging) if carry_over and folder.state == "manifest" else {}
            yield staging
            files = _seal(staging, carried)
            os.replace(staging, final)
            _fsync_dir(root)
            legacy = [n for n in previous.get("legacy", []) if (root / n).exists()]
            if folder.state == "legacy":
                legacy = sorted(LEGACY_LAYOUTS[kind].entries)
            manifest = {
                "writer": WRITER,
                "layout_version": LAYOUT_VERSION,
                "kind": kind,
                "generation": number,
                "directory": final.name,
                "files": files,
                "legacy": legacy,
            }
            write_file_atomically(root / MANIFEST, lambda handle: json.dump(manifest, handle, indent=1))
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            try:
                orphan = final.exists() and _current_directory(root) != final.name
            except OSError:
                orphan = False  # unknown: the next persist's cleanup decides
            if orphan:
                shutil.rmtree(final, ignore_errors=True)
            raise
        try:
            _clean(root, keep=final.name, legacy=legacy)
        except OSError as exc:  # the new index is published; leftovers wait for the next persist
            logger.warning("%s: cleaning up after persist failed (%s)", root, exc)
    finally:
        lock.release()


def _current_directory(root: Path) -> str | None:
    folder = _inspect(root)
    return folder.manifest["directory"] if folder.manifest else None


def _remove(path: Path) -> None:
    def report(function: Any, target: str, excinfo: Any) -> None:
        logger.warning("could not delete %s (%s); the next persist retries", target, excinfo[1])

    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, onerror=report)
    else:
        try:
            path.unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:
            logger.warning("could not delete %s (%s); the next persist retries", path, exc)


def _clean(root: Path, keep: str, legacy: list[str]) -> None:
    """Delete leftovers, then (once no reader holds them) old generations and legacy files."""
    names = os.listdir(root)
    for name in names:
        if _STAGING.fullmatch(name) or (_MANIFEST_TEMP.fullmatch(name) and _is_ours(root, name)):
            _remove(root / name)  # no reader ever opens these
    retired = [n for n in names if _GENERATION.fullmatch(n) and n != keep and _is_ours(root, n)]
    retired += [n for n in legacy if (root / n).exists()]
    if not retired:
        return
    lock = None
    try:
        lock = _shared_lock(root)
        with lock.write_lock(timeout=CLEANUP_WAIT):
            for name in retired:
                _remove(root / name)
    except Timeout:
        logger.info(
            "%s: readers are still loading %s; they stay until the next persist",
            root,
            ", ".join(sorted(retired)),
        )
    except (OSError, sqlite3.Error) as exc:
        logger.warning("%s: cannot take the cleanup lock (%s); old generations stay", root, exc)
    finally:
        if lock is not None:
            lock.close()


def _shared_lock(root: Path) -> ReadWriteLock:
    return ReadWriteLock(str(root / READ_LOCK), timeout=READ_LOCK_TIMEOUT, is_singleton=False)


# ------------------------------------------------------------------ reading
def _verified_generation(root: Path, manifest: dict[str, Any]) -> Path:
    """The generation folder ``manifest`` names, after checking every file's size and sha256.

    A file that is still the inode the writer sealed, with the modification
    time it had then, is the file the writer hashed: its sha256 is not read
    again, so opening a multi-gigabyte index of segments costs a ``stat`` per
    file. Any write, truncation, replacement or copy changes one of the two,
    and the file is then hashed in full.
    """
    generation = root / manifest["directory"]
    if not generation.is_dir():
        raise PersistError(
            f"{generation} is missing although {root / MANIFEST} names it: the folder was "
            "modified by hand; persist the retriever again"
        )
    for name, entry in manifest["files"].items():
        path = generation / name
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            raise PersistError(
                f"{path} is missing: {root / MANIFEST} lists it; restore it or persist the retriever again"
            ) from None
        if size != entry["size"]:
            raise PersistError(
                f"{path} is truncated or was modified: it has {size} bytes, the manifest records "
                f"{entry['size']}; restore it or persist the retriever again"
            )
        status = path.stat()
        if (status.st_ino, status.st_mtime_ns) == (entry.get("inode"), entry.get("mtime_ns")):
            continue  # untouched since it was sealed
        digest = hashlib.sha256()
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        if digest.hexdigest() != entry["sha256"]:
            raise PersistError(
                f"{path} was modified after it was persisted (its sha256 differs from the one in "
                f"{root / MANIFEST}); restore it or persist the retriever again"
            )
    return generation


def _generation_of(root: Path, kind: str) -> Path:
    """The folder to load an index of ``kind`` from: a verified generation, or a legacy root."""
    folder = _inspect(root)
    if folder.state == "manifest":
        if folder.problem is not None:
            raise PersistError(f"{root / MANIFEST} is damaged: {folder.problem}; persist the retriever again")
        if folder.kind != kind:
            raise PersistError(
                f"{root} holds a {folder.kind} index, not a {kind}; load it with {folder.kind}.from_persist_dir"
            )
        assert folder.manifest is not None  # _inspect: a manifest state has a manifest or a problem
        return _verified_generation(root, folder.manifest)
    if folder.state == "legacy":
        if folder.kind != kind:
            raise PersistError(
                f"{root} holds a {folder.kind} index (previous format), not a {kind}; load it "
                f"with {folder.kind}.from_persist_dir"
            )
        return root
    if folder.state == "missing":
        raise NoIndexError(f"{root} does not exist; build and persist a {kind} first")
    if folder.state == "file":
        raise NoIndexError(f"{root} is a file, not a folder a {kind} was persisted to")
    if folder.state == "empty":
        leftovers = [n for n in os.listdir(root) if n not in _LOCK_FILES]
        detail = (
            f"only leftovers of an interrupted persist ({_describe(root, leftovers)}), no {MANIFEST}"
            if leftovers
            else "nothing"
        )
        raise NoIndexError(f"{root} holds {detail}; persist a {kind} there first")
    raise NoIndexError(
        f"{root} holds no index written by persist() ({_describe(root, folder.entries)}): "
        f"{MANIFEST} is missing; pass the folder a {kind} was persisted to"
    )


def published_directory(path: PathLike) -> str | None:
    """The name of the generation folder the manifest at ``path`` publishes (``None``: none).

    Each name is made once (a generation number and a random token), so it
    names one content: every reader of it reads the same index.
    """
    return _current_directory(Path(path))


def published_generation(path: PathLike) -> int:
    """The generation number the manifest at ``path`` publishes (``0``: none yet).

    Inside :func:`write_index`'s block (the write lock held) it is stable, and
    the generation being written is this number plus one.
    """
    manifest = _inspect(Path(path)).manifest
    return 0 if manifest is None else int(manifest["generation"])


def current_generation(path: PathLike) -> Path:
    """The folder holding the files of the index currently published at ``path``.

    For inspecting a persisted index (its files are those of the previous
    release's layout); do not write into it.

    Raises:
        NoIndexError: ``path`` holds no manifest of an index.
    """
    root = Path(path)
    directory = _current_directory(root)
    if directory is None:
        raise NoIndexError(f"{root} holds no {MANIFEST} naming a current index generation")
    return root / directory


@contextmanager
def _reading(root: Path) -> Iterator[bool]:
    """Hold the shared lock of ``root`` if it can be taken; yield whether it is held.

    A reader without write access to the folder (another account) cannot open
    the lock database and loads without it.
    """
    lock = _shared_lock(root)
    try:
        lock.acquire_read(timeout=READ_LOCK_TIMEOUT)
    except Timeout as exc:
        lock.close()
        raise PersistError(
            f"{root} stayed locked by a persist for {READ_LOCK_TIMEOUT:.0f} s (lock file {root / READ_LOCK}); retry"
        ) from exc
    except (OSError, sqlite3.Error) as exc:
        lock.close()
        logger.debug("%s: loading without the shared lock (%s)", root, exc)
        yield False
        return
    try:
        yield True
    finally:
        lock.close()


def read_index(path: PathLike, kind: str, load: Callable[[Path], T]) -> T:
    """Load the current index of ``kind`` at ``path`` with ``load(folder)``.

    ``folder`` is the verified current generation (every file's size and
    sha256 match the manifest), or ``path`` itself for a folder written by the
    previous release. The shared lock is held while ``load`` runs, so a
    concurrent persist never deletes the files being read; where the lock
    cannot be taken (a read-only folder), a load that fails because a persist
    replaced the generation meanwhile is retried on the new one.

    Raises:
        NoIndexError: nothing was persisted at ``path``.
        PersistError: the index is of another kind, or a file is missing,
            truncated, modified or malformed (the message names it).
    """
    root = Path(path)
    if _inspect(root).state not in ("manifest", "legacy"):
        _generation_of(root, kind)  # raises NoIndexError, before any lock file is created
    attempt = 0
    while True:
        attempt += 1
        with _reading(root) as locked:
            before = _current_directory(root)
            try:
                return load(_generation_of(root, kind))
            except (PersistError, OSError):
                if locked or attempt >= _LOAD_ATTEMPTS or _current_directory(root) == before:
                    raise
        logger.info("%s was persisted again while loading; loading the new generation", root)
