"""The engine on the CPU from numpy: no torch needed (what CI runs)."""

import subprocess
import sys

import pytest

np = pytest.importorskip("numpy")
import gconv  # noqa: E402


def reference_forward(x, w, stride, pad, groups):
    """NCHW forward in float64, by loops over the filter taps."""
    n, c, h, wd = x.shape
    k, cg, r, s = w.shape
    kg = k // groups
    xp = np.zeros((n, c, h + 2 * pad, wd + 2 * pad))
    xp[:, :, pad:pad + h, pad:pad + wd] = x
    oh = (h + 2 * pad - r) // stride + 1
    ow = (wd + 2 * pad - s) // stride + 1
    y = np.zeros((n, k, oh, ow))
    for g in range(groups):
        xs = xp[:, g * cg:(g + 1) * cg]
        ws = w[g * kg:(g + 1) * kg]
        for i in range(r):
            for j in range(s):
                patch = xs[:, :, i:i + stride * oh:stride, j:j + stride * ow:stride]
                y[:, g * kg:(g + 1) * kg] += np.einsum("nchw,kc->nkhw", patch, ws[:, :, i, j])
    return y


def run(engine, direction, x, w, y, stride, pad, groups):
    key = gconv.problem_key(direction, "f32", False, x.shape[0], x.shape[1], w.shape[0], groups, x.shape[2:], w.shape[2:], (stride,) * 2, (pad,) * 2, (1, 1))
    plan = engine.plan(key, "find")
    workspace = np.zeros(max(plan.workspace_bytes, 1), dtype=np.uint8)
    plan.run(x.ctypes.data, w.ctypes.data, y.ctypes.data, workspace.ctypes.data, plan.workspace_bytes, 0)
    return plan


@pytest.fixture
def engine(tmp_path):
    return gconv.Engine("cpu", db=str(tmp_path / "user.db"))


@pytest.mark.parametrize("stride,pad,groups", [(1, 1, 1), (2, 0, 2), (1, 2, 6)])
def test_every_direction_agrees_with_the_reference_and_its_adjoints(engine, stride, pad, groups):
    rng = np.random.default_rng(stride * 10 + pad + groups)
    x = rng.uniform(-1, 1, (2, 6, 7, 8)).astype(np.float32)
    w = rng.uniform(-1, 1, (12, 6 // groups, 3, 3)).astype(np.float32)
    expected = reference_forward(x.astype(np.float64), w.astype(np.float64), stride, pad, groups)
    y = np.empty(expected.shape, dtype=np.float32)
    run(engine, "fwd", x, w, y, stride, pad, groups)
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)
    # <conv(x, w), dy> = <x, bwd_data(dy, w)> = <w, bwd_weight(x, dy)>
    dy = rng.uniform(-1, 1, y.shape).astype(np.float32)
    dx = np.full(x.shape, np.nan, dtype=np.float32)
    dw = np.full(w.shape, np.nan, dtype=np.float32)
    run(engine, "bwd-data", dx, w, dy, stride, pad, groups)
    run(engine, "bwd-weight", x, dw, dy, stride, pad, groups)
    inner = float((expected * dy).sum())
    assert np.isclose(float((x.astype(np.float64) * dx).sum()), inner, rtol=1e-4)
    assert np.isclose(float((w.astype(np.float64) * dw).sum()), inner, rtol=1e-4)


def test_a_second_process_reuses_the_first_ones_finds(tmp_path):
    script = f"""
import numpy as np, gconv
e = gconv.Engine("cpu", db={str(tmp_path / "user.db")!r})
key = gconv.problem_key("fwd", "f32", True, 2, 8, 16, 1, (9, 9), (3, 3), (1, 1), (1, 1), (1, 1))
print(e.plan(key, "find").source)
"""
    sources = [subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout.strip() for _ in range(2)]
    assert sources == ["find", "find-db"]


def test_fast_mode_never_benchmarks(engine):
    key = gconv.problem_key("bwd-weight", "f32", False, 2, 8, 16, 2, (9, 9), (3, 3), (1, 1), (1, 1), (1, 1))
    assert engine.stored(key) is None
    assert engine.plan(key, "fast").source in ("model", "rule")
    assert engine.stored(key) is None, "nothing was benchmarked, so nothing was stored"
    assert engine.plan(key, "find").source == "find"
    assert engine.stored(key).source == "find-db"


@pytest.mark.parametrize(
    "key,message",
    [
        ("v1:fwd:f32:NCHW:n2:c8:k8:i6x6:f3x3:s1x1:p1x1:d1x1:g3", "not divisible by G=3"),
        ("v1:fwd:f32:NCHW:n2:c8:k8:i2x2:f5x5:s1x1:p0x0:d1x1", "output"),
        ("v2:fwd", "v1"),
    ],
)
def test_bad_problems_are_value_errors_that_say_why(engine, key, message):
    with pytest.raises(ValueError, match=message):
        engine.plan(key, "find")


def test_bad_arguments_are_clear_errors(engine, tmp_path):
    key = gconv.problem_key("fwd", "f32", False, 1, 4, 4, 1, (5, 5), (3, 3), (1, 1), (0, 0), (1, 1))
    with pytest.raises(ValueError, match="unknown mode"):
        engine.plan(key, "slow")
    with pytest.raises(ValueError, match="unknown backend"):
        gconv.Engine("tpu", db=str(tmp_path / "other.db"))
    with pytest.raises(ValueError, match="has 1 values for 2 spatial"):
        gconv.problem_key("fwd", "f32", False, 1, 4, 4, 1, (5, 5), (3,), (1, 1), (0, 0), (1, 1))
    plan = engine.plan(key, "find")
    with pytest.raises(gconv.Error, match="null address"):
        plan.run(0, 0, 0, 0, 0, 0)
