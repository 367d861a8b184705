"""The shared argument checks (posenc.core._checks): what they accept, what they return,
and that their errors name the argument and the value."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from posenc.core._checks import check_int, check_positive_float
from posenc.core.encoding import wide_dtype


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


def test_check_finite_names_the_argument_and_passes_finite_tensors_through():
    from posenc.core._checks import check_finite
    ok = torch.tensor([0.0, 1e300], dtype=torch.float64)
    assert check_finite(ok, "times") is ok
    assert check_finite(torch.tensor([2**62]), "times") is not None  # integers are finite
    for bad in (math.nan, math.inf, -math.inf):
        with pytest.raises(ValueError, match=r"^times must be finite, got NaN or inf values"):
            check_finite(torch.tensor([0.0, bad]), "times")


def test_check_finite_is_skipped_inside_a_fullgraph_compile():
    """The documented contract: compiled blocks do not validate (no graph break); the model's
    edge calls check_finite eagerly."""
    from posenc.core._checks import check_finite

    def double(t):
        return check_finite(t, "times") * 2

    compiled = torch.compile(double, backend="eager", fullgraph=True)
    out = compiled(torch.tensor([1.0, math.nan]))
    assert out[0] == 2 and math.isnan(out[1])


@pytest.mark.parametrize("value, kwargs, match", [
    (1.0, dict(gt=1), r"^base must be a finite number > 1, got 1.0"),
    (0.5, dict(ge=1), r"^base must be a finite number >= 1, got 0.5"),
    (math.inf, dict(), r"^base must be a finite number, got inf"),
    (math.nan, dict(gt=0), r"^base must be a finite number > 0, got nan"),
])
def test_check_float_states_the_bound(value, kwargs, match):
    from posenc.core._checks import check_float
    with pytest.raises(ValueError, match=match):
        check_float(value, "base", **kwargs)


def test_check_float_returns_a_python_float_and_refuses_bools():
    from posenc.core._checks import check_float
    assert check_float(np.int64(3), "factor", ge=1) == 3.0
    with pytest.raises(TypeError, match=r"^factor must be a number, got bool"):
        check_float(True, "factor", ge=1)


@pytest.mark.parametrize("value", ["False", 1, None, np.bool_(True)])
def test_check_bool_refuses_everything_but_bool(value):
    from posenc.core._checks import check_bool
    with pytest.raises(TypeError, match=r"^causal must be a bool \(True or False\), got "):
        check_bool(value, "causal")
    assert check_bool(False, "causal") is False


@pytest.mark.parametrize("value, error, match", [
    (-1, ValueError, r"^workers must be >= 0, got -1$"),
    (True, TypeError, r"^workers must be an int, got bool \(True\)$"),
    (2.0, TypeError, r"^workers must be an int, got float \(2.0\)$"),
])
def test_check_int_names_the_argument_and_the_bound(value, error, match):
    with pytest.raises(error, match=match):
        check_int(value, "workers", ge=0)


def test_check_int_returns_values_within_bounds():
    assert check_int(0, "workers", ge=0) == 0
    assert check_int(-5, "offset") == -5
    assert check_int(2**63 - 1, "offset") == 2**63 - 1 and check_int(-2**63, "offset") == -2**63


@pytest.mark.parametrize("value", [2**63, 2**70, -2**63 - 1])
def test_check_int_refuses_integers_beyond_int64_naming_the_argument(value):
    # Every checked int becomes a torch or numpy size or index: beyond int64 torch raises an
    # OverflowError that names nothing.
    with pytest.raises(ValueError, match=rf"^offset must fit in int64 .*got {value}$"):
        check_int(value, "offset")


def test_a_size_beyond_int64_is_a_value_error_naming_the_argument():
    from posenc.core import RotaryEncoding

    with pytest.raises(ValueError, match="^head_dim must fit in int64"):
        RotaryEncoding(head_dim=2**64)


@pytest.mark.parametrize("value", [np.int64(3), np.int32(3), np.uint8(3)])
def test_check_int_takes_numpy_integers_as_python_ints(value):
    """One int check for the library: sizes read from numpy (FourierSeasonality's harmonics,
    a plot's origin) pass as the same Python int; numpy bools and floats stay refused."""
    result = check_int(value, "harmonics", ge=1)
    assert type(result) is int and result == 3
    for bad, type_name in ((np.bool_(True), "bool"), (np.float64(3.0), "float64")):
        with pytest.raises(TypeError, match=rf"^harmonics must be an int, got {type_name}"):
            check_int(bad, "harmonics")


@pytest.mark.parametrize("value, choices, type_name", [
    (["axial"], ("axial", "mixed"), "list"),
    (1, (None, "unit"), "int"),
    (None, ("half", "interleaved"), "NoneType"),
    (True, ("half", "interleaved"), "bool"),
    (True, (1, 2), "bool"),
])
def test_check_choice_refuses_a_value_of_another_type_with_type_error(value, choices, type_name):
    from posenc.core._checks import check_choice

    with pytest.raises(TypeError, match=rf"^layout must be one of .*, got {type_name} "):
        check_choice(value, "layout", choices)


def test_check_choice_refuses_an_unknown_value_with_value_error_and_accepts_listed_ones():
    from posenc.core._checks import check_choice

    with pytest.raises(ValueError, match=r"^layout must be one of \['half', 'interleaved'\], "
                                         r"got 'concat'$"):
        check_choice("concat", "layout", ("half", "interleaved"))
    assert check_choice(None, "normalize", (None, "unit")) is None
    assert check_choice(np.str_("unit"), "normalize", (None, "unit")) == "unit"
