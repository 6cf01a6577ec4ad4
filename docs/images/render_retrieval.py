"""Draw docs/images/retrieval.png: the notebook view of one retrieval, rendered by headless Chromium.

The view (``RetrievalView._repr_html_``) is what Jupyter shows; this renders it
in a real browser, so the picture in docs/guide/09-reading-results.md is what a
reader's notebook draws. Needs Debian's ``chromium`` (``apt-get install chromium``).

    .venv/bin/python docs/images/render_retrieval.py
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from llama_index_ext_recursive import RecursiveSummaryRetriever, RetrievalView, load_sample_documents

QUESTION = "What should a beginner do the week before a marathon?"
OUT = Path(__file__).with_name("retrieval.png")


def main() -> None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        raise SystemExit("needs Chromium: apt-get install chromium")
    retriever = RecursiveSummaryRetriever.from_documents(load_sample_documents(), similarity_top_k=6)
    view = RetrievalView(retriever.retrieve(QUESTION), query=QUESTION)
    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / "view.html"
        page.write_text(
            f'<!doctype html><html><head><meta charset="utf-8"></head>'
            f'<body style="background:#fff;margin:16px">{view._repr_html_()}</body></html>',
            encoding="utf-8",
        )
        subprocess.run(
            [
                browser,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
                f"--screenshot={OUT}",
                "--window-size=940,460",
                page.as_uri(),
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
