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

/// What a config says of its records, by path name under `folder`: `true` for
/// one torch reads raw, `false` for one it unpickles (an entry whose
/// `use_pickle` is not `false`, or a constant that is no tensor: opaque and
/// TorchScript objects are pickles whatever it says). `None` when it is not a
/// config torch reads, which leaves every record to be read by content.
pub fn pt2_config_records(folder: &str, json: &[u8]) -> Option<Vec<(String, bool)>> {
    let document: Value = serde_json::from_slice(json).ok()?;
    let entries = document.get("config")?.as_object()?;
    let constants = folder == PT2_TENSOR_FOLDERS[1];
    entries
        .values()
        .map(|meta| {
            let path_name = meta.get("path_name")?.as_str()?;
            let raw = meta.get("use_pickle") == Some(&Value::Bool(false))
                && (!constants || path_name.starts_with("tensor_"));
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
}
