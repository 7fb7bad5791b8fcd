#!/usr/bin/python3
"""Trains pillar's demo models on scikit-learn's bundled `digits` set and writes the demo store.

Run with Debian's interpreter (python3-torch, python3-sklearn):
    /usr/bin/python3 scripts/make_demo_models.py models/demo

Writes, under the output directory:
  store/digits/1/{model.pt,model.toml}       primary MLP (64 -> 128 -> 64 -> 10)
  store/digits-lite/1/{model.pt,model.toml}  lighter fallback (64 -> 10, linear)
  heldout.csv                                held-out labelled set: label,p0..p63 (raw 0..16)
  reference_profile.json                     per-feature histograms of the training inputs
  lineage.json                               seed, data hash, parameters, accuracies
The models take raw pixel intensities (0..16) and scale them internally, so clients send the
image as it is. Everything is seeded; the same script gives the same accuracy.
"""
import hashlib
import json
import os
import subprocess
import sys

import numpy as np
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

SEED = 20261129
EPOCHS = 60


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(64, 128), torch.nn.ReLU(),
            torch.nn.Linear(128, 64), torch.nn.ReLU(),
            torch.nn.Linear(64, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.net(x / 16.0), dim=1)


class Linear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.net(x / 16.0), dim=1)


def train(model, x, y):
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    loss_fn = torch.nn.NLLLoss()
    gen = torch.Generator().manual_seed(SEED)
    for _ in range(EPOCHS):
        perm = torch.randperm(len(x), generator=gen)
        for i in range(0, len(x), 64):
            idx = perm[i:i + 64]
            opt.zero_grad()
            loss = loss_fn(torch.log(model(x[idx]) + 1e-9), y[idx])
            loss.backward()
            opt.step()
    return model


def accuracy(model, x, y):
    with torch.no_grad():
        return float((model(x).argmax(dim=1) == y).float().mean())


MODEL_TOML = """# {description}
platform = "torchscript"
max_batch_size = 64

[[input]]
name = "pixels"
datatype = "FP32"
shape = [64]

[[output]]
name = "probabilities"
datatype = "FP32"
shape = [10]

[batching]
max_queue_delay_us = {delay}
max_queue_size = 4096

[instance]
count = {instances}
kind = "auto"

# What policy conditions read as model.<name>: the built-in policy lets a "user" key use the
# models of its own tenant.
[access]
tenant = "demo"
"""


def code_version():
    """The commit of the training code, when it runs from a git checkout."""
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True, cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def version_lineage(name, description, data_hash, train_rows, heldout_rows, acc, correct):
    import sklearn
    return {
        "schema": "pillar-lineage-v1",
        "model": name,
        "description": description,
        "parent": None,
        "training_data": {"name": "sklearn.datasets.load_digits", "sha256": data_hash,
                          "train_rows": train_rows, "heldout_rows": heldout_rows},
        "code": {"script": "scripts/make_demo_models.py", "version": code_version()},
        "parameters": {"seed": SEED, "epochs": EPOCHS, "torch_threads": 1,
                       "test_size": 0.25},
        "metrics": {"heldout_accuracy": round(acc, 6), "heldout_correct": correct},
        "libraries": {"torch": torch.__version__, "numpy": np.__version__,
                      "scikit-learn": sklearn.__version__},
    }


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "models/demo"
    torch.manual_seed(SEED)
    torch.set_num_threads(1)
    digits = load_digits()
    data = digits.data.astype(np.float32)
    target = digits.target.astype(np.int64)
    data_hash = hashlib.sha256(data.tobytes() + target.tobytes()).hexdigest()
    x_train, x_test, y_train, y_test = train_test_split(
        data, target, test_size=0.25, random_state=SEED, stratify=target)
    xt, yt = torch.from_numpy(x_train), torch.from_numpy(y_train)
    xh, yh = torch.from_numpy(x_test), torch.from_numpy(y_test)

    lineage = {"seed": SEED, "epochs": EPOCHS, "dataset": "sklearn.datasets.load_digits",
               "dataset_sha256": data_hash, "train_rows": len(x_train),
               "heldout_rows": len(x_test), "torch": torch.__version__, "models": {}}
    for name, cls, desc, delay, inst in [
            ("digits", Mlp, "Primary digit classifier: MLP 64-128-64-10.", 200, 1),
            ("digits-lite", Linear, "Fallback digit classifier: linear 64-10.", 100, 1)]:
        model = train(cls(), xt, yt).eval()
        acc = accuracy(model, xh, yh)
        predictions = model(xh).argmax(dim=1)
        correct = int((predictions == yh).sum())
        vdir = os.path.join(out, "store", name, "1")
        os.makedirs(vdir, exist_ok=True)
        scripted = torch.jit.script(model)
        scripted.save(os.path.join(vdir, "model.pt"))
        with open(os.path.join(vdir, "model.toml"), "w") as f:
            f.write(MODEL_TOML.format(description=desc, delay=delay, instances=inst))
        with open(os.path.join(vdir, "model.pt"), "rb") as f:
            model_hash = hashlib.sha256(f.read()).hexdigest()
        lineage["models"][name] = {"version": 1, "heldout_accuracy": acc,
                                   "heldout_correct": correct, "model_pt_sha256": model_hash}
        # The version's own lineage, next to its weights: it is signed with them
        # (docs/formats/model_store.md, "lineage.json").
        with open(os.path.join(vdir, "lineage.json"), "w") as f:
            json.dump(version_lineage(name, desc, data_hash, len(x_train), len(x_test), acc,
                                      correct), f, indent=2, sort_keys=True)
            f.write("\n")
        print(f"{name}: held-out accuracy {acc:.4f} ({correct}/{len(x_test)})")

    with open(os.path.join(out, "heldout.csv"), "w") as f:
        f.write("label," + ",".join(f"p{i}" for i in range(64)) + "\n")
        for row, label in zip(x_test, y_test):
            f.write(str(int(label)) + "," + ",".join(str(int(v)) for v in row) + "\n")
    edges = list(np.linspace(0, 16, 9))
    profile = {"features": [], "bin_edges": edges, "rows": len(x_train)}
    for i in range(64):
        col = x_train[:, i]
        counts, _ = np.histogram(col, bins=edges)
        profile["features"].append({"name": f"p{i}", "mean": float(col.mean()),
                                    "std": float(col.std()), "counts": [int(c) for c in counts]})
    with open(os.path.join(out, "reference_profile.json"), "w") as f:
        json.dump(profile, f, indent=1)
    with open(os.path.join(out, "lineage.json"), "w") as f:
        json.dump(lineage, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()
