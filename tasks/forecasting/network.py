"""``ForecastTransformer``: a transformer over (value, timestamp) tokens and future query times.

Each observation is a token (its values and timestamp); each time to predict is a query token
carrying only its timestamp. Timestamps enter additively (features of each token's time summed
into its embedding: calendar, Fourier, elapsed-time sinusoids, time deltas, holidays, age) and
relatively (RoPE or ALiBi on elapsed time in ``time_unit`` inside
[`posenc.core.MultiheadAttention`][posenc.core.MultiheadAttention]). A query token attends to the
observations and itself only, so a forecast does not depend on which other times are asked.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

import torch
from posenc.core import FIRE, ALiBi, Kerple, MultiheadAttention, RotaryEncoding
from posenc.core._checks import check_choice, check_int, check_positive_int, known_finite
from posenc.core.attention import _as_additive
from posenc.core.encoding import wide_dtype
from posenc.temporal.calendar import FIELDS, month_positions
from torch import Tensor, nn
from torch.nn import functional as F

from posenc import temporal

from .metrics import seasonal_naive

__all__ = ["ForecastTransformer", "TimeFeatures", "TIME_ENCODINGS", "NORM_STATS",
           "RELATIVE_ENCODINGS", "READS", "encoding_dim", "encoding_reads", "window_statistics"]

NORM_STATS = ("standard", "robust", "last")  # see window_statistics
# neuralforecast's robust scaler: std * this where the MAD is 0 (a normal's MAD / std).
_MAD_PER_STD = 0.6744897501960817
_MAX_SEASON_NS = 2 ** 62

# What an additive encoding reads (its class's ``reads``): "fields" {name: (B, N) int} calendar
# fields of local time; "timestamps" (B, N) int64 local wall-clock ns; "elapsed" (B, N) float
# time from the forecast origin in ``time_unit``; "deltas" elapsed plus the (B, N) bool observed
# mask; "series_start" local ns plus the (B, 1) int64 local ns of the series' first observation.
READS = ("fields", "timestamps", "elapsed", "deltas", "series_start")

# name -> factory, called with what it takes of the model's sizes (dim, head_dim, num_heads).
TIME_ENCODINGS: dict[str, Any] = {
    "calendar": partial(temporal.CalendarFeatures, cyclic=True),
    "calendar_embedding": temporal.CalendarEmbedding,
    "fourier": temporal.FourierSeasonality,
    "continuous": partial(temporal.ContinuousSinusoidal, min_period=1.0, max_period=1000.0),
    "time2vec": temporal.Time2Vec,
    "timedelta": partial(temporal.TimeDelta, log=True),
    "index_sinusoidal": temporal.IndexSinusoidal,
    "age": partial(temporal.AgeFeature, unit="D", transform="gluonts"),
}
# Relative-time attention on real elapsed time: rotary (rope) or a bias of the time gap.
RELATIVE_ENCODINGS: dict[str, Any] = {
    "rope": RotaryEncoding, "alibi": partial(ALiBi, causal=False),
    "fire": partial(FIRE, causal=False), "kerple_log": partial(Kerple, kernel="log", causal=False),
    "kerple_power": partial(Kerple, kernel="power", causal=False)}


def encoding_reads(module: nn.Module, name: str = "encoding") -> str:
    """What an additive temporal encoding reads: its class's ``reads`` (one of `READS`),
    else ``TypeError`` naming the class."""
    reads = getattr(module, "reads", None)
    if reads not in READS:
        raise TypeError(f"{name} {type(module).__name__} does not declare what it reads: give "
                        f"the class a reads attribute, one of {list(READS)}, got {reads!r}")
    return reads


def encoding_dim(module: nn.Module, name: str = "encoding") -> int:
    """The width of an additive temporal encoding's output: the ``dim`` it declares, else
    ``TypeError`` naming the class (not measured: made-up times could trip its checks)."""
    dim = getattr(module, "dim", None)
    if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
        raise TypeError(f"{name} {type(module).__name__} does not declare its width: give it a "
                        f"dim attribute, the positive int size of its last output axis, got "
                        f"{dim!r}")
    return dim


class TimeFeatures(nn.Module):
    """Concatenated additive temporal features of every token, ``(B, N, F)``, ``F``
    (`width`) the sum of the encodings' declared ``dim``.

    Args:
        encodings: the temporal encoding modules.
        reads: per encoding, what it reads (one of `READS`).
    """

    def __init__(self, encodings: list[nn.Module], reads: list[str]) -> None:
        super().__init__()
        for i, value in enumerate(reads):
            check_choice(value, f"reads[{i}]", READS)
        self.encodings = nn.ModuleList(encodings)
        self.reads = list(reads)
        self.reads_fields = "fields" in self.reads
        self.reads_start = "series_start" in self.reads
        self.width = sum(encoding_dim(e, f"encodings[{i}]") for i, e in enumerate(encodings))

    def forward(self, fields: Tensor | None, local: Tensor, elapsed: Tensor,
                observed: Tensor, series_start: Tensor | None = None) -> Tensor:
        """``fields`` ``(B, N, len(FIELDS))`` int calendar fields of the local time (or None),
        ``local`` ``(B, N)`` int64 wall-clock ns, ``elapsed`` ``(B, N)`` float in
        ``time_unit``, ``observed`` ``(B, N)`` bool, ``series_start`` ``(B, 1)`` int64
        wall-clock ns (or None) -> ``(B, N, F)`` float32."""
        columns = None
        features = []
        for encoding, read in zip(self.encodings, self.reads, strict=True):
            if read == "fields":
                if columns is None:
                    columns = dict(zip(FIELDS, fields.unbind(-1), strict=True))
                out = encoding(columns)
            elif read == "timestamps":
                out = encoding(local)
            elif read == "elapsed":
                out = encoding(elapsed)
            elif read == "series_start":
                out = encoding(local, series_start)
            else:
                out = encoding(elapsed, observed)
            features.append(out.to(device=elapsed.device, dtype=torch.float32))
        return torch.cat(features, dim=-1)


def window_statistics(context: Tensor, observed: Tensor, stats: str = "standard"
                      ) -> tuple[Tensor, Tensor]:
    """Each window's level and spread over its observed context values, per channel.

    ``"standard"`` (RevIN): the mean and ``sqrt(variance + 1e-5)``. ``"robust"``
    (neuralforecast's ``robust`` scaler): the lower median and ``sqrt(mad^2 + 1e-5)``, the MAD
    replaced by ``0.6745`` standard deviations where it is 0. ``"last"`` (NLinear's anchor):
    the last observed value and the standard spread, so the network forecasts the change from
    it and an output of 0 is persistence.

    Args:
        context: ``(B, Nc, C)`` float values (anything where unobserved).
        observed: ``(B, Nc, C)`` bool, True where a value is present (False on padding).
        stats: one of `NORM_STATS`.

    Returns:
        ``(loc, scale)``, each ``(B, 1, C)`` in ``context``'s dtype; a channel never observed
        in the window gets ``loc = 0`` and ``scale = sqrt(1e-5)``.
    """
    weight = observed.to(context.dtype)
    count = weight.sum(1, keepdim=True).clamp_min(1)
    mean = (context * weight).sum(1, keepdim=True) / count
    var = ((context - mean).square() * weight).sum(1, keepdim=True) / count
    if stats == "standard":
        return mean, (var + 1e-5).sqrt()
    if stats == "last":
        positions = torch.arange(context.shape[1], device=context.device)[None, :, None]
        index = torch.where(observed, positions, -1).amax(1, keepdim=True)        # (B, 1, C)
        last = context.gather(1, index.clamp_min(0))
        return last.where(index >= 0, torch.zeros_like(last)), (var + 1e-5).sqrt()
    missing = torch.full_like(context, float("nan"))
    median = context.where(observed, missing).nanmedian(1, keepdim=True).values.nan_to_num(0.0)
    mad = (context - median).abs().where(observed, missing).nanmedian(1, keepdim=True) \
        .values.nan_to_num(0.0)
    mad = mad.where(mad > 0, var.sqrt() * _MAD_PER_STD)
    return median, (mad.square() + 1e-5).sqrt()


def latest_tokens(tokens: Tensor, valid: Tensor, count: int) -> Tensor:
    """``(B, N, D)`` tokens, ``(B, N)`` bool ``valid`` -> ``(B, count * D)``: each window's
    ``count`` latest valid tokens in time order, ending at its last valid one (zeros for those
    before the first; valid tokens are contiguous)."""
    b, n, d = tokens.shape
    positions = torch.arange(n, device=tokens.device)
    last = torch.where(valid, positions, 0).amax(1, keepdim=True)               # (B, 1)
    index = last - torch.arange(count - 1, -1, -1, device=tokens.device)          # (B, count)
    present = (index >= 0) & valid.gather(1, index.clamp_min(0))
    gathered = tokens.gather(1, index.clamp_min(0)[..., None].expand(-1, -1, d))
    return (gathered * present[..., None]).flatten(1)


class Block(nn.Module):
    """Pre-norm transformer block around the core attention."""

    def __init__(self, dim: int, num_heads: int, mlp_ratio: float, dropout: float,
                 rotary: nn.Module | None, bias: nn.Module | None) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = MultiheadAttention(dim, num_heads, rotary=rotary, bias=bias, proj_drop=dropout)
        self.norm2 = nn.LayerNorm(dim)
        hidden = int(dim * mlp_ratio)
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Dropout(dropout),
                                 nn.Linear(hidden, dim), nn.Dropout(dropout))

    def forward(self, x: Tensor, positions: Tensor | None, mask: Tensor) -> Tensor:
        x = x + self.attn(self.norm1(x), query_positions=positions, attn_mask=mask)
        return x + self.mlp(self.norm2(x))


class ForecastTransformer(nn.Module):
    """The forecasting network; see the module docstring.

    Args:
        num_targets: target channels ``C``.
        num_outputs: outputs per channel (1 for a point forecast, ``Q`` for quantiles).
        dim: token width.
        depth: transformer blocks.
        num_heads: attention heads.
        mlp_ratio: MLP hidden width / ``dim``.
        dropout: dropout probability.
        time_features: the additive encodings (may hold none).
        relative: called once per block (as it is built, so a forged ``depth`` meets the
            blocks' allocations first): its ``(rotary, bias)`` modules (each may be None).
        unit_seconds: seconds per unit of elapsed time; unused with ``unit_months``.
        instance_norm: standardize each window by its context and undo it at the output
            (RevIN, Kim et al. 2022).
        num_past: past covariates ``P`` (``context_past``, with their observed flags part of
            each context token's input).
        num_future: future covariates ``K``: one linear map of ``*_future`` added to every
            context and query token.
        static_cardinalities: codes per categorical static column (``static_cat``): one
            embedding each, summed into every token.
        num_static_real: numeric static columns (``static_real``): one linear map, summed
            into every token.
        unit_months: when > 0, elapsed time is in local calendar months divided by this (1:
            months, 3: quarters, 12: years;
            [`month_positions`][posenc.temporal.calendar.month_positions]).
        nonnegative: forecasts never below zero in data units: the scaled output ``y`` becomes
            ``z + softplus(y - z)``, ``z = -loc / scale`` the scaled zero (a clamp would have
            no gradient below zero).
        instance_norm_stats: with ``instance_norm``,
            [`window_statistics`][posenc.tasks.forecasting.network.window_statistics]' ``stats``.
        lag_seasons: seasons in ns (``L`` of them, each in (0, 2**62]), or None: each query
            token gets one linear map of
            [`lag_inputs`][posenc.tasks.ForecastTransformer.lag_inputs]. Built after every other
            parameter, so a seed initialises the others as without lags.
        patch_size: context observations per token (``P``; 1: one each). With ``P > 1``
            (PatchTST, Nie et al. 2023) every ``P`` embedded observations, counted back from
            the forecast origin, become one token by a linear map of their concatenation (the
            earliest patch zero-filled), at its latest observation's elapsed time. Built last.
        patch_stride: observations between consecutive patches' ends (``S``, ``1 <= S <= P``),
            None for ``P``: ``S < P`` overlaps patches (PatchTST's ``P = 16, S = 8``).
        origin_tokens: ``K``: each query token also gets a linear map of the context's
            latest ``K`` tokens (or patches; before the blocks, zeros before the first), a direct
            path from the latest values to every forecast; 0: none. Built after the lags' map.
    """

    def __init__(self, num_targets: int, num_outputs: int, dim: int, depth: int,
                 num_heads: int, mlp_ratio: float, dropout: float, time_features: TimeFeatures,
                 relative: Callable[[], tuple[nn.Module | None, nn.Module | None]],
                 unit_seconds: float, instance_norm: bool = True, num_past: int = 0,
                 num_future: int = 0, static_cardinalities: list[int] | None = None,
                 num_static_real: int = 0, unit_months: int = 0,
                 nonnegative: bool = False, instance_norm_stats: str = "standard",
                 lag_seasons: list[int] | None = None, patch_size: int = 1,
                 patch_stride: int | None = None, origin_tokens: int = 0) -> None:
        super().__init__()
        self.num_past, self.num_future, self.num_static_real = num_past, num_future, num_static_real
        self.static_cardinalities = list(static_cardinalities or [])
        self.future_proj = nn.Linear(num_future, dim) if num_future else None
        self.static_embeds = nn.ModuleList(nn.Embedding(n, dim) for n in self.static_cardinalities)
        self.static_proj = nn.Linear(num_static_real, dim) if num_static_real else None
        self.instance_norm = instance_norm
        self.num_targets, self.num_outputs = num_targets, num_outputs
        self.unit_seconds, self.unit_months = unit_seconds, unit_months
        self.nonnegative = nonnegative
        self.value_embed = nn.Linear(2 * (num_targets + num_past), dim)
        self.query_token = nn.Parameter(torch.zeros(dim))
        nn.init.trunc_normal_(self.query_token, std=0.02)
        self.time_features = time_features
        self.time_proj = nn.Linear(time_features.width, dim) if time_features.width else None
        self.blocks, self.use_positions = nn.ModuleList(), False
        for _ in range(depth):
            rotary, bias = relative()
            self.blocks.append(Block(dim, num_heads, mlp_ratio, dropout, rotary, bias))
            self.use_positions |= rotary is not None or bias is not None
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_targets * num_outputs)
        check_choice(instance_norm_stats, "instance_norm_stats", NORM_STATS)
        if instance_norm_stats != "standard" and not instance_norm:
            raise ValueError(f"instance_norm_stats={instance_norm_stats!r} needs "
                             f"instance_norm=True")
        self.instance_norm_stats = instance_norm_stats
        if lag_seasons is not None and not isinstance(lag_seasons, (list, tuple)):
            raise TypeError(f"lag_seasons must be a list of seasons in ns or None, got "
                            f"{type(lag_seasons).__name__} ({lag_seasons!r})")
        self.lag_seasons = [check_positive_int(season, f"lag_seasons[{i}]")
                            for i, season in enumerate(lag_seasons or [])]
        for i, season in enumerate(self.lag_seasons):
            if season > _MAX_SEASON_NS:
                raise ValueError(f"lag_seasons[{i}] must be at most 2**62 ns, got {season}")
        if len(set(self.lag_seasons)) != len(self.lag_seasons):
            raise ValueError(f"lag_seasons={self.lag_seasons} repeats a season")
        # Last, so that the parameters above are initialised as without lags.
        self.lag_proj = nn.Linear(2 * len(self.lag_seasons) * num_targets, dim) \
            if self.lag_seasons else None
        self.patch_size = check_positive_int(patch_size, "patch_size")
        self.patch_stride = patch_size if patch_stride is None else check_positive_int(
            patch_stride, "patch_stride")
        if self.patch_stride > patch_size:
            raise ValueError(f"patch_stride={patch_stride} must be at most patch_size="
                             f"{patch_size} (a longer stride would skip observations)")
        self.origin_tokens = check_int(origin_tokens, "origin_tokens", ge=0)
        self.origin_proj = nn.Linear(origin_tokens * dim, dim) if origin_tokens else None
        self.patch_embed = nn.Linear(patch_size * dim, dim) if patch_size > 1 else None

    def _static(self, batch: Mapping[str, Tensor]) -> Tensor | None:
        """``(B, dim)`` sum of the window's static embeddings, or None without any."""
        terms = [embed(batch["static_cat"][:, j]) for j, embed in enumerate(self.static_embeds)]
        if self.static_proj is not None:
            terms.append(self.static_proj(batch["static_real"].float()))
        return sum(terms[1:], terms[0]) if terms else None

    def input_keys(self) -> list[str]:
        """The batch keys [`forward`][posenc.tasks.ForecastTransformer.forward] reads (it ignores
        any others), in a fixed order."""
        keys = ["context_time", "target_time", "context_local", "target_local",
                "context_valid", "target_valid", "context_value", "context_observed"]
        keys += ["context_fields", "target_fields"] if self.time_features.reads_fields else []
        keys += ["series_start_local"] if self.time_features.reads_start else []
        keys += ["context_past", "context_past_observed"] if self.num_past else []
        keys += ["context_future", "target_future"] if self.num_future else []
        keys += ["static_cat"] if self.static_embeds else []
        keys += ["static_real"] if self.num_static_real else []
        keys += ["loc", "scale"] if self.nonnegative else []
        return keys

    def _check_batch(self, batch: Mapping[str, Tensor]) -> None:
        """Keys, dtypes and shapes only: nothing here reads values."""
        if not isinstance(batch, Mapping):
            raise TypeError(f"batch must be a dict of tensors (a data module's batch, make_batch), "
                            f"got {type(batch).__name__}")
        keys = self.input_keys()
        missing = [key for key in keys if key not in batch]
        if missing:
            raise ValueError(f"batch has no {missing}; make batches with a "
                             f"TimeSeriesDataModule, Forecaster.forecast or make_batch (they "
                             f"add the calendar fields of the local times as *_fields, and "
                             f"the covariates and static attributes the model was built for)")
        sizes = {"context_past": self.num_past, "context_future": self.num_future,
                 "target_future": self.num_future, "static_real": self.num_static_real,
                 "static_cat": len(self.static_embeds)}
        for key, size in sizes.items():
            if key in keys and batch[key].shape[-1] != size:
                raise ValueError(f"batch[{key!r}] has {batch[key].shape[-1]} columns but the "
                                 f"model was built for {size}")
        start, size = batch.get("series_start_local"), tuple(batch["context_valid"].shape[:1])
        if "series_start_local" in keys and (start.dtype != torch.int64 or start.shape != size):
            raise ValueError(f"batch['series_start_local'] must be the {size} int64 wall-clock ns "
                             f"of each window's series' first observation, got {start.dtype} of "
                             f"shape {tuple(start.shape)}")
        for side in ("context", "target"):
            valid = batch[f"{side}_valid"]
            for key in (f"{side}_time", f"{side}_local"):
                if batch[key].dtype != torch.int64:
                    raise TypeError(f"batch[{key!r}] must be int64 nanoseconds, got "
                                    f"{batch[key].dtype}")
            key = f"{side}_fields"
            if key in keys:
                fields = batch[key]
                if fields.is_floating_point() or fields.dtype == torch.bool \
                        or fields.shape != (*valid.shape, len(FIELDS)):
                    raise ValueError(
                        f"batch[{key!r}] must be the {(*valid.shape, len(FIELDS))} "
                        f"int calendar fields of batch['{side}_local'] (local_time_fields), "
                        f"got {fields.dtype} of shape {tuple(fields.shape)}")

    def elapsed(self, batch: Mapping[str, Tensor]) -> Tensor:
        """``(B, Nc + Nh)`` float64 (float32 on MPS) time of every token from the forecast
        origin (the last real observation) in ``unit_seconds`` or months / ``unit_months``."""
        last = batch["context_valid"].sum(1, keepdim=True).clamp_min(1) - 1
        dtype = wide_dtype(batch["context_time"].device)
        if self.unit_months:
            local = torch.cat((batch["context_local"], batch["target_local"]), dim=1)
            months, fraction = month_positions(local, dtype)
            origin_months, origin_fraction = month_positions(
                batch["context_local"].gather(1, last), dtype)
            # Whole months subtracted as integers keep the fractions' precision.
            return ((months - origin_months).to(dtype) + (fraction - origin_fraction)) \
                / self.unit_months
        time = torch.cat((batch["context_time"], batch["target_time"]), dim=1)
        # Exact int64 differences before the one float conversion: sub-second over years.
        return (time - batch["context_time"].gather(1, last)).to(dtype) / (self.unit_seconds * 1e9)

    def lag_inputs(self, batch: Mapping[str, Tensor], context: Tensor) -> Tensor:
        """``(B, Nh, 2 * L * C)`` inputs of the query tokens for ``lag_seasons``: per season
        the ``C`` [`seasonal_naive`][posenc.tasks.forecasting.metrics.seasonal_naive] values of
        ``context`` at the query times (0 where none), then the ``C`` flags (1.0: a value).

        Args:
            batch: the batch (its context/target times, local times, validity, observed).
            context: ``(B, Nc, C)`` float context values as they enter the network
                (instance-normalised with ``instance_norm``).
        """
        parts = []
        for season in self.lag_seasons:
            naive = seasonal_naive(batch["context_time"], context, batch["context_observed"],
                                   batch["context_valid"], batch["target_time"], season,
                                   context_local=batch["context_local"],
                                   target_local=batch["target_local"])
            present = ~naive.isnan()
            parts += [naive.nan_to_num(0.0), present.to(context.dtype)]
        return torch.cat(parts, dim=-1)

    def patches(self, tokens: Tensor, elapsed: Tensor, valid: Tensor
                ) -> tuple[Tensor, Tensor, Tensor]:
        """Group the context's token embeddings into patches of ``P = patch_size``, one every
        ``S = patch_stride`` tokens counted back from each window's last real token.

        Args:
            tokens: ``(B, Nc, D)`` context token embeddings.
            elapsed: ``(B, Nc)`` their elapsed times.
            valid: ``(B, Nc)`` bool, False on padding (padding only at the end).

        Returns:
            ``(B, Np, P * D)`` the patches' embeddings in time order (zeros before the first
            token), ``(B, Np)`` each patch's latest elapsed time, ``(B, Np)`` bool valid
            patches; ``Np = 1 + ceil(max(Nc - P, 0) / S)`` (``ceil(Nc / P)`` side by side), the
            last patch ending at the origin.
        """
        b, nc, d = tokens.shape
        p, stride = self.patch_size, self.patch_stride
        num = 1 + -(-max(nc - p, 0) // stride)
        # Slot s of patch j is (Np - 1 - j) * S + P - 1 - s tokens before the last real one.
        back = (torch.arange(num - 1, -1, -1, device=tokens.device)[:, None] * stride
                + torch.arange(p - 1, -1, -1, device=tokens.device)).flatten()
        index = valid.sum(1, keepdim=True) - 1 - back                     # (B, Np * P)
        present = index >= 0
        index = index.clamp_min(0)
        gathered = tokens.gather(1, index[..., None].expand(-1, -1, d)) * present[..., None]
        last = index.view(b, num, p)[..., -1]
        return (gathered.reshape(b, num, p * d), elapsed.gather(1, last),
                present.view(b, num, p)[..., -1])

    def forward(self, batch: Mapping[str, Tensor]) -> Tensor:
        """Batch dict (see [`posenc.tasks.forecasting.windows`][posenc.tasks.forecasting.windows])
        -> ``(B, Nh, C, outputs)`` predictions in scaled units; nothing reads values on the host."""
        self._check_batch(batch)
        ctx_valid, tgt_valid = batch["context_valid"], batch["target_valid"]
        num_ctx = ctx_valid.shape[1]
        local = torch.cat((batch["context_local"], batch["target_local"]), dim=1)
        fields = (torch.cat((batch["context_fields"], batch["target_fields"]), dim=1)
                  if self.time_features.reads_fields else None)
        valid = torch.cat((ctx_valid, tgt_valid), dim=1)
        # From int64 timestamps: finite by construction, so no encoding's check reads it.
        elapsed = known_finite(self.elapsed(batch))

        observed = batch["context_observed"]
        context = batch["context_value"].float()
        if self.instance_norm:
            window_loc, window_scale = window_statistics(context, observed,
                                                         self.instance_norm_stats)
            context = (context - window_loc) / window_scale
        parts = [context * observed, observed.float()]
        if self.num_past:
            past_observed = batch["context_past_observed"]
            parts += [batch["context_past"].float() * past_observed, past_observed.float()]
        ctx_tokens = self.value_embed(torch.cat(parts, dim=-1))
        tgt_tokens = self.query_token.expand(tgt_valid.shape[0], tgt_valid.shape[1], -1)
        if self.lag_proj is not None:
            tgt_tokens = tgt_tokens + self.lag_proj(self.lag_inputs(batch, context))
        x = torch.cat((ctx_tokens, tgt_tokens.to(ctx_tokens.dtype)), dim=1)
        if self.future_proj is not None:
            future = torch.cat((batch["context_future"], batch["target_future"]), dim=1)
            x = x + self.future_proj(future.float())
        static = self._static(batch)
        if static is not None:
            x = x + static[:, None]
        if self.time_proj is not None:
            has_value = torch.cat((ctx_valid & observed.any(-1), torch.zeros_like(tgt_valid)),
                                  dim=1)
            start = batch["series_start_local"][:, None] if self.time_features.reads_start else None
            features = self.time_features(fields, local, elapsed, has_value, start)
            x = x + self.time_proj(features)

        if self.patch_embed is not None:
            patches, patch_elapsed, ctx_valid = self.patches(
                x[:, :num_ctx], elapsed[:, :num_ctx], ctx_valid)
            x = torch.cat((self.patch_embed(patches), x[:, num_ctx:]), dim=1)
            elapsed = known_finite(torch.cat((patch_elapsed, elapsed[:, num_ctx:]), dim=1))
            num_ctx = ctx_valid.shape[1]
            valid = torch.cat((ctx_valid, tgt_valid), dim=1)
        if self.origin_proj is not None:
            latest = latest_tokens(x[:, :num_ctx], ctx_valid, self.origin_tokens)
            x = torch.cat((x[:, :num_ctx], x[:, num_ctx:] + self.origin_proj(latest)[:, None]),
                          dim=1)
        # Keys: real observations; every token also sees itself (no empty rows).
        total = valid.shape[1]
        key_ok = torch.zeros_like(valid)
        key_ok[:, :num_ctx] = ctx_valid
        eye = torch.eye(total, dtype=torch.bool, device=valid.device)
        # Additive once for all blocks: a bool mask is made additive by each attention call
        # (a (B, 1, N, N) fill per block, up to 9% of a training step's CPU time).
        mask = _as_additive((key_ok[:, None, :] | eye)[:, None], x.dtype)
        positions = elapsed if self.use_positions else None
        for block in self.blocks:
            x = block(x, positions, mask)
        out = self.head(self.norm(x[:, num_ctx:]))
        out = out.unflatten(-1, (self.num_targets, self.num_outputs))
        if self.instance_norm:
            out = out * window_scale[..., None] + window_loc[..., None]
        if self.nonnegative:
            zero = (-batch["loc"].float() / batch["scale"].float())[:, None, :, None]
            out = zero + F.softplus(out - zero)
        return out
