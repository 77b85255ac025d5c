"""gconv from PyTorch: outputs and gradients against torch.nn.functional on random problems, the
modules and patch, errors, modes, CUDA graphs and torch.compile. CPU tests run wherever torch
is installed; CUDA tests where a GPU is."""

import json
import subprocess
import sys
import warnings

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import gconv  # noqa: E402
from problems import random_problem, tensors, to_channels_last, worst_excess  # noqa: E402

CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="no GPU")
# Problems per device: the GPU's set covers every dtype, layout, rank, groups, stride, dilation
# and padding many times over.
PROBLEMS = {"cpu": 24, "cuda": 320}


@pytest.fixture(autouse=True, scope="module")
def private_database(tmp_path_factory):
    gconv.set_database(tmp_path_factory.mktemp("db") / "user.db")


@pytest.fixture(autouse=True)
def tf32_as_it_was():
    before = torch.backends.cudnn.allow_tf32
    yield
    torch.backends.cudnn.allow_tf32 = before


def check_problem(p, device, seed):
    torch.backends.cudnn.allow_tf32 = p.dtype == "tf32"
    x, w, dy = tensors(p, device, seed)
    conv = getattr(gconv, f"conv{p.rank}d")
    reference = getattr(F, f"conv{p.rank}d")
    args = dict(stride=p.stride, padding=p.padding, dilation=p.dilation, groups=p.groups)
    bias = torch.rand(p.k, generator=torch.Generator().manual_seed(seed)).to(device, x.dtype) if seed % 2 else None
    xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()
    bg = None if bias is None else bias.clone().requires_grad_()
    y = conv(xg, wg, bg, **args)
    y.backward(dy)
    x64, w64 = x.double().requires_grad_(), w.double().requires_grad_()
    b64 = None if bias is None else bias.double().requires_grad_()
    y64 = reference(x64, w64, b64, **args)
    y64.backward(dy.double())
    fwd, bwd_data, bwd_weight = p.reduction_lengths()
    excess = {
        "y": worst_excess(y.detach(), y64.detach(), p.dtype, fwd, 1.0, 0.0 if bias is None else 1.0),
        "dx": worst_excess(xg.grad, x64.grad, p.dtype, bwd_data, 1.0),
        "dw": worst_excess(wg.grad, w64.grad, p.dtype, bwd_weight, 1.0),
    }
    if bias is not None:
        excess["db"] = worst_excess(bg.grad, b64.grad, p.dtype, bwd_weight, 1.0)
    assert all(v <= 1 for v in excess.values()), f"{p}: error over its bound by {excess}"
    if p.channels_last and not x.is_contiguous():
        assert to_channels_last(y).stride() == y.stride(), "channels-last in, channels-last out"


@pytest.mark.parametrize("device,index", [("cpu", i) for i in range(PROBLEMS["cpu"])] + [("cuda", i) for i in range(PROBLEMS["cuda"])])
def test_outputs_and_gradients_match_torch(device, index):
    if device == "cuda" and not CUDA:
        pytest.skip("no GPU")
    # The learned pick, not a find per problem: these test the package's plumbing (layouts,
    # dtypes, autograd, streams); the Rust GPU suite tests every solver.
    with gconv.mode("fast"):
        check_problem(random_problem(1000 + index), device, index)


DEVICES = ["cpu"] + (["cuda"] if CUDA else [])


@pytest.mark.parametrize("device", DEVICES)
def test_find_mode_benchmarks_once_and_a_second_process_reads_the_database(device, tmp_path):
    script = f"""
import json, torch, gconv
gconv.set_database({str(tmp_path / "user.db")!r})
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(16, 16, 3, groups=4)).to({device!r})
gconv.patch(model)
x = torch.randn(2, 8, 12, 12, device={device!r})
model(x).sum().backward()
print(json.dumps(gconv.stats()))
"""
    runs = [json.loads(subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout) for _ in range(2)]
    counts = [next(iter(r.values())) for r in runs]
    assert counts[0].get("find", 0) == 5, counts  # two forwards, two backward-weights, one backward-data
    assert counts[1] == {"find-db": 5}, counts


@pytest.mark.parametrize("device", DEVICES)
def test_patch_swaps_what_it_can_keeps_weights_and_says_what_it_left(device):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(4, 8, 3, padding=1, bias=False),
        torch.nn.Conv2d(8, 8, 3, padding=1, padding_mode="reflect", groups=8),
        torch.nn.Conv2d(8, 8, 4, padding="same"),
        torch.nn.ConvTranspose2d(8, 4, 2, stride=2),
        torch.nn.Conv2d(4, 4, 3, padding="same", dilation=2),
    ).to(device)
    x = torch.randn(2, 4, 10, 10, device=device)
    with torch.no_grad():
        before = model(x)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    report = gconv.patch(model)
    assert report.swapped == ["0", "1", "4"]
    assert set(report.left) == {"2", "3"}
    assert "transposed" in report.left["3"] and "same" in report.left["2"]
    assert isinstance(model[0], gconv.nn.Conv2d) and isinstance(model[0], torch.nn.Conv2d)
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())
    with torch.no_grad():
        after = model(x)
    torch.testing.assert_close(after, before, rtol=1e-4, atol=1e-4)


def test_modules_take_torch_constructors_and_state_dicts():
    torch.manual_seed(0)
    ours, theirs = gconv.nn.Conv1d(6, 4, 3, stride=2, padding=1, groups=2), torch.nn.Conv1d(6, 4, 3, stride=2, padding=1, groups=2)
    theirs.load_state_dict(ours.state_dict())
    x = torch.randn(3, 6, 17)
    torch.testing.assert_close(ours(x), theirs(x), rtol=1e-5, atol=1e-5)
    ours3 = gconv.nn.Conv3d(2, 4, (1, 3, 3), padding=(0, 1, 1))
    x3 = torch.randn(1, 2, 3, 6, 6)
    torch.testing.assert_close(ours3(x3), F.conv3d(x3, ours3.weight, ours3.bias, padding=(0, 1, 1)), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_bad_calls_raise_clear_errors(device):
    x = torch.randn(2, 4, 8, 8, device=device)
    w = torch.randn(8, 2, 3, 3, device=device)
    with pytest.raises(ValueError, match="do not make 3 groups"):
        gconv.conv2d(x, w, groups=3)
    with pytest.raises(ValueError, match="4-dimensional input"):
        gconv.conv2d(x[0], w)
    with pytest.raises(TypeError, match="one dtype"):
        gconv.conv2d(x, w.half(), groups=2)
    with pytest.raises(TypeError, match="float64"):
        gconv.conv2d(x.double(), w.double(), groups=2)
    with pytest.raises(ValueError, match="leaves no output"):
        gconv.conv2d(x[:, :, :2, :2], w, groups=2)
    with pytest.raises(ValueError, match="stride"):
        gconv.conv2d(x, w, stride=0, groups=2)
    with pytest.raises(ValueError, match="padding='same'"):
        gconv.conv2d(x, torch.randn(8, 2, 2, 2, device=device), padding="same", groups=2)
    if device == "cuda":
        with pytest.raises(ValueError, match="one device"):
            gconv.conv2d(x, w.cpu(), groups=2)


def test_strided_views_are_copied_with_one_warning():
    x = torch.randn(2, 4, 16, 16)[:, :, ::2, ::2]
    w = torch.randn(4, 4, 3, 3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        y1 = gconv.conv2d(x, w)
        y2 = gconv.conv2d(x, w)
    assert sum("neither channels-first nor channels-last" in str(c.message) for c in caught) <= 1
    torch.testing.assert_close(y1, F.conv2d(x, w), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(y2, y1)


def test_modes_are_set_and_scoped():
    assert gconv.get_mode() == "find"
    with gconv.mode("fast"):
        assert gconv.get_mode() == "fast"
    assert gconv.get_mode() == "find"
    with pytest.raises(ValueError, match="unknown mode"):
        gconv.set_mode("sometimes")


@pytest.mark.parametrize("device", DEVICES)
def test_tune_selects_every_layer_ahead(device):
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(8, 8, 1)).to(device)
    gconv.patch(model)
    made = gconv.tune(model, torch.randn(2, 3, 9, 9, device=device))
    assert sum(made[f"{device}:0"].values()) == 5  # the first layer's input needs no gradient
    assert all(p.grad is None for p in model.parameters())


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_fullgraph(device):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(4, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(8, 8, 3, groups=8)).to(device)
    gconv.patch(model)
    compiled = torch.compile(model, fullgraph=True, backend="inductor" if device == "cuda" else "aot_eager")
    x = torch.randn(2, 4, 10, 10, device=device, requires_grad=True)
    eager = model(x)
    (gx_eager,) = torch.autograd.grad(eager.sum(), x)
    out = compiled(x)
    (gx,) = torch.autograd.grad(out.sum(), x)
    torch.testing.assert_close(out, eager)
    torch.testing.assert_close(gx, gx_eager)


@needs_cuda
def test_cuda_graph_capture_and_replay():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(16, 16, 3, padding=1, groups=16)).cuda()
    model = model.to(memory_format=torch.channels_last)
    gconv.patch(model)
    static_x = torch.randn(4, 8, 16, 16, device="cuda").to(memory_format=torch.channels_last)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            model.zero_grad(set_to_none=True)
            model(static_x).sum().backward()
    torch.cuda.current_stream().wait_stream(side)
    model.zero_grad(set_to_none=True)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_y = model(static_x)
        static_y.sum().backward()
    for seed in (1, 2):
        torch.manual_seed(seed)
        static_x.copy_(torch.randn(4, 8, 16, 16, device="cuda"))
        graph.replay()
        torch.cuda.synchronize()
        expected = model[2]._conv_forward(torch.relu(model[0](static_x)), model[2].weight, model[2].bias)
        torch.testing.assert_close(static_y, expected)
        assert model[0].weight.grad is not None and torch.isfinite(model[0].weight.grad).all()


@needs_cuda
@pytest.mark.parametrize("seed", range(1000, 1024))
def test_runs_repeated_on_the_same_memory_match_torch_every_time(seed):
    """Runs made again on the same addresses (a training step's, from the third step on) are
    launched from a graph captured of them: every round's results match torch's for that
    round's data, and some rounds were replays."""
    p = random_problem(seed)
    torch.backends.cudnn.allow_tf32 = p.dtype == "tf32"
    x, w, dy = tensors(p, "cuda", seed)
    x.requires_grad_()
    w.requires_grad_()
    conv = getattr(gconv, f"conv{p.rank}d")
    reference = getattr(F, f"conv{p.rank}d")
    args = dict(stride=p.stride, padding=p.padding, dilation=p.dilation, groups=p.groups)
    fwd, bwd_data, bwd_weight = p.reduction_lengths()
    before = gconv.launch_replays().get("cuda:0", {}).get("replayed", 0)
    for _ in range(6):
        with torch.no_grad():
            x.copy_(torch.rand_like(x) * 2 - 1)
            dy.copy_(torch.rand_like(dy) * 2 - 1)
        y = conv(x, w, None, **args)
        y.backward(dy)
        x64, w64 = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
        y64 = reference(x64, w64, None, **args)
        y64.backward(dy.double())
        excess = {
            "y": worst_excess(y.detach(), y64.detach(), p.dtype, fwd, 1.0),
            "dx": worst_excess(x.grad, x64.grad, p.dtype, bwd_data, 1.0),
            "dw": worst_excess(w.grad, w64.grad, p.dtype, bwd_weight, 1.0),
        }
        assert all(v <= 1 for v in excess.values()), f"{p}: error over its bound by {excess}"
        # Each round frees all it made, so the caching allocator hands the next round the same
        # addresses (as a training step's are from step to step).
        x.grad = w.grad = None
        del y, x64, w64, y64
    counts = gconv.launch_replays()["cuda:0"]
    assert counts["refused"] == 0 and counts["replayed"] > before, f"{p}: {counts}"


@needs_cuda
def test_a_shape_first_seen_in_capture_is_a_clear_error():
    x = torch.randn(3, 5, 7, 7, device="cuda")
    w = torch.randn(5, 5, 3, 3, device="cuda")
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(gconv.Error, match="first seen while a CUDA graph is being captured"):
        with torch.cuda.graph(graph):
            gconv.conv2d(x, w)


@pytest.mark.parametrize("device", DEVICES)
def test_mixed_layouts_and_unaligned_views(device):
    """A channels-last input with a contiguous weight (a model not converted), an incoming
    gradient in the other layout, and a view that starts 4 bytes into its storage."""
    torch.manual_seed(0)
    x = torch.randn(3, 8, 10, 10, device=device).to(memory_format=torch.channels_last).requires_grad_()
    w = torch.randn(16, 4, 3, 3, device=device, requires_grad=True)
    y = gconv.conv2d(x, w, padding=1, groups=2)
    dy = torch.randn(y.shape, device=device)  # channels-first, unlike y
    y.backward(dy)
    x64, w64 = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    y64 = F.conv2d(x64, w64, padding=1, groups=2)
    y64.backward(dy.double())
    tolerance = dict(rtol=1e-4, atol=1e-4) if device == "cpu" else dict(rtol=2e-2, atol=2e-2)  # TF32 on the GPU
    torch.testing.assert_close(y.double(), y64, **tolerance)
    torch.testing.assert_close(x.grad.double(), x64.grad, **tolerance)
    torch.testing.assert_close(w.grad.double(), w64.grad, **tolerance)
    storage = torch.randn(1 + 2 * 8 * 6 * 6, device=device)
    view = storage[1:].view(2, 8, 6, 6)
    assert view.data_ptr() % 16 != 0
    weight = torch.randn(8, 8, 1, 1, device=device)
    torch.testing.assert_close(gconv.conv2d(view, weight), F.conv2d(view, weight), **tolerance)
