#!/usr/bin/python3
"""Writes a checkpoint of real-weights-like values: an MLP trained with Adam on a synthetic task.

Random normal values (make_checkpoint.py --kind bench) flatter nothing a compressor does,
but they can mislead: trained weights have another spread of exponents. This trains a small
torch.nn MLP for --steps Adam steps on a fixed random regression task and saves its state
dict with torch.save as OUT_DIR/pytorch_model.bin, in --dtype (float32 as trained, or cast
to bfloat16 / float16 as models are shipped). Deterministic for a given seed and torch.

Two tasks. By default the inputs are i.i.d. normal and the target is tanh of a random
linear map of them. With --latent K the inputs lie near a random K-dimensional subspace
(K normal coordinates, projected, plus 0.1 noise) and the target is a small random tanh
MLP of those K coordinates: a task a few hundred small batches can learn, so the weights
move the way training moves them (the held-out loss printed at the end says how far).

Usage: make_trained_checkpoint.py OUT_DIR [--width 1024] [--depth 4] [--steps 300]
                                          [--batch 64] [--lr 1e-3] [--latent 0]
                                          [--dtype bfloat16] [--seed 0]
Needs Debian's python3-torch (run it with /usr/bin/python3).
"""
import argparse
import os

import torch

OUTPUTS = 16


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out_dir")
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--depth", type=int, default=4, help="hidden layers")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-3, help="Adam learning rate")
    p.add_argument("--latent", type=int, default=0,
                   help="K > 0: inputs near a K-dim subspace, target an MLP of its coordinates")
    p.add_argument("--dtype", default="bfloat16", choices=("float32", "bfloat16", "float16"))
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    if args.latent < 0 or args.width < 1 or args.depth < 1 or args.steps < 0 or args.batch < 1:
        p.error("--width, --depth and --batch must be positive, --steps and --latent not negative")

    torch.manual_seed(args.seed)
    layers, width = [], args.width
    for _ in range(args.depth):
        layers += [torch.nn.Linear(width, width), torch.nn.GELU(), torch.nn.LayerNorm(width)]
    layers.append(torch.nn.Linear(width, OUTPUTS))
    model = torch.nn.Sequential(*layers)
    # A fixed random teacher gives the weights something to learn, so they move away from
    # their initialization the way trained weights do.
    if args.latent:
        k = args.latent
        teacher = torch.nn.Sequential(torch.nn.Linear(k, 64), torch.nn.Tanh(),
                                      torch.nn.Linear(64, OUTPUTS))
        proj = torch.randn(k, width)

        def sample(n, gen=None):
            z = torch.randn(n, k, generator=gen)
            with torch.no_grad():
                y = teacher(z)
            return z @ proj + 0.1 * torch.randn(n, width, generator=gen), y
    else:
        teacher = torch.nn.Linear(width, OUTPUTS)

        def sample(n, gen=None):
            x = torch.randn(n, width, generator=gen)
            with torch.no_grad():
                y = torch.tanh(teacher(x))
            return x, y

    # Held-out data from a generator of its own: the training stream stays what the seed gives.
    x_eval, y_eval = sample(256, torch.Generator().manual_seed(args.seed + 1))

    def held_out_loss():
        with torch.no_grad():
            return torch.nn.functional.mse_loss(model(x_eval), y_eval).item()

    before = held_out_loss()
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    loss = torch.zeros(())
    for _ in range(args.steps):
        x, y = sample(args.batch)
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    after = held_out_loss()
    dtype = getattr(torch, args.dtype)
    state = {k: v.detach().to(dtype).contiguous() for k, v in model.state_dict().items()}
    os.makedirs(args.out_dir, exist_ok=True)
    torch.save(state, os.path.join(args.out_dir, "pytorch_model.bin"))
    print(f"{args.out_dir}: {sum(v.numel() for v in state.values())} parameters, {args.dtype}, "
          f"{args.steps} steps, held-out loss {before:.4f} -> {after:.4f} "
          f"(predicting the mean: {y_eval.var(unbiased=False).item():.4f}), "
          f"final batch loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
