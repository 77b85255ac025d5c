#!/usr/bin/env python3
"""Makes the small ONNX test models with the `onnx` package's helper API (pip install onnx).

    python3 crates/gconv-cli/tests/data/make_onnx.py

tiny-net.onnx: a symbolic batch `N`, no recorded intermediate shapes (the reader infers them),
a stem, a grouped and strided convolution, a residual branch joined by Add, a depthwise
convolution and a 1x1 head; only the input and output shapes are recorded.
asymmetric-pad.onnx: one convolution padded 0 before and 1 after, which gconv refuses with the
layer's name.
"""

import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))


def conv(name, x, c, k, f, *, stride=1, pad=0, group=1, pads=None, inits):
    w = numpy_helper.from_array(np.zeros((k, c // group, f, f), dtype=np.float32), f"{name}.weight")
    inits.append(w)
    attrs = dict(kernel_shape=[f, f], strides=[stride, stride], group=group, pads=pads or [pad] * 4)
    return helper.make_node("Conv", [x, w.name], [f"{name}.out"], name=name, **attrs)


def tiny():
    inits = []
    nodes = [
        conv("stem", "x", 3, 8, 3, pad=1, inits=inits),
        helper.make_node("Relu", ["stem.out"], ["stem.relu"], name="stem.relu"),
        conv("grouped", "stem.relu", 8, 16, 3, stride=2, pad=1, group=4, inits=inits),
        helper.make_node("Relu", ["grouped.out"], ["grouped.relu"], name="grouped.relu"),
        conv("branch", "grouped.relu", 16, 16, 1, inits=inits),
        helper.make_node("Add", ["branch.out", "grouped.relu"], ["sum"], name="sum"),
        conv("depthwise", "sum", 16, 16, 3, pad=1, group=16, inits=inits),
        conv("head", "depthwise.out", 16, 10, 1, inits=inits),
        helper.make_node("GlobalAveragePool", ["head.out"], ["y"], name="pool"),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 16, 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10, 1, 1])
    graph = helper.make_graph(nodes, "tiny-net", [x], [y], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="gconv tests")


def asymmetric():
    inits = []
    nodes = [conv("padded", "x", 4, 4, 2, stride=2, pads=[0, 0, 1, 1], inits=inits)]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 9, 9])
    y = helper.make_tensor_value_info("padded.out", TensorProto.FLOAT, [2, 4, 5, 5])
    graph = helper.make_graph(nodes, "asymmetric-pad", [x], [y], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="gconv tests")


for name, model in [("tiny-net.onnx", tiny()), ("asymmetric-pad.onnx", asymmetric())]:
    onnx.checker.check_model(model)
    onnx.save(model, os.path.join(HERE, name))
    print(name, os.path.getsize(os.path.join(HERE, name)), "bytes")
