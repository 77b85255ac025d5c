"""The eager path of `gconv.conv*d`: what a call needs beyond its tensors' addresses (checked
arguments, layout, output size, plans) is worked out once per signature (shapes, strides,
dtypes, devices, arguments) and kept, so a repeated call costs a dict lookup, an output
allocation and a launch, without going through the dispatcher. Under `torch.compile` the
functions call the registered operators instead (`functional.py`).
"""

import torch

from . import _engine, _ops

_specs = {}


class Spec:
    """One call signature's fixed facts."""

    __slots__ = ("rank", "stride", "padding", "dilation", "groups", "channels_last", "x_size", "w_size", "y_size", "x_packed", "w_packed", "plans")

    def __init__(self, rank, x, w, stride, padding, dilation, groups):
        self.rank, self.stride, self.padding, self.dilation, self.groups = rank, stride, padding, dilation, groups
        self.channels_last = _ops._layout_of(x)
        self.x_size, self.w_size = tuple(x.shape), tuple(w.shape)
        self.y_size = tuple(_ops.output_size(x.shape, w.shape, stride, padding, dilation))
        self.x_packed = _ops._packed_strides(x, self.channels_last)
        self.w_packed = _ops._packed_strides(w, self.channels_last)
        self.plans = {}

    def forward_plan(self, x):
        found = self.plans.get("fwd")
        if found is None:
            found = _engine.plan("fwd", self.x_size, self.w_size, self.channels_last, x, self.stride, self.padding, self.dilation, self.groups)
            self.plans["fwd"] = found
        return found


def signature(x, w, bias, args):
    """The key a call's spec is kept under, or None when an argument is not hashable."""
    bias_facts = None if bias is None else (bias.shape, bias.dtype, bias.device)
    key = (args, x.shape, x.stride(), w.shape, w.stride(), x.dtype, w.dtype, x.device, w.device, bias_facts, torch._C._get_cudnn_allow_tf32())
    try:
        hash(key)
    except TypeError:
        return None
    return key


def conv(x, w, bias, args, make_spec):
    key = signature(x, w, bias, args)
    spec = None if key is None else _specs.get(key)
    if spec is None:
        spec = make_spec()
        if key is not None:
            _specs[key] = spec
    if torch.is_grad_enabled() and (x.requires_grad or w.requires_grad or (bias is not None and bias.requires_grad)):
        return _Conv.apply(x, w, bias, spec)
    return forward(x, w, bias, spec)


def _ready(t, packed, channels_last):
    if packed and t.data_ptr() % 16 == 0:
        return t
    return _ops._packed(t, channels_last)


def forward(x, w, bias, spec):
    x = _ready(x, spec.x_packed, spec.channels_last)
    w = _ready(w, spec.w_packed, spec.channels_last)
    y = _ops._empty(spec.y_size, x, spec.channels_last)
    _engine.run(spec.forward_plan(x), x, w, y)
    if bias is not None:
        y.add_(bias.view((1, -1) + (1,) * spec.rank))
    return y


class _Conv(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, bias, spec):
        ctx.spec = spec
        ctx.save_for_backward(x if ctx.needs_input_grad[1] else None, w if ctx.needs_input_grad[0] else None)
        return forward(x, w, bias, spec)

    @staticmethod
    def backward(ctx, dy):
        x, w = ctx.saved_tensors
        s = ctx.spec
        geometry = (s.stride, s.padding, s.dilation, s.groups)
        dx = _ops._conv_backward_data(dy, w, s.x_size, *geometry) if ctx.needs_input_grad[0] else None
        dw = _ops._conv_backward_weight(x, dy, s.w_size, *geometry) if ctx.needs_input_grad[1] else None
        db = _ops._conv_backward_bias(dy) if ctx.needs_input_grad[2] else None
        return dx, dw, db, None
