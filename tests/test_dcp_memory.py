"""What reading a big DCP ``.metadata`` costs in memory, against torch's reader,
counted deterministically.

``benches/dcp_metadata.py`` measures the peak RSS of ``read_metadata`` on 50,000
tensors beside torch's ``FileSystemReader.read_metadata`` (tensorplay's is the
lower). RSS moves with the allocator and the machine, so these tests pin its two
parts by counts that do not: the Python objects (tracemalloc's peak, which sees
all of torch's reader, a pure ``pickle.load``) and the core's parsed form (its
values, 16-byte nodes, counted against ``max_nodes``)."""
from __future__ import annotations

import json
import subprocess
import sys
import warnings

import pytest
import tensorplay
import tensorplay.dcp
import torch
import torch.distributed.checkpoint as dcp

TENSORS = 2000

# Each in a fresh process, so no other test's objects or threads allocate during
# the count; each reader after a gc, its peak counted from where it started.
_PEAKS = """
import gc, json, sys, tracemalloc
import torch.distributed.checkpoint as dcp
import tensorplay.dcp
folder = sys.argv[1]
tensorplay.dcp.TorchTensorProperties  # built once, as an import would
readers = {
    "torch": lambda: dcp.FileSystemReader(folder).read_metadata(),
    "tp_torch": lambda: tensorplay.dcp.read_metadata(folder, backend="torch"),
    "tp_numpy": lambda: tensorplay.dcp.read_metadata(folder, backend="numpy"),
}
for read in readers.values():  # first calls import and cache what later ones reuse
    read()
out = {}
for name, read in readers.items():
    gc.collect()
    tracemalloc.start()
    start = tracemalloc.get_traced_memory()[0]
    metadata = read()
    held, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    out[name] = {"peak": peak - start, "held": held - start, "items": len(metadata.state_dict_metadata)}
    del metadata
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def many(tmp_path_factory):
    """A folder ``dcp.save`` wrote of ``TENSORS`` small tensors, as benches/generate.py's
    ``many_small`` (whose 50,000 the benchmark reads)."""
    folder = tmp_path_factory.mktemp("dcp_many")
    g = torch.Generator().manual_seed(3)
    state = {f"layer.{i}.weight": torch.randn(4, 22, generator=g) for i in range(TENSORS)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "assuming the intent is to save in a single process"
        dcp.save(state, checkpoint_id=str(folder))
    return folder


@pytest.fixture(scope="module")
def peaks(many):
    out = subprocess.run([sys.executable, "-c", _PEAKS, str(many)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("backend", ["torch", "numpy"])
def test_python_objects_peak_below_half_of_torchs_reader(peaks, backend):
    """The objects tensorplay builds (torch's own DCP classes with the torch backend)
    and everything Python allocates on the way peak at under 0.45 of what torch's
    reader peaks at (about 0.42: 1.2 KB a tensor against 2.9), and hold no more
    than torch's result holds; the rest of torch's peak is the core's budget."""
    ours, torchs = peaks[f"tp_{backend}"], peaks["torch"]
    assert ours["items"] == torchs["items"] == TENSORS
    assert ours["peak"] <= 0.45 * torchs["peak"], (ours, torchs)
    assert ours["held"] <= torchs["held"], (ours, torchs)


def test_the_parsed_form_is_at_most_fifty_values_a_tensor(many):
    """The core's parsed form of ``.metadata`` stays within 50 values a tensor
    (47 today; 16 bytes a node, 4 of reference count): at most a third of torch's
    reader's peak a tensor, so with the Python side's 0.45 the whole stays below
    it. ``max_nodes`` counts every value the VM makes, shared ones included."""
    limits = {"max_nodes": 50 * TENSORS}
    metadata = tensorplay.dcp.read_metadata(many, backend="numpy", limits=limits)
    assert len(metadata.state_dict_metadata) == TENSORS
    with pytest.raises(tensorplay.LimitExceededError, match="max_nodes"):
        tensorplay.dcp.read_metadata(many, backend="numpy", limits={"max_nodes": 40 * TENSORS})
