"""A loader and a model that cost known times on a fake clock, for the loop tests."""

from __future__ import annotations

import torch

BATCH = 8


class ClockedData(torch.utils.data.Dataset):
    """Each batch of ``BATCH`` rows costs ``load_s`` on the fake clock."""

    def __init__(self, clock, load_s: float, n: int) -> None:
        self.clock, self.load_s, self.n = clock, load_s, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):
        self.clock.advance(self.load_s)
        return torch.ones(BATCH, 4), torch.zeros(BATCH, dtype=torch.long)


class CostlyNet(torch.nn.Module):
    """A forward pass costs ``compute_s`` on the fake clock."""

    def __init__(self, clock, compute_s: float = 0.008) -> None:
        super().__init__()
        self.clock, self.compute_s = clock, compute_s
        self.fc = torch.nn.Linear(4, 2)

    def forward(self, x):
        self.clock.advance(self.compute_s)
        return self.fc(x)
