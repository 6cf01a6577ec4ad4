"""The command line, end to end, in-process (the model loads once)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from llama_index_ext_recursive.cli import main, parse_filters

pytestmark = pytest.mark.integration


def test_parse_filters():
    assert parse_filters(["year=2024", "language=en", "score=0.5"]) == {"year": 2024, "language": "en", "score": 0.5}
    with pytest.raises(SystemExit, match="key=value"):
        parse_filters(["year"])


def test_build_then_query(tmp_path, capsys, real_model):
    corpus = tmp_path / "docs"
    corpus.mkdir()
    (corpus / "bees.md").write_text("# Bees\n\nThe queen bee lays eggs. Workers gather nectar.\n")
    (corpus / "more.jsonl").write_text(
        json.dumps({"doc_id": "solar", "title": "Solar", "text": "Panels turn sunlight into power.",
                    "metadata": {"year": 2023}}) + "\n"
    )
    assert main(["build", str(corpus), "--persist", str(tmp_path / "idx")]) == 0
    assert "Indexed 2 documents" in capsys.readouterr().out
    assert main(["query", str(tmp_path / "idx"), "who lays the eggs?", "--top-k", "1"]) == 0
    out = capsys.readouterr().out
    assert "routed documents: bees.md" in out and "queen bee" in out
    main(["query", str(tmp_path / "idx"), "energy", "--filter", "year=2023", "--json"])
    rows = json.loads(capsys.readouterr().out)
    assert [r["explanation"]["doc_id"] for r in rows] == ["solar"]
    (corpus / "bees.md").write_text("# Bees\n\nDrones do not sting.\n")
    main(["build", str(corpus), "--persist", str(tmp_path / "idx")])
    assert "Reused 1 cached summaries" in capsys.readouterr().out  # solar unchanged, bees changed


def test_bad_jsonl_line_names_file_and_line(tmp_path):
    corpus = tmp_path / "docs"
    corpus.mkdir()
    (corpus / "bad.jsonl").write_text('{"doc_id": "a", "text": "ok"}\n{"doc_id": "b"}\n')
    with pytest.raises(SystemExit, match=r"bad.jsonl:2: expected a JSON object"):
        main(["build", str(corpus), "--persist", str(tmp_path / "idx")])


def test_demo_runs_as_a_module_offline():
    result = subprocess.run(
        [sys.executable, "-m", "llama_index_ext_recursive", "demo"],
        capture_output=True, text=True, timeout=300, env={**__import__("os").environ, "HF_HUB_OFFLINE": "1"},
    )
    assert result.returncode == 0, result.stderr
    assert "Built 12 documents" in result.stdout
    assert result.stdout.count("routed documents:") == 5
