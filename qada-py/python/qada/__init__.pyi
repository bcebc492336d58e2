"""Type stubs of qada (the extension module qada._native, re-exported)."""

from os import PathLike
from typing import Any, Optional, Sequence, Union

import numpy as np
import numpy.typing as npt

ArrayLike = npt.ArrayLike
Prompt = Union[str, Sequence[int]]

CRITERIA: list[str]
"""The criteria `decide` and `Model` build by name: dense, window, oracle, approx, bound,
mixture, hybrid."""

class QadaError(Exception):
    """An operation qada's libraries refused; the message says what was wrong and what to do."""

class KeyMoments:
    """Mean and population covariance of keys, accumulated in float64."""

    def __init__(self, dim: int) -> None: ...
    def push(self, keys: ArrayLike) -> None:
        """Add keys of shape (n, dim), or one key of shape (dim,) (read as float32)."""
    def merge(self, other: KeyMoments) -> None:
        """Add the keys another KeyMoments of the same dimension has seen."""
    @property
    def dim(self) -> int: ...
    @property
    def count(self) -> int: ...
    @property
    def mean(self) -> npt.NDArray[np.float64]:
        """The mean key, shape (dim,)."""
    @property
    def covariance(self) -> npt.NDArray[np.float64]:
        """The population covariance M2 / n, shape (dim, dim), exactly symmetric."""
    def __len__(self) -> int: ...

class Decisions:
    """What `decide` returns."""

    @property
    def local(self) -> npt.NDArray[np.bool_]:
        """True where the head is local; shape () for one head, (h,) for a batch."""
    @property
    def log_local_share(self) -> npt.NDArray[np.float64]:
        """ln(A_local / (A_local + A_bulk)) as the criterion computed it; NaN where it
        computes none (dense, window)."""
    @property
    def criterion(self) -> str: ...
    @property
    def pages(self) -> Optional[Union[npt.NDArray[np.uint64], list[npt.NDArray[np.uint64]]]]:
        """For pages, certified and quest: the bulk pages each head reads (page p is bulk
        rows [p * page_size, (p + 1) * page_size)); an array for one head, a list for a batch.
        None for the criteria that read all of the bulk or none."""
    @property
    def page_size(self) -> Optional[int]: ...

def decide(
    q: ArrayLike,
    local_keys: ArrayLike,
    bulk_keys: Optional[ArrayLike] = None,
    moments: Optional[KeyMoments] = None,
    tau: float = 0.6,
    criterion: str = "approx",
    scale: Optional[float] = None,
    page: int = 32,
    clusters: int = 4,
    margin: float = 1.0,
    quest_tokens: int = 1024,
    channels: int = 8,
) -> Decisions:
    """Decide whether attention heads are local.

    q: one query (d,) or a batch of heads (h, d) sharing the keys; local_keys: (n, d), the sink
    then the window; bulk_keys: (T_bulk, d); moments: KeyMoments of the bulk (approx only);
    scale defaults to 1 / sqrt(d). pages (QAdA's gate, then the pages holding all but 1 - tau
    of the estimated mass), certified (pages until their bounds prove the rest below 1 - tau)
    quest (quest_tokens of pages of largest bound), channels (pages by key scores from the
    `channels` channels of largest |q| (max k - min k), the rest of each page as its Gaussian),
    channels-ungated (the same pages with no gate: a head whose window holds tau of the
    estimated mass reads none) and pages-oracle (pages by their exact mass: the ceiling)
    decide the heads as one GQA group
    and return the pages each reads (Decisions.pages). oracle, bound, mixture, hybrid and the
    page criteria need bulk_keys; approx
    needs bulk_keys or moments. Raises ValueError naming the argument on wrong shapes, an
    unknown criterion, tau outside (0, 1] or a missing bulk.
    """

class Generation:
    """What `Model.generate` returns."""

    text: str
    ids: list[int]
    prompt_ids: list[int]
    stop_reason: str
    criterion: str
    sparsity: float
    flops_ratio: float
    kv_bytes_ratio: float
    prefill_secs: float
    decode_secs: float

class Session:
    """One sequence decoding on a model (see `Model.session`)."""

    def prefill(self, ids: Sequence[int]) -> npt.NDArray[np.float32]:
        """Run the prompt densely; the logits after its last token, shape (vocab,). Ctrl-C
        stops it between blocks of 512 tokens (KeyboardInterrupt) and leaves the session
        empty."""
    def step(self, id: int) -> npt.NDArray[np.float32]:
        """Decode one token; the logits after it. Records the step's rotated queries."""
    def keys(self, layer: int) -> npt.NDArray[np.float32]:
        """The cache's rotated keys of a layer, (kv_heads, T, d)."""
    def values(self, layer: int) -> npt.NDArray[np.float32]:
        """The cache's values of a layer, (kv_heads, T, d)."""
    def queries(self, layer: int) -> Optional[npt.NDArray[np.float32]]:
        """The rotated queries of a global layer at the last step, (h, d); None for a
        sliding layer or before any step."""
    def first_position(self, layer: int) -> int: ...
    def reset(self) -> None: ...
    @property
    def sparsity(self) -> float: ...
    @property
    def kv_bytes_ratio(self) -> float: ...
    def sparsity_per_head(self) -> npt.NDArray[np.float64]: ...
    def __len__(self) -> int: ...

class Model:
    """A GGUF model and its tokenizer."""

    def __init__(
        self,
        path_or_name: Union[str, PathLike[str]],
        weights: str = "native",
        activations: str = "f32",
        ctx: Optional[int] = None,
    ) -> None:
        """A GGUF file, or a short name: smollm2-135m, qwen2.5-0.5b, gemma3-270m,
        qwen2.5-1.5b (found under $QADA_REPO or the current directory and its ancestors).
        Raises FileNotFoundError when neither."""
    @property
    def path(self) -> str: ...
    @property
    def n_layers(self) -> int: ...
    @property
    def n_heads(self) -> int: ...
    @property
    def n_kv_heads(self) -> int: ...
    @property
    def head_dim(self) -> int: ...
    @property
    def context_length(self) -> int: ...
    @property
    def vocab_size(self) -> int: ...
    @property
    def global_layers(self) -> list[int]: ...
    @property
    def attention_scale(self) -> float: ...
    def tokenize(self, text: str, chat: bool = False, system: Optional[str] = None) -> list[int]: ...
    def detokenize(self, ids: Sequence[int]) -> str: ...
    def generate(
        self,
        prompt: Prompt,
        max_tokens: int = 64,
        criterion: str = "dense",
        tau: float = 0.6,
        temperature: float = 0.0,
        top_k: int = 0,
        top_p: float = 1.0,
        seed: int = 0,
        chat: bool = False,
        system: Optional[str] = None,
        stop: Sequence[str] = ...,
        ignore_eos: bool = False,
        sink: int = 16,
        local: int = 128,
        kv: str = "f16",
        moments: str = "current",
        group: str = "head",
        page: int = 32,
        clusters: int = 4,
        margin: float = 1.0,
        channels: int = 8,
        dense_below: Optional[int] = None,
    ) -> Generation:
        """Generate text; greedy at temperature 0. Ctrl-C raises KeyboardInterrupt between
        tokens, and between blocks of 512 tokens of the prompt."""
    def analyze(
        self,
        prompt: Prompt,
        tau: float = 0.6,
        criterion: str = "approx",
        steps: int = 16,
        chat: bool = False,
        system: Optional[str] = None,
        sink: int = 16,
        local: int = 128,
        kv: str = "f16",
        moments: str = "current",
        page: int = 32,
        clusters: int = 4,
        margin: float = 1.0,
        channels: int = 8,
    ) -> dict[str, Any]:
        """The per-head report of `qada analyze`: oracle_local, approx_local, agreement
        (layers x heads), per-layer fractions, accuracy, recall_long, precision_long, counts,
        the exact share of the softmax mass the criterion's reads leave out (missed_share_mean,
        missed_share_max, frac_over_budget, per_layer_missed_share), and the raw probes
        (layer, head, bulk_len, log_local, log_bulk, log_bulk_hat, log_missed)."""
    def session(
        self,
        criterion: str = "dense",
        tau: float = 0.6,
        sink: int = 16,
        local: int = 128,
        kv: str = "f32",
        moments: str = "current",
        group: str = "head",
        page: int = 32,
        clusters: int = 4,
        margin: float = 1.0,
        capacity: Optional[int] = None,
        channels: int = 8,
        dense_below: Optional[int] = None,
    ) -> Session: ...

def setting_options(path_or_name: str, model: Optional[Model] = None) -> dict[str, Any]:
    """The decoding keywords of a setting file of `qada calibrate tau` (format
    qada-setting/1): criterion, tau, group, page, channels, clusters, margin, dense_below,
    sink and local, for Model.generate and Model.session. A short name (smollm2-135m,
    qwen2.5-0.5b, gemma3-270m, qwen2.5-1.5b) reads the shipped setting,
    qada-cli/settings/NAME.json under $QADA_REPO or the current directory and its ancestors.
    With `model`, a setting made for another shape of model raises ValueError."""
