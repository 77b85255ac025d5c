"""Random convolution problems for the torch tests, and the tolerance a result is held to.

The tolerance follows gconv's verification: rounding of the inputs the arithmetic sees (TF32
rounds fp32 inputs to 10 mantissa bits), fp32 accumulation over the reduction length, and one
rounding of the result into its storage type.
"""

import math
import random
from dataclasses import dataclass

import torch

UNIT_ROUNDOFF = {"f32": 2.0**-24, "tf32": 2.0**-11, "f16": 2.0**-11, "bf16": 2.0**-8}
TORCH_DTYPE = {"f32": torch.float32, "tf32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


@dataclass
class Problem:
    rank: int
    n: int
    c: int
    k: int
    groups: int
    size: tuple
    kernel: tuple
    stride: tuple
    padding: tuple
    dilation: tuple
    dtype: str
    channels_last: bool

    def __str__(self):
        return (
            f"{self.rank}d n{self.n} c{self.c} k{self.k} g{self.groups} i{self.size} f{self.kernel} s{self.stride} "
            f"p{self.padding} d{self.dilation} {self.dtype} {'channels-last' if self.channels_last else 'channels-first'}"
        )

    def out_size(self):
        return tuple((i + 2 * p - d * (f - 1) - 1) // s + 1 for i, f, s, p, d in zip(self.size, self.kernel, self.stride, self.padding, self.dilation))

    def reduction_lengths(self):
        """Terms summed per result: forward, backward-data (at most), backward-weight."""
        taps = math.prod(self.kernel)
        return self.c // self.groups * taps, self.k // self.groups * taps, self.n * math.prod(self.out_size())


def random_problem(seed, dtypes=("f32", "tf32", "f16", "bf16")):
    rng = random.Random(seed)
    rank = rng.choice((1, 2, 2, 2, 3))
    groups = rng.choice((1, 1, 2, 4, "depthwise"))
    if groups == "depthwise":
        groups = rng.choice((4, 8, 16))
        c, k = groups, groups * rng.choice((1, 1, 2))
    else:
        c, k = groups * rng.choice((1, 2, 3, 4, 8, 16)), groups * rng.choice((1, 2, 4, 8, 16))
    low, high = {1: (4, 40), 2: (3, 20), 3: (2, 8)}[rank]
    size, kernel, stride, padding, dilation = [], [], [], [], []
    for _ in range(rank):
        i = rng.randint(low, high)
        d = rng.choice((1, 1, 1, 2))
        f = rng.choice((1, 2, 3, 3, 5))
        p = rng.randint(0, d * (f - 1) // 2)
        i = max(i, d * (f - 1) + 1 - 2 * p)
        s = rng.choice((1, 1, 2, 3))
        size.append(i), kernel.append(f), stride.append(s), padding.append(p), dilation.append(d)
    return Problem(
        rank, rng.randint(1, 4), c, k, groups, tuple(size), tuple(kernel), tuple(stride), tuple(padding), tuple(dilation),
        rng.choice(dtypes), rng.random() < 0.5,
    )


def tensors(p, device, seed):
    """x and w of the problem, in its dtype and layout, and a gradient for y."""
    g = torch.Generator().manual_seed(seed)
    dtype = TORCH_DTYPE[p.dtype]
    x = (torch.rand((p.n, p.c) + p.size, generator=g) * 2 - 1).to(device, dtype)
    w = (torch.rand((p.k, p.c // p.groups) + p.kernel, generator=g) * 2 - 1).to(device, dtype)
    dy = (torch.rand((p.n, p.k) + p.out_size(), generator=g) * 2 - 1).to(device, dtype)
    if p.channels_last:
        x, w, dy = (to_channels_last(t) for t in (x, w, dy))
    return x, w, dy


def to_channels_last(t):
    if t.dim() == 4:
        return t.contiguous(memory_format=torch.channels_last)
    if t.dim() == 5:
        return t.contiguous(memory_format=torch.channels_last_3d)
    return t.transpose(1, 2).contiguous().transpose(1, 2)


def worst_excess(got, exact, dtype, length, scale, added=0.0):
    """The largest error over its bound (at most 1 passes), NaN counting as over. `added` bounds
    a term added after one rounding into the storage type (the bias), rounded again with it."""
    if got.shape != exact.shape:
        return math.inf
    got = got.double()
    if torch.isnan(got).any():
        return math.inf
    compute = UNIT_ROUNDOFF["tf32" if dtype == "tf32" else "f32"]
    bound = 8 * (compute * math.sqrt(length) + UNIT_ROUNDOFF["f32"] * length) * scale + 2 * UNIT_ROUNDOFF[dtype] * (exact.abs() + added) + 1e-30
    return float(((got - exact).abs() / bound).max()) if got.numel() else 0.0
