"""The shared argument checks of posenc.core.validation: what they accept, what they return,
and that their errors name the argument and the value."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from posenc.core import check_positive_float, wide_dtype


@pytest.mark.parametrize("value, expected", [
    (1, 1.0),
    (2.5, 2.5),
    (1e-300, 1e-300),
    (np.float32(0.5), 0.5),
    (np.int64(7), 7.0),
    (10**20, 1e20),
])
def test_check_positive_float_returns_a_python_float(value, expected):
    result = check_positive_float(value, "scale")
    assert type(result) is float and result == expected


@pytest.mark.parametrize("value", [0, 0.0, -0.0, -1, -1e-9, math.nan, math.inf, -math.inf,
                                   np.float64("nan"), 10**400])
def test_check_positive_float_rejects_non_positive_and_non_finite_values(value):
    with pytest.raises(ValueError, match=r"^period must be a positive number \(finite, > 0\), "
                                         r"got " + repr(value)[:8]):
        check_positive_float(value, "period")


@pytest.mark.parametrize("value, type_name", [
    (True, "bool"),
    (np.bool_(True), "bool"),
    ("1.0", "str"),
    (None, "NoneType"),
    (1 + 0j, "complex"),
    (torch.tensor(1.0), "Tensor"),
])
def test_check_positive_float_rejects_non_numbers_with_type_error(value, type_name):
    with pytest.raises(TypeError, match=f"^min_period must be a number, got {type_name}"):
        check_positive_float(value, "min_period")


def test_wide_dtype_is_float64_except_on_mps():
    assert wide_dtype(torch.device("cpu")) is torch.float64
    assert wide_dtype(torch.device("mps")) is torch.float32
