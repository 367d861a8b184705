"""Frequency strings have one home, posenc.temporal.frequencies (the old path re-exports)."""

from __future__ import annotations

import pytest
from posenc import temporal
from posenc.temporal import cyclic, frequencies


def test_frequency_fields_lives_in_frequencies_and_the_old_paths_reexport_it():
    assert cyclic.frequency_fields is frequencies.frequency_fields
    assert temporal.frequency_fields is frequencies.frequency_fields
    assert frequencies.frequency_fields("15min") == (
        "minute", "hour", "day_of_week", "day_of_month", "day_of_year")


@pytest.mark.parametrize("freq", ["15", "fortnight", "", "15 min x"])
def test_unknown_frequencies_are_refused_naming_freq(freq):
    with pytest.raises(ValueError, match=rf"freq must be a pandas frequency string .*got "
                                         rf"{freq!r}"):
        frequencies.frequency_fields(freq)


@pytest.mark.parametrize("freq, type_name", [(None, "NoneType"), (15, "int"), (["h"], "list")])
def test_a_frequency_that_is_not_a_string_is_a_type_error(freq, type_name):
    with pytest.raises(TypeError, match=rf"^freq must be a pandas frequency string .*got "
                                        rf"{type_name} "):
        frequencies.frequency_fields(freq)
