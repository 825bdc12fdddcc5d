//! The zip reader and the checkpoint layout: real torch files open, and every
//! structural lie is refused before any byte of a payload is trusted.

mod common;

use std::sync::Arc;

use common::zipw::{self, Entry, Options};
use proptest::prelude::*;
use tensorplay::archive::source::Source;
use tensorplay::archive::zip::{find_record, read_entries, read_index, FileBytes, Pieces};
use tensorplay::checkpoint::{self, LoadOptions, StorageData};
use tensorplay::error::ErrorKind;
use tensorplay::torch::records::{self, Record};
use tensorplay::torch::{Node, Torch};
use tensorplay::{Error, Limits};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/torch");

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(format!("{FIXTURES}/{name}")).unwrap()
}

fn open(bytes: Vec<u8>) -> Result<checkpoint::Checkpoint, Error> {
    checkpoint::open(Arc::new(Source::from_vec(bytes)), &LoadOptions::default())
}

fn archive_error(result: Result<checkpoint::Checkpoint, Error>) -> String {
    match result {
        Err(e) if matches!(e.kind(), ErrorKind::Archive { .. }) => e.to_string(),
        Err(other) => panic!("expected an archive error, got {other}"),
        Ok(_) => panic!("expected an archive error, got a checkpoint"),
    }
}

/// A tensor pickle `tensor(float32, numel=2)` over storage key `0`.
const TENSOR: &[u8] = b"\x80\x02ctorch._utils\n_rebuild_tensor_v2\n((X\x07\x00\x00\x00storagectorch\nFloatStorage\nX\x01\x00\x00\x000X\x03\x00\x00\x00cpuK\x02tQK\x00K\x02\x85K\x01\x85\x89ccollections\nOrderedDict\n)RtR.";

#[test]
fn real_torch_checkpoints_open_with_aligned_storages() {
    for name in [
        "seed_tensor.pt",
        "many_tensors.pt",
        "my.model-v2.pth",
        "bytesio_root.bin",
        "no_crc.pt",
    ] {
        let ckpt = open(fixture(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        for id in 0..ckpt.storages.len() {
            let s = &ckpt.storages[id];
            let StorageData::Stored { offset } = s.data else {
                panic!("{name}: not stored")
            };
            assert_eq!(offset % 64, 0, "{name}: torch aligns payloads to 64 bytes");
        }
    }
}

#[test]
fn an_opened_checkpoint_keeps_only_the_values_its_root_reaches() {
    // {"w": tensor, "shared": [same tensor]}: the persistent id, the argument
    // tuples, the shape ints and the hook dict are gone; the tensor stays shared.
    let body = &TENSOR[2..TENSOR.len() - 1];
    let pickle = [
        &b"\x80\x02}(X\x01\x00\x00\x00w"[..],
        body,
        b"q\x00X\x06\x00\x00\x00shared]h\x00au.",
    ]
    .concat();
    let data = [1.0f32.to_le_bytes(), 2.0f32.to_le_bytes()].concat();
    let ckpt = open(zipw::checkpoint(&pickle, &[("data/0", &data)])).unwrap();
    let Node::Dict(_, dict) = ckpt.arena.get(ckpt.root) else {
        panic!("the root is not a dict")
    };
    let items = &ckpt.arena.dict(*dict).items;
    let Node::List(list) = ckpt.arena.get(items[1].1) else {
        panic!("not a list")
    };
    assert_eq!(list.as_slice(), [items[0].1], "the tensor is shared");
    // The dict, two keys, the tensor and the list.
    assert_eq!(ckpt.arena.len(), 5);
    assert!(matches!(
        ckpt.arena.get(items[0].1),
        Node::Domain(Torch::Tensor(_))
    ));
}

#[test]
fn a_hand_written_checkpoint_opens_and_reads() {
    let data = [1.0f32.to_le_bytes(), 2.0f32.to_le_bytes()].concat();
    let ckpt = open(zipw::checkpoint(TENSOR, &[("data/0", &data)])).unwrap();
    let mut out = vec![0u8; 8];
    ckpt.read_storage(tensorplay::torch::StorageId(0), &mut out)
        .unwrap();
    assert_eq!(out, data);
}

#[test]
fn zip64_end_records_are_read() {
    let bytes = zipw::write(
        &[
            Entry::new("a/data.pkl", b"N."),
            Entry::new("a/version", b"3"),
        ],
        Options {
            zip64: true,
            claimed_entries: None,
        },
    );
    assert_eq!(read_index(&bytes, 100).unwrap().entries.len(), 2);
    let plain = zipw::write(&[Entry::new("a/data.pkl", b"N.")], Options::default());
    assert_eq!(read_index(&plain, 100).unwrap().entries.len(), 1);
}

#[test]
fn trailing_bytes_after_the_end_record_are_tolerated() {
    let mut bytes = fixture("seed_tensor.pt");
    bytes.extend_from_slice(b"trailing garbage");
    assert!(open(bytes).is_ok());
}

#[test]
fn duplicate_names_are_refused() {
    let bytes = zipw::write(
        &[
            Entry::new("a/data.pkl", b"N."),
            Entry::new("a/data.pkl", b"K\x01."),
            Entry::new("a/version", b"3"),
        ],
        Options::default(),
    );
    assert!(archive_error(open(bytes)).contains("duplicate entry name"));
}

#[test]
fn duplicate_names_are_refused_among_many() {
    // Few names are compared pairwise, many through a hash set: both find the twin.
    for storages in [3, 40] {
        let mut entries = vec![Entry::new("a/data.pkl", b"N.")];
        entries.extend((0..storages).map(|i| Entry::new(&format!("a/data/{i}"), b"\0\0\0\0")));
        entries.push(Entry::new(&format!("a/data/{}", storages - 1), b"\0\0\0\0"));
        let bytes = zipw::write(&entries, Options::default());
        let error = archive_error(open(bytes));
        assert!(
            error.contains("duplicate entry name"),
            "{storages}: {error}"
        );
        assert!(
            error.contains(&format!("a/data/{}", storages - 1)),
            "{error}"
        );
    }
}

#[test]
fn overlapping_entries_are_refused() {
    let mut second = Entry::new("a/version", b"3");
    second.offset_override = Some(0);
    let bytes = zipw::write(
        &[Entry::new("a/data.pkl", b"N."), second],
        Options::default(),
    );
    // The second local header, listed nowhere, is the first thing wrong.
    let error = archive_error(open(bytes));
    assert!(
        error.contains("a local header at byte 42 that the central directory does not list"),
        "{error}"
    );
}

#[test]
fn encrypted_entries_are_refused() {
    let mut e = Entry::new("a/data.pkl", b"N.");
    e.flags = 1;
    let bytes = zipw::write(&[e, Entry::new("a/version", b"3")], Options::default());
    assert!(archive_error(open(bytes)).contains("encrypted"));
}

#[test]
fn an_absurd_entry_count_is_refused_before_allocating() {
    let bytes = zipw::write(
        &[Entry::new("a/data.pkl", b"N.")],
        Options {
            zip64: true,
            claimed_entries: Some(100_000_000),
        },
    );
    assert!(read_index(&bytes, u64::MAX)
        .unwrap_err()
        .to_string()
        .contains("cannot fit"));
    match read_index(&bytes, 1000).unwrap_err().kind() {
        ErrorKind::Limit { limit, .. } => assert_eq!(limit.name(), "max_zip_entries"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn ranges_outside_the_file_are_refused() {
    let mut e = Entry::new("a/data.pkl", b"N.");
    e.offset_override = Some(1 << 30);
    let bytes = zipw::write(&[e], Options::default());
    assert!(read_index(&bytes, 100)
        .unwrap_err()
        .to_string()
        .contains("outside the file"));
    // Truncating a real checkpoint anywhere gives an error, never a panic.
    let full = fixture("seed_tensor.pt");
    for cut in (0..full.len()).step_by(7) {
        assert!(open(full[..cut].to_vec()).is_err(), "cut at {cut}");
    }
}

#[test]
fn the_layout_needs_a_root_folder_data_pkl_and_a_version() {
    let flat = zipw::write(&[Entry::new("data.pkl", b"N.")], Options::default());
    assert!(archive_error(open(flat)).contains("not in a subdirectory"));
    let two_roots = zipw::write(
        &[
            Entry::new("a/data.pkl", b"N."),
            Entry::new("b/version", b"3"),
        ],
        Options::default(),
    );
    assert!(archive_error(open(two_roots)).contains("not in a subdirectory a/"));
    let no_version = zipw::write(&[Entry::new("a/data.pkl", b"N.")], Options::default());
    assert!(archive_error(open(no_version)).contains("version"));
    let no_pickle = zipw::write(&[Entry::new("a/version", b"3")], Options::default());
    assert!(archive_error(open(no_pickle)).contains("data.pkl"));
    let future = zipw::write(
        &[
            Entry::new("a/data.pkl", b"N."),
            Entry::new("a/version", b"11"),
        ],
        Options::default(),
    );
    assert!(matches!(
        open(future).map_err(|e| e.into_kind()),
        Err(ErrorKind::Unsupported { .. })
    ));
    let bad_order = zipw::write(
        &[
            Entry::new("a/data.pkl", b"N."),
            Entry::new("a/version", b"3"),
            Entry::new("a/byteorder", b"middle"),
        ],
        Options::default(),
    );
    assert!(archive_error(open(bad_order)).contains("Unknown endianness"));
}

#[test]
fn storages_must_match_their_records() {
    let missing = zipw::checkpoint(TENSOR, &[]);
    assert!(archive_error(open(missing)).contains("data/0"));
    let short = zipw::checkpoint(TENSOR, &[("data/0", &[0u8; 4])]);
    assert!(matches!(
        open(short).map_err(|e| e.into_kind()),
        Err(ErrorKind::Tensor { .. })
    ));
    let long = zipw::checkpoint(TENSOR, &[("data/0", &[0u8; 12])]);
    assert!(matches!(
        open(long).map_err(|e| e.into_kind()),
        Err(ErrorKind::Tensor { .. })
    ));
}

#[test]
fn unknown_compression_methods_are_named() {
    let mut e = Entry::new("a/data.pkl", b"N.");
    e.method = 12;
    let bytes = zipw::write(&[e, Entry::new("a/version", b"3")], Options::default());
    let msg = open(bytes).err().unwrap().to_string();
    assert!(msg.contains("bzip2"), "{msg}");
}

#[test]
fn a_local_header_that_contradicts_the_directory_is_refused() {
    let mut e = Entry::new("a/data.pkl", b"N.");
    e.local_name = Some("a/other.pk".into());
    let bytes = zipw::write(&[e, Entry::new("a/version", b"3")], Options::default());
    let index = tensorplay::archive::zip::read_entries(&bytes, 100).unwrap();
    assert_eq!(index.entries[0].disagreement, Some("name"));
    assert!(archive_error(open(bytes)).contains("disagree: name"));
    let mut sized = Entry::new("a/data.pkl", b"N.");
    sized.declared_size = Some(7);
    let bytes = zipw::write(&[sized, Entry::new("a/version", b"3")], Options::default());
    assert!(archive_error(open(bytes)).contains("disagree"));
}

#[test]
fn names_differing_only_in_case_are_refused() {
    let bytes = zipw::write(
        &[
            Entry::new("a/data.pkl", b"N."),
            Entry::new("a/DATA.PKL", b"N."),
            Entry::new("a/version", b"3"),
        ],
        Options::default(),
    );
    assert!(archive_error(open(bytes)).contains("differ only in case"));
    let both_upper = zipw::write(
        &[
            Entry::new("a/data.pkl", b"N."),
            Entry::new("a/data/Key", b"x"),
            Entry::new("a/data/kEY", b"x"),
            Entry::new("a/version", b"3"),
        ],
        Options::default(),
    );
    assert!(archive_error(open(both_upper)).contains("differ only in case"));
}

#[test]
fn finding_one_record_gives_the_entry_the_whole_directory_gives() {
    for path in std::fs::read_dir(FIXTURES).unwrap() {
        let path = path.unwrap().path();
        let bytes = std::fs::read(&path).unwrap();
        let Ok(index) = read_entries(&bytes, u64::MAX) else {
            continue; // legacy and raw-pickle fixtures
        };
        let whole = index
            .entries
            .iter()
            .find(|e| e.name.ends_with(b"/data.pkl"));
        let found = find_record(&bytes[..], u64::MAX, &Record(records::DATA_PKL)).unwrap();
        assert_eq!(Some(&found), whole, "{}", path.display());
    }
}

#[test]
fn finding_one_record_refuses_a_twin_before_or_after_it_and_a_missing_one() {
    let find = |names: &[&str]| {
        let entries: Vec<Entry> = names.iter().map(|n| Entry::new(n, b"N.")).collect();
        find_record(
            &zipw::write(&entries, Options::default())[..],
            u64::MAX,
            &Record(records::DATA_PKL),
        )
    };
    let found = find(&["a/data.pkl", "a/version"]).unwrap();
    assert_eq!(&*found.name, b"a/data.pkl");
    for names in [
        ["a/data.pkl", "a/DATA.pkl", "a/version"],
        ["a/version", "a/Data.pkl", "a/data.pkl"],
        ["a/data.pkl", "a/version", "a/data.pkl"],
    ] {
        let err = find(&names).unwrap_err().to_string();
        assert!(err.contains("differ only in case"), "{names:?}: {err}");
    }
    let err = find(&["a/version", "b/data.pkl"]).unwrap_err().to_string();
    assert!(err.contains("no data.pkl record"), "{err}");
}

#[test]
fn bytes_after_stop_and_impossible_inflation_are_refused() {
    let trailing = zipw::checkpoint(b"N.N.", &[]);
    assert!(matches!(
        open(trailing).map_err(|e| e.into_kind()),
        Err(ErrorKind::Pickle { .. })
    ));
    assert!(tensorplay::archive::inflate::check_ratio(100, 200_000, "e").is_err());
    assert!(tensorplay::archive::inflate::check_ratio(100, 100_000, "e").is_ok());
}

#[test]
fn limits_apply_to_the_archive() {
    let ckpt = fixture("many_tensors.pt");
    let limits = Limits {
        max_zip_entries: 10,
        ..Limits::default()
    };
    let options = LoadOptions {
        limits,
        ..LoadOptions::default()
    };
    match checkpoint::open(Arc::new(Source::from_vec(ckpt)), &options).map_err(|e| e.into_kind()) {
        Err(ErrorKind::Limit { limit, .. }) => assert_eq!(limit.name(), "max_zip_entries"),
        Err(other) => panic!("{other:?}"),
        Ok(_) => panic!("expected a limit error"),
    }
}

proptest! {
    /// Pieces of a file, read in any order and overlapping in any way, answer for
    /// a range exactly when one piece holds all of it, with the file's bytes.
    #[test]
    fn pieces_hold_a_range_exactly_when_one_read_covered_it(
        reads in proptest::collection::vec((0usize..300, 0usize..80), 0..24),
        ranges in proptest::collection::vec((0usize..400, 0usize..90), 1..24),
    ) {
        let file: Vec<u8> = (0..400u32).map(|i| (i * 7 % 251) as u8).collect();
        let mut pieces = Pieces::new(file.len());
        for &(start, len) in &reads {
            pieces.add(start, file[start..start + len].to_vec());
        }
        for (start, len) in ranges {
            let range = start..start + len;
            let covered = reads.iter().any(|&(s, l)| s <= range.start && range.end <= s + l);
            let got = pieces.get(range.clone());
            prop_assert_eq!(got.is_some(), covered, "range {:?}", range);
            if let Some(bytes) = got {
                prop_assert_eq!(bytes, &file[range]);
            }
        }
    }

    /// After `keep_holding`, the pieces answer exactly as if only the reads that
    /// held one of the offsets had been made.
    #[test]
    fn pieces_kept_by_offset_answer_as_those_reads_alone(
        reads in proptest::collection::vec((0usize..300, 0usize..80), 0..24),
        offsets in proptest::collection::vec(0u64..400, 0..6),
        ranges in proptest::collection::vec((0usize..400, 0usize..90), 1..24),
    ) {
        let file: Vec<u8> = (0..400u32).map(|i| (i * 7 % 251) as u8).collect();
        let mut pieces = Pieces::new(file.len());
        for &(start, len) in &reads {
            pieces.add(start, file[start..start + len].to_vec());
        }
        pieces.keep_holding(&offsets);
        let kept: Vec<_> = (reads.iter())
            .filter(|&&(s, l)| offsets.iter().any(|&o| s as u64 <= o && o < (s + l) as u64))
            .collect();
        for (start, len) in ranges {
            let range = start..start + len;
            let covered = kept.iter().any(|&&(s, l)| s <= range.start && range.end <= s + l);
            let got = pieces.get(range.clone());
            prop_assert_eq!(got.is_some(), covered, "range {:?}", range);
            if let Some(bytes) = got {
                prop_assert_eq!(bytes, &file[range]);
            }
        }
    }
}
