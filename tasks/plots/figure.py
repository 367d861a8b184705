"""Plumbing shared by the plot modules: a matplotlib figure on an Agg canvas (no pyplot, no
global backend change), PNG output at the figure's dpi, titles naming the encoding, and the
cosine-similarity matrix that both the 1D and the 2D similarity plots show.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from posenc.core.encoding import check_positive_int
from torch import Tensor, nn

__all__ = ["new_figure", "require_matplotlib", "save_png", "describe", "cosine_matrix"]


def require_matplotlib() -> None:
    """Raise an ImportError naming the ``plot`` extra if matplotlib is missing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as err:
        raise ImportError("posenc plots need matplotlib, which the 'plot' extra installs: "
                          "pip install 'posenc[plot]'") from err


def new_figure(figsize: tuple[float, float], dpi: int) -> Any:
    """A constrained-layout matplotlib ``Figure`` on an Agg canvas (imported lazily)."""
    require_matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    check_positive_int(dpi, "dpi")
    fig = Figure(figsize=figsize, dpi=dpi, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def save_png(fig: Any, path: str | Path) -> Path:
    """Write ``fig`` to ``path`` (a PNG of ``figsize * dpi`` pixels), creating its folder."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.canvas.print_png(path)  # one draw at the figure's dpi (savefig lays out twice)
    return path


def describe(module: nn.Module) -> str:
    """``ClassName(extra_repr)``: the default title of a plot of ``module``."""
    return f"{type(module).__name__}({module.extra_repr()})"


def cosine_matrix(enc: Tensor) -> np.ndarray:
    """``(N, dim)`` -> ``(N, N)`` cosine similarities (float64 numpy)."""
    unit = torch.nn.functional.normalize(enc.detach().double(), dim=-1)
    return (unit @ unit.T).cpu().numpy()
