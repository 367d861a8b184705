"""posenc: positional encodings for vision transformers and time-series models.

The library is its sub-packages, imported on use: :mod:`posenc.core`, :mod:`posenc.spatial`,
:mod:`posenc.temporal` and :mod:`posenc.tasks` (folders ``core/`` ... mapped by
pyproject.toml's ``package-dir``). This folder holds only what belongs to the distribution.
"""

from importlib.metadata import version

#: The installed distribution's version: pyproject.toml's ``[project] version``, its one source.
__version__ = version("posenc")

__all__ = ["__version__"]
