"""qada: query-adaptive attention (QAdA) from Python.

- ``KeyMoments``: streaming mean and covariance of keys (float64).
- ``decide``: any criterion of qada by name (dense, window, oracle, approx, bound, mixture,
  hybrid) on your own queries and keys, one head or a batch of heads.
- ``Model``: a GGUF model (a path, or a short name such as ``smollm2-135m``): ``tokenize``,
  ``detokenize``, ``generate``, ``analyze`` and ``session`` (prefill, step, the cache's rotated
  keys and values, the last step's rotated queries).
- ``setting_options``: the decoding keywords of a setting file of ``qada calibrate tau``, or
  of a model's shipped setting, for ``Model.generate`` and ``Model.session``.

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

import json
import os
from pathlib import Path
from typing import Any, Optional

#: The fields of a setting file that are decoding keywords of ``Model.generate``.
_SETTING_KEYWORDS = (
    "criterion",
    "tau",
    "group",
    "page",
    "channels",
    "clusters",
    "margin",
    "dense_below",
    "sink",
    "local",
)
#: The fields every setting holds, and those older or dense settings may lack (with the
#: value that means: the CLI's ``Setting`` reads them so).
_SETTING_REQUIRED = ("criterion", "group", "page", "clusters", "margin", "sink", "local")
_SETTING_OPTIONAL = {"tau": None, "channels": 8, "dense_below": None}
#: The model shape a setting records, as ``Model`` names it.
_SETTING_SHAPE = {
    "n_layers": "n_layers",
    "n_heads": "n_heads",
    "n_kv_heads": "n_kv_heads",
    "head_dim": "head_dim",
    "vocab_size": "vocab_size",
}


def _shipped_setting(name: str) -> Path:
    """``qada-cli/settings/NAME.json`` under ``$QADA_REPO``, or the current directory or one of
    its ancestors."""
    rel = Path("qada-cli") / "settings" / f"{name}.json"
    roots = []
    if os.environ.get("QADA_REPO"):
        roots.append(Path(os.environ["QADA_REPO"]))
    cwd = Path.cwd()
    roots += [cwd, *cwd.parents]
    for root in roots:
        if (root / rel).is_file():
            return root / rel
    raise ValueError(
        f"path_or_name: expected a setting file or a model's short name, found {name!r}: "
        f"no file of that name and no {rel} under $QADA_REPO or {cwd} and its parents "
        "(set QADA_REPO to the repository)"
    )


def setting_options(path_or_name: str, model: Optional[Model] = None) -> dict[str, Any]:
    """The decoding keywords of a setting file of ``qada calibrate tau`` (format
    ``qada-setting/1``), for ``Model.generate`` and ``Model.session``: criterion, tau, group,
    page, channels, clusters, margin, dense_below, sink and local.

    ``path_or_name`` is a file, or a short name (``smollm2-135m``, ``qwen2.5-0.5b``,
    ``gemma3-270m``, ``qwen2.5-1.5b``) whose shipped setting is read. With ``model``, a setting
    made for a model of another shape (layers, heads, KV heads, head dimension, vocabulary)
    raises ``ValueError``.

    >>> m = qada.Model("smollm2-135m")
    >>> m.generate("...", **qada.setting_options("smollm2-135m", m))
    """
    path = Path(path_or_name)
    if not path.is_file():
        path = _shipped_setting(str(path_or_name))
    try:
        s = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"path_or_name: {path} is not a readable JSON setting: {e}") from None
    if not isinstance(s, dict) or s.get("format") != "qada-setting/1":
        found = s.get("format") if isinstance(s, dict) else type(s).__name__
        raise ValueError(
            f"path_or_name: expected a setting of format qada-setting/1 (from qada calibrate "
            f"tau), found {found!r} in {path}"
        )
    missing = [k for k in _SETTING_REQUIRED if k not in s]
    if missing:
        raise ValueError(f"path_or_name: {path} lacks {', '.join(missing)}")
    if model is not None:
        shape = s.get("model", {})
        for key, attr in _SETTING_SHAPE.items():
            want, have = shape.get(key), getattr(model, attr)
            if want is not None and want != have:
                raise ValueError(
                    f"model: the setting {path} was made for a model with {key} {want}, "
                    f"this model has {have}"
                )
    opts = {k: s.get(k, default) for k, default in _SETTING_OPTIONAL.items()}
    opts.update({k: s[k] for k in _SETTING_REQUIRED})
    if opts["tau"] is None:
        # dense and window read no tau: the keyword's default stands
        del opts["tau"]
    return {k: opts[k] for k in _SETTING_KEYWORDS if k in opts}

__all__ = [
    "CRITERIA",
    "Decisions",
    "Generation",
    "KeyMoments",
    "Model",
    "QadaError",
    "Session",
    "decide",
    "setting_options",
]
