"""Write the benchmark checkpoints, each as a torch file and as a safetensors file,
and gpt2 and many_small also as a distributed checkpoint (DCP) folder.

    python benches/generate.py --scale small|full [--out benches/data] [--only gpt2,many_small]

Files go to OUT/SCALE/ (e.g. benches/data/full/gpt2.pt, gpt2.safetensors and the
folder gpt2_dcp/), with a manifest.json that run.py reads. Every tensor is random
(seeded), so the bytes are not compressible and the files are the same on every run.
`--only` merges into an existing manifest: `--only gpt2,many_small` adds the DCP
folders to data written before they existed (rewriting those two checkpoints' files
byte for byte).

| name        | what                                                        | full size (torch file) |
| ----------- | ----------------------------------------------------------- | ---------------------- |
| gpt2        | GPT-2 small state dict, fp32, lm_head tied to wte             | ~500 MB                |
| llama_bf16  | 2 LLaMA-7B decoder layers + embed_tokens + norm, bfloat16    | ~1.07 GB               |
| many_small  | 50,000 tensors of shape (4, 22) fp32                         | ~17 MB payload         |
| training    | {"model", "optimizer" (Adam), "epoch", "step", "loss", "rng"} | ~75 MB                 |
| views       | slices, transposes, expands, strided views of 4 storages     | ~64 MB                 |

The DCP folders hold the same state dict plus a few non-tensor items ("step",
"config"), saved by `torch.distributed.checkpoint.save` in one process.

The "small" scale keeps every structure (key names, nesting, views, dtypes) and
shrinks the sizes so the whole generation takes a few seconds.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
import warnings
from collections import OrderedDict
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp
from safetensors.torch import save_file

SCALES = {
    "small": {
        "gpt2": {"vocab": 4096, "ctx": 256, "embd": 128, "layers": 4},
        "llama_bf16": {"vocab": 1024, "hidden": 256, "intermediate": 688, "layers": 2},
        "many_small": {"count": 2000, "shape": (4, 22)},
        "training": {"dims": (64, 256, 256, 64), "batch": 16},
        "views": {"side": 256},
    },
    "full": {
        "gpt2": {"vocab": 50257, "ctx": 1024, "embd": 768, "layers": 12},
        # 2 layers are ~0.81 GB; LLaMA's full 32000-row embedding brings it to ~1.07 GB.
        "llama_bf16": {"vocab": 32000, "hidden": 4096, "intermediate": 11008, "layers": 2},
        "many_small": {"count": 50_000, "shape": (4, 22)},
        "training": {"dims": (512, 2048, 2048, 512), "batch": 64},
        "views": {"side": 2048},
    },
}


def _randn(gen: torch.Generator, *shape: int, dtype=torch.float32, std: float = 0.02) -> torch.Tensor:
    return (torch.randn(*shape, generator=gen) * std).to(dtype)


# --- the checkpoints ----------------------------------------------------------------


def make_gpt2(p: dict, gen: torch.Generator) -> tuple[dict, dict, dict]:
    """GPT-2 as Hugging Face's GPT2LMHeadModel names it (Conv1D weights are in x out)."""
    e, sd = p["embd"], OrderedDict()
    sd["transformer.wte.weight"] = _randn(gen, p["vocab"], e)
    sd["transformer.wpe.weight"] = _randn(gen, p["ctx"], e, std=0.01)
    for i in range(p["layers"]):
        h = f"transformer.h.{i}."
        sd[h + "ln_1.weight"] = torch.ones(e)
        sd[h + "ln_1.bias"] = torch.zeros(e)
        sd[h + "attn.c_attn.weight"] = _randn(gen, e, 3 * e)
        sd[h + "attn.c_attn.bias"] = torch.zeros(3 * e)
        sd[h + "attn.c_proj.weight"] = _randn(gen, e, e)
        sd[h + "attn.c_proj.bias"] = torch.zeros(e)
        sd[h + "ln_2.weight"] = torch.ones(e)
        sd[h + "ln_2.bias"] = torch.zeros(e)
        sd[h + "mlp.c_fc.weight"] = _randn(gen, e, 4 * e)
        sd[h + "mlp.c_fc.bias"] = torch.zeros(4 * e)
        sd[h + "mlp.c_proj.weight"] = _randn(gen, 4 * e, e)
        sd[h + "mlp.c_proj.bias"] = torch.zeros(e)
    sd["transformer.ln_f.weight"] = torch.ones(e)
    sd["transformer.ln_f.bias"] = torch.zeros(e)
    # Tied: the very same tensor object, so torch.save writes its storage once.
    sd["lm_head.weight"] = sd["transformer.wte.weight"]
    # safetensors refuses shared tensors; like Hugging Face's save_pretrained we save
    # the shared tensor once (under wte's name) and drop the tied duplicate.
    st = {k: v for k, v in sd.items() if k != "lm_head.weight"}
    return sd, st, {"tied": "lm_head.weight = transformer.wte.weight (saved once in safetensors)"}


def make_llama(p: dict, gen: torch.Generator) -> tuple[dict, dict, dict]:
    h, m, bf = p["hidden"], p["intermediate"], torch.bfloat16
    sd = OrderedDict()
    sd["model.embed_tokens.weight"] = _randn(gen, p["vocab"], h, dtype=bf)
    for i in range(p["layers"]):
        pre = f"model.layers.{i}."
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            sd[pre + f"self_attn.{proj}.weight"] = _randn(gen, h, h, dtype=bf)
        sd[pre + "mlp.gate_proj.weight"] = _randn(gen, m, h, dtype=bf)
        sd[pre + "mlp.up_proj.weight"] = _randn(gen, m, h, dtype=bf)
        sd[pre + "mlp.down_proj.weight"] = _randn(gen, h, m, dtype=bf)
        sd[pre + "input_layernorm.weight"] = torch.ones(h, dtype=bf)
        sd[pre + "post_attention_layernorm.weight"] = torch.ones(h, dtype=bf)
    sd["model.norm.weight"] = torch.ones(h, dtype=bf)
    return sd, dict(sd), {}


def make_many_small(p: dict, gen: torch.Generator) -> tuple[dict, dict, dict]:
    sd = OrderedDict((f"layer.{i}.weight", torch.randn(*p["shape"], generator=gen)) for i in range(p["count"]))
    return sd, dict(sd), {}


def make_training(p: dict, gen: torch.Generator) -> tuple[dict, dict, dict]:
    torch.manual_seed(0)
    dims = p["dims"]
    layers: list[torch.nn.Module] = []
    for a, b in zip(dims[:-1], dims[1:]):
        layers += [torch.nn.Linear(a, b), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers[:-1])
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(2):
        x = torch.randn(p["batch"], dims[0], generator=gen)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    ckpt = {
        "model": model.state_dict(),
        "optimizer": opt.state_dict(),  # int keys in "state", 0-d "step" tensors, param_groups
        "epoch": 3,
        "step": 1000,
        "loss": 0.25,
        "rng": torch.get_rng_state(),
    }
    # safetensors holds only a flat str -> tensor map: tensors are flattened to dotted
    # keys, and the rest (epoch, step, loss, param_groups) goes to the string metadata.
    st = {f"model.{k}": v for k, v in ckpt["model"].items()}
    for idx, state in ckpt["optimizer"]["state"].items():
        for name, v in state.items():
            st[f"optimizer.state.{idx}.{name}"] = v
    st["rng"] = ckpt["rng"]
    meta = {
        "epoch": "3",
        "step": "1000",
        "loss": "0.25",
        "param_groups": json.dumps(ckpt["optimizer"]["param_groups"], default=str),
    }
    return ckpt, st, {"metadata": meta}


def make_views(p: dict, gen: torch.Generator) -> tuple[dict, dict, dict]:
    """Four storages of different dtypes, each seen through ~70 views."""
    s = p["side"]
    bases = {
        "f32": torch.randn(s, s, generator=gen),
        "f16": torch.randn(s, 2 * s, generator=gen).half(),
        "bf16": torch.randn(2 * s, s, generator=gen).bfloat16(),
        "i64": torch.randint(0, 1 << 40, (s // 2, s), generator=gen),
    }
    sd = OrderedDict()
    for name, b in bases.items():
        rows, cols = b.shape
        sd[f"{name}.base"] = b
        sd[f"{name}.T"] = b.t()
        for i in range(32):  # contiguous row blocks
            r = rows // 32
            sd[f"{name}.rows.{i}"] = b[i * r:(i + 1) * r]
        for j in range(16):  # column blocks: non-contiguous
            c = cols // 16
            sd[f"{name}.cols.{j}"] = b[:, j * c:(j + 1) * c]
        for k in range(8):  # one row broadcast to 4 rows: stride 0
            sd[f"{name}.expand.{k}"] = b[k * (rows // 8)].expand(4, cols)
        sd[f"{name}.diag"] = b.diagonal()
        sd[f"{name}.strided"] = b[::2, ::3]
        sd[f"{name}.flat_tail"] = b.view(-1)[-1000:]
        sd[f"{name}.transposed_block"] = b[: rows // 2, : cols // 2].t()
        sd[f"{name}.unsqueezed"] = b[1].unsqueeze(0).unsqueeze(-1)
        sd[f"{name}.scalar"] = b[2, 3]  # 0-d view
    # safetensors has no views: every entry is saved as its own contiguous clone.
    st = {k: v.contiguous().clone() for k, v in sd.items()}
    return sd, st, {"views": "safetensors stores each view as a contiguous clone"}


MAKERS = {
    "gpt2": make_gpt2,
    "llama_bf16": make_llama,
    "many_small": make_many_small,
    "training": make_training,
    "views": make_views,
}

# Also written as a DCP folder: a model's worth of big tensors and the per-tensor
# overhead case. A DCP folder holds one flat state dict, so the nested `training`
# and the storage-sharing `views` would measure DCP's flattening, not its loading.
DCP_CHECKPOINTS = ("gpt2", "many_small")
# Non-tensor items, as a training script saves beside the weights: DCP stores each
# leaf as its own torch.save, which the readers then load one by one.
DCP_EXTRA_ITEMS = {"step": 1, "config": {"model": "bench", "lr": 3e-4, "betas": [0.9, 0.95], "tied": True}}


def save_dcp(obj: dict, folder: Path) -> dict:
    """``dcp.save`` in this one process, as a single-GPU job (or a converter) writes
    one: no process group. Returns the manifest's facts about the folder."""
    shutil.rmtree(folder, ignore_errors=True)  # dcp.save would leave another run's stray files
    with warnings.catch_warnings():
        # Without a process group dcp.save warns that it assumes a single process: that is the intent.
        warnings.filterwarnings("ignore", message="torch.distributed is disabled", category=UserWarning)
        dcp.save({**obj, **DCP_EXTRA_ITEMS}, checkpoint_id=folder)
    # What the folder holds as DCP sees it: a tied tensor (gpt2's lm_head) is one
    # entry per name, saved twice, unlike torch.save's shared storage.
    entries = dcp.FileSystemReader(folder).read_metadata().state_dict_metadata.values()
    tensors = [md for md in entries if isinstance(md, dcp.metadata.TensorStorageMetadata)]
    return {
        "dcp": folder.name,
        "dcp_bytes": sum(f.stat().st_size for f in folder.iterdir()),
        "dcp_tensors": len(tensors),
        "dcp_payload_bytes": sum(md.size.numel() * md.properties.dtype.itemsize for md in tensors),
    }


# --- facts about what was written -----------------------------------------------------


def _tensors(obj) -> list[torch.Tensor]:
    out, stack = [], [obj]
    while stack:
        o = stack.pop()
        if isinstance(o, torch.Tensor):
            out.append(o)
        elif isinstance(o, dict):
            stack.extend(o.values())
        elif isinstance(o, (list, tuple)):
            stack.extend(o)
    return out


def _payload(obj) -> tuple[int, int, int]:
    """(tensor count, distinct storages, bytes of the distinct storages)."""
    tensors = _tensors(obj)
    storages = {}
    for t in tensors:
        s = t.untyped_storage()
        storages[s.data_ptr(), s.nbytes()] = s.nbytes()
    return len(tensors), len(storages), sum(storages.values())


def _resnet18(gen: torch.Generator) -> dict:
    """resnet18's state dict, by its names and shapes (122 tensors, 44.6 MiB)."""
    sd = {"conv1.weight": _randn(gen, 64, 3, 7, 7)}

    def batch_norm(prefix: str, c: int) -> None:
        sd.update({f"{prefix}.weight": torch.ones(c), f"{prefix}.bias": torch.zeros(c),
                   f"{prefix}.running_mean": _randn(gen, c), f"{prefix}.running_var": torch.ones(c),
                   f"{prefix}.num_batches_tracked": torch.tensor(0)})

    batch_norm("bn1", 64)
    c_in = 64
    for layer, c in enumerate((64, 128, 256, 512), 1):
        for block in range(2):
            p, first_in = f"layer{layer}.{block}", c_in if block == 0 else c
            sd[f"{p}.conv1.weight"] = _randn(gen, c, first_in, 3, 3)
            batch_norm(f"{p}.bn1", c)
            sd[f"{p}.conv2.weight"] = _randn(gen, c, c, 3, 3)
            batch_norm(f"{p}.bn2", c)
            if first_in != c:
                sd[f"{p}.downsample.0.weight"] = _randn(gen, c, first_in, 1, 1)
                batch_norm(f"{p}.downsample.1", c)
        c_in = c
    sd.update({"fc.weight": _randn(gen, 1000, 512), "fc.bias": _randn(gen, 1000)})
    return sd


def make_repeat_files(out: Path) -> dict[str, str]:
    """The files a service loads one after another in one process: one tensor of
    4 MiB and of 16 MiB, and a resnet18. The same at every scale."""
    folder = out / "repeat"
    folder.mkdir(exist_ok=True)
    gen = torch.Generator().manual_seed(99)
    files = {"4 MiB tensor": ("4mib.pt", {"w": _randn(gen, 1 << 20)}),
             "16 MiB tensor": ("16mib.pt", {"w": _randn(gen, 4 << 20)}),
             "resnet18": ("resnet18.pt", _resnet18(gen))}
    for name, obj in files.values():
        torch.save(obj, folder / name)
    return {label: f"repeat/{name}" for label, (name, _) in files.items()}


def generate(scale: str, out: Path, only: list[str] | None = None, quiet: bool = False) -> dict:
    out = out / scale
    out.mkdir(parents=True, exist_ok=True)
    manifest_path = out / "manifest.json"
    manifest = {"scale": scale, "torch": torch.__version__, "checkpoints": {}}
    if only and manifest_path.exists():
        manifest["checkpoints"] = json.loads(manifest_path.read_text())["checkpoints"]
    manifest["repeat"] = make_repeat_files(out)
    for name, make in MAKERS.items():
        if only and name not in only:
            continue
        t0 = time.perf_counter()
        gen = torch.Generator().manual_seed(1234)
        obj, st, extra = make(SCALES[scale][name], gen)
        pt, sf = out / f"{name}.pt", out / f"{name}.safetensors"
        torch.save(obj, pt)
        save_file(st, sf, metadata=extra.pop("metadata", None))
        dcp_facts = save_dcp(obj, out / f"{name}_dcp") if name in DCP_CHECKPOINTS else {}
        n_tensors, n_storages, payload = _payload(obj)
        st_payload = sum(v.nbytes for v in st.values())
        manifest["checkpoints"][name] = {
            "torch": pt.name,
            "safetensors": sf.name,
            "torch_file_bytes": pt.stat().st_size,
            "safetensors_file_bytes": sf.stat().st_size,
            "payload_bytes": payload,
            "safetensors_payload_bytes": st_payload,
            "tensors": n_tensors,
            "storages": n_storages,
            "safetensors_tensors": len(st),
            **dcp_facts,
            **extra,
        }
        del obj, st
        if not quiet:
            dcp_note = f", {dcp_facts['dcp_bytes'] / 2**20:.1f} MiB DCP" if dcp_facts else ""
            print(f"{name:11s} {pt.stat().st_size / 2**20:9.1f} MiB torch, {sf.stat().st_size / 2**20:9.1f} MiB "
                  f"safetensors{dcp_note}, {n_tensors} tensors in {n_storages} storages "
                  f"({time.perf_counter() - t0:.1f} s)")
    manifest_path.write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", choices=sorted(SCALES), default="small")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "data",
                    help="parent folder; files go to OUT/SCALE/ (default benches/data)")
    ap.add_argument("--only", default="", help="comma-separated checkpoint names (default: all)")
    args = ap.parse_args(argv)
    only = [s for s in args.only.split(",") if s]
    unknown = sorted(set(only) - set(MAKERS))
    if unknown:
        ap.error(f"unknown checkpoint(s) {unknown}; choose from {sorted(MAKERS)}")
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    generate(args.scale, args.out, only or None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
