"""A small MLP regression, single process: the smallest thing worth capturing.

    python examples/mlp.py --steps 8
    trace-capture examples/mlp.py --steps 8
"""

import argparse

import torch
from torch import nn


def build(width: int) -> nn.Module:
    return nn.Sequential(nn.Linear(64, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                         nn.Linear(width, 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--fail-at", type=int, default=-1, help="raise at this step (tests)")
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = build(args.width)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(args.batch, 64), torch.randn(args.batch, 1)
    for step in range(args.steps):
        if step == args.fail_at:
            raise RuntimeError(f"failing on purpose at step {step}")
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"mlp: {args.steps} steps, final loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
