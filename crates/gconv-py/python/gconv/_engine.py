"""Engines per device, the selection mode, and plans per problem: the path every call takes.

A call looks its plan up by a tuple of the problem's facts (a dict hit); only a miss builds the
problem key and asks the engine, which answers from the databases, the learned model or a find.
"""

import contextlib
import json
import subprocess
import sys
import threading
import warnings

import torch

from . import _native
from ._key import problem_key

MODES = ("find", "fast")
_state = threading.local()
_default_mode = "find"
_engines = {}
_plans = {}
_lock = threading.Lock()
_db_path = None
_launch_replay = True
_counts = {}
_finders = {}


def get_mode():
    """The selection mode of this thread: `find` or `fast` (see `set_mode`)."""
    return getattr(_state, "mode", _default_mode)


def set_mode(mode):
    """Sets the default selection mode for shapes seen for the first time.

    `find` benchmarks gconv's candidates on first sight of a shape (as `cudnn.benchmark` does)
    and stores the ranking in gconv's user database, so no later process benchmarks it again;
    `fast` takes the database's answer, else the learned model's pick, and never benchmarks.
    """
    global _default_mode
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r} (expected one of {', '.join(MODES)})")
    _default_mode = mode


@contextlib.contextmanager
def mode(name):
    """Selects by `name` (`find` or `fast`) in this thread inside the block."""
    if name not in MODES:
        raise ValueError(f"unknown mode {name!r} (expected one of {', '.join(MODES)})")
    before = getattr(_state, "mode", None)
    _state.mode = name
    try:
        yield
    finally:
        if before is None:
            del _state.mode
        else:
            _state.mode = before


def set_database(path):
    """Uses the user database at `path` (gconv's default, shared with the CLI, otherwise).
    Takes effect for devices not used yet."""
    global _db_path
    _db_path = None if path is None else str(path)


def set_launch_replay(enabled):
    """Whether a GPU convolution run again on the same tensors' addresses (a training step's,
    from the third step on) is launched from a CUDA graph captured of it, which costs the host
    a few microseconds instead of a vendor library's or a kernel's launch path (on by
    default). Calls under a CUDA graph capture are always launched as they are."""
    global _launch_replay
    _launch_replay = bool(enabled)
    for found in list(_engines.values()):
        found.set_launch_replay(_launch_replay)


def launch_replays():
    """Per device in use, the runs the launch replay (`set_launch_replay`) captured into a CUDA
    graph, the graph launches it made in their place, and the runs it could not capture."""
    out = {}
    for (kind, index), found in list(_engines.items()):
        captured, replayed, refused = found.launch_replays()
        out[f"{kind}:{index}"] = {"captured": captured, "replayed": replayed, "refused": refused}
    return out


def engine(device):
    """The engine of a torch device (`cpu` or `cuda:N`), made on first use."""
    key = (device.type, device.index or 0)
    found = _engines.get(key)
    if found is None:
        with _lock:
            found = _engines.get(key)
            if found is None:
                if device.type not in ("cpu", "cuda"):
                    raise _native.Error(f"gconv runs on cpu and cuda tensors, not {device.type}")
                if device.type == "cuda":
                    # torch's cuDNN opened first: gconv then uses that one, not a second copy
                    # (two in one process fail to load each other's engines).
                    torch.backends.cudnn.version()
                found = _native.Engine(device.type, key[1], _db_path)
                found.set_launch_replay(_launch_replay)
                _engines[key] = found
    return found


def stats():
    """Selections made in this process per device, by where the answer came from: `find-db`
    (stored), `find` (benchmarked now), `model` (learned pick) or `rule`."""
    return {device: dict(counts) for device, counts in _counts.items()}


def _dtype_token(t):
    if t.dtype == torch.float32:
        if t.is_cuda and torch.backends.cudnn.allow_tf32:
            return "tf32"
        return "f32"
    if t.dtype == torch.float16:
        return "f16"
    if t.dtype == torch.bfloat16:
        return "bf16"
    raise TypeError(f"gconv convolves float32, float16 and bfloat16 tensors, not {t.dtype}")


def plan(direction, x_shape, w_shape, channels_last, t, stride, padding, dilation, groups):
    """The plan of one problem on `t`'s device and dtype, selected on first sight."""
    dtype = _dtype_token(t)
    device = t.device
    cache_key = (direction, dtype, channels_last, device.index, device.type, x_shape, w_shape, stride, padding, dilation, groups)
    found = _plans.get(cache_key)
    if found is not None:
        return found
    return _select(cache_key, direction, dtype, channels_last, device, x_shape, w_shape, stride, padding, dilation, groups)


def _select(cache_key, direction, dtype, channels_last, device, x_shape, w_shape, stride, padding, dilation, groups):
    key = problem_key(direction, dtype, channels_last, x_shape[0], x_shape[1], w_shape[0], groups, x_shape[2:], w_shape[2:], stride, padding, dilation)
    selecting = get_mode()
    e = engine(device)
    if selecting == "find":
        found, source = _find_apart(e, device, key)
    else:
        found = e.plan(key, selecting)
        source = found.source
    for note in e.take_notes():
        warnings.warn(f"gconv: {note}", stacklevel=3)
    counts = _counts.setdefault(f"{device.type}:{device.index or 0}", {})
    counts[source] = counts.get(source, 0) + 1
    _plans[cache_key] = found
    return found


def _find_apart(e, device, key):
    """The stored choice, else a find in the worker process (`gconv._find`) whose ranking the
    database then holds: a candidate that faults takes the worker down, not this process."""
    stored = e.stored(key)
    if stored is not None:
        return stored, "find-db"
    if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
        raise _native.Error(
            f"{key} is first seen while a CUDA graph is being captured, where gconv cannot benchmark: "
            "run the model once before capturing (as torch.cuda.graph's warm-up does), or call gconv.tune first"
        )
    answer = _finder(device).find(key)
    for note in answer.get("notes", []):
        warnings.warn(f"gconv: {note}", stacklevel=4)
    found = e.stored(key) if answer["ok"] else None
    if found is None:
        warnings.warn(f"gconv: the find of {key} failed ({answer.get('error', 'nothing stored')}); using the learned pick", stacklevel=4)
        found = e.plan(key, "fast")
        return found, found.source
    return found, "find"


class _Finder:
    """A find worker for one device, started on first use and kept for the process's life."""

    def __init__(self, device):
        self.args = [sys.executable, "-m", "gconv._find", device.type, str(device.index or 0), engine(device).db_path]
        self.process = None

    def find(self, key):
        if self.process is None or self.process.poll() is not None:
            self.process = subprocess.Popen(self.args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            self.process.stdin.write(key + "\n")
            self.process.stdin.flush()
            line = self.process.stdout.readline()
        except BrokenPipeError:
            line = ""
        if line:
            return json.loads(line)
        status = self.process.wait()
        return {"ok": False, "error": f"the find worker ended with status {status}: a candidate may have faulted"}


def close_finders():
    """Ends the find workers (each holds a CUDA context of its own while it lives); the next find
    starts a fresh one."""
    for finder in _finders.values():
        if finder.process is not None and finder.process.poll() is None:
            finder.process.stdin.close()
            finder.process.wait()
    _finders.clear()


def _finder(device):
    key = (device.type, device.index or 0)
    if key not in _finders:
        _finders[key] = _Finder(device)
    return _finders[key]


def aligned(t):
    """`t`, or a copy of it where its data is not 16-byte aligned (a view into a tensor)."""
    return t if t.data_ptr() % 16 == 0 else t.clone(memory_format=torch.preserve_format)


# A workspace kept per (GPU, stream) for launches outside graph captures, as PyTorch keeps
# cuBLAS's: an allocation per call costs the host about as much as a small layer's launch.
# Larger ones are allocated per call (their layers' kernels take far longer than the
# allocation), so that the memory kept stays small: a 32 MiB cap put SqueezeNet's training
# step 8% above PyTorch's peak. The CPU's runs take their caller's thread, where a shared
# buffer would be raced for.
_KEPT_WORKSPACE_BYTES = 4 << 20
_kept = {}
_capturing = torch.cuda.is_current_stream_capturing


def _workspace(device, stream, nbytes):
    """A workspace of `nbytes` for a launch on `stream`. A capture's comes from the capture's
    own pool (a graph must not hold memory the process later frees); the others reuse the one
    kept for the stream, which its launches use one after another in stream order."""
    if device.type != "cuda" or nbytes > _KEPT_WORKSPACE_BYTES or _capturing():
        return torch.empty(nbytes, dtype=torch.uint8, device=device)
    key = (device.index, stream)
    kept = _kept.get(key)
    if kept is None or kept.numel() < nbytes:
        kept = _kept[key] = torch.empty(nbytes, dtype=torch.uint8, device=device)
    return kept


def launch(found, device, stream, x_address, w_address, y_address):
    """Enqueues `found` on `stream` over the tensors at these addresses, with a workspace from
    torch's caching allocator, held until the launch is enqueued (stream order keeps it)."""
    workspace_bytes = found.workspace_bytes
    if workspace_bytes:
        workspace = _workspace(device, stream, workspace_bytes)
        found.run(x_address, w_address, y_address, workspace.data_ptr(), workspace_bytes, stream)
    else:
        found.run(x_address, w_address, y_address, 0, 0, stream)


def run(found, x, w, y):
    """Enqueues `found` on torch's current stream of the tensors' device."""
    stream = torch._C._cuda_getCurrentRawStream(x.device.index) if x.is_cuda else 0
    launch(found, x.device, stream, x.data_ptr(), w.data_ptr(), y.data_ptr())
