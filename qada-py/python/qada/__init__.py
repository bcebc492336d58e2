"""qada: query-adaptive attention (QAdA) from Python.

- ``KeyMoments``: streaming mean and covariance of keys (float64).
- ``decide``: any criterion of qada by name (dense, window, oracle, approx, bound, mixture,
  hybrid) on your own queries and keys, one head or a batch of heads.
- ``Model``: a GGUF model (a path, or a short name such as ``smollm2-135m``): ``tokenize``,
  ``detokenize``, ``generate``, ``analyze`` and ``session`` (prefill, step, the cache's rotated
  keys and values, the last step's rotated queries).

Errors: arguments that are wrong raise ``ValueError`` naming the argument; what qada's
libraries refuse raises ``QadaError`` with their message. Long work releases the GIL;
``Model.generate`` checks for Ctrl-C between tokens.
"""

from ._native import (
    CRITERIA,
    Decisions,
    Generation,
    KeyMoments,
    Model,
    QadaError,
    Session,
    decide,
)

__all__ = [
    "CRITERIA",
    "Decisions",
    "Generation",
    "KeyMoments",
    "Model",
    "QadaError",
    "Session",
    "decide",
]
