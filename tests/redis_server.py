"""Session fixture ``redis_server`` (and ``own_redis``, one a test may stop): a real Redis.

Debian's ``redis-server`` (``make test`` installs it when missing), started on a
free port of 127.0.0.1 in a temporary folder, persisting nothing, stopped by
its PID. Tests never skip when it is missing: a missing server is a broken
environment and fails with the command that installs it.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

__all__ = ["RedisServer", "own_redis", "redis_server", "running_redis"]


class RedisServer:
    """One ``redis-server`` process on 127.0.0.1; :attr:`url` to reach it."""

    def __init__(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed: run make test (it installs Debian's redis-server)")
        self._binary = binary
        self._folder = Path(tempfile.mkdtemp(prefix="llama-recursive-redis-"))
        self.port = _free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self._process = subprocess.Popen(
            [
                self._binary,
                "--bind",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self._folder),
                "--protected-mode",
                "yes",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as conn:
                    conn.sendall(b"PING\r\n")
                    if conn.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"redis-server did not answer on 127.0.0.1:{self.port} within 20 s")

    def stop(self) -> None:
        if self._process is not None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            self._process = None

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self._folder, ignore_errors=True)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def running_redis() -> Iterator[RedisServer]:
    """A started Redis server, closed (stopped, its folder removed) on the way out."""
    server = RedisServer()
    server.start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """A Redis server for the whole test session."""
    with running_redis() as server:
        yield server


@pytest.fixture
def own_redis() -> Iterator[RedisServer]:
    """A Redis server of this test's own, which it may stop and start again."""
    with running_redis() as server:
        yield server
