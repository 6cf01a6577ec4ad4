"""What ``build`` reads from a folder (cli/documents.py): every file, or a reason it was skipped."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from llama_index_ext_recursive.cli import documents as documents_module
from llama_index_ext_recursive.cli import main, read_documents


def _folder(tmp_path):
    docs = tmp_path / "docs"
    for package in ("bees", "kites"):
        (docs / package).mkdir(parents=True)
        (docs / package / "__init__.py").write_text(f'"""The {package} package."""\n', encoding="utf-8")
    (docs / "guide.md").write_text("# Guide\n\nBees make honey.\n", encoding="utf-8")
    (docs / "data.csv").write_text("name,wings\nbee,4\n", encoding="utf-8")
    (docs / "paper.pdf").write_bytes(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n1 0 obj\n<<>>\nendobj\n")
    (docs / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    (docs / "cache.sqlite").write_bytes(b"SQLite format 3\x00" + bytes(100))
    (docs / ".hidden.md").write_text("hidden", encoding="utf-8")
    return docs


def test_every_text_file_is_a_document_and_every_other_file_is_named_with_its_reason(tmp_path, capsys):
    docs = _folder(tmp_path)
    corpus = read_documents(docs, "doc_id")
    read = {d.doc_id: d for d in corpus}
    # source code and CSV are text, as SimpleDirectoryReader reads them
    assert sorted(read) == ["bees/__init__.py", "data.csv", "guide.md", "kites/__init__.py"]
    # titled by folder and name: the two __init__.py differ
    assert read["bees/__init__.py"].metadata["title"] == "bees/__init__.py"
    assert read["kites/__init__.py"].metadata["title"] == "kites/__init__.py"
    assert read["guide.md"].metadata["title"] == "guide.md"
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "cannot be read as text" in line]
    assert len(lines) == 1  # one line for all of them
    assert "skipped 3 files" in lines[0]
    assert "2 binary (.png, .sqlite)" in lines[0] and str(docs / "logo.png") in lines[0]
    assert "pip install llama-index-readers-file pypdf" in lines[0] and str(docs / "paper.pdf") in lines[0]
    assert corpus.hidden == 1


def test_build_counts_the_skipped_files_in_its_last_line(tmp_path, capsys, real_model):
    from llama_index.core import Settings

    docs = _folder(tmp_path)
    Settings.embed_model = real_model
    try:
        argv = ["build", str(docs), "--persist", str(tmp_path / "idx"), "--embedding-cache", str(tmp_path / "c")]
        assert main(argv) == 0
    finally:
        Settings._embed_model = None
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("Indexed 4 documents") and "(skipped 3 not text)" in last


class _Pages:
    """Stands in for LlamaIndex's PDFReader: one document per page."""

    def load_data(self, file):
        if file.name.startswith("broken"):
            raise ValueError("EOF marker not found")
        return [SimpleNamespace(text=f"page {i} of {file.name}") for i in (1, 2)]


def test_a_pdf_is_read_by_llamaindexs_reader_when_it_is_installed(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(documents_module, "_reader_class", lambda name: _Pages if name == "PDFReader" else None)
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "paper.pdf").write_bytes(b"%PDF-1.4")
    (docs / "broken.pdf").write_bytes(b"%PDF-1.4")
    (docs / "letter.docx").write_bytes(b"PK\x03\x04")
    corpus = read_documents(docs, "doc_id")
    assert [(d.doc_id, d.text) for d in corpus] == [("paper.pdf", "page 1 of paper.pdf\n\npage 2 of paper.pdf")]
    err = capsys.readouterr().err
    assert "PDFReader could not read (ValueError: EOF marker not found)" in err and "broken.pdf" in err
    assert "pip install llama-index-readers-file docx2txt" in err and "letter.docx" in err


def test_a_folder_of_nothing_readable_is_one_error_counting_why(tmp_path, capsys):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00")
    (docs / "empty.md").write_text("", encoding="utf-8")
    assert main(["build", str(docs), "--persist", str(tmp_path / "idx")]) == 1
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
    assert errors == [f"error: no documents to index under {docs} (1 empty, 1 not text, all skipped)"]
    assert not (tmp_path / "idx").exists()


@pytest.mark.parametrize("name", ["notes.txt", "page.html", "main.rs"])
def test_text_is_read_whatever_the_suffix(tmp_path, name):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / name).write_text("Honey bees dance.", encoding="utf-8")
    assert [d.text for d in read_documents(docs, "doc_id")] == ["Honey bees dance."]
