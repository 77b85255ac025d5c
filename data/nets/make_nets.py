"""Writes gconv's built-in networks (data/nets/*.txt) from torchvision's models.

Each model (weights=None: only the architecture matters) is traced with torch.fx and its
shapes propagated for one batch-1 input; every Conv1d/2d/3d becomes one line:

    <layer name> <- <producers> : <problem key>

Producers are the convolutions (or `input`) whose outputs reach this layer's input through
other operations (activations, pooling, additions, concatenations). A line `output <- ...`
names the convolutions whose outputs reach the network's output without another convolution.
Keys are forward fp32 NCHW-family at batch 1; gconv sets the batch, dtype, layout and direction.

Usage: python3 make_nets.py OUT_DIR [NAME...]   (every network, or those named)
"""
import sys

import torch
import torchvision
from torch import nn
from torch.fx import GraphModule, Tracer
from torch.fx.passes.shape_prop import ShapeProp

NETS = {
    "resnet50": ("ResNet-50", lambda: torchvision.models.resnet50(weights=None), (3, 224, 224)),
    "resnext50_32x4d": ("ResNeXt-50 32x4d", lambda: torchvision.models.resnext50_32x4d(weights=None), (3, 224, 224)),
    "mobilenet_v2": ("MobileNetV2", lambda: torchvision.models.mobilenet_v2(weights=None), (3, 224, 224)),
    "efficientnet_b0": ("EfficientNet-B0", lambda: torchvision.models.efficientnet_b0(weights=None), (3, 224, 224)),
    "convnext_tiny": ("ConvNeXt-T", lambda: torchvision.models.convnext_tiny(weights=None), (3, 224, 224)),
    "inception_v3": ("Inception-v3", lambda: torchvision.models.inception_v3(weights=None, aux_logits=False, init_weights=False), (3, 299, 299)),
    "squeezenet1_1": ("SqueezeNet 1.1", lambda: torchvision.models.squeezenet1_1(weights=None), (3, 224, 224)),
    "r3d_18": ("R3D-18", lambda: torchvision.models.video.r3d_18(weights=None), (3, 16, 112, 112)),
    "resnet18": ("ResNet-18", lambda: torchvision.models.resnet18(weights=None), (3, 224, 224)),
    "wide_resnet50_2": ("Wide ResNet-50-2", lambda: torchvision.models.wide_resnet50_2(weights=None), (3, 224, 224)),
    "vgg16": ("VGG-16", lambda: torchvision.models.vgg16(weights=None), (3, 224, 224)),
    "densenet121": ("DenseNet-121", lambda: torchvision.models.densenet121(weights=None), (3, 224, 224)),
    "shufflenet_v2_x1_0": ("ShuffleNetV2 1.0x", lambda: torchvision.models.shufflenet_v2_x1_0(weights=None), (3, 224, 224)),
    "mnasnet1_0": ("MNASNet 1.0", lambda: torchvision.models.mnasnet1_0(weights=None), (3, 224, 224)),
    "mobilenet_v3_large": ("MobileNetV3-Large", lambda: torchvision.models.mobilenet_v3_large(weights=None), (3, 224, 224)),
    "regnet_y_800mf": ("RegNetY-800MF", lambda: torchvision.models.regnet_y_800mf(weights=None), (3, 224, 224)),
    "efficientnet_v2_s": ("EfficientNetV2-S", lambda: torchvision.models.efficientnet_v2_s(weights=None), (3, 384, 384)),
    "r2plus1d_18": ("R(2+1)D-18", lambda: torchvision.models.video.r2plus1d_18(weights=None), (3, 16, 112, 112)),
}


def key(conv, in_shape):
    rank = len(in_shape) - 2
    sizes = "x".join(str(s) for s in in_shape[2:])
    pad = conv.padding if isinstance(conv.padding, tuple) else (conv.padding,) * rank
    if any(not isinstance(q, int) for q in pad):
        raise SystemExit(f"padding {conv.padding!r} is not explicit")
    parts = [
        "v1", "fwd", "f32", ["NCW", "NCHW", "NCDHW"][rank - 1], "n1", f"c{conv.in_channels}", f"k{conv.out_channels}", f"i{sizes}",
        "f" + "x".join(map(str, conv.kernel_size)), "s" + "x".join(map(str, conv.stride)),
        "p" + "x".join(map(str, pad)), "d" + "x".join(map(str, conv.dilation)),
    ]
    if conv.groups != 1:
        parts.append(f"g{conv.groups}")
    return ":".join(parts)


class ConvLeaves(Tracer):
    """Keeps every convolution a module call, subclasses too (R3D's Conv3DSimple), so that
    none is traced into a bare functional call."""

    def is_leaf_module(self, m, qualname):
        return isinstance(m, CONVS) or super().is_leaf_module(m, qualname)


CONVS = (nn.Conv1d, nn.Conv2d, nn.Conv3d)


def layers(model, shape):
    model = model.eval()
    graph = GraphModule(model, ConvLeaves().trace(model))
    ShapeProp(graph).propagate(torch.randn(1, *shape))
    modules = dict(graph.named_modules())
    reach = {}
    lines = []
    for node in graph.graph.nodes:
        if node.op == "placeholder":
            reach[node] = {"input"}
            continue
        sources = set()
        for arg in node.all_input_nodes:
            sources |= reach.get(arg, set())
        module = modules.get(node.target) if node.op == "call_module" else None
        if isinstance(module, CONVS):
            in_shape = tuple(node.args[0].meta["tensor_meta"].shape)
            lines.append(f"{node.target} <- {' '.join(sorted(sources))} : {key(module, in_shape)}")
            reach[node] = {node.target}
        elif node.op == "output":
            lines.append(f"output <- {' '.join(sorted(sources))}")
        else:
            reach[node] = sources
    return lines


def main():
    out, named = sys.argv[1], sys.argv[2:]
    unknown = [n for n in named if n not in NETS]
    if unknown:
        sys.exit(f"no network {', '.join(unknown)} (known: {', '.join(NETS)})")
    for name, (title, make, shape) in NETS.items():
        if named and name not in named:
            continue
        lines = layers(make(), shape)
        with open(f"{out}/{name}.txt", "w") as f:
            f.write(f"# {title} (torchvision {torchvision.__version__}), input {'x'.join(map(str, shape))}: "
                    f"{len(lines) - 1} convolutions. Made by make_nets.py.\n")
            f.write("\n".join(lines) + "\n")
        print(f"{name}: {len(lines) - 1} convolutions")


if __name__ == "__main__":
    main()
