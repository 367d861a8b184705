"""Independent references for tests/spatial, written from the papers' formulas."""

from __future__ import annotations

import math

import numpy as np
import torch


def mae_sincos_2d(embed_dim: int, rows: int, cols: int) -> np.ndarray:
    """MAE's get_2d_sincos_pos_embed (numpy, float64): first half of the channels encodes the
    column (its grid[0] is the w coordinate), second half the row; each half is
    [sin(p w_i)..., cos(p w_i)...] with w_i = 1 / 10000 ** (i / (embed_dim / 4))."""
    quarter = embed_dim // 4
    omega = 1.0 / 10000 ** (np.arange(quarter, dtype=np.float64) / quarter)
    r, c = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    r, c = r.reshape(-1), c.reshape(-1)

    def one_axis(p):
        out = np.outer(p, omega)
        return np.concatenate([np.sin(out), np.cos(out)], axis=1)

    return np.concatenate([one_axis(c), one_axis(r)], axis=1)


def ropevit_mixed_init(dim: int, num_heads: int, theta: float = 10.0) -> torch.Tensor:
    """RoPE-ViT's init_random_2d_freqs as written in the paper's code: for each head, one
    torch.rand(1) angle a; fx = mag*[cos a, cos(a + pi/2)], fy = mag*[sin a, sin(a + pi/2)],
    mag_i = 1 / theta ** (4i / dim). Returns the paper's (2, H, dim/2) = (fx, fy)."""
    mag = 1 / (theta ** (torch.arange(0, dim, 4)[: dim // 4].float() / dim))
    fx, fy = [], []
    for _ in range(num_heads):
        a = torch.rand(1) * 2 * torch.pi
        fx.append(torch.cat([mag * torch.cos(a), mag * torch.cos(torch.pi / 2 + a)]))
        fy.append(torch.cat([mag * torch.sin(a), mag * torch.sin(torch.pi / 2 + a)]))
    return torch.stack([torch.stack(fx), torch.stack(fy)])


def rotate_pairs_half(x: torch.Tensor, theta: torch.Tensor) -> torch.Tensor:
    """Rotate pair (i, i + D/2) of x (..., D) by theta (..., D/2), textbook rotate_half form."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    cos, sin = theta.cos(), theta.sin()
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def rotate_pairs_interleaved(x: torch.Tensor, theta: torch.Tensor) -> torch.Tensor:
    """Rotate pair (2i, 2i+1) of x by theta as a complex multiply (RoPE-ViT's form)."""
    xc = torch.view_as_complex(x.double().reshape(*x.shape[:-1], -1, 2).contiguous())
    return torch.view_as_real(xc * torch.polar(torch.ones_like(theta.double()),
                                               theta.double())).flatten(-2)


def dinov3_angles(rows: int, cols: int, head_dim: int, base: float = 100.0) -> torch.Tensor:
    """DINOv3 RopePositionEmbedding angles (normalize_coords="separate", no augmentation):
    coords = 2 * (i + 0.5) / n - 1 per axis, periods = base ** (2j / (D / 2)) for j < D/4,
    angles = 2 pi coords / periods, laid out [rows..., cols...] -> (rows*cols, D/2)."""
    ch = torch.arange(0.5, rows, dtype=torch.float64) / rows
    cw = torch.arange(0.5, cols, dtype=torch.float64) / cols
    coords = torch.stack(torch.meshgrid(ch, cw, indexing="ij"), dim=-1).flatten(0, 1)
    coords = 2.0 * coords - 1.0
    periods = base ** (2 * torch.arange(head_dim // 4, dtype=torch.float64) / (head_dim // 2))
    angles = 2 * math.pi * coords[:, :, None] / periods[None, None, :]
    return angles.flatten(1, 2)
