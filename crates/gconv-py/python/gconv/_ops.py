"""gconv's convolutions as torch operators: `torch.ops.gconv.conv` (with the bias, as
`aten::convolution` has it) and its backward operators (data, weight, bias), registered straight with `torch.library.Library` (cheaper per call than
`custom_op`'s wrapper), each with a fake implementation for `torch.compile` and the forward with
an autograd formula that runs only the gradients asked for.

Tensors are used in place when packed channels-first (`contiguous()`) or channels-last; the
weight (or the incoming gradient) is brought to the input's layout when it differs, as PyTorch
does before calling cuDNN. Any other strides are copied to channels-first once per call, with
a warning the first time.
"""

import warnings

import torch

from . import _engine

_lib = torch.library.Library("gconv", "DEF")
_lib.define("conv(Tensor x, Tensor w, Tensor? bias, int[] stride, int[] padding, int[] dilation, int groups) -> Tensor")
_lib.define(
    "conv_backward_data(Tensor dy, Tensor w, SymInt[] x_size, int[] stride, int[] padding, int[] dilation, int groups) -> Tensor"
)
_lib.define(
    "conv_backward_weight(Tensor x, Tensor dy, SymInt[] w_size, int[] stride, int[] padding, int[] dilation, int groups) -> Tensor"
)
_lib.define("conv_backward_bias(Tensor dy) -> Tensor")

_warned_copy = False


def _channels_last(t):
    """Whether `t` is packed channels-last and not also channels-first."""
    if t.is_contiguous():
        return False
    rank = t.dim()
    if rank == 4:
        return t.is_contiguous(memory_format=torch.channels_last)
    if rank == 5:
        return t.is_contiguous(memory_format=torch.channels_last_3d)
    return rank == 3 and t.transpose(1, 2).is_contiguous()


def _layout_of(t):
    """The layout gconv runs `t`'s problem in: channels-last when `t` is packed so, channels-first
    otherwise (copying what is neither, with a warning the first time)."""
    global _warned_copy
    if _channels_last(t):
        return True
    if not _warned_copy and not t.is_contiguous():
        _warned_copy = True
        warnings.warn(
            f"gconv: a tensor of shape {tuple(t.shape)} and strides {t.stride()} is neither channels-first nor "
            "channels-last packed; gconv copies such tensors to channels-first (said once)",
            stacklevel=4,
        )
    return False


def _packed(t, channels_last):
    """`t` packed in the layout at a 16-byte aligned address, copied only where it is not."""
    if not channels_last:
        t = t.contiguous()
    elif t.dim() == 4:
        t = t.contiguous(memory_format=torch.channels_last)
    elif t.dim() == 5:
        t = t.contiguous(memory_format=torch.channels_last_3d)
    elif not t.transpose(1, 2).is_contiguous():
        t = t.transpose(1, 2).contiguous().transpose(1, 2)
    return _engine.aligned(t)


def _packed_strides(t, channels_last):
    """Whether `t` is packed in the layout (then only its alignment is left to check)."""
    if not channels_last:
        return t.is_contiguous()
    if t.dim() == 4:
        return t.is_contiguous(memory_format=torch.channels_last)
    if t.dim() == 5:
        return t.is_contiguous(memory_format=torch.channels_last_3d)
    return t.transpose(1, 2).is_contiguous()


def _empty(size, like, channels_last):
    size = tuple(size)
    if not channels_last:
        return torch.empty(size, dtype=like.dtype, device=like.device)
    if len(size) == 4:
        return torch.empty(size, dtype=like.dtype, device=like.device, memory_format=torch.channels_last)
    if len(size) == 5:
        return torch.empty(size, dtype=like.dtype, device=like.device, memory_format=torch.channels_last_3d)
    n, c, width = size
    return torch.empty((n, width, c), dtype=like.dtype, device=like.device).transpose(1, 2)


def output_size(x_size, w_size, stride, padding, dilation):
    """y's size, or a ValueError naming the dimension that leaves no output."""
    out = [x_size[0], w_size[0]]
    for i, (size, k, s, p, d) in enumerate(zip(x_size[2:], w_size[2:], stride, padding, dilation)):
        o = (size + 2 * p - d * (k - 1) - 1) // s + 1
        if o < 1:
            raise ValueError(
                f"spatial dimension {i} leaves no output: input {size} padded by {p} on each side is smaller "
                f"than the filter {k} dilated by {d}"
            )
        out.append(o)
    return out


def _conv(x, w, bias, stride, padding, dilation, groups):
    channels_last = _layout_of(x)
    x = _packed(x, channels_last)
    w = _packed(w, channels_last)
    y = _empty(output_size(x.shape, w.shape, stride, padding, dilation), x, channels_last)
    found = _engine.plan("fwd", tuple(x.shape), tuple(w.shape), channels_last, x, tuple(stride), tuple(padding), tuple(dilation), groups)
    _engine.run(found, x, w, y)
    if bias is not None:
        y.add_(bias.view((1, -1) + (1,) * (x.dim() - 2)))
    return y


def _gradient(direction, lead, other, out_size, stride, padding, dilation, groups):
    """dx from (dy, w) or dw from (x, dy): `lead`, the first, decides the layout."""
    channels_last = _layout_of(lead)
    lead, other = _packed(lead, channels_last), _packed(other, channels_last)
    out = _empty(out_size, lead, channels_last)
    if direction == "bwd-data":
        x_size, w_size, tensors = out_size, other.shape, (out, other, lead)
    else:
        x_size, w_size, tensors = lead.shape, out_size, (lead, out, other)
    found = _engine.plan(direction, tuple(x_size), tuple(w_size), channels_last, lead, tuple(stride), tuple(padding), tuple(dilation), groups)
    _engine.run(found, *tensors)
    return out


def _conv_backward_data(dy, w, x_size, stride, padding, dilation, groups):
    return _gradient("bwd-data", dy, w, x_size, stride, padding, dilation, groups)


def _conv_backward_weight(x, dy, w_size, stride, padding, dilation, groups):
    return _gradient("bwd-weight", x, dy, w_size, stride, padding, dilation, groups)


def _conv_backward_bias(dy):
    return dy.sum([0] + list(range(2, dy.dim())))


for _device in ("CPU", "CUDA"):
    _lib.impl("conv", _conv, _device)
    _lib.impl("conv_backward_data", _conv_backward_data, _device)
    _lib.impl("conv_backward_weight", _conv_backward_weight, _device)
    _lib.impl("conv_backward_bias", _conv_backward_bias, _device)


@torch.library.register_fake("gconv::conv")
def _conv_fake(x, w, bias, stride, padding, dilation, groups):
    return _empty(output_size(x.shape, w.shape, stride, padding, dilation), x, _channels_last(x))


@torch.library.register_fake("gconv::conv_backward_data")
def _conv_backward_data_fake(dy, w, x_size, stride, padding, dilation, groups):
    return _empty(x_size, dy, _channels_last(dy))


@torch.library.register_fake("gconv::conv_backward_weight")
def _conv_backward_weight_fake(x, dy, w_size, stride, padding, dilation, groups):
    return _empty(w_size, x, _channels_last(x))


@torch.library.register_fake("gconv::conv_backward_bias")
def _conv_backward_bias_fake(dy):
    return dy.new_empty(dy.shape[1])


def _setup_context(ctx, inputs, output):
    x, w, bias, stride, padding, dilation, groups = inputs
    ctx.save_for_backward(x if ctx.needs_input_grad[1] else None, w if ctx.needs_input_grad[0] else None)
    ctx.x_size = list(x.shape)
    ctx.w_size = list(w.shape)
    ctx.geometry = (stride, padding, dilation, groups)


def _backward(ctx, dy):
    x, w = ctx.saved_tensors
    dx = dw = db = None
    if ctx.needs_input_grad[0]:
        dx = torch.ops.gconv.conv_backward_data(dy, w, ctx.x_size, *ctx.geometry)
    if ctx.needs_input_grad[1]:
        dw = torch.ops.gconv.conv_backward_weight(x, dy, ctx.w_size, *ctx.geometry)
    if ctx.needs_input_grad[2]:
        db = torch.ops.gconv.conv_backward_bias(dy)
    return dx, dw, db, None, None, None, None


torch.library.register_autograd("gconv::conv", _backward, setup_context=_setup_context)
