"""`gconv.tune(model, *example_inputs)`: selects, by benchmark, every convolution a training
step of the model runs (forward, backward-data and backward-weight) and stores the choices in
gconv's user database, so that training, in this process or a later one, starts with none to
make."""

import gc

import torch

from . import _engine


def _tensors(out):
    if isinstance(out, torch.Tensor):
        yield out
    elif isinstance(out, dict):
        for v in out.values():
            yield from _tensors(v)
    elif isinstance(out, (list, tuple)):
        for v in out:
            yield from _tensors(v)


def tune(model, *example_inputs, backward=True):
    """Runs one forward (and, unless `backward=False`, one backward) pass of `model` on the
    example inputs in `find` mode, then clears the gradients it made. Returns the selections
    this made per device (see `gconv.stats`)."""
    before = _engine.stats()
    with _engine.mode("find"), torch.set_grad_enabled(backward):
        out = model(*example_inputs)
        if backward:
            outputs = [t for t in _tensors(out) if t.requires_grad]
            if outputs:
                torch.autograd.backward(outputs, [torch.ones_like(t) for t in outputs])
    if backward:
        model.zero_grad(set_to_none=True)
    # Training needs no more finds: the workers' GPU memory goes back.
    _engine.close_finders()
    # A long tune leaves garbage behind (a find's answers, its pass's autograd graph); collected
    # here, not by a collection falling in the first training step.
    gc.collect()
    after = _engine.stats()
    return {device: {k: v - before.get(device, {}).get(k, 0) for k, v in counts.items()} for device, counts in after.items()}
