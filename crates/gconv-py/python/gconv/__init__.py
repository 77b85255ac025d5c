"""gconv for PyTorch: convolutions run by the fastest of gconv's solvers for each shape (its
own CUDA kernels, cuDNN's engines, cuBLAS), selected once per shape and remembered.

    import gconv
    gconv.patch(model)            # every nn.Conv1d/2d/3d gconv can run
    gconv.tune(model, example)    # optional: select every layer's solvers ahead of training

`gconv.conv1d/2d/3d` mirror `torch.nn.functional`, `gconv.nn` mirrors torch's modules. The
torch-facing parts load on first use, so the engine (`gconv.Engine`, `gconv.problem_key`)
works without torch.
"""

import importlib

from ._key import problem_key
from ._native import Engine, Error

_FROM = {
    "nn": None,
    "functional": None,
    "conv1d": "functional",
    "conv2d": "functional",
    "conv3d": "functional",
    "patch": "_patch",
    "PatchReport": "_patch",
    "tune": "_tune",
    "mode": "_engine",
    "set_mode": "_engine",
    "get_mode": "_engine",
    "set_database": "_engine",
    "set_launch_replay": "_engine",
    "launch_replays": "_engine",
    "stats": "_engine",
}

__all__ = ["Engine", "Error", "problem_key"] + list(_FROM)


def __getattr__(name):
    if name not in _FROM:
        raise AttributeError(f"module 'gconv' has no attribute {name!r}")
    module = importlib.import_module(f".{_FROM[name] or name}", __name__)
    value = module if _FROM[name] is None else getattr(module, name)
    # Kept, so later lookups (one per convolution call) do not come back here.
    globals()[name] = value
    return value
