"""gconv's problem key, written from Python: the text the engine selects and stores by.

No torch here: the key is plain data, so the CPU path can be used (and tested) from numpy.
"""

DIRECTIONS = ("fwd", "bwd-data", "bwd-weight")
DTYPES = ("f32", "tf32", "f16", "bf16")
_LAYOUTS = {(False, 1): "NCW", (False, 2): "NCHW", (False, 3): "NCDHW", (True, 1): "NWC", (True, 2): "NHWC", (True, 3): "NDHWC"}


def _sizes(values):
    return "x".join(str(int(v)) for v in values)


def problem_key(direction, dtype, channels_last, n, c, k, groups, input_size, filter_size, stride, padding, dilation):
    """The key of one convolution: x is (n, c, *input_size), w is (k, c // groups, *filter_size),
    packed channels-first (NCHW family) or channels-last (NHWC family); stride, padding and
    dilation have one value per spatial dimension."""
    if direction not in DIRECTIONS:
        raise ValueError(f"unknown direction {direction!r} (expected one of {', '.join(DIRECTIONS)})")
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r} (expected one of {', '.join(DTYPES)})")
    rank = len(input_size)
    if not 1 <= rank <= 3:
        raise ValueError(f"gconv convolves 1, 2 or 3 spatial dimensions, not {rank}")
    for name, values in (("filter size", filter_size), ("stride", stride), ("padding", padding), ("dilation", dilation)):
        if len(values) != rank:
            raise ValueError(f"{name} {tuple(values)} has {len(values)} values for {rank} spatial dimensions")
    key = (
        f"v1:{direction}:{dtype}:{_LAYOUTS[(bool(channels_last), rank)]}:n{int(n)}:c{int(c)}:k{int(k)}"
        f":i{_sizes(input_size)}:f{_sizes(filter_size)}:s{_sizes(stride)}:p{_sizes(padding)}:d{_sizes(dilation)}"
    )
    if groups != 1:
        key += f":g{int(groups)}"
    return key
