"""A custom tool whose module imports numpy (OpenBLAS starts a pool of native threads
at import unless told to use one): imported in the sub-agent's process, before its walls."""

from __future__ import annotations

import numpy
from agentcell.worker.tools import function_tool


def mean_of(values: list[float]) -> str:
    """The mean of ``values``."""
    return str(float(numpy.mean(values)))


np_mean = function_tool(mean_of, name="np_mean")
