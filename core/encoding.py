"""What every posenc encoding module shares: its parameters are position parameters."""

from __future__ import annotations

from torch import nn

__all__ = ["PositionEncoding", "no_weight_decay_names"]


class PositionEncoding(nn.Module):
    """Base of posenc's encoding modules.

    Every parameter an encoding owns (a learned table, RoPE-Mixed frequencies, a relative-bias
    table, a continuous-bias MLP, Time2Vec frequencies) places tokens rather than transforms
    their content, so weight decay would only pull positions towards each other.
    :meth:`no_weight_decay` names them all, timm's convention, which optimizer set-ups read
    through :func:`no_weight_decay_names`.
    """

    def no_weight_decay(self) -> set[str]:
        """Names (relative to this module) of the parameters to keep out of weight decay."""
        return {name for name, _ in self.named_parameters()}


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
