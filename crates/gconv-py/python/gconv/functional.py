"""`gconv.conv1d`, `conv2d` and `conv3d`: `torch.nn.functional.conv*`'s signatures, run by gconv."""

import torch

from . import _eager, _ops  # noqa: F401  (_ops registers torch.ops.gconv)


def _per_dim(value, rank, name):
    values = (value,) * rank if isinstance(value, int) else tuple(value)
    if len(values) == 1:
        values = values * rank
    if len(values) != rank or not all(isinstance(v, int) for v in values):
        raise ValueError(f"{name} must be an int or {rank} ints, got {value!r}")
    return values


def _padding(padding, w, stride, dilation, rank):
    """Padding per dimension; `valid` is none, `same` is half the dilated filter's reach when
    that is even (gconv pads both sides alike)."""
    if isinstance(padding, str):
        if padding == "valid":
            return (0,) * rank
        if padding != "same":
            raise ValueError(f"padding must be 'valid', 'same' or ints, got {padding!r}")
        if any(s != 1 for s in stride):
            raise ValueError("padding='same' is not supported for strided convolutions")
        reach = [d * (k - 1) for d, k in zip(dilation, w.shape[2:])]
        if any(r % 2 for r in reach):
            raise ValueError(
                f"padding='same' with filter {tuple(w.shape[2:])} and dilation {dilation} needs more padding on one "
                "side than the other, which gconv does not do"
            )
        return tuple(r // 2 for r in reach)
    return _per_dim(padding, rank, "padding")


def _check(x, w, bias, rank, stride, padding, dilation, groups):
    if x.dim() != rank + 2:
        raise ValueError(f"conv{rank}d takes a {rank + 2}-dimensional input (N, C, {rank} spatial), got shape {tuple(x.shape)}")
    if w.dim() != rank + 2:
        raise ValueError(f"conv{rank}d takes a {rank + 2}-dimensional weight (K, C/groups, {rank} filter), got shape {tuple(w.shape)}")
    if x.dtype != w.dtype or (bias is not None and bias.dtype != x.dtype):
        raise TypeError(f"input, weight and bias must have one dtype, got {x.dtype}, {w.dtype}" + ("" if bias is None else f", {bias.dtype}"))
    if x.device != w.device or (bias is not None and bias.device != x.device):
        raise ValueError(f"input, weight and bias must be on one device, got {x.device}, {w.device}" + ("" if bias is None else f", {bias.device}"))
    if not isinstance(groups, int) or groups < 1:
        raise ValueError(f"groups must be a positive int, got {groups!r}")
    c, k = x.shape[1], w.shape[0]
    if c % groups or k % groups or w.shape[1] * groups != c:
        raise ValueError(
            f"input of {c} channels and weight of shape {tuple(w.shape)} do not make {groups} groups "
            f"(expected weight (K, {c // groups if c % groups == 0 else 'C/groups'}, ...) with K divisible by {groups})"
        )
    if bias is not None and tuple(bias.shape) != (k,):
        raise ValueError(f"bias must have shape ({k},), got {tuple(bias.shape)}")
    if any(s < 1 for s in stride) or any(d < 1 for d in dilation) or any(p < 0 for p in padding):
        raise ValueError(f"stride and dilation must be positive and padding non-negative, got {stride}, {dilation}, {padding}")


def _normalized(args, x, w, bias):
    """Checks a call's arguments; returns stride, padding and dilation per dimension."""
    rank, stride, padding, dilation, groups = args
    stride = _per_dim(stride, rank, "stride")
    dilation = _per_dim(dilation, rank, "dilation")
    padding = _padding(padding, w, stride, dilation, rank)
    _check(x, w, bias, rank, stride, padding, dilation, groups)
    return stride, padding, dilation


def _conv(rank, x, w, bias, stride, padding, dilation, groups):
    device_type = "cuda" if x.is_cuda else "cpu"
    if torch.is_autocast_enabled(device_type):
        dtype = torch.get_autocast_dtype(device_type)
        x, w = x.to(dtype), w.to(dtype)
        bias = None if bias is None else bias.to(dtype)
    args = (rank, stride, padding, dilation, groups)
    if torch.compiler.is_compiling():
        stride, padding, dilation = _normalized(args, x, w, bias)
        return torch.ops.gconv.conv(x, w, bias, stride, padding, dilation, groups)
    return _eager.conv(x, w, bias, args, _normalized)


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """As `torch.nn.functional.conv1d`."""
    return _conv(1, input, weight, bias, stride, padding, dilation, groups)


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """As `torch.nn.functional.conv2d`."""
    return _conv(2, input, weight, bias, stride, padding, dilation, groups)


def conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """As `torch.nn.functional.conv3d`."""
    return _conv(3, input, weight, bias, stride, padding, dilation, groups)
