"""gconv for PyTorch: convolutions run by the fastest of gconv's solvers for each shape (its
own CUDA kernels, cuDNN's engines, cuBLAS), selected once per shape and remembered.

    import gconv
    gconv.patch(model)            # every nn.Conv1d/2d/3d gconv can run
    gconv.tune(model, example)    # optional: select every layer's solvers ahead of training

`gconv.conv1d/2d/3d` mirror `torch.nn.functional`, `gconv.nn` mirrors torch's modules. Without
torch installed only the engine (`gconv._native`) and `gconv.problem_key` are available.
"""

from ._key import problem_key
from ._native import Engine, Error

try:
    import torch as _torch  # noqa: F401
except ImportError:
    _torch = None

if _torch is not None:
    from . import nn
    from ._engine import get_mode, mode, set_database, set_mode, stats
    from ._patch import PatchReport, patch
    from ._tune import tune
    from .functional import conv1d, conv2d, conv3d

__all__ = [
    "Engine", "Error", "problem_key", "nn", "conv1d", "conv2d", "conv3d", "patch", "PatchReport", "tune",
    "mode", "set_mode", "get_mode", "set_database", "stats",
]
