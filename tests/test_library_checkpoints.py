"""Files the libraries users train with write, with classes outside the allowlist
in them: a Lightning `.ckpt` whose hyperparameters hold an `argparse.Namespace`
and an omegaconf config, and the `training_args.bin` transformers' Trainer saves.
By default each load is refused with one error that lists every global; in stub
mode the tensors equal `torch.load(weights_only=False)`'s and nothing is called."""
from __future__ import annotations

import argparse
import warnings

import pytest
import tensorplay

torch = pytest.importorskip("torch")
lightning = pytest.importorskip("lightning")
omegaconf = pytest.importorskip("omegaconf")
transformers = pytest.importorskip("transformers")


class _TinyModule(lightning.LightningModule):
    def __init__(self, args, config):
        super().__init__()
        self.save_hyperparameters()
        self.layer = torch.nn.Linear(4, 2)

    def training_step(self, batch, _):
        return self.layer(batch[0]).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)


@pytest.fixture(scope="module")
def lightning_ckpt(tmp_path_factory):
    path = tmp_path_factory.mktemp("lightning") / "model.ckpt"
    torch.manual_seed(0)
    model = _TinyModule(argparse.Namespace(lr=1e-3, layers=2),
                        omegaconf.OmegaConf.create({"data": {"batch": 4}, "name": "tiny"}))
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 4)), batch_size=4)
    trainer = lightning.Trainer(max_steps=2, accelerator="cpu", logger=False, enable_checkpointing=False,
                                enable_progress_bar=False, enable_model_summary=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(model, data)
    trainer.save_checkpoint(path)
    return path


def _stub_load(path):
    with pytest.warns(tensorplay.StubWarning) as caught:
        loaded = tensorplay.load(path, unknown_globals="stub")
    return loaded, str(caught[0].message)


def test_a_lightning_checkpoint_is_refused_with_every_global_then_loads_in_stub_mode(lightning_ckpt):
    with pytest.raises(tensorplay.UnsafeCheckpointError) as refused:
        tensorplay.load(lightning_ckpt)
    names = {f.name for f in refused.value.globals}
    assert "argparse.Namespace" in names
    assert any(n.startswith("omegaconf.") for n in names), names
    assert not any(f.dangerous for f in refused.value.globals)

    expected = torch.load(lightning_ckpt, weights_only=False)
    loaded, warning = _stub_load(lightning_ckpt)
    assert loaded["state_dict"].keys() == expected["state_dict"].keys()
    for key, value in expected["state_dict"].items():
        assert torch.equal(loaded["state_dict"][key], value)
    for state, theirs in zip(loaded["optimizer_states"][0]["state"].values(),
                             expected["optimizer_states"][0]["state"].values()):
        assert torch.equal(state["exp_avg"], theirs["exp_avg"])
    assert loaded["global_step"] == expected["global_step"] == 2
    hparams = loaded["hyper_parameters"]
    args = hparams["args"] if isinstance(hparams, dict) else hparams.to_dict()["args"]
    assert isinstance(args, tensorplay.Stub) and args.to_dict() == {"lr": 1e-3, "layers": 2}
    assert "argparse.Namespace" in warning


@pytest.fixture(scope="module")
def training_args_bin(tmp_path_factory):
    folder = tmp_path_factory.mktemp("trainer")
    args = transformers.TrainingArguments(output_dir=str(folder), learning_rate=3e-5, num_train_epochs=2,
                                          report_to=[])
    path = folder / "training_args.bin"
    torch.save(args, path)  # what transformers' Trainer._save writes
    return path


def test_transformers_training_args_are_refused_then_read_as_data(training_args_bin):
    with pytest.raises(tensorplay.UnsafeCheckpointError) as refused:
        tensorplay.load(training_args_bin)
    names = {f.name for f in refused.value.globals}
    assert "transformers.training_args.TrainingArguments" in names
    assert "tensorplay.serialization.add_safe_globals([" in str(refused.value)

    expected = torch.load(training_args_bin, weights_only=False)
    loaded, warning = _stub_load(training_args_bin)
    assert (loaded.module, loaded.name) == ("transformers.training_args", "TrainingArguments")
    state = loaded.to_dict()
    assert state["learning_rate"] == expected.learning_rate == 3e-5
    assert state["num_train_epochs"] == 2 and state["output_dir"] == expected.output_dir
    assert "transformers.training_args.TrainingArguments" in warning


def test_the_transformers_preset_builds_training_arguments_without_running_post_init(training_args_bin, monkeypatch):
    import dataclasses

    from accelerate.utils.dataclasses import DistributedType
    from tensorplay.serialization import TRANSFORMERS_PRESET, safe_globals
    from transformers.trainer_utils import IntervalStrategy

    expected = torch.load(training_args_bin, weights_only=False)

    def refuse(self):
        raise AssertionError("__post_init__ ran")

    monkeypatch.setattr(transformers.TrainingArguments, "__post_init__", refuse)
    with safe_globals(TRANSFORMERS_PRESET):
        loaded = tensorplay.load(training_args_bin)
    assert type(loaded) is transformers.TrainingArguments
    fields = [f.name for f in dataclasses.fields(expected)]
    assert len(fields) > 100
    assert {f: getattr(loaded, f) for f in fields} == {f: getattr(expected, f) for f in fields}
    assert loaded.eval_strategy is IntervalStrategy.NO and loaded.learning_rate == 3e-5
    assert loaded.accelerator_config == expected.accelerator_config
    state = loaded.distributed_state
    assert type(state).__name__ == "DistributedState"
    assert state.distributed_type is DistributedType.NO and state.device == torch.device("cpu")
    assert state.num_processes == expected.distributed_state.num_processes == 1
    assert "DistributedState(" in repr(state)


def test_the_presets_load_a_lightning_checkpoint_as_plain_data(lightning_ckpt):
    """ARGPARSE_PRESET and OMEGACONF_PRESET: the hyperparameters come back as a
    Namespace and plain dicts, omegaconf never imported by the load."""
    import sys

    from tensorplay.serialization import ARGPARSE_PRESET, OMEGACONF_PRESET, safe_globals

    expected = torch.load(lightning_ckpt, weights_only=False)
    with safe_globals(ARGPARSE_PRESET + OMEGACONF_PRESET):
        loaded = tensorplay.load(lightning_ckpt)
    config = loaded["hyper_parameters"]["config"]
    assert type(config).__name__ == "OmegaDict"
    assert config == omegaconf.OmegaConf.to_container(expected["hyper_parameters"]["config"])
    assert loaded["hyper_parameters"]["args"] == expected["hyper_parameters"]["args"]
    for key, value in expected["state_dict"].items():
        assert torch.equal(loaded["state_dict"][key], value)
    assert "omegaconf" in sys.modules  # imported by this test, not by the preset: see below


def test_the_omegaconf_preset_needs_no_omegaconf():
    import subprocess
    import sys

    code = (
        "import sys, pickle, io, zipfile\n"
        "sys.modules['omegaconf'] = None\n"
        "from tensorplay.serialization import OMEGACONF_PRESET, add_safe_globals\n"
        "import tensorplay.pickle as tp\n"
        "add_safe_globals(OMEGACONF_PRESET)\n"
        f"data = {_omegaconf_pickle()!r}\n"
        "assert tp.loads(data) == {'a': 1, 'b': {'c': [1, 2]}, 'n': None}, tp.loads(data)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def _omegaconf_pickle() -> bytes:
    import pickle

    return pickle.dumps(omegaconf.OmegaConf.create({"a": 1, "b": {"c": [1, 2]}, "n": None}), protocol=2)
