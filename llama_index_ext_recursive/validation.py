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
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence

from llama_index.core.schema import QueryBundle


def closest(name: str, known: Iterable[str]) -> str:
    """``"did you mean 'x'?"`` for the known name closest to ``name``, or a list."""
    known = sorted(set(known))
    match = difflib.get_close_matches(name, known, n=1)
    if match:
        return f"did you mean {match[0]!r}?"
    return f"known: {known[:10]}" if known else "none are known"


def check_count(name: str, value: Any, minimum: int = 1, allow_none: bool = False) -> Optional[int]:
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
    low: Optional[float] = None,
    high: Optional[float] = None,
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
    if query_bundle.embedding is not None:
        return
    text = query_bundle.query_str
    if not isinstance(text, str):
        raise TypeError(f"the query must be a string, got {type(text).__name__}")
    if not text.strip():
        raise ValueError(
            f"the query is empty ({text!r}): pass a question with at least one "
            "non-space character"
        )


def check_vectors(
    vectors: Any, model_name: str, what: str, dim: Optional[int] = None
) -> int:
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
