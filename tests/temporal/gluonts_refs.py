"""GluonTS 0.17.0 reference values for the holiday and age features (tests/temporal/
test_holidays.py, test_age.py). GluonTS is not a posenc dependency; these were produced once by

    pip install --no-deps --target /tmp/gluonts_ref gluonts==0.17.0 toolz
    PYTHONPATH=/tmp/gluonts_ref python make_refs.py   # (pandas 3.1.1, numpy 2.4)

where make_refs.py is::

    import numpy as np, pandas as pd
    import gluonts.time_feature.holiday as h
    from gluonts.transform.feature import AddAgeFeature
    daily = pd.date_range("2016-12-20", "2017-01-05", freq="D")
    odd = pd.DatetimeIndex(["2016-12-24 23:00", "2016-12-25 00:30", "2016-12-25 23:59:59",
                            "2017-06-25", "2017-07-05", "2017-04-10", "2017-11-22"])
    stamps = daily.append(odd)
    DISTANCE = {n: [int(h.SPECIAL_DATE_FEATURES[n](t)) for t in stamps]
                for n in (h.CHRISTMAS_DAY, h.EASTER_SUNDAY, h.THANKSGIVING)}
    KERNELS = {label: h.SpecialDateFeatureSet([h.CHRISTMAS_EVE, h.CHRISTMAS_DAY], k)(daily)
               for label, k in (("indicator", h.indicator),
                                ("exponential", h.exponential_kernel(alpha=0.5)),
                                ("squared_exponential", h.squared_exponential_kernel(alpha=1.0)))}
    AGE = AddAgeFeature("target", "age", pred_length=3, log_scale=...).map_transform(
        {"target": np.zeros(5)}, is_train=False)["age"][0]

DISTANCE is GluonTS's signed ``(date - holiday).days`` (SPECIAL_DATE_FEATURES); KERNELS its
``SpecialDateFeatureSet`` output, shape (2 holidays: Christmas Eve, Christmas Day, 17 days).
"""

DISTANCE: dict[str, list[int]] = {}
KERNELS: dict[str, list[list[float]]] = {}

STAMPS = [
    "2016-12-20 00:00:00", "2016-12-21 00:00:00", "2016-12-22 00:00:00", "2016-12-23 00:00:00",
    "2016-12-24 00:00:00", "2016-12-25 00:00:00", "2016-12-26 00:00:00", "2016-12-27 00:00:00",
    "2016-12-28 00:00:00", "2016-12-29 00:00:00", "2016-12-30 00:00:00", "2016-12-31 00:00:00",
    "2017-01-01 00:00:00", "2017-01-02 00:00:00", "2017-01-03 00:00:00", "2017-01-04 00:00:00",
    "2017-01-05 00:00:00", "2016-12-24 23:00:00", "2016-12-25 00:30:00", "2016-12-25 23:59:59",
    "2017-06-25 00:00:00", "2017-07-05 00:00:00", "2017-04-10 00:00:00", "2017-11-22 00:00:00",
]
DISTANCE["christmas_day"] = [
    -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, -1, 0, 0,
    182, 192, 106, -33,
]
DISTANCE["easter_sunday"] = [
    -117, -116, -115, -114, -113, -112, -111, -110, -109, -108, -107, -106,
    -105, -104, -103, -102, -101, -113, -112, -112, 70, 80, -6, -130,
]
DISTANCE["thanksgiving"] = [
    26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 30,
    31, 31, -151, -141, 137, -1,
]
KERNELS["indicator"] = [
    [0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
    [0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
]
KERNELS["exponential"] = [
    [
        0.1353352832366127, 0.22313016014842982, 0.36787944117144233, 0.6065306597126334,
        1.0, 0.6065306597126334, 0.36787944117144233, 0.22313016014842982,
        0.1353352832366127, 0.0820849986238988, 0.049787068367863944, 0.0301973834223185,
        0.01831563888873418, 0.011108996538242306, 0.006737946999085467,
        0.004086771438464067, 0.0024787521766663585,
    ],
    [
        0.0820849986238988, 0.1353352832366127, 0.22313016014842982, 0.36787944117144233,
        0.6065306597126334, 1.0, 0.6065306597126334, 0.36787944117144233,
        0.22313016014842982, 0.1353352832366127, 0.0820849986238988, 0.049787068367863944,
        0.0301973834223185, 0.01831563888873418, 0.011108996538242306,
        0.006737946999085467, 0.004086771438464067,
    ],
]
KERNELS["squared_exponential"] = [
    [
        1.1253517471925912e-07, 0.00012340980408667956, 0.01831563888873418,
        0.36787944117144233, 1.0, 0.36787944117144233, 0.01831563888873418,
        0.00012340980408667956, 1.1253517471925912e-07, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
        0.0,
    ],
    [
        0.0, 1.1253517471925912e-07, 0.00012340980408667956, 0.01831563888873418,
        0.36787944117144233, 1.0, 0.36787944117144233, 0.01831563888873418,
        0.00012340980408667956, 1.1253517471925912e-07, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
    ],
]
# AddAgeFeature(log_scale=True): log10(2 + index), float32; log_scale=False: the index.
AGE_LOG_SCALE = [
    0.3010300099849701, 0.4771212935447693, 0.6020600199699402, 0.6989700198173523,
    0.778151273727417, 0.845098078250885, 0.9030900001525879, 0.9542425274848938,
]
AGE_LINEAR = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]
