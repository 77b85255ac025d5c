"""The eager path of `gconv.conv*d`: what a call needs beyond its tensors' addresses (checked
arguments, layout, output size, plan, workspace size, stream getter) is worked out once per
signature (shapes, strides, dtypes, devices, arguments) and kept, so a repeated call costs a
dict lookup, an output allocation and a launch, without going through the dispatcher. Under
`torch.compile` the functions call the registered operators instead (`functional.py`).
"""

import contextlib

import torch

from . import _engine, _ops

_specs = {}
_tf32 = torch._C._get_cudnn_allow_tf32
_profiling = torch.autograd._profiler_enabled
# The registered operators' names, which a profile of the eager path shows its calls under.
_OP_NAMES = {"fwd": "gconv::conv", "bwd-data": "gconv::conv_backward_data", "bwd-weight": "gconv::conv_backward_weight", "bias": "gconv::conv_backward_bias"}


def _no_stream():
    return 0


class Spec:
    """One call signature's fixed facts, and its plans once selected."""

    __slots__ = (
        "rank", "stride", "padding", "dilation", "groups", "channels_last", "x_size", "w_size", "y_size",
        "x_strides", "w_strides", "y_strides", "dtype", "x_packed", "w_packed", "bias_view", "device", "stream", "plans",
    )

    def __init__(self, rank, x, w, stride, padding, dilation, groups):
        self.rank, self.stride, self.padding, self.dilation, self.groups = rank, stride, padding, dilation, groups
        self.channels_last = cl = _ops._layout_of(x)
        self.x_size, self.w_size = tuple(x.shape), tuple(w.shape)
        self.y_size = tuple(_ops.output_size(x.shape, w.shape, stride, padding, dilation))
        meta = torch.empty(0, dtype=x.dtype, device="meta")  # strides without allocating
        self.x_strides, self.w_strides, self.y_strides = (_ops._empty(size, meta, cl).stride() for size in (self.x_size, self.w_size, self.y_size))
        self.dtype = x.dtype
        self.x_packed = _ops._packed_strides(x, cl)
        self.w_packed = _ops._packed_strides(w, cl)
        self.bias_view = (1, -1) + (1,) * rank
        self.device = x.device
        if x.is_cuda:
            index = x.device.index
            self.stream = lambda: torch._C._cuda_getCurrentRawStream(index)
        else:
            self.stream = _no_stream
        self.plans = {}

    def plan(self, direction, like):
        """The direction's plan and its workspace size, selected on the first call."""
        found = self.plans.get(direction)
        if found is None:
            selected = _engine.plan(direction, self.x_size, self.w_size, self.channels_last, like, self.stride, self.padding, self.dilation, self.groups)
            found = self.plans[direction] = (selected, selected.workspace_bytes)
        return found

    def empty(self, size, strides):
        return torch.empty_strided(size, strides, dtype=self.dtype, device=self.device)

    def launch(self, found, x_address, w_address, y_address):
        plan, workspace_bytes = found
        if workspace_bytes:
            _engine.launch(plan, self.device, self.stream(), x_address, w_address, y_address)
        else:
            plan.run(x_address, w_address, y_address, 0, 0, self.stream())


_UNNAMED = contextlib.nullcontext()


def _named(direction):
    """A profiler range under the operator's name, for calls made while a profiler runs."""
    return torch.profiler.record_function(_OP_NAMES[direction])


def _unnamed(direction):
    return _UNNAMED


_F32 = torch.float32


def signature(x, w, bias, args):
    """The key a call's spec is kept under."""
    bias_facts = None if bias is None else (bias.shape, bias.dtype, bias.device)
    dtype = x.dtype
    # TF32's switch matters to fp32 problems only: other dtypes skip the call.
    return (args, x.shape, x.stride(), w.shape, w.stride(), dtype, w.dtype, x.device, w.device, bias_facts, dtype is _F32 and _tf32())


_functorch_active = torch._C._are_functorch_transforms_active


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
        if _functorch_active():
            return GconvConvolution.apply(x, w, bias, spec)
        return _conv_apply(x, w, bias, spec)
    return forward(x, w, bias, spec)


def _operand(t, packed, channels_last):
    """`t` and its address, copied first where it is not `packed` in the layout or not aligned.
    The caller holds the tensor returned until the launch is enqueued: a copy dropped earlier
    goes back to torch's allocator, which may hand its memory to the next allocation."""
    address = t.data_ptr()
    if packed and address % 16 == 0:
        return t, address
    t = _ops._packed(t, channels_last)
    return t, t.data_ptr()


def forward(x, w, bias, spec):
    found = spec.plan("fwd", x)
    if _profiling():
        with _named("fwd"):
            return _forward(x, w, bias, spec, found)
    return _forward(x, w, bias, spec, found)


def _forward(x, w, bias, spec, found):
    x, x_address = _operand(x, spec.x_packed, spec.channels_last)
    w, w_address = _operand(w, spec.w_packed, spec.channels_last)
    y = spec.empty(spec.y_size, spec.y_strides)
    spec.launch(found, x_address, w_address, y.data_ptr())
    if bias is not None:
        y.add_(bias.view(spec.bias_view))
    return y


class GconvConvolution(torch.autograd.Function):
    """The eager path's autograd node: profiles show its calls as `GconvConvolution` and
    `GconvConvolutionBackward`, the operators whose kernels are gconv's convolutions."""

    @staticmethod
    def forward(ctx, x, w, bias, spec):
        ctx.spec = spec
        ctx.save_for_backward(x if ctx.needs_input_grad[1] else None, w if ctx.needs_input_grad[0] else None)
        return forward(x, w, bias, spec)

    @staticmethod
    def backward(ctx, dy):
        return _backward(ctx, dy, _named if _profiling() else _unnamed)


def _backward(ctx, dy, named):
    x, w = ctx.saved_tensors
    s = ctx.spec
    needs = ctx.needs_input_grad
    cl = s.channels_last
    dy, dy_address = _operand(dy, dy.stride() == s.y_strides, cl)
    dx = dw = db = None
    if needs[0]:
        found = s.plan("bwd-data", dy)
        with named("bwd-data"):
            w, w_address = _operand(w, s.w_packed, cl)
            dx = s.empty(s.x_size, s.x_strides)
            s.launch(found, dx.data_ptr(), w_address, dy_address)
    if needs[1]:
        found = s.plan("bwd-weight", dy)
        with named("bwd-weight"):
            x, x_address = _operand(x, s.x_packed, cl)
            dw = s.empty(s.w_size, s.w_strides)
            s.launch(found, x_address, dw.data_ptr(), dy_address)
    if needs[2]:
        with named("bias"):
            db = _ops._conv_backward_bias(dy)
    return dx, dw, db, None


# `GconvConvolution.apply` as torch's Python wrapper runs it outside functorch's transforms,
# without the wrapper's argument rebinding and unwrapping (a few microseconds a call); under
# functorch's transforms the wrapper runs.
_conv_apply = super(torch.autograd.Function, GconvConvolution).apply
