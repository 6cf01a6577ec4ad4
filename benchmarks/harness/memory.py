"""Peak memory: of this process, and of a child process run for one measurement.

A build's peak resident memory is only meaningful in a process that did
nothing else first (Python never gives freed arenas back, so a peak measured
after another build is that build's). Benchmarks of memory therefore run each
case in a fresh child and read the child's peak from the kernel:
:func:`run_child` waits with ``os.wait4``, whose resource usage is the child's
own (and its waited-for descendants'), so no ``/usr/bin/time`` is needed and a
child killed by a time limit still reports its peak. A child that wants to
report its peak as it goes (at each stage, or when it fails) calls
:func:`peak_rss_mib`.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path


def peak_rss_mib() -> float:
    """This process's peak resident set size so far, in MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def limit_address_space(gib: float) -> None:
    """Cap this process's address space, so an allocation past it raises ``MemoryError``
    instead of taking the shared machine down."""
    limit = int(gib * 2**30)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


@dataclass
class ChildRun:
    """What :func:`run_child` saw: exit status, output, wall and CPU time, peak RSS."""

    returncode: int | None  # None: killed at the time limit
    stdout: str
    stderr: str
    wall_s: float
    user_s: float
    sys_s: float
    peak_rss_mib: float

    @property
    def timed_out(self) -> bool:
        return self.returncode is None

    def usage(self) -> dict[str, object]:
        """The figures as recorded in result files (the keys ``/usr/bin/time -v`` parsing gave)."""
        return {
            "wall_s": round(self.wall_s, 2),
            "user_s": round(self.user_s, 2),
            "sys_s": round(self.sys_s, 2),
            "max_rss_kb": int(self.peak_rss_mib * 1024),
        }


def run_child(
    command: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
    timeout: float | None = None,
    stdout: str | Path | None = None,
    stderr: str | Path | None = None,
    poll: Callable[[int], None] | None = None,
    poll_every: float = 2.0,
) -> ChildRun:
    """Run ``command`` to completion (or ``timeout`` seconds) and measure it.

    Output goes to the files ``stdout``/``stderr`` when given (and is read back),
    else to temporary files. While the child runs, ``poll(pid)`` is called
    between checks, which are at most ``poll_every`` seconds apart (e.g. to
    sample the machine's other load; it keeps its own schedule).
    """
    with tempfile.TemporaryDirectory(prefix="bench-child-") as tmp:
        out_path = Path(stdout) if stdout else Path(tmp) / "stdout"
        err_path = Path(stderr) if stderr else Path(tmp) / "stderr"
        with open(out_path, "w", encoding="utf-8") as out, open(err_path, "w", encoding="utf-8") as err:
            started = time.perf_counter()
            proc = subprocess.Popen(
                list(command), env=dict(env) if env is not None else None, cwd=cwd, stdout=out, stderr=err
            )
            returncode: int | None = None
            while True:
                pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
                if pid:
                    returncode = os.waitstatus_to_exitcode(status)
                    break
                if timeout is not None and time.perf_counter() - started > timeout:
                    proc.send_signal(signal.SIGKILL)
                    _, _, usage = os.wait4(proc.pid, 0)
                    break
                if poll is not None:
                    poll(proc.pid)
                time.sleep(min(poll_every, 0.05 + (time.perf_counter() - started) / 10))
            wall = time.perf_counter() - started
            proc.returncode = returncode if returncode is not None else -signal.SIGKILL  # reaped by wait4
        return ChildRun(
            returncode=returncode,
            stdout=out_path.read_text(encoding="utf-8", errors="replace"),
            stderr=err_path.read_text(encoding="utf-8", errors="replace"),
            wall_s=wall,
            user_s=usage.ru_utime,
            sys_s=usage.ru_stime,
            peak_rss_mib=usage.ru_maxrss / 1024,
        )
