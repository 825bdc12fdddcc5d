//! Which records of a torch.export archive (`.pt2`) `torch.export.load` reads as
//! raw tensor bytes: those its weights and constants configs
//! (`data/weights/<model>_weights_config.json`,
//! `data/constants/<model>_constants_config.json`) list with `use_pickle: false`.
//! It unpickles the others (with `weights_only=False`), so a scan reads those as
//! pickles, and the raw ones as a checkpoint's storages are read.

use serde_json::Value;

use super::PT2_TENSOR_FOLDERS;

const CONFIG_SUFFIXES: [&str; 2] = ["_weights_config.json", "_constants_config.json"];

/// The folder (`data/weights/` or `data/constants/`) whose config `record` (a
/// name under the archive's root) is, if it is one.
pub fn pt2_config_folder(record: &[u8]) -> Option<&'static str> {
    PT2_TENSOR_FOLDERS.iter().zip(CONFIG_SUFFIXES).find_map(|(folder, suffix)| {
        let rest = record.strip_prefix(folder.as_bytes())?;
        let stem = rest.strip_suffix(suffix.as_bytes())?;
        (!stem.is_empty() && !stem.contains(&b'/')).then_some(*folder)
    })
}

/// How `torch.export.load` reads a record that a weights or constants config lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pt2Record {
    /// Raw tensor bytes, laid out by the entry's `tensor_meta`.
    Raw,
    /// A pickled tensor (`use_pickle` not `false`).
    Pickled,
    /// A constant that is a pickled opaque object (`opaque_obj_N`).
    Opaque,
    /// A TorchScript object (`custom_obj_N`), which only its registered C++ class rebuilds.
    TorchBind,
    /// A constant whose path name names no kind torch writes.
    Unknown,
}

impl Pt2Record {
    /// The record `path_name` of `folder`'s config, whose entry's `use_pickle` is
    /// `use_pickle` (`None` when absent or not a boolean).
    pub fn of(folder: &str, path_name: &str, use_pickle: Option<bool>) -> Pt2Record {
        if folder == PT2_TENSOR_FOLDERS[1] {
            if path_name.starts_with("custom_obj_") {
                return Pt2Record::TorchBind;
            }
            if path_name.starts_with("opaque_obj_") {
                return Pt2Record::Opaque;
            }
            if !path_name.starts_with("tensor_") {
                return Pt2Record::Unknown;
            }
        }
        if use_pickle == Some(false) {
            Pt2Record::Raw
        } else {
            Pt2Record::Pickled
        }
    }

    /// The name the Python layer knows the kind by.
    pub fn name(self) -> &'static str {
        match self {
            Pt2Record::Raw => "raw",
            Pt2Record::Pickled => "pickled",
            Pt2Record::Opaque => "opaque",
            Pt2Record::TorchBind => "torchbind",
            Pt2Record::Unknown => "unknown",
        }
    }
}

/// What a config says of its records, by path name under `folder`: `true` for
/// one torch reads raw, `false` for every other ([`Pt2Record`]: a scan reads
/// those as pickles). `None` when it is not a config torch reads, which leaves
/// every record to be read by content.
pub fn pt2_config_records(folder: &str, json: &[u8]) -> Option<Vec<(String, bool)>> {
    let document: Value = serde_json::from_slice(json).ok()?;
    let entries = document.get("config")?.as_object()?;
    entries
        .values()
        .map(|meta| {
            let path_name = meta.get("path_name")?.as_str()?;
            let use_pickle = meta.get("use_pickle").and_then(Value::as_bool);
            let raw = Pt2Record::of(folder, path_name, use_pickle) == Pt2Record::Raw;
            Some((format!("{folder}{path_name}"), raw))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configs_are_found_by_name_and_read_entry_by_entry() {
        assert_eq!(pt2_config_folder(b"data/weights/model_weights_config.json"), Some("data/weights/"));
        assert_eq!(pt2_config_folder(b"data/constants/m_constants_config.json"), Some("data/constants/"));
        assert_eq!(pt2_config_folder(b"data/weights/_weights_config.json"), None);
        assert_eq!(pt2_config_folder(b"data/weights/a/b_weights_config.json"), None);
        let weights = br#"{"config": {"w": {"path_name": "weight_0", "use_pickle": false},
                                      "p": {"path_name": "weight_1", "use_pickle": true}}}"#;
        let mut found = pt2_config_records("data/weights/", weights).unwrap();
        found.sort();
        assert_eq!(
            found,
            [("data/weights/weight_0".into(), true), ("data/weights/weight_1".into(), false)]
        );
        let constants = br#"{"config": {"c": {"path_name": "opaque_obj_0", "use_pickle": false},
                                        "t": {"path_name": "tensor_0", "use_pickle": false}}}"#;
        let mut found = pt2_config_records("data/constants/", constants).unwrap();
        found.sort();
        assert_eq!(
            found,
            [("data/constants/opaque_obj_0".into(), false), ("data/constants/tensor_0".into(), true)]
        );
        assert_eq!(pt2_config_records("data/weights/", b"{\"config\": {\"w\": {}}}"), None);
        assert_eq!(pt2_config_records("data/weights/", b"NaN"), None);
    }

    #[test]
    fn a_record_is_raw_only_as_a_weight_or_tensor_constant_not_pickled() {
        let kind = |folder, name, use_pickle| Pt2Record::of(folder, name, use_pickle).name();
        assert_eq!(kind("data/weights/", "weight_0", Some(false)), "raw");
        assert_eq!(kind("data/weights/", "weight_0", Some(true)), "pickled");
        assert_eq!(kind("data/weights/", "weight_0", None), "pickled");
        assert_eq!(kind("data/constants/", "tensor_0", Some(false)), "raw");
        assert_eq!(kind("data/constants/", "opaque_obj_0", Some(false)), "opaque");
        assert_eq!(kind("data/constants/", "custom_obj_0", Some(false)), "torchbind");
        assert_eq!(kind("data/constants/", "weight_0", Some(false)), "unknown");
    }
}
