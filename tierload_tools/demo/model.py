"""A small CNN for 8x8 single-channel digits."""

from __future__ import annotations

import torch
from torch import nn


class DigitsCNN(nn.Module):
    """Input: float32 (N, 1, 8, 8) in [0, 1]. Output: logits (N, 10)."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(),
            nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(64 * 4 * 4, 128), nn.ReLU(), nn.Linear(128, 10))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(images))


def to_input(sample) -> torch.Tensor:
    """Demo transform: an image tensor (1, 8, 8) uint8, or a Parquet row with 64 ``pixels``,
    to float32 (1, 8, 8) in [0, 1]."""
    pixels = sample["pixels"] if isinstance(sample, dict) else sample
    return pixels.reshape(1, 8, 8).to(torch.float32) / 255.0
