"""Ranks of a real torch.distributed job on the gloo backend, for tests/test_dcp.py:
save a DTensor-sharded state dict with torch.distributed.checkpoint, and load it
back with another sharding through a chosen storage reader. Run by
``torch.multiprocessing.spawn``, so the functions live in a module of their own."""
from __future__ import annotations

import os

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard, distribute_tensor


def reference() -> dict:
    """The full tensors every rank agrees on (the same seed everywhere)."""
    g = torch.Generator().manual_seed(1234)
    return {
        "w": torch.randn(8, 12, generator=g),
        "b": torch.randn(12, generator=g).to(torch.bfloat16),
        "emb": torch.randint(0, 1000, (16, 4), generator=g),
    }


def _join(rank: int, world: int, port: int) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)


def _leave_together() -> None:
    """Wait for every rank before tearing the group down, so that no rank
    destroys it while a peer's gloo thread still talks to it: the likely cause of
    one rank aborting ("terminate called without an active exception") in a CI
    run on a loaded machine."""
    dist.barrier()


def save(rank: int, world: int, port: int, folder: str) -> None:
    """Each rank holds a row shard of w and emb, and a replica of b."""
    _join(rank, world, port)
    try:
        mesh = init_device_mesh("cpu", (world,))
        full = reference()
        state = {
            "model": {
                "w": distribute_tensor(full["w"], mesh, [Shard(0)]),
                "b": distribute_tensor(full["b"], mesh, [Replicate()]),
                "emb": distribute_tensor(full["emb"], mesh, [Shard(0)]),
            },
            "step": 42,
            "config": {"lr": 0.5, "betas": (0.9, 0.99), "name": "run"},
        }
        dcp.save(state, checkpoint_id=folder)
        _leave_together()
    finally:
        dist.destroy_process_group()


def load(rank: int, world: int, port: int, folder: str, reader: str, keys: str, out: str) -> None:
    """Load into column shards (another layout than the save's) through torch's
    reader or tensorplay's, only the ``keys`` given (comma-separated: a planner
    that loads part of the checkpoint); rank 0 writes the full tensors to ``out``."""
    _join(rank, world, port)
    try:
        mesh = init_device_mesh("cpu", (world,))
        full = reference()
        wanted = keys.split(",")
        model = {k: distribute_tensor(torch.zeros_like(full[k]), mesh, [Shard(1)]) for k in ("w", "emb")
                 if k in wanted}
        if "b" in wanted:
            model["b"] = distribute_tensor(torch.zeros_like(full["b"]), mesh, [Replicate()])
        state: dict = {"model": model}
        if "step" in wanted:
            state["step"] = 0
            state["config"] = {"lr": 0.0, "betas": (0.0, 0.0), "name": ""}
        if reader == "tensorplay":
            import tensorplay.dcp

            storage_reader = tensorplay.dcp.FileSystemReader(folder)
        else:
            storage_reader = dcp.FileSystemReader(folder)
        dcp.load(state, storage_reader=storage_reader)
        gathered = {k: v.full_tensor() for k, v in model.items()}
        if rank == 0:
            torch.save({"model": gathered, **{k: v for k, v in state.items() if k != "model"}}, out)
        _leave_together()
    finally:
        dist.destroy_process_group()
