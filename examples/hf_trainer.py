"""HuggingFace `Trainer` (accelerate underneath) on a 2-layer GPT-2 built from a config (no
download), on CPU: one process, or DDP under torchrun. `trace-capture` captures it unchanged.

    trace-capture examples/hf_trainer.py --steps 8
    trace-capture -- torchrun --standalone --nproc-per-node 2 examples/hf_trainer.py --steps 8
"""

import argparse
import tempfile

import torch
from torch.utils.data import Dataset
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments


class RandomTokens(Dataset):
    """Token ids drawn once from a seeded generator: a language-model batch with no data set."""

    def __init__(self, n: int = 64, seq: int = 32, vocab: int = 256):
        self.ids = torch.randint(0, vocab, (n, seq), generator=torch.Generator().manual_seed(0))

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--batch", type=int, default=4)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=256, n_positions=64, n_embd=64, n_layer=2, n_head=2))
    with tempfile.TemporaryDirectory() as out:
        targs = TrainingArguments(output_dir=out, max_steps=args.steps, per_device_train_batch_size=args.batch,
                                  logging_steps=10_000, save_strategy="no", report_to=[], use_cpu=True,
                                  disable_tqdm=True, dataloader_num_workers=0)
        Trainer(model=model, args=targs, train_dataset=RandomTokens()).train()


if __name__ == "__main__":
    main()
