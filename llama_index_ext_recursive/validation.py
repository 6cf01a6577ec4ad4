"""Argument checks shared by every public entry point.

Each check raises at construction (or at the start of a call) with a message
that names the argument, what was given and what to pass instead, so bad input
fails before any chunking, embedding or search instead of deep inside them or,
worse, as a silently wrong answer.
"""

from __future__ import annotations

import difflib
import inspect
import math
import numbers
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal, overload

from llama_index.core.schema import BaseNode, QueryBundle


def closest(name: str, known: Iterable[str]) -> str:
    """``"did you mean 'x'?"`` for the known name closest to ``name``, or a list."""
    known = sorted({str(k) for k in known})  # ids may be ints: compared as they print
    match = difflib.get_close_matches(str(name), known, n=1)
    if match:
        return f"did you mean {match[0]!r}?"
    return f"known: {known[:10]}" if known else "none are known"


@overload
def check_count(name: str, value: Any, minimum: int = 1, allow_none: Literal[False] = False) -> int: ...


@overload
def check_count(name: str, value: Any, minimum: int = 1, *, allow_none: bool) -> int | None: ...


def check_count(name: str, value: Any, minimum: int = 1, allow_none: bool = False) -> int | None:
    """An integer ``>= minimum``; bools, floats, strings and NaN are refused.

    ``True`` is not ``1`` here: a flag passed where a count belongs is a bug.
    """
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(
            f"{name} must be an integer >= {minimum}, got {value!r} "
            f"({type(value).__name__}); pass e.g. {name}={max(minimum, 5)}"
        )
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def check_real(
    name: str,
    value: Any,
    low: float | None = None,
    high: float | None = None,
) -> float:
    """A finite real number within ``[low, high]``; bools, NaN and inf are refused."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number, got {value!r} ({type(value).__name__})")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    if (low is not None and value < low) or (high is not None and value > high):
        raise ValueError(f"{name} must be within [{low}, {high}], got {value}")
    return value


def check_weights(name: str, weights: Sequence[Any], count: int) -> list:
    """``count`` finite, non-negative weights, not all zero (any iterable, numpy included)."""
    if isinstance(weights, (str, bytes, Mapping)) or not isinstance(weights, Iterable):
        raise TypeError(f"{name} must be a list of {count} numbers, got {weights!r}")
    weights = list(weights)
    if len(weights) != count:
        raise ValueError(f"{name} has {len(weights)} values for {count} retrievers; pass one per retriever")
    checked = [check_real(f"{name}[{i}]", w, low=0.0) for i, w in enumerate(weights)]
    if not any(checked):
        raise ValueError(f"{name} are all 0: at least one retriever must have a positive weight")
    return checked


def check_query(query_bundle: QueryBundle) -> None:
    """Refuse an empty or blank query that carries no embedding of its own.

    A blank string embeds to an arbitrary vector and matches nothing lexically,
    so any hit it returned would be noise.
    """
    if isinstance(query_bundle, (bytes, bytearray)):
        raise TypeError("the query is bytes, not text: decode it first, e.g. retrieve(query.decode('utf-8'))")
    if not isinstance(query_bundle, QueryBundle):
        raise TypeError(f"the query must be a string or a QueryBundle, got {type(query_bundle).__name__}")
    if query_bundle.embedding is not None:
        return
    text = query_bundle.query_str
    if not isinstance(text, str):
        raise TypeError(f"the query must be a string, got {type(text).__name__}")
    if not text.strip():
        raise ValueError(f"the query is empty ({text!r}): pass a question with at least one non-space character")
    check_unicode("the query", text)
    strs = query_bundle.custom_embedding_strs
    if strs is not None:
        if not strs:
            raise ValueError(
                "custom_embedding_strs is an empty list, so there is nothing to embed: pass None "
                "(the query text is embedded) or at least one string"
            )
        for position, item in enumerate(strs):
            if not isinstance(item, str) or not item.strip():
                raise ValueError(f"custom_embedding_strs[{position}] is {item!r}: each must be a non-blank string")
            check_unicode(f"custom_embedding_strs[{position}]", item)


def check_unicode(what: str, text: str) -> None:
    """Refuse a lone surrogate (``"\\ud800"``): not Unicode text, so no model, store or file can take it."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"{what} holds {text[exc.start]!r} at position {exc.start}, a lone surrogate that is not "
            "valid Unicode text (often a wrongly decoded file or JSON); decode the text correctly "
            "or remove it"
        ) from None


def check_vectors(vectors: Any, model_name: str, what: str, dim: int | None = None) -> int:
    """Refuse embeddings with NaN/inf or the wrong dimension; return the dimension.

    ``vectors`` is one vector or a sequence of them; ``what`` says whose
    (``"the query"``, ``"chunk 'a-1'"``) so the message can name it.
    """
    import numpy as np

    array = np.asarray(vectors, dtype=np.float64)
    if array.ndim == 1:
        array = array[None, :]
    if array.ndim != 2 or array.shape[1] == 0:
        raise ValueError(f"embedding model {model_name!r} returned no vector for {what}")
    if dim is not None and array.shape[1] != dim:
        raise ValueError(
            f"embedding model {model_name!r} gives {array.shape[1]}-dimensional vectors for "
            f"{what}, but the index holds {dim}-dimensional ones: use the embedding model "
            "the index was built with (embed_model=...)"
        )
    if not np.isfinite(array).all():
        raise ValueError(
            f"embedding model {model_name!r} returned NaN or infinite values for {what}; "
            "check the model (a NaN vector would score every node NaN)"
        )
    return int(array.shape[1])


def check_kwargs(target: Callable[..., Any], kwargs: Mapping[str, Any], where: str) -> None:
    """Refuse keywords ``target`` does not accept, before any work is done.

    ``from_documents(..., similarity_topk=5)`` used to fail only after chunking,
    summarizing and embedding; this names the keyword and the closest valid one
    at once.
    """
    parameters = inspect.signature(target).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return
    known = [n for n, p in parameters.items() if p.kind is not inspect.Parameter.VAR_POSITIONAL]
    for key in kwargs:
        if key not in parameters:
            raise TypeError(f"{where} got an unexpected keyword argument {key!r} ({closest(key, known)})")


def check_keywords(targets: Sequence[Callable[..., Any]], kwargs: Mapping[str, Any], where: str) -> None:
    """Refuse a keyword none of ``targets`` accepts, naming the closest valid one across all of
    them (a call whose keywords several callables share out, such as a builder's)."""
    known: set[str] = set()
    for target in targets:
        known |= set(inspect.signature(target).parameters)
    known -= {"self", "cls", "kwargs"}
    for key in kwargs:
        if key not in known:
            raise TypeError(f"{where} got an unexpected keyword argument {key!r} ({closest(key, sorted(known))})")


_JSON_SCALARS = (str, int, float, bool, type(None))


def json_metadata(metadata: Mapping[str, Any], owner: str) -> dict[str, Any]:
    """``metadata`` as a persisted index and every filter will see it, checked before any work.

    NumPy scalars (``np.int64``, ``np.float32``, ``np.bool_``: what pandas hands
    out) become the Python numbers they hold; a value JSON cannot hold (a
    datetime, a Decimal, a set, an object) is refused naming the key, the owner
    and the fix, instead of failing after chunking and embedding, or comparing
    differently before and after a reload.

    Args:
        metadata: a document's or node's metadata (not modified).
        owner: what it belongs to, for the error (``"document 'x'"``).
    """
    return {
        str(key) if isinstance(key, str) else _bad_key(key, owner): _json_value(value, key, owner)
        for key, value in metadata.items()
    }


def json_nodes(nodes: Iterable[BaseNode]) -> list[BaseNode]:
    """``nodes`` with :func:`json_metadata`, checked before anything is embedded or indexed.

    A node whose metadata is already plain JSON is kept as it is; one holding
    NumPy scalars or tuples is replaced by a copy holding the Python values
    (the caller's node is not changed), so every store, BM25 and the filters
    see the same numbers. A value no index can hold is refused, naming the
    node, its document, the key and the fix.

    Args:
        nodes: the nodes about to be indexed.
    """
    out: list[BaseNode] = []
    for node in nodes:
        if _plain(node.metadata):
            out.append(node)
            continue
        ref = node.ref_doc_id
        owner = f"node {node.node_id!r}" + (f" of document {ref!r}" if ref is not None else "")
        copy = node.model_copy()
        copy.metadata = json_metadata(node.metadata, owner)
        out.append(copy)
    return out


def _plain(value: Any) -> bool:
    """Whether ``value`` is JSON as it is (what :func:`json_metadata` returns unchanged)."""
    if isinstance(value, _JSON_SCALARS) and type(value).__module__ != "numpy":
        return True
    if type(value) is list:
        return all(_plain(v) for v in value)
    if type(value) is dict:
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    return False


def _bad_key(key: Any, owner: str) -> str:
    raise TypeError(f"{owner}: metadata key {key!r} is a {type(key).__name__}; metadata keys must be strings")


def _json_value(value: Any, key: str, owner: str) -> Any:
    if isinstance(value, _JSON_SCALARS) and type(value).__module__ != "numpy":
        return value
    if isinstance(value, (list, tuple)):
        return [_json_value(v, key, owner) for v in value]
    if isinstance(value, dict):
        return {
            str(k) if isinstance(k, str) else _bad_key(k, owner): _json_value(v, key, owner) for k, v in value.items()
        }
    item = getattr(value, "item", None)
    if type(value).__module__ == "numpy" and callable(item) and getattr(value, "ndim", None) == 0:
        return _json_value(item(), key, owner)  # a NumPy scalar: the Python number it holds
    fix = {
        "datetime": "store value.isoformat() (ISO dates compare correctly as strings)",
        "date": "store value.isoformat() (ISO dates compare correctly as strings)",
        "Decimal": "store float(value) or str(value)",
        "set": "store sorted(value) (a list)",
        "frozenset": "store sorted(value) (a list)",
        "ndarray": "store value.tolist()",
    }.get(type(value).__name__, "store a string, a number, a bool or a list of them")
    raise TypeError(
        f"{owner}: metadata[{key!r}] is a {type(value).__name__} ({value!r}), which an index cannot "
        f"store or filter on as it is; {fix}"
    )
