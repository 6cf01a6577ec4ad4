"""What the benchmark scripts share, so each fact about a measurement is written once.

The scripts in ``benchmarks/`` each used to carry their own copy of the same
pieces: a synthetic corpus, a hashed bag-of-words model, a median of rounds, a
markdown table, the machine line, a PostgreSQL start, a dataset path. Copies
drift (two scripts took the p95 two different ways; one fingerprinted files the
package no longer has), so a figure in one table could not be compared with
another's. Each piece now lives in one module here, by concern:

- :mod:`harness.corpus`: synthetic text and vectors from a seed, streamed;
- :mod:`harness.models`: synthetic embedding models, and the bundled real ones
  behind the shared embedding cache;
- :mod:`harness.data`: the public BEIR datasets under ``../shared/data``
  (through the package's own loader) and their embedded nodes and queries;
- :mod:`harness.timing`: medians, percentiles, interleaved rounds, warm-ups,
  time limits;
- :mod:`harness.memory`: peak RSS of this process and of a child process;
- :mod:`harness.postgres`: a throw-away PostgreSQL through the package's
  ``stores.pgserver``;
- :mod:`harness.report`: markdown tables, the machine and code measured,
  writing result files;
- :mod:`harness.cli`: the flags every script spells the same way, and the
  command line quoted in a report;
- :mod:`harness.versions`: the package copy measured, and an older revision of
  it for before/after runs.

Scripts run as ``python benchmarks/<script>.py``, so ``benchmarks/`` is first on
``sys.path`` and ``import harness`` finds this package. The harness imports
``llama_index_ext_recursive`` only inside the functions that need it: a script
run with ``PYTHONPATH`` pointing at an older checkout measures that checkout.
"""

from __future__ import annotations

import os
from pathlib import Path

# benchmarks never download: the models are bundled, the datasets are local
os.environ.setdefault("HF_HUB_OFFLINE", "1")

REPO = Path(__file__).resolve().parents[2]
BENCHMARKS = REPO / "benchmarks"
RESULTS = BENCHMARKS / "results"
