"""The cost model's scalar shortcuts (perf/ops.py is_scalar, any_true) must answer exactly as the numpy calls they
stand for: they choose between the one-deployment path (plain numbers: the simulator, the fit) and the planner's
array path, and a wrong answer would send arrays down the scalar path or the reverse."""
import math

import numpy as np
import pytest

from tokensim.perf.ops import any_true, is_scalar

VALUES = [0, 3, 0.0, 2.5, -1.0, math.nan, True, False, np.float64(0.0), np.float64(1.5), np.int64(0), np.bool_(True),
          np.bool_(False), np.array(0.0), np.array(2.0), np.array([0.0, 1.0]), np.zeros(3), np.array([[1.0]]),
          [0.0, 2.0], (0, 0), []]


@pytest.mark.parametrize("x", VALUES, ids=[repr(v) for v in VALUES])
def test_is_scalar_is_ndim_zero_and_any_true_is_np_any(x):
    assert is_scalar(x) == (np.ndim(x) == 0)
    assert any_true(x) == bool(np.any(x))
