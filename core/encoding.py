"""What every posenc encoding module shares: where it enters a transformer (its ``kind``),
and that its parameters are position parameters."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from torch import nn

__all__ = ["KINDS", "PositionEncoding", "encoding_kind", "no_weight_decay_names", "unchecked"]

KINDS = ("additive", "rotary", "bias", "none")
"""Where an encoding enters a transformer: added to the token embeddings, rotating q and k,
added to the attention logits, or nowhere (the NoPE baseline).
"""


class PositionEncoding(nn.Module):
    """Base of posenc's encoding modules.

    Every subclass declares its ``kind`` (one of :data:`KINDS`) as a class attribute, so code
    that places an encoding (an attention module, ``posenc.spatial.attach``, the forecaster)
    asks the class rather than guessing from its name or methods.

    Every parameter an encoding owns (a learned table, RoPE-Mixed frequencies, a relative-bias
    table, a continuous-bias MLP, Time2Vec frequencies) places tokens rather than transforms
    their content, so weight decay would only pull positions towards each other.
    :meth:`no_weight_decay` names them all, timm's convention, which optimizer set-ups read
    through :func:`no_weight_decay_names`.
    """

    kind: ClassVar[str]

    def no_weight_decay(self) -> set[str]:
        """Names (relative to this module) of the parameters to keep out of weight decay."""
        return {name for name, _ in self.named_parameters()}


def encoding_kind(encoding: object) -> str:
    """``"additive"``, ``"rotary"``, ``"bias"`` or ``"none"``: the ``kind`` that ``encoding``
    (a module or a class) declares; None is ``"none"``. Anything else raises a ``TypeError``
    naming the class."""
    if encoding is None:
        return "none"
    kind = getattr(encoding, "kind", None)
    if kind not in KINDS:
        name = encoding.__name__ if isinstance(encoding, type) else type(encoding).__name__
        raise TypeError(f"{name} does not declare how it enters a transformer: give the class "
                        f"a kind attribute, one of {list(KINDS)} (posenc's encodings derive "
                        f"from posenc.core.PositionEncoding and declare it), got {kind!r}")
    return kind


def no_weight_decay_names(model: nn.Module) -> set[str]:
    """Full names of the parameters of ``model`` that it or its submodules exclude from weight
    decay through a ``no_weight_decay()`` method (posenc encodings, timm models and layers).

    Names a module lists that it does not own (timm lists ``dist_token`` on every ViT) are
    ignored.
    """
    owned = {name for name, _ in model.named_parameters()}
    names: set[str] = set()
    for prefix, module in model.named_modules():
        declared = getattr(module, "no_weight_decay", None)
        if not callable(declared):
            continue
        for name in declared():
            names.add(f"{prefix}.{name}" if prefix else name)
    return names & owned


def unchecked(encoding: object, method: str = "forward") -> Callable:
    """``encoding``'s ``method`` without its value checks: posenc's encodings check positions'
    values in their public methods (``rotation``, ``key_rotation``, ``forward``,
    ``score_mod``), then call the unchecked ``_rotation``, ..., ``_forward``, ``_score_mod``,
    which check shapes only (as timm's Eva builds its rotary embedding at the model's edge
    and passes it to the blocks).

    For callers whose positions were checked once where they entered, or made from shapes
    (a model's edge, the blocks after it, :class:`~posenc.core.MultiheadAttention` after its
    own check), so nothing in a block waits for the host. An encoding of the user's own,
    without the unchecked method, gets its public one.
    """
    internal = getattr(encoding, f"_{method}", None)
    if internal is not None:
        return internal
    return encoding if method == "forward" else getattr(encoding, method)
