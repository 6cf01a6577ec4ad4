"""What ``build`` reads from a folder (cli/documents.py): every file, or a reason it was skipped."""

from __future__ import annotations

import sys
from types import ModuleType, SimpleNamespace

import pytest

from llama_index_ext_recursive.cli import main, read_documents
from llama_index_ext_recursive.cli.documents import BINARY_READERS, FileReader, _reader_class


@pytest.fixture(autouse=True)
def _private_cache_home(tmp_path, monkeypatch):
    """Builds cache embeddings under $XDG_CACHE_HOME: never the real home's cache in tests."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))


def _folder(tmp_path):
    """What the issue's tester indexed (a .md, a .py, a .pdf), with a source tree's two
    ``cli/__init__.py``, a CSV, two binary files and a hidden file."""
    docs = tmp_path / "docs"
    for package in ("bees", "kites"):
        (docs / package / "cli").mkdir(parents=True)
        (docs / package / "cli" / "__init__.py").write_text(f'"""The {package} CLI."""\n', encoding="utf-8")
    (docs / "guide.md").write_text("# Guide\n\nBees make honey.\n", encoding="utf-8")
    (docs / "data.csv").write_text("name,wings\nbee,4\n", encoding="utf-8")
    (docs / "paper.pdf").write_bytes(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n1 0 obj\n<<>>\nendobj\n")
    (docs / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    (docs / "cache.sqlite").write_bytes(b"SQLite format 3\x00" + bytes(100))
    (docs / ".hidden.md").write_text("hidden", encoding="utf-8")
    return docs


def _warnings(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("warning: skipped")]


def test_every_text_file_is_a_document_and_every_other_file_is_named_with_its_reason(tmp_path, capsys):
    docs = _folder(tmp_path)
    corpus = read_documents(docs, "doc_id")
    read = {d.doc_id: d for d in corpus}
    # source code and CSV are text, as SimpleDirectoryReader reads them
    assert sorted(read) == ["bees/cli/__init__.py", "data.csv", "guide.md", "kites/cli/__init__.py"]
    # titled by the path in the folder: the two cli/__init__.py differ
    assert read["bees/cli/__init__.py"].metadata["title"] == "bees/cli/__init__.py"
    assert read["kites/cli/__init__.py"].metadata["title"] == "kites/cli/__init__.py"
    assert read["guide.md"].metadata["title"] == "guide.md"
    lines = _warnings(capsys.readouterr().err)
    assert len(lines) == 1  # one line for all of them
    assert lines[0].startswith("warning: skipped 3 files: 1 .pdf (needs LlamaIndex's PDFReader: ")
    # llama-index-readers-file is not in the default (nor the dev) install: the real path
    assert f"pip install llama-index-readers-file pypdf): {docs / 'paper.pdf'}; " in lines[0]
    assert "2 binary (.png, .sqlite; no text to index, " in lines[0]
    assert f"{docs / 'cache.sqlite'}, {docs / 'logo.png'}" in lines[0]
    assert corpus.skipped_counts() == {"binary": 2, "needing a reader": 1, "hidden": 1}


def test_build_counts_the_skipped_files_in_its_last_line(tmp_path, capsys, real_model):
    from llama_index.core import Settings

    docs = _folder(tmp_path)
    Settings.embed_model = real_model
    try:
        argv = ["build", str(docs), "--persist", str(tmp_path / "idx"), "--embedding-cache", str(tmp_path / "c")]
        assert main(argv) == 0
    finally:
        Settings._embed_model = None
    captured = capsys.readouterr()
    last = captured.out.strip().splitlines()[-1]
    assert last.startswith("Indexed 4 documents") and last.endswith("(skipped 2 binary, 1 needing a reader, 1 hidden)")
    assert len(_warnings(captured.err)) == 1


class _Pages:
    """Stands in for LlamaIndex's PDFReader: one document per page; a broken file fails as the
    real one does, its error inside tenacity's RetryError, and a file needing a missing library
    raises ImportError."""

    def load_data(self, file):
        if file.name.startswith("broken"):
            error = ValueError("EOF marker\n  not found")
            raise _RetryError(SimpleNamespace(exception=lambda: error))
        if file.name.startswith("encrypted"):
            raise ImportError("cryptography is required for AES encryption")
        return [SimpleNamespace(text=f"page {i} of {file.name}") for i in (1, 2)]


class _RetryError(Exception):
    def __init__(self, last_attempt):
        super().__init__(f"RetryError[{last_attempt}]")
        self.last_attempt = last_attempt


def test_a_pdf_is_read_by_the_reader_for_its_suffix(tmp_path, capsys):
    docs = tmp_path / "docs"
    docs.mkdir()
    for name in ("paper.pdf", "broken.pdf", "encrypted.pdf"):
        (docs / name).write_bytes(b"%PDF-1.4")
    (docs / "letter.docx").write_bytes(b"PK\x03\x04")
    corpus = read_documents(docs, "doc_id", readers={".pdf": _Pages, ".docx": None})
    documents = list(corpus)
    assert [(d.doc_id, d.text) for d in documents] == [("paper.pdf", "page 1 of paper.pdf\n\npage 2 of paper.pdf")]
    assert documents[0].metadata == {"doc_id": "paper.pdf", "title": "paper.pdf", "file_name": "paper.pdf"}
    (line,) = _warnings(capsys.readouterr().err)
    assert line.startswith("warning: skipped 3 files: ")
    # a library the reader imports for this file is missing: skipped with the install line, as a missing reader is
    assert (
        f"1 .pdf (needs LlamaIndex's PDFReader: pip install llama-index-readers-file pypdf): {docs / 'encrypted.pdf'}; "
        in line
    )
    assert (
        f"1 .docx (needs LlamaIndex's DocxReader: pip install llama-index-readers-file docx2txt): {docs / 'letter.docx'}; "
        in line
    )
    # the reader's own error, out of the RetryError, on one line
    assert line.endswith(
        f"1 LlamaIndex's reader could not read: {docs / 'broken.pdf'} (ValueError: EOF marker not found)"
    )
    assert corpus.skipped_counts() == {"needing a reader": 2, "unreadable": 1}
    with pytest.raises(ValueError, match=r"readers for \['.pptx'\]: only \['.docx', '.pdf'\]"):
        read_documents(docs, "doc_id", readers={".pptx": _Pages})


def test_a_reader_is_used_only_when_it_and_the_library_it_reads_with_are_installed(monkeypatch):
    # the default install: llama-index-readers-file is missing, even where the library is there
    assert _reader_class(BINARY_READERS[".pdf"]) is None
    assert _reader_class(FileReader("PDFReader", "json", "pip install ...")) is None
    readers_file = ModuleType("llama_index.readers.file")
    readers_file.PDFReader = _Pages
    monkeypatch.setitem(sys.modules, "llama_index.readers.file", readers_file)
    assert _reader_class(FileReader("PDFReader", "json", "pip install ...")) is _Pages
    # PDFReader imports without pypdf, then fails on every file: not used
    assert _reader_class(FileReader("PDFReader", "no_such_library_for_pdf", "pip install ...")) is None


def test_a_folder_of_nothing_readable_is_one_error_counting_why(tmp_path, capsys):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00")
    (docs / "empty.md").write_text("", encoding="utf-8")
    (docs / ".env").write_text("KEY=1", encoding="utf-8")
    assert main(["build", str(docs), "--persist", str(tmp_path / "idx")]) == 1
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
    assert errors == [f"error: no documents to index under {docs} (1 empty, 1 binary, all skipped)"]
    assert not (tmp_path / "idx").exists()


def test_utf16_text_is_named_as_such_with_the_fix_not_called_binary(tmp_path, capsys):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "notes.txt").write_text("Honey bees dance.", encoding="utf-8")
    (docs / "ps.txt").write_text("Written by PowerShell.", encoding="utf-16")  # with its byte order mark
    corpus = read_documents(docs, "doc_id")
    assert [d.doc_id for d in corpus] == ["notes.txt"] and corpus.undecodable == [str(docs / "ps.txt")]
    err = capsys.readouterr().err
    assert f"warning: {docs / 'ps.txt'}: UTF-16 text, not UTF-8; skipped. Convert it, e.g. iconv -f utf-16" in err
    assert not _warnings(err)


@pytest.mark.parametrize("name", ["notes.txt", "page.html", "main.rs", "conf.yaml", "index.rst", "Makefile"])
def test_text_is_read_whatever_the_suffix(tmp_path, name):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / name).write_text("Honey bees dance.", encoding="utf-8")
    assert [d.text for d in read_documents(docs, "doc_id")] == ["Honey bees dance."]
