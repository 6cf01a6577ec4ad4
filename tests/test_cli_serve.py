"""``llama-recursive shell`` and ``serve`` (cli/serve.py): an index loaded once, many questions.

Both run as a user runs them: a real process over an index ``build`` wrote,
with the bundled model; ``serve`` on a free port of 127.0.0.1, stopped by its PID.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from llama_index_ext_recursive.cli import main

ENV = {**os.environ, "HF_HUB_OFFLINE": "1"}
DOCUMENTS = {
    "bees.md": "# Bees\n\nThe queen bee lays the eggs of the colony. Worker bees gather nectar.\n",
    "solar.md": "# Solar power\n\nA photovoltaic panel turns sunlight into electricity. An inverter makes AC.\n",
    "bread.md": "# Bread\n\nSourdough rises with wild yeast and is baked covered for the first part.\n",
}


@pytest.fixture(scope="module")
def index(tmp_path_factory, real_model) -> Path:
    from llama_index.core import Settings

    root = tmp_path_factory.mktemp("serve")
    (root / "docs").mkdir()
    for name, text in DOCUMENTS.items():
        (root / "docs" / name).write_text(text, encoding="utf-8")
    Settings.embed_model = real_model
    try:
        cache = str(root / "embeddings.sqlite")
        assert main(["build", str(root / "docs"), "--persist", str(root / "idx"), "--embedding-cache", cache]) == 0
    finally:
        Settings._embed_model = None
    return root / "idx"


def _query(capsys, real_model, index: Path, question: str) -> list[dict]:
    """What the one-shot ``query --top-k 2 --json`` prints (in this process: the model is loaded)."""
    from llama_index.core import Settings

    Settings.embed_model = real_model
    try:
        assert main(["query", str(index), question, "--top-k", "2", "--json"]) == 0
    finally:
        Settings._embed_model = None
    return json.loads(capsys.readouterr().out)


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "llama_index_ext_recursive", *args]


def test_shell_answers_each_piped_line_as_query_does_and_ends_with_the_input(index, capsys, real_model):
    questions = "who lays the eggs?\n\nwhat does an inverter do?\n"
    shell = subprocess.run(
        _cli("shell", str(index), "--top-k", "2", "--json"),
        input=questions,
        capture_output=True,
        text=True,
        timeout=600,
        env=ENV,
    )
    assert shell.returncode == 0, shell.stderr
    answers = [json.loads(line) for line in shell.stdout.splitlines()]
    assert [a["question"] for a in answers] == ["who lays the eggs?", "what does an inverter do?"]  # blank skipped
    assert [a["hits"][0]["explanation"]["doc_id"] for a in answers] == ["bees.md", "solar.md"]
    assert all(len(a["hits"]) == 2 for a in answers)
    assert answers[0]["hits"] == _query(capsys, real_model, index, "who lays the eggs?")  # as the one-shot command
    assert "Loaded 3 documents" in shell.stderr and "Loading weights" not in shell.stderr


def test_shell_reports_a_bad_filter_in_one_line_before_any_question(index):
    shell = subprocess.run(
        _cli("shell", str(index), "--filter", "colour=red"),
        input="bees\n",
        capture_output=True,
        text=True,
        timeout=600,
        env=ENV,
    )
    assert shell.returncode == 1 and "Traceback" not in shell.stderr
    assert [line for line in shell.stderr.splitlines() if line.startswith("error: ")][0].count("colour") >= 1


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _call(port: int, method: str, path: str, body: bytes | None = None) -> tuple[int, dict]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body, method=method)
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


@pytest.fixture(scope="module")
def server(index):
    port = _free_port()
    process = subprocess.Popen(
        _cli("serve", str(index), "--port", str(port)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    try:
        started = time.monotonic()
        while True:  # the index and the model load first: wait for the port to answer
            if process.poll() is not None:
                raise AssertionError(f"serve exited: {process.stderr.read()}")
            try:
                status, health = _call(port, "GET", "/health")
                break
            except (ConnectionError, urllib.error.URLError):
                if time.monotonic() - started > 300:
                    raise
                time.sleep(0.2)
        assert status == 200 and health == {"status": "ok", "documents": 3}
        yield port
    finally:
        os.kill(process.pid, signal.SIGTERM)
        process.wait(timeout=60)
        process.stdout.close()
        process.stderr.close()


def test_serve_answers_the_retrieve_api_with_what_query_prints(index, server, capsys, real_model):
    status, answer = _call(
        server, "POST", "/retrieve", json.dumps({"query": "who lays the eggs?", "top_k": 2}).encode()
    )
    assert status == 200 and len(answer["hits"]) == 2 and answer["ms"] >= 0
    assert answer["hits"] == _query(capsys, real_model, index, "who lays the eggs?")
    # filters, as a JSON object of key: value
    status, answer = _call(
        server, "POST", "/retrieve", json.dumps({"query": "electricity", "filters": {"doc_id": "bread.md"}}).encode()
    )
    assert status == 200 and {h["explanation"]["doc_id"] for h in answer["hits"]} == {"bread.md"}


@pytest.mark.parametrize(
    "body, says",
    [
        (b"not json", "not JSON"),
        (b'["a list"]', "JSON object"),
        (b'{"question": "bees"}', "unknown field"),
        (b'{"query": "  "}', "non-empty string"),
        (b'{"query": "bees", "top_k": 0}', "positive integer"),
        (b'{"query": "bees", "filters": {"colour": "red"}}', "colour"),
    ],
)
def test_serve_refuses_a_bad_request_with_400_naming_the_problem_and_keeps_serving(server, body, says):
    status, answer = _call(server, "POST", "/retrieve", body)
    assert status == 400 and says in answer["error"]
    assert _call(server, "GET", "/health")[0] == 200


def test_serve_refuses_a_port_it_cannot_take_before_loading(index):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        refused = subprocess.run(
            _cli("serve", str(index), "--port", str(port)), capture_output=True, text=True, timeout=600, env=ENV
        )
    assert refused.returncode == 1 and f"cannot listen on 127.0.0.1:{port}" in refused.stderr
    assert "Loaded" not in refused.stderr  # the index was not loaded first
