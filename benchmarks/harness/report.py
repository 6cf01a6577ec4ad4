"""How results are written: markdown tables, the machine and the code measured, result files.

A figure is only worth what its context says: which machine, which BLAS, which
version of the package, how loaded the machine was. Every report states these
the same way (:func:`machine`, :func:`library_fingerprint`), so two reports
can be put side by side. Tables are GitHub markdown built by :class:`Table`,
which can print its rows one at a time for long runs.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any


class Table:
    """A markdown table: ``columns`` and their alignment (``"l"``/``"r"`` per column).

    ``align`` defaults to the first column left and the others right (a label,
    then figures). Print :meth:`header` then :meth:`row` per row to show rows
    as they are measured, or :meth:`render` all at once.
    """

    def __init__(self, columns: Sequence[str], align: str | None = None) -> None:
        align = align or "l" + "r" * (len(columns) - 1)
        if len(align) != len(columns) or set(align) - {"l", "r"}:
            raise ValueError(f"align {align!r} must give l or r for each of {len(columns)} columns")
        self.columns, self.align = list(columns), align

    def header(self) -> str:
        rule = "|" + "|".join("---:" if a == "r" else "---" for a in self.align) + "|"
        return self.row(*self.columns) + "\n" + rule

    def row(self, *cells: Any) -> str:
        if len(cells) != len(self.columns):
            raise ValueError(f"{len(cells)} cells for {len(self.columns)} columns")
        return "| " + " | ".join(str(c).replace("\n", " ") for c in cells) + " |"

    def render(self, rows: Iterable[Sequence[Any]]) -> str:
        return "\n".join([self.header(), *(self.row(*r) for r in rows)])


def table(columns: Sequence[str], rows: Iterable[Sequence[Any]], align: str | None = None) -> str:
    """A whole markdown table (see :class:`Table`)."""
    return Table(columns, align).render(rows)


def fmt(value: float | None, digits: int = 2, missing: str = "-") -> str:
    """``value`` with ``digits`` decimals; ``missing`` for ``None`` (a figure not measured)."""
    return missing if value is None else f"{value:.{digits}f}"


def write(out: str | Path, text: str, data: Any = None) -> Path:
    """Write ``text`` to ``out`` (folders made), and ``data`` as JSON next to it (``.json``)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")
    if data is not None:
        out.with_suffix(".json").write_text(json.dumps(data, indent=1, ensure_ascii=False), encoding="utf-8")
    print(f"wrote {out}" + (f" and {out.with_suffix('.json')}" if data is not None else ""), file=sys.stderr)
    return out


# ---------------------------------------------------------------- context
def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def mem_gib() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return float("nan")


def blas_info() -> str:
    """The BLAS libraries numpy loaded and their thread counts (they change latencies a lot)."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "unknown"
    return (
        ", ".join(
            f"{i.get('internal_api')} {i.get('version')} num_threads={i.get('num_threads')}"
            for i in threadpool_info()
            if i.get("user_api") == "blas"
        )
        or "none found"
    )


def machine(blas: bool = True) -> str:
    """One line: cores, CPU, memory, Python, numpy and BLAS."""
    import numpy as np

    line = (
        f"nproc={os.cpu_count()}, CPU {cpu_model()}, {mem_gib():.0f} GiB RAM, "
        f"Python {platform.python_version()}, {platform.system()} {platform.release()}, numpy {np.__version__}"
    )
    return line + (f", BLAS {blas_info()}" if blas else "")


def load_average() -> float:
    """The 1-minute load average (above the core count, another process competed)."""
    return os.getloadavg()[0]


def library_fingerprint() -> str:
    """sha256[:12] over every source file of the ``llama_index_ext_recursive`` imported.

    Other sessions edit the package while long runs go on; a fingerprint taken
    before and after a run shows whether the code measured changed under it.
    """
    import llama_index_ext_recursive as package

    root = Path(package.__file__).parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]
