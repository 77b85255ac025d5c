"""The eager path of `gconv.conv*d`: what a call needs beyond its tensors' addresses (checked
arguments, layout, output size, plan, workspace size, stream getter) is worked out once per
signature (shapes, strides, dtypes, devices, arguments) and kept, so a repeated call costs a
dict lookup, an output allocation and a launch, without going through the dispatcher. Under
`torch.compile` the functions call the registered operators instead (`functional.py`).
"""

import torch

from . import _engine, _ops

_specs = {}
_tf32 = torch._C._get_cudnn_allow_tf32


def _no_stream():
    return 0


class Spec:
    """One call signature's fixed facts."""

    __slots__ = (
        "rank", "stride", "padding", "dilation", "groups", "channels_last", "x_size", "w_size", "y_size",
        "x_packed", "w_packed", "bias_view", "device", "stream", "plans", "forward",
    )

    def __init__(self, rank, x, w, stride, padding, dilation, groups):
        self.rank, self.stride, self.padding, self.dilation, self.groups = rank, stride, padding, dilation, groups
        self.channels_last = _ops._layout_of(x)
        self.x_size, self.w_size = tuple(x.shape), tuple(w.shape)
        self.y_size = tuple(_ops.output_size(x.shape, w.shape, stride, padding, dilation))
        self.x_packed = _ops._packed_strides(x, self.channels_last)
        self.w_packed = _ops._packed_strides(w, self.channels_last)
        self.bias_view = (1, -1) + (1,) * rank
        self.device = x.device
        if x.is_cuda:
            index = x.device.index
            self.stream = lambda: torch._C._cuda_getCurrentRawStream(index)
        else:
            self.stream = _no_stream
        self.plans = {}
        self.forward = None

    def forward_plan(self, x):
        if self.forward is None:
            self.forward = _engine.plan("fwd", self.x_size, self.w_size, self.channels_last, x, self.stride, self.padding, self.dilation, self.groups)
        return self.forward


def signature(x, w, bias, args):
    """The key a call's spec is kept under."""
    bias_facts = None if bias is None else (bias.shape, bias.dtype, bias.device)
    return (args, x.shape, x.stride(), w.shape, w.stride(), x.dtype, w.dtype, x.device, w.device, bias_facts, _tf32())


def conv(x, w, bias, args, normalize):
    """`normalize(args, x, w, bias)` checks the arguments and returns (stride, padding,
    dilation) per dimension; it runs once per signature."""
    key = signature(x, w, bias, args)
    try:
        spec = _specs.get(key)
    except TypeError:  # an argument given as a list: no key, no cache
        key = spec = None
    if spec is None:
        spec = Spec(args[0], x, w, *normalize(args, x, w, bias), args[4])
        if key is not None:
            _specs[key] = spec
    if torch.is_grad_enabled() and (x.requires_grad or w.requires_grad or (bias is not None and bias.requires_grad)):
        return _Conv.apply(x, w, bias, spec)
    return forward(x, w, bias, spec)


def forward(x, w, bias, spec):
    found = spec.forward or spec.forward_plan(x)
    x_address = x.data_ptr()
    if not spec.x_packed or x_address % 16:
        x = _ops._packed(x, spec.channels_last)
        x_address = x.data_ptr()
    w_address = w.data_ptr()
    if not spec.w_packed or w_address % 16:
        w = _ops._packed(w, spec.channels_last)
        w_address = w.data_ptr()
    y = _ops._empty(spec.y_size, x, spec.channels_last)
    workspace_bytes = found.workspace_bytes
    if workspace_bytes:
        workspace = torch.empty(workspace_bytes, dtype=torch.uint8, device=spec.device)
        found.run(x_address, w_address, y.data_ptr(), workspace.data_ptr(), workspace_bytes, spec.stream())
    else:
        found.run(x_address, w_address, y.data_ptr(), 0, 0, spec.stream())
    if bias is not None:
        y.add_(bias.view(spec.bias_view))
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
