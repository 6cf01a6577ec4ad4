"""The package's base exception.

Every exception this package raises derives from :class:`LlamaIndexExtRecursiveError`,
so an app can catch "anything from this retriever" in one clause, and each also
keeps the builtin base it always had (``FilterError`` is still a ``ValueError``,
``StaleIdError`` a ``KeyError``, ``PersistError`` a ``RuntimeError``), so code
written against those bases keeps working.
"""


class LlamaIndexExtRecursiveError(Exception):
    """Base of every exception raised by ``llama_index_ext_recursive``."""
