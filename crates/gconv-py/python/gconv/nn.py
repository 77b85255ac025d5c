"""`gconv.nn.Conv1d`, `Conv2d` and `Conv3d`: torch's modules (same constructor, parameters and
state_dict) whose convolution gconv runs. Padding modes other than zeros pad with torch first,
as torch's own modules do."""

import torch
import torch.nn.functional as F

from . import functional


def _forward(module, conv, input, weight, bias):
    if module.padding_mode != "zeros":
        padded = F.pad(input, module._reversed_padding_repeated_twice, mode=module.padding_mode)
        return conv(padded, weight, bias, module.stride, 0, module.dilation, module.groups)
    return conv(input, weight, bias, module.stride, module.padding, module.dilation, module.groups)


class Conv1d(torch.nn.Conv1d):
    def _conv_forward(self, input, weight, bias):
        return _forward(self, functional.conv1d, input, weight, bias)


class Conv2d(torch.nn.Conv2d):
    def _conv_forward(self, input, weight, bias):
        return _forward(self, functional.conv2d, input, weight, bias)


class Conv3d(torch.nn.Conv3d):
    def _conv_forward(self, input, weight, bias):
        return _forward(self, functional.conv3d, input, weight, bias)


GCONV_OF = {torch.nn.Conv1d: Conv1d, torch.nn.Conv2d: Conv2d, torch.nn.Conv3d: Conv3d}
