"""`gconv.patch(model)`: every `nn.Conv1d/2d/3d` gconv can take becomes its gconv twin in place
(the same object, parameters, buffers and hooks), and the report says what stayed on PyTorch
and why."""

import torch

from .nn import GCONV_OF

_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


class PatchReport:
    """What `patch` did: `swapped` names the modules gconv now runs, `left` maps each module
    left on PyTorch to the reason."""

    def __init__(self):
        self.swapped = []
        self.left = {}

    def __repr__(self):
        lines = [f"gconv.patch: {len(self.swapped)} convolutions on gconv, {len(self.left)} left on PyTorch"]
        lines += [f"  {name or '(model)'}: {reason}" for name, reason in self.left.items()]
        return "\n".join(lines)


def _reason_to_leave(module):
    """Why gconv cannot run `module`, or None when it can."""
    if isinstance(module, torch.nn.modules.conv._ConvTransposeNd):
        return "transposed convolution"
    if type(module) not in GCONV_OF:
        return f"{type(module).__name__} is a subclass gconv does not know"
    weight = module.weight
    if weight.dtype not in _DTYPES:
        return f"weights in {weight.dtype}"
    if weight.device.type not in ("cpu", "cuda"):
        return f"weights on {weight.device.type}"
    if isinstance(module.padding, str) and module.padding == "same":
        reach = [d * (k - 1) for d, k in zip(module.dilation, module.kernel_size)]
        if any(r % 2 for r in reach):
            return f"padding='same' with kernel {module.kernel_size} and dilation {module.dilation} pads one side more"
    return None


def patch(model):
    """Swaps every convolution of `model` (and `model` itself) that gconv can run; returns a
    `PatchReport`. Weights stay where they are: no copy, same state_dict."""
    report = PatchReport()
    for name, module in model.named_modules():
        if not isinstance(module, torch.nn.modules.conv._ConvNd):
            continue
        if type(module) in GCONV_OF.values():
            report.swapped.append(name)
            continue
        reason = _reason_to_leave(module)
        if reason is None:
            module.__class__ = GCONV_OF[type(module)]
            report.swapped.append(name)
        else:
            report.left[name] = reason
    return report
