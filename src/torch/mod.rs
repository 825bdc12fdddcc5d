//! torch's meaning for the values a checkpoint's pickle builds: storages named by
//! persistent ids, the `_rebuild_*` functions, dtypes, and the weights-only rules.

mod args;
mod dtype;
pub mod export_program;
pub mod invariants;
pub mod legacy;
mod module_ids;
mod numpy;
mod numpy_values;
pub mod policy;
mod rebuild;
pub mod records;
mod semantics;
mod storage_keys;
mod storages;
mod tensor;
mod value;

// The front: what the layers above use. Five parts are fronts of their own,
// used by name (`policy::is_dangerous`, `records::DATA_PKL`, `invariants::...`,
// `legacy::...`, `export_program::hazards`); nothing reaches past them.
pub use dtype::{DType, NumpyDType};
pub use semantics::{Refusals, TorchHooks};
pub use storage_keys::StorageKey;
pub use storages::{IdFormat, Storages};
pub use tensor::{Dense, Dims, Layout, QParams, StorageDecl, StorageId, TensorKind, TensorNode};
pub use value::{Arena, Node, TensorId, Torch};
