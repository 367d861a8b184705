"""The README's Python examples run as written: a stale example is a bug users hit first."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
EXAMPLES = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)

# Names an example uses without defining them (the user's own data), given real values here.
PRELUDES = {
    "df[": "from vega_datasets import data\n"
           # hourly Seattle temperatures in naive local time, around the spring-forward gap
           "df = data.seattle_temps().iloc[1700:1800]\n",
    "tokens": "import torch\ntokens = torch.randn(len(df), 64)\n",
}


def test_the_readme_stays_a_front_page():
    # Tables, studies and option lists live in docs/; the README keeps what a newcomer reads.
    assert len(README.read_text().splitlines()) <= 300


def test_the_readme_has_its_examples():
    assert len(EXAMPLES) >= 3


@pytest.mark.parametrize("example", EXAMPLES, ids=[f"example{i}" for i in range(len(EXAMPLES))])
def test_readme_example_runs(example, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # what an example writes (a trainer's checkpoints) lands there
    if "df[" in example:
        pytest.importorskip("vega_datasets")
    prelude = "".join(code for marker, code in PRELUDES.items() if marker in example)
    namespace: dict = {}
    exec(compile(prelude + example, str(README), "exec"), namespace)  # noqa: S102
    # Beyond running: each example builds a model or computes tensors with finite values.
    import torch

    built = [v for v in namespace.values() if isinstance(v, (torch.Tensor, torch.nn.Module))]
    assert built
    assert all(torch.isfinite(v).all() for v in built if isinstance(v, torch.Tensor)
               and v.is_floating_point())


def test_the_readme_test_commands_are_what_ci_runs():
    [block] = re.findall(r"^Run the tests.*?```bash\n(.*?)```", README.read_text(), re.S | re.M)
    ci = (README.parent / ".ci" / "run").read_text().splitlines()
    commands = [line for line in ci if line and not line.startswith(("#", "set ", "cd "))]
    assert block.splitlines() == commands


def test_the_advice_quotes_the_published_study_tables():
    """Each one-decimal percentage in "Which encoding should I use" is a mean or a std of a
    published study table (docs/studies/*_table.md, which the study tests rebuild from the
    CSVs), so the headline numbers cannot drift from the results they summarise."""
    advice = README.read_text().split("## Which encoding should I use", 1)[1].split("\n## ")[0]
    studies = README.parent / "docs" / "studies"
    tables = "".join(path.read_text() for path in studies.glob("*_table.md"))
    values = {abs(float(v)) for pair in re.findall(r"(-?\d+\.\d+) ± (\d+\.\d+)", tables)
              for v in pair}
    # The one derived number: per-holiday indicators' MAE change against calendar features.
    holidays = (studies / "forecast_holidays_table.md").read_text()
    mae = {name: float(value) for name, value in
           re.findall(r"^\| (\w+) \| 3 \| (\d+\.\d+) ±", holidays, re.M)}
    values.add(round(abs(mae["calendar_holiday_names"] / mae["calendar"] - 1) * 100, 1))
    quoted = [float(q) for q in re.findall(r"(\d+\.\d)%", advice)]
    assert len(quoted) >= 15
    assert [q for q in quoted if q not in values] == []
