"""CalendarEmbedding: summed per-field tables, learned or Informer's fixed sinusoids."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from posenc.temporal import CalendarEmbedding, calendar_fields
from temporal_refs import informer_fixed_table


def test_learned_is_the_sum_of_table_rows():
    enc = CalendarEmbedding(8, fields=["month", "day_of_week", "hour"])
    fields = calendar_fields(pd.date_range("2021-01-01", periods=40, freq="11h"))
    expected = sum(enc.tables[n].weight[torch.from_numpy(fields[n]).long()]
                   for n in ["month", "day_of_week", "hour"])
    torch.testing.assert_close(enc(fields), expected, rtol=0, atol=0)
    assert {n: t.num_embeddings for n, t in enc.tables.items()} == {
        "month": 13, "day_of_week": 7, "hour": 24}  # raw values index rows, as in Informer
    enc(fields).sum().backward()
    assert all(t.weight.grad is not None for t in enc.tables.values())


def test_fixed_equals_informer_and_is_frozen():
    enc = CalendarEmbedding(16, fields=["month", "day_of_month"], embed_type="fixed")
    for name, rows in [("month", 13), ("day_of_month", 32)]:
        np.testing.assert_allclose(enc.tables[name].weight.numpy(),
                                   informer_fixed_table(rows, 16), rtol=0, atol=1e-6)
        assert not enc.tables[name].weight.requires_grad
    # Month 3, day 15: Informer's sum of row 3 and row 15.
    out = enc({"month": np.array([3]), "day_of_month": np.array([15])})
    table = informer_fixed_table(32, 16)
    np.testing.assert_allclose(out[0].numpy(), table[3] + table[15], atol=1e-6)


def test_batched_tensor_fields_and_device_dtype_follow_the_tables():
    enc = CalendarEmbedding(4).to(torch.float64)
    fields = calendar_fields(pd.date_range("2021-01-01", periods=6, freq="D"),
                             fields=enc.fields)
    batched = {k: torch.from_numpy(v).reshape(2, 3) for k, v in fields.items()}
    out = enc(batched)
    assert out.shape == (2, 3, 4) and out.dtype == torch.float64
    torch.testing.assert_close(out.reshape(6, 4), enc(fields))


def test_errors():
    with pytest.raises(ValueError, match="embed_type must be one of"):
        CalendarEmbedding(8, embed_type="sinusoidal")
    with pytest.raises(ValueError, match="dim must be even"):
        CalendarEmbedding(7, embed_type="fixed")
    enc = CalendarEmbedding(8, fields=["hour"])
    with pytest.raises(ValueError, match=r"fields\['hour'\] must lie in \[0, 23\]"):
        enc({"hour": np.array([24])})
