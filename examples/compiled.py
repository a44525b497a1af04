"""A model compiled with `torch.compile` (Inductor, CPU): the trace holds the compiled regions
(`Torch-Compiled Region`, `CompiledFunction`, `## Call CompiledFxGraph ... ##`) with the kernels
Inductor generated under them, forward and backward; it converts, validates and replays like any
other trace.

    python examples/compiled.py --steps 8
    trace-capture examples/compiled.py --steps 8
"""

import argparse

import torch
from torch import nn


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--width", type=int, default=128)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, args.width), nn.ReLU(), nn.Linear(args.width, 1))
    compiled = torch.compile(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 64), torch.randn(32, 1)
    for _ in range(args.steps):
        loss = nn.functional.mse_loss(compiled(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"compiled: {args.steps} steps, loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
