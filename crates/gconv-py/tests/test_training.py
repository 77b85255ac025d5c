"""A user's acceptance test: a small CNN trained on scikit-learn's handwritten digits (1,797 8x8
images that ship inside the package) once with PyTorch's convolutions and once after
`gconv.patch`, from the same initial weights and batch order. The loss curves must agree within
noise and the held-out accuracy within one point (597 held-out images: a point is six of them).

The run is taken to convergence (30 epochs, the learning rate annealed to zero): stopped
halfway, at about 93%, the accuracy depends on rounding alone by about a point (PyTorch against
PyTorch with its weights scaled by 1 + 1e-6 noise: 93.1% to 94.0% over six draws on the CPU);
converged, at about 97%, by half a point (97.0% to 97.5%)."""

import copy

import pytest

torch = pytest.importorskip("torch")
datasets = pytest.importorskip("sklearn.datasets")
import gconv  # noqa: E402

EPOCHS = 30
BATCH = 64


def digits(device):
    data = datasets.load_digits()
    x = torch.tensor(data.images, dtype=torch.float32).unsqueeze(1) / 16.0
    y = torch.tensor(data.target)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
    x, y = x[order].to(device), y[order].to(device)
    return (x[:1200], y[:1200]), (x[1200:], y[1200:])


def network():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 16, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Conv2d(16, 32, 3, padding=1, groups=2),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(32, 32, 3, padding=1, groups=32),
        torch.nn.ReLU(),
        torch.nn.Conv2d(32, 64, 1),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(64, 10),
    )


def train(model, train_set, test_set):
    (x, y), (x_test, y_test) = train_set, test_set
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, EPOCHS)
    order = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(EPOCHS):
        total = 0.0
        for batch in torch.randperm(len(y), generator=order).split(BATCH):
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x[batch]), y[batch])
            loss.backward()
            optimizer.step()
            total += loss.item() * len(batch)
        schedule.step()
        losses.append(total / len(y))
    with torch.no_grad():
        accuracy = (model(x_test).argmax(1) == y_test).float().mean().item() * 100
    return losses, accuracy


@pytest.mark.parametrize("device", ["cpu"] + (["cuda"] if torch.cuda.is_available() else []))
def test_digits_train_the_same_with_gconv(device, tmp_path):
    gconv.set_database(tmp_path / "user.db")
    before, torch.backends.cudnn.allow_tf32 = torch.backends.cudnn.allow_tf32, False
    train_set, test_set = digits(device)
    reference = network().to(device)
    patched = copy.deepcopy(reference)
    report = gconv.patch(patched)
    assert len(report.swapped) == 4 and not report.left
    torch_losses, torch_accuracy = train(reference, train_set, test_set)
    gconv_losses, gconv_accuracy = train(patched, train_set, test_set)
    print(f"\n{device} losses torch {[round(v, 4) for v in torch_losses]}\n{device} losses gconv {[round(v, 4) for v in gconv_losses]}")
    print(f"{device} accuracy torch {torch_accuracy:.2f}% gconv {gconv_accuracy:.2f}%")
    assert torch_losses[-1] < 0.5 * torch_losses[0], "the network learns"
    for epoch, (a, b) in enumerate(zip(torch_losses, gconv_losses)):
        assert abs(a - b) <= 0.05 * max(a, b) + 0.01, f"epoch {epoch}: loss {b:.4f} with gconv against {a:.4f}"
    assert abs(torch_accuracy - gconv_accuracy) <= 1.0
    torch.backends.cudnn.allow_tf32 = before
