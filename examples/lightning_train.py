"""A PyTorch Lightning training run on CPU: one process, or DDP on 2 ranks that Lightning starts
itself (its subprocess launcher re-runs this script for rank 1). `trace-capture` captures every
rank either way, with no change to the script.

    trace-capture examples/lightning_train.py --steps 8
    trace-capture examples/lightning_train.py --steps 8 --devices 2
"""

import argparse

import pytorch_lightning as pl
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Regressor(pl.LightningModule):
    def __init__(self, width: int):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(32, width), nn.ReLU(), nn.Linear(width, 1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--width", type=int, default=64)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(512, 32), torch.randn(512, 1))
    trainer = pl.Trainer(accelerator="cpu", devices=args.devices,
                         strategy="ddp" if args.devices > 1 else "auto", max_steps=args.steps,
                         logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False)
    trainer.fit(Regressor(args.width), DataLoader(data, batch_size=16))


if __name__ == "__main__":
    main()
