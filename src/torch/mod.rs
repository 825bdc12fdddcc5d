//! torch's meaning for the values a checkpoint's pickle builds: storages named by
//! persistent ids, the `_rebuild_*` functions, dtypes, and the weights-only rules.

pub mod args;
pub mod dtype;
pub mod export_program;
pub mod invariants;
pub mod legacy;
pub mod module_ids;
pub mod numpy;
pub mod numpy_values;
pub mod policy;
pub mod rebuild;
pub mod records;
pub mod semantics;
pub mod storage_keys;
pub mod storages;
pub mod tensor;
pub mod value;
