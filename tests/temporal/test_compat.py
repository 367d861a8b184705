"""What posenc.temporal._compat says about the installed pandas holds: CI runs this under
pandas 3 and, in .ci/oldest.sh, under pandas 2.2, so each statement is checked in both."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pandas as pd
import pytest
from pandas.tseries.frequencies import to_offset
from posenc.temporal import localize
from posenc.temporal._compat import (
    EXACT_MULTIPLES,
    LOCAL_TIME_ERRORS,
    PANDAS_3,
    TEXT_UNIT,
    to_datetime,
)


def test_pandas_3_is_the_installed_major_version():
    assert PANDAS_3 == (pd.__version__.split(".")[0] == "3")


def test_text_and_datetimes_parse_to_text_unit():
    assert pd.DatetimeIndex(["2021-03-04 05:06:07"]).unit == TEXT_UNIT
    assert pd.DatetimeIndex(np.array([dt.datetime(2021, 3, 4)], dtype=object)).unit == TEXT_UNIT
    # finer text keeps its digits in both
    assert pd.DatetimeIndex(["2021-03-04 05:06:07.123456789"]).unit == "ns"


@pytest.mark.parametrize("wall, option", [("2021-03-28 02:30", "nonexistent"),
                                          ("2021-10-31 02:30", "ambiguous")])
def test_local_time_errors_are_what_tz_localize_raises(wall, option):
    # Berlin skips 02:00-03:00 on 2021-03-28 and repeats it on 2021-10-31.
    with pytest.raises(LOCAL_TIME_ERRORS):
        pd.DatetimeIndex([wall]).tz_localize("Europe/Berlin")
    with pytest.raises(ValueError, match=f"cannot localize .*{option}="):
        localize(pd.DatetimeIndex([wall]), "Europe/Berlin")


def test_several_offsets_without_utc_raise_and_read_in_utc_with_it():
    text = ["2021-01-01 00:00+01:00", "2021-07-01 00:00+02:00"]
    with pytest.raises(ValueError):
        to_datetime(text)
    parsed = pd.DatetimeIndex(to_datetime(text, utc=True))
    expected = [pd.Timestamp("2020-12-31 23:00", tz="UTC"), pd.Timestamp("2021-06-30 22:00",
                                                                          tz="UTC")]
    assert list(parsed) == expected


def test_exact_multiples_is_whether_to_offset_keeps_a_whole_multiple_past_2_to_the_53():
    assert (to_offset("9007199254740993ns").n == 9007199254740993) == EXACT_MULTIPLES
