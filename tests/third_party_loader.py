"""Stands in for a third-party library (transformers' load_state_dict and the like):
it calls torch.load internally and knows nothing of tensorplay."""
import torch


def load_state_dict(checkpoint_file):
    return torch.load(checkpoint_file, map_location="cpu", weights_only=True)
