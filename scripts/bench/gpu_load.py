#!/usr/bin/python3
"""The bench's GPU load: what an inference server does with a checkpoint file.

    gpu_load.py FILE...    prints "BYTES SECONDS": the tensors' bytes and the load's time

Each file goes through safetensors.torch.load_file(FILE, device="cuda") (it maps the file
and copies each tensor to the GPU), then torch.cuda.synchronize(). The time runs from the
first load to the last synchronize: importing torch and starting CUDA (seconds, the same
for every contender) are left out, so they do not flatten the ratios. Run only where
torch.cuda.is_available(); exits 3 when safetensors is missing.
"""
import sys
import time

import torch

try:
    from safetensors.torch import load_file
except ImportError:
    sys.exit(3)


def main(paths):
    torch.empty(1, device="cuda")  # CUDA started before the clock
    torch.cuda.synchronize()
    total = 0
    start = time.monotonic()
    for path in paths:
        tensors = load_file(path, device="cuda")
        torch.cuda.synchronize()
        total += sum(t.numel() * t.element_size() for t in tensors.values())
        del tensors
    seconds = time.monotonic() - start
    torch.cuda.empty_cache()
    print(total, f"{seconds:.6f}")


if __name__ == "__main__":
    main(sys.argv[1:])
