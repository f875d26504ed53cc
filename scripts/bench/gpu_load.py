#!/usr/bin/python3
"""The bench's GPU load: what an inference server does with a checkpoint file.

    gpu_load.py FILE...    prints the bytes of the tensors loaded

Each file goes through safetensors.torch.load_file(FILE, device="cuda") (it maps the file
and copies each tensor to the GPU), then torch.cuda.synchronize(). Run only where
torch.cuda.is_available(); exits 3 when safetensors is missing.
"""
import sys

import torch

try:
    from safetensors.torch import load_file
except ImportError:
    sys.exit(3)


def main(paths):
    total = 0
    for path in paths:
        tensors = load_file(path, device="cuda")
        torch.cuda.synchronize()
        total += sum(t.numel() * t.element_size() for t in tensors.values())
        del tensors
    torch.cuda.empty_cache()
    print(total)


if __name__ == "__main__":
    main(sys.argv[1:])
