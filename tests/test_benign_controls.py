"""Benign controls: everything a model repository and a training run hold, written by
the real libraries, scanned as a folder. Reading every file from byte 0 and
following every pointer must not flag any of it: each file is clean or skipped,
except the files whose pickles name classes outside the allowlist (Lightning's
hyperparameters, transformers' training arguments, accelerate's random states),
which are unsafe for those globals alone, none of them dangerous, and which
``tensorplay.load`` refuses too. Nothing is unreadable."""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest
import tensorplay
from tensorplay import cli, scanner

# Written in a subprocess: the libraries' imports and threads stay out of the tests.
WRITE_REPOSITORY = r'''
import argparse, io, json, os, pathlib, sys, warnings
warnings.simplefilter("ignore")
root = pathlib.Path(sys.argv[1])
import numpy as np, torch
torch.manual_seed(0)

# transformers: config, weights in both formats, a tokenizer, generation config, training args.
import transformers, tokenizers
config = transformers.GPT2Config(n_layer=2, n_embd=16, n_head=2, vocab_size=96, n_positions=16)
model = transformers.GPT2LMHeadModel(config)
model.save_pretrained(root / "hf", safe_serialization=False, max_shard_size="8KB")
model.save_pretrained(root / "hf_safe", safe_serialization=True)
bpe = tokenizers.Tokenizer(tokenizers.models.BPE(unk_token="<unk>"))
bpe.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel()
bpe.train_from_iterator(["hello world, a tiny corpus for a tiny tokenizer"] * 20,
                        tokenizers.trainers.BpeTrainer(vocab_size=96, special_tokens=["<unk>"]))
fast = transformers.PreTrainedTokenizerFast(tokenizer_object=bpe, unk_token="<unk>")
fast.save_pretrained(root / "hf")
arguments = transformers.TrainingArguments(output_dir=str(root / "run"), report_to=[])
torch.save(arguments, root / "hf" / "training_args.bin")

# sentencepiece, trained here.
import sentencepiece as spm
(root / "corpus.txt").write_text("\n".join(f"sentence number {i} of a small corpus" for i in range(200)))
spm.SentencePieceTrainer.train(input=str(root / "corpus.txt"), model_prefix=str(root / "hf" / "spiece"),
                               vocab_size=40, minloglevel=2)
(root / "corpus.txt").unlink()

# GGUF and ONNX, beside the weights as conversions are published.
import gguf
writer = gguf.GGUFWriter(str(root / "hf" / "model.gguf"), "gpt2")
writer.add_block_count(2)
writer.add_tensor("token_embd.weight", np.random.default_rng(0).standard_normal((96, 16)).astype(np.float32))
writer.write_header_to_file(); writer.write_kv_data_to_file(); writer.write_tensors_to_file(); writer.close()
import onnx, onnx.helper as oh
graph = oh.make_graph([oh.make_node("Relu", ["x"], ["y"])], "g",
                      [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 4])],
                      [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4])])
onnx.save(oh.make_model(graph), str(root / "hf" / "model.onnx"))

# Images and text a repository holds.
from PIL import Image
Image.new("RGB", (8, 8), (200, 10, 10)).save(root / "hf" / "sample.png")
Image.new("RGB", (8, 8), (10, 200, 10)).save(root / "hf" / "sample.jpg")
(root / "hf" / "README.md").write_text("---\nlicense: mit\n---\n# tiny\n\ncos\nsystem\nis text here.\n")
(root / "hf" / ".gitattributes").write_text("*.bin filter=lfs diff=lfs merge=lfs -text\n")

# Lightning, accelerate, tensordict, DCP, numpy.
import lightning
class Tiny(lightning.LightningModule):
    def __init__(self, args):
        super().__init__(); self.save_hyperparameters(); self.layer = torch.nn.Linear(4, 2)
    def training_step(self, batch, _): return self.layer(batch[0]).pow(2).mean()
    def configure_optimizers(self): return torch.optim.Adam(self.parameters(), lr=1e-3)
data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 4)), batch_size=4)
trainer = lightning.Trainer(max_steps=2, accelerator="cpu", logger=False, enable_checkpointing=False,
                            enable_progress_bar=False, enable_model_summary=False)
trainer.fit(Tiny(argparse.Namespace(lr=1e-3)), data)
trainer.save_checkpoint(root / "lightning" / "last.ckpt")
import accelerate
acc = accelerate.Accelerator(cpu=True)
net = acc.prepare(torch.nn.Linear(4, 2))
acc.save_state(str(root / "accelerate"))
import tensordict
td = tensordict.TensorDict({"a": torch.arange(6.0), "nested": {"b": torch.ones(2, 2, dtype=torch.bfloat16)},
                            "note": tensordict.NonTensorData("text")}, batch_size=[])
td.memmap_(str(root / "tensordict"))
import torch.distributed.checkpoint as dcp
dcp.save({"w": torch.arange(32.0), "extra": {"step": 3, "name": "x"}}, checkpoint_id=str(root / "dcp"))
(root / "numpy").mkdir()
np.save(root / "numpy" / "structured.npy", np.zeros(3, dtype=[("O", "<i4"), ("b", "<f8")]))
np.savez(root / "numpy" / "arrays.npz", a=np.arange(4), b=np.zeros((2, 2), dtype=np.float16))
'''

# Files whose pickles name classes outside the allowlist, none of them dangerous.
NOT_ALLOWLISTED = ("training_args.bin", "last.ckpt", "random_states_0.pkl")


@pytest.fixture(scope="module")
def repository(tmp_path_factory) -> pathlib.Path:
    root = tmp_path_factory.mktemp("benign")
    subprocess.run([sys.executable, "-c", WRITE_REPOSITORY, str(root)], check=True, timeout=600,
                   env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})
    return root


def test_nothing_real_libraries_write_is_flagged(repository):
    reports = scanner.scan_paths([repository])
    kinds = {os.path.basename(r.path) for r in reports}
    for expected in ("model.gguf", "model.onnx", "tokenizer.json", "spiece.model", "sample.png", "sample.jpg",
                     "README.md", "last.ckpt", "structured.npy", "arrays.npz", ".metadata", "meta.json",
                     "model.safetensors", "pytorch_model.bin.index.json"):
        assert expected in kinds, expected
    for r in reports:
        where = (r.path, r.verdict, r.format, r.problems, r.findings)
        assert r.verdict != "unreadable", where
        if r.verdict == "unsafe":
            assert os.path.basename(r.path) in NOT_ALLOWLISTED, where
            assert not any(f.dangerous for f in r.findings), where
            with pytest.raises(tensorplay.UnsafeCheckpointError):
                tensorplay.load(r.path)
    assert cli.exit_code(reports, scanner.Policy(fail_on="dangerous")) == 0
    # The DCP folder's items were followed, and read clean.
    pointed = [r for r in reports if r.reached_from is not None]
    assert pointed and all(r.verdict == "clean" for r in pointed), pointed


def test_files_tensorplay_loads_scan_clean(repository):
    for path in (*repository.rglob("*.bin"), *repository.rglob("*.pt"), *repository.rglob("*.safetensors")):
        if path.name in NOT_ALLOWLISTED or path.parent.name == "accelerate":
            continue
        tensorplay.load(path)
        assert scanner.scan(path).verdict == "clean", path


def test_a_structured_npy_with_a_field_named_o_is_clean(repository):
    path = repository / "numpy" / "structured.npy"
    reports = scanner.scan_paths([path])
    assert [r.verdict for r in reports] == ["clean"] and cli.exit_code(reports) == 0
