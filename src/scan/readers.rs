//! The real readers the scanner models, in one list. Each reading a scan makes
//! stands for what one of these readers does with the same bytes, and is held
//! to it by running the reader itself: `tests/oracle/` (the oracle harness)
//! plants payloads that only a reader's own run can prove, and each model has
//! a differential test against its reader (`tests/test_tar_model.py`,
//! `tests/test_npy_model.py`, the random pickle, archive and checkpoint tests).
//! The version is the one those tests run; a reader that changes how it reads
//! needs its model checked again.

/// One real reader, as a report's summary lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReaderModel {
    /// A short stable name (`pickle`, `tarfile`, `torch.load`...).
    pub name: &'static str,
    /// What it is and what of it is modelled.
    pub reader: &'static str,
    /// The version the model matches: what its tests run.
    pub version: &'static str,
    /// Which bytes the scan reads as this reader reads them.
    pub reads: &'static str,
}

const CPYTHON: &str = "CPython 3.11.7";

/// Every reader the scanner models, in the order a file meets them.
pub const MODELS: &[ReaderModel] = &[
    ReaderModel {
        name: "pickle",
        reader:
            "CPython's unpicklers: the C one (_pickle) and the Python one (pickle._Unpickler), \
                 from memory and from a file",
        version: CPYTHON,
        reads: "every file and every archive member from byte 0, pickle after pickle; \
                where the two part ways, both readings",
    },
    ReaderModel {
        name: "torch.load",
        reader: "torch.load: a zip checkpoint's data.pkl through torch's own zip reader; a legacy \
                 file as tarfile reads it first (its storages, tensors and pickle members), then \
                 as the legacy stream of five pickles",
        version: "torch 2.13.0",
        reads: "zip checkpoints, legacy files, and the bytes a DCP item points at",
    },
    ReaderModel {
        name: "zipfile",
        reader: "CPython's zipfile (names cut at a NUL byte, offsets shifted by a prefix) and the \
                 stricter readers beside it (torch's, local headers one by one)",
        version: CPYTHON,
        reads: "every member of every zip, whatever its name",
    },
    ReaderModel {
        name: "tarfile",
        reader: "CPython's tarfile: headers with or without the ustar magic, PAX and GNU \
                 extensions, every member type it hands out as a regular file",
        version: CPYTHON,
        reads: "every member tarfile hands out",
    },
    ReaderModel {
        name: "compression",
        reader: "gzip, bz2, lzma (xz and LZMA-alone) and zlib as CPython's modules open them \
                 (multi-member streams included); zstd as the zstandard package opens it",
        version: "CPython 3.11.7; zstandard 0.25.0",
        reads: "what a compressed file decompresses to, and what decodes before a break",
    },
    ReaderModel {
        name: "7z",
        reader: "7z archives as py7zr extracts them",
        version: "py7zr 1.1.4",
        reads: "every member",
    },
    ReaderModel {
        name: "numpy",
        reader: "numpy.load: an .npy header as numpy.lib.format parses it (a Python literal, \
                 every spelling of an object dtype); an .npz's members that start with the \
                 .npy magic, whatever their names",
        version: "numpy 2.4.6",
        reads: "the pickle after the header of an object array",
    },
    ReaderModel {
        name: "joblib",
        reader: "joblib.load: a pickle read by the Python unpickler, behind zlib, gzip, bz2, xz \
                 or LZMA",
        version: "joblib 1.6.0",
        reads: "what the compression holds, as a pickle",
    },
    ReaderModel {
        name: "pandas",
        reader: "pandas.read_pickle: the compression its file name says (gzip, bz2, xz, zstd, a \
                 zip's or a tar's single member), then the C unpickler, and the Python one \
                 where that fails",
        version: "pandas 3.1.1",
        reads: "every compression, zip member and tar member by content",
    },
    ReaderModel {
        name: "safetensors",
        reader: "safetensors' header check",
        version: "safetensors 0.8.0",
        reads: "the header of a .safetensors file",
    },
    ReaderModel {
        name: "dcp",
        reader: "torch.distributed.checkpoint's FileSystemReader and default load planner: \
                 each item of .metadata at its file, offset and length, a bytes item through \
                 torch.load(weights_only=False), a tensor chunk through torch.load",
        version: "torch 2.13.0 (metadata of torch 2.13 to 2.15)",
        reads: "every span a .metadata points at, wherever it lies",
    },
    ReaderModel {
        name: "sharded",
        reader: "Hugging Face sharded loading: every shard the weight_map of an *.index.json \
                 names, torch.load-ed whatever its name",
        version: "transformers 4.57.1",
        reads: "every shard an index names",
    },
    ReaderModel {
        name: "torch.export",
        reader: "torch.export.load: the program JSON (models/*.json; torch 2.6 and 2.7: \
                 serialized_exported_program.json) with what it evaluates (sympy.sympify of \
                 expressions, input names in generated code, modules pytree contexts import, \
                 guards module() executes), and every pickle and record it reads",
        version: "torch 2.13.0 (archives of torch 2.6 to 2.15)",
        reads: "every program of a .pt2, and every member",
    },
    ReaderModel {
        name: "tensordict",
        reader: "TensorDict.load_memmap: meta.json, the pickle sidecars it unpickles \
                 (other.pickle, pickle.pkl) and the sub-levels its keys name",
        version: "tensordict 0.15.3",
        reads: "every level's files, and a key that names a folder outside its level",
    },
];
