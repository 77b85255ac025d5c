"""The find worker: `python -m gconv._find BACKEND DEVICE DB` benchmarks each problem key read
from standard input (one per line) and answers with one JSON line per key; the rankings go to
the database, where the parent process reads its choices.

A find runs every candidate, and a candidate that faults (a vendor engine writing out of
bounds, say) leaves the whole CUDA context unusable: in a worker that costs the worker, not the
user's training process and its tensors.
"""

import json
import sys

from ._native import DeviceLost, Engine


def _open_torch_cudnn():
    import torch

    torch.backends.cudnn.version()


def main():
    backend, device, db = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    if backend == "cuda":
        # The parent runs on torch's cuDNN; the worker must rank the same library's engines.
        _open_torch_cudnn()
    engine = Engine(backend, device, db)
    for line in sys.stdin:
        key = line.strip()
        if not key:
            continue
        lost = False
        try:
            plan = engine.plan(key, "find")
            answer = {"key": key, "ok": True, "solver": plan.solver, "config": plan.config, "source": plan.source}
        except DeviceLost as e:
            answer, lost = {"key": key, "ok": False, "error": f"a candidate faulted: {e}"}, True
        except Exception as e:  # every failure is the parent's to report
            answer = {"key": key, "ok": False, "error": f"{type(e).__name__}: {e}"}
        answer["notes"] = engine.take_notes()
        print(json.dumps(answer), flush=True)
        if lost:
            # Nothing more can run in this context: the parent starts a fresh worker.
            sys.exit(3)


if __name__ == "__main__":
    main()
