//! The archive writer reproduces files written by real torch byte for byte.

use tensorplay::archive::zip::read_index;
use tensorplay::save::zip_writer::{plan, Segment};
use tensorplay::save::{checkpoint_records, crc32, StorageRecord};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/torch");

/// Rebuild `name` from its own records and compare.
fn rebuild(name: &str, root: &str, crc: bool) {
    let original = std::fs::read(format!("{FIXTURES}/{name}")).unwrap();
    let index = read_index(&original, 1 << 20).unwrap();
    let record = |r: &str| {
        let e = index
            .entries
            .iter()
            .find(|e| e.name_lossy() == format!("{root}/{r}"))
            .unwrap();
        e.raw(&original[..]).unwrap().to_vec()
    };
    let pickle = record("data.pkl");
    let payloads: Vec<Vec<u8>> = (0..)
        .map_while(|k| {
            index
                .entries
                .iter()
                .find(|e| e.name_lossy() == format!("{root}/data/{k}"))
                .map(|e| e.raw(&original[..]).unwrap().to_vec())
        })
        .collect();
    let storages: Vec<StorageRecord> = payloads
        .iter()
        .enumerate()
        .map(|(i, p)| StorageRecord {
            len: p.len() as u64,
            index: i,
            crc32: if crc { crc32(p) } else { 0 },
            reserved: false,
        })
        .collect();
    let records = checkpoint_records(pickle, &storages, 64, false);
    let (segments, total) = plan(root, &records, 64, crc);
    let mut out = Vec::new();
    for s in segments {
        match s {
            Segment::Bytes(b) => out.extend_from_slice(&b),
            Segment::Buffer(i) => out.extend_from_slice(&payloads[i]),
            Segment::Hole(n) => out.extend(std::iter::repeat_n(0u8, n as usize)),
        }
    }
    assert_eq!(out.len() as u64, total);
    if out != original {
        let first = out.iter().zip(&original).position(|(a, b)| a != b);
        panic!(
            "{name}: differs at byte {first:?} (lengths {} vs {})",
            out.len(),
            original.len()
        );
    }
}

#[test]
fn a_single_tensor_checkpoint_is_byte_identical() {
    rebuild("seed_tensor.pt", "seed_tensor", true);
}

#[test]
fn a_state_dict_with_metadata_is_byte_identical() {
    rebuild(
        "seed_batchnorm_state_dict.pt",
        "seed_batchnorm_state_dict",
        true,
    );
}

#[test]
fn three_thousand_storages_give_torchs_serialization_id() {
    rebuild("many_tensors.pt", "many_tensors", true);
}

#[test]
fn crc_off_writes_zeros_everywhere() {
    rebuild("no_crc.pt", "no_crc", false);
}

#[test]
fn objects_without_tensors_are_byte_identical() {
    rebuild("python_values.pt", "python_values", true);
}
