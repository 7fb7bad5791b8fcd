"""The torch.save / torch.load peer of bench/run_ckpt.sh: the same 64 float32 tensors as
ckpt_benchmark, saved as a dict to DIR/state.pt (then flushed and fsynced, as a checkpoint must
be to survive a crash) and loaded back after the page cache is dropped. Prints save and load
seconds."""
import os
import sys
import time

import torch

directory, gib = sys.argv[1], float(sys.argv[2])
tensors = 64
floats = int(gib * (1 << 30) / 4 / tensors)
state = {f"layer{t}.weight": (torch.arange(floats, dtype=torch.float32) % 1000) * 0.001 + t
         for t in range(tensors)}
path = os.path.join(directory, "state.pt")
start = time.monotonic()
with open(path, "wb") as f:
    torch.save(state, f)
    f.flush()
    os.fsync(f.fileno())
save = time.monotonic() - start
del state
try:
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")
except OSError:
    pass
start = time.monotonic()
loaded = torch.load(path)
load = time.monotonic() - start
assert len(loaded) == tensors
os.remove(path)
print(f"{save:.4f} {load:.4f}")
