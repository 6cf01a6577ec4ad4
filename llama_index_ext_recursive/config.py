"""One configuration convention for every component that can be saved.

A component's configuration is ``{"type": "<module>.<Class>", "init_parameters": {...}}``
(Haystack's shape): ``Class.from_dict(component.to_dict())`` builds a
component with the same settings, and ``persist`` writes that same dict as
``config.json`` beside the data, so saving a retriever and describing it are one
mechanism. Init parameters are JSON values only; what cannot be (an embedding
model, an LLM, the data itself) is passed again when loading.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from llama_index_ext_recursive.persist import load_json_object

CONFIG_FILE = "config.json"


def type_name(cls: type) -> str:
    """The ``type`` field for ``cls``: its module and qualified name."""
    return f"{cls.__module__}.{cls.__qualname__}"


def component_to_dict(component: Any, **init_parameters: Any) -> dict[str, Any]:
    """The configuration dict of ``component`` with these (JSON-safe) init parameters."""
    data = {"type": type_name(type(component)), "init_parameters": init_parameters}
    json.dumps(data)  # fail here, naming nothing lost later, if a value is not JSON
    return data


def init_parameters(cls: type[Any], data: Mapping[str, Any]) -> dict[str, Any]:
    """The init parameters of a configuration dict written for ``cls`` (or a subclass).

    Raises:
        ValueError: ``data`` is not a configuration dict, or is one for another class.
    """
    if not isinstance(data, Mapping) or "init_parameters" not in data or "type" not in data:
        raise ValueError(
            f"{cls.__name__}.from_dict expects {{'type': ..., 'init_parameters': {{...}}}} "
            f"as written by to_dict(), got {type(data).__name__} with keys "
            f"{sorted(data) if isinstance(data, Mapping) else '-'}"
        )
    written = data["type"]
    known = {type_name(c) for c in cls.__mro__}
    if written not in known:
        raise ValueError(
            f"this configuration is for {written}, not {type_name(cls)}; "
            f"load it with {written.rsplit('.', 1)[-1]}.from_dict"
        )
    return dict(data["init_parameters"])


def write_config(folder: Path, data: Mapping[str, Any]) -> None:
    """Write a configuration dict as ``config.json`` in a persist's staging folder."""
    (Path(folder) / CONFIG_FILE).write_text(json.dumps(data, ensure_ascii=False, indent=1), encoding="utf-8")


def read_config(folder: Path) -> dict[str, Any]:
    """Read ``config.json`` from a persisted folder (the error names a broken file)."""
    return load_json_object(Path(folder) / CONFIG_FILE, ("type", "init_parameters"))
