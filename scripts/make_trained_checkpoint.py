#!/usr/bin/python3
"""Writes a checkpoint of real-weights-like values: an MLP trained with Adam on random data.

Random normal values (make_checkpoint.py --kind bench) flatter nothing a compressor does,
but they can mislead: trained weights have another spread of exponents. This trains a small
torch.nn MLP for --steps Adam steps on a fixed random regression task and saves its state
dict with torch.save as OUT_DIR/pytorch_model.bin, in --dtype (float32 as trained, or cast
to bfloat16 / float16 as models are shipped). Deterministic for a given seed and torch.

Usage: make_trained_checkpoint.py OUT_DIR [--width 1024] [--depth 4] [--steps 300]
                                          [--dtype bfloat16] [--seed 0]
Needs Debian's python3-torch (run it with /usr/bin/python3).
"""
import argparse
import os

import torch


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out_dir")
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--depth", type=int, default=4, help="hidden layers")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--dtype", default="bfloat16", choices=("float32", "bfloat16", "float16"))
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()

    torch.manual_seed(args.seed)
    layers, width = [], args.width
    for _ in range(args.depth):
        layers += [torch.nn.Linear(width, width), torch.nn.GELU(), torch.nn.LayerNorm(width)]
    layers.append(torch.nn.Linear(width, 16))
    model = torch.nn.Sequential(*layers)
    # A fixed random teacher gives the weights something to learn, so they move away from
    # their initialization the way trained weights do.
    teacher = torch.nn.Linear(width, 16)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(args.steps):
        x = torch.randn(args.batch, width)
        loss = torch.nn.functional.mse_loss(model(x), torch.tanh(teacher(x)))
        opt.zero_grad()
        loss.backward()
        opt.step()
    dtype = getattr(torch, args.dtype)
    state = {k: v.detach().to(dtype).contiguous() for k, v in model.state_dict().items()}
    os.makedirs(args.out_dir, exist_ok=True)
    torch.save(state, os.path.join(args.out_dir, "pytorch_model.bin"))
    print(f"{args.out_dir}: {sum(v.numel() for v in state.values())} parameters, {args.dtype}, "
          f"final loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
