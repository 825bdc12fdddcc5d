//! The scanner against the tricks that defeated earlier scanners.

mod common;

use common::zipw::{self, Entry, Options};
use tensorplay::archive::zip::{
    read_directory_only, read_entries, read_entries_by_reading, Pieces, TAIL_READ,
};
use tensorplay::scan::{
    scan_bytes, scan_file, scan_pickles_by_reading, scan_pickles_in_waves, unsafe_globals,
    unsafe_globals_by_reading, Report, ScanOptions, Verdict, Wave,
};

fn scan(data: &[u8]) -> Report {
    scan_bytes(data, &ScanOptions::default())
}

fn scan_pickles_only(data: &[u8]) -> Report {
    let options = ScanOptions {
        pickles_only: true,
        ..ScanOptions::default()
    };
    scan_bytes(data, &options)
}

fn names(r: &Report) -> Vec<String> {
    r.names()
}

const OS_SYSTEM: &[u8] = b"\x80\x02cos\nsystem\nX\x02\x00\x00\x00ls\x85R.";

#[test]
fn a_plain_payload_is_unsafe_and_dangerous() {
    let r = scan(OS_SYSTEM);
    assert_eq!(r.format.name(), "pickle");
    assert_eq!(r.verdict(), Verdict::Unsafe);
    assert!(r.findings[0].dangerous);
    assert_eq!(names(&r), ["os.system"]);
}

#[test]
fn stack_global_names_from_the_memo_are_resolved() {
    let data = b"\x80\x04\x8c\x02os\x94\x8c\x06system\x94h\x00h\x01\x93\x8c\x02ls\x85R.";
    assert_eq!(names(&scan(data)), ["os.system"]);
    // Names computed at run time cannot be named: they are reported, never clean.
    let computed = b"\x80\x04K\x01K\x02\x93.";
    let r = scan(computed);
    assert_eq!(r.verdict(), Verdict::Unsafe);
    assert!(r.findings[0].name.starts_with('<'));
}

#[test]
fn extension_codes_are_unresolvable_globals() {
    let r = scan(b"\x80\x02\x82\x01)R.");
    assert_eq!(r.verdict(), Verdict::Unsafe);
    assert_eq!(names(&r), ["<extension code 1>"]);
}

#[test]
fn python2_names_are_mapped_before_judging() {
    assert_eq!(
        names(&scan(b"ccommands\ngetoutput\n(S'ls'\ntR.")),
        ["subprocess.getoutput"]
    );
    assert_eq!(
        names(&scan(b"c__builtin__\neval\n(S'1'\ntR.")),
        ["builtins.eval"]
    );
}

#[test]
fn every_pickle_of_a_stream_is_scanned_and_trailing_data_is_reported() {
    let second = [&b"\x80\x02N."[..], OS_SYSTEM].concat();
    let r = scan(&second);
    assert_eq!(r.pickles, 2);
    assert_eq!(names(&r), ["os.system"]);
    let trailing = [&b"\x80\x02N."[..], b"garbage\xff"].concat();
    assert_eq!(scan(&trailing).verdict(), Verdict::Unreadable);
}

#[test]
fn a_break_after_the_payload_still_reports_it_and_what_follows() {
    let broken = [&OS_SYSTEM[..OS_SYSTEM.len() - 1], b"\xff"].concat();
    let r = scan(&broken);
    assert_eq!(r.verdict(), Verdict::Unsafe);
    assert!(!r.problems.is_empty());
    // A break *before* the payload: the rest is still disassembled.
    let hidden = b"\x80\x02\xff\xffcposix\nsystem\nX\x02\x00\x00\x00ls\x85R.";
    let r = scan(hidden);
    assert_eq!(names(&r), ["posix.system"]);
}

#[test]
fn frames_do_not_hide_opcodes() {
    let mut data = b"\x80\x04\x95".to_vec();
    let body = b"cos\nsystem\nX\x02\x00\x00\x00ls\x85R.";
    data.extend_from_slice(&(body.len() as u64).to_le_bytes());
    data.extend_from_slice(body);
    assert_eq!(names(&scan(&data)), ["os.system"]);
}

#[test]
fn every_pickle_in_an_archive_is_scanned_and_duplicates_too() {
    let zip = zipw::write(
        &[
            Entry::new("a/data.pkl", b"\x80\x02N."),
            Entry::new("a/data.pkl", OS_SYSTEM),
            Entry::new("a/version", b"3"),
        ],
        Options::default(),
    );
    for r in [scan(&zip), scan_pickles_only(&zip)] {
        assert_eq!(r.format.name(), "torch-zip", "{:?}", r.problems);
        assert_eq!(names(&r), ["os.system"]);
        assert!(r
            .problems
            .iter()
            .any(|p| p.to_string().contains("duplicate")));
    }
}

#[test]
fn a_repeated_storage_name_matters_to_a_load_not_to_the_pickles_only_gate() {
    let zip = zipw::write(
        &[
            Entry::new("a/data.pkl", b"\x80\x02N."),
            Entry::new("a/data/0", b"\x00\x00\x00\x00"),
            Entry::new("a/data/0", b"\x01\x01\x01\x01"),
            Entry::new("a/version", b"3"),
        ],
        Options::default(),
    );
    let full = scan(&zip);
    assert_eq!(full.verdict(), Verdict::Unreadable);
    assert!(full
        .problems
        .iter()
        .any(|p| p.to_string().contains("duplicate")));
    let gate = scan_pickles_only(&zip);
    assert_eq!(gate.verdict(), Verdict::Clean, "{:?}", gate.problems);
    assert_eq!(gate.pickles, 1);
}

#[test]
fn local_headers_that_disagree_are_reported() {
    let mut e = Entry::new("a/data.pkl", b"\x80\x02N.");
    e.local_name = Some("a/other.pk".into());
    let zip = zipw::write(&[e, Entry::new("a/version", b"3")], Options::default());
    for r in [scan(&zip), scan_pickles_only(&zip)] {
        assert_eq!(r.verdict(), Verdict::Unreadable);
        assert!(r
            .problems
            .iter()
            .any(|p| p.to_string().contains("disagree: name")));
    }
}

#[test]
fn a_pickles_only_scan_reads_no_payload_header() {
    // A storage whose local header is not even a local header: the full scan
    // cannot locate it (a load would refuse the file), the pickles-only scan
    // never needs to.
    let mut zip = zipw::checkpoint(b"\x80\x02N.", &[("data/0", &[7u8; 64][..])]);
    let storage = find(&zip, b"PK\x03\x04", b"archive/data/0");
    zip[storage] = b'X';
    assert_eq!(scan(&zip).verdict(), Verdict::Unreadable);
    let r = scan_pickles_only(&zip);
    assert_eq!(r.verdict(), Verdict::Clean, "{:?}", r.problems);
    assert_eq!((r.format.name(), r.pickles), ("torch-zip", 1));
}

/// Offset of the local header (starting with `signature`) that names `name`.
fn find(data: &[u8], signature: &[u8], name: &[u8]) -> usize {
    (0..data.len())
        .find(|&i| data[i..].starts_with(signature) && data[i + 30..].starts_with(name))
        .unwrap()
}

#[test]
fn nested_archives_are_opened() {
    let inner = zipw::checkpoint(OS_SYSTEM, &[]);
    let outer = zipw::write(
        &[Entry::new("upload/model.zip", &inner)],
        Options::default(),
    );
    let r = scan(&outer);
    assert_eq!(r.format.name(), "zip");
    assert_eq!(names(&r), ["os.system"]);
    assert!(r.findings[0]
        .location
        .contains("model.zip > archive/data.pkl"));
}

fn tar_with(name: &str, body: &[u8]) -> Vec<u8> {
    let mut header = vec![0u8; 512];
    header[..name.len()].copy_from_slice(name.as_bytes());
    let size = format!("{:011o}\0", body.len());
    header[124..136].copy_from_slice(size.as_bytes());
    header[156] = b'0';
    header[257..262].copy_from_slice(b"ustar");
    // tarfile reads no header whose checksum is wrong.
    header[148..156].copy_from_slice(b"        ");
    let sum: u32 = header.iter().map(|b| u32::from(*b)).sum();
    header[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
    let mut out = header;
    out.extend_from_slice(body);
    out.resize(out.len().div_ceil(512) * 512 + 1024, 0);
    out
}

#[test]
fn tar_members_are_scanned() {
    let r = scan(&tar_with("model.pkl", OS_SYSTEM));
    assert_eq!(r.format.name(), "tar");
    assert_eq!(names(&r), ["os.system"]);
}

/// A tar header block tarfile reads (the checksum summed last), with `fields`
/// written over a plain one.
fn tar_header(name: &[u8], size: usize, kind: u8, fields: &[(usize, &[u8])]) -> Vec<u8> {
    let mut header = vec![0u8; 512];
    header[..name.len()].copy_from_slice(name);
    header[100..108].copy_from_slice(b"0000644\0");
    header[124..136].copy_from_slice(format!("{size:011o}\0").as_bytes());
    header[156] = kind;
    for (at, bytes) in fields {
        header[*at..*at + bytes.len()].copy_from_slice(bytes);
    }
    header[148..156].copy_from_slice(b"        ");
    let sum: u32 = header.iter().map(|b| u32::from(*b)).sum();
    header[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
    header
}

fn tar_member(name: &[u8], body: &[u8], kind: u8) -> Vec<u8> {
    let mut out = tar_header(name, body.len(), kind, &[]);
    out.extend_from_slice(body);
    out.resize(out.len().div_ceil(512) * 512, 0);
    out
}

#[test]
fn a_tar_without_ustar_magic_is_read_as_tarfile_reads_it() {
    // V7 headers have no magic: tarfile reads them all the same.
    let v7 = [tar_member(b"model.pkl", OS_SYSTEM, b'0'), vec![0; 1024]].concat();
    let r = scan(&v7);
    assert_eq!(r.format.name(), "tar");
    assert_eq!(names(&r), ["os.system"]);
    assert_eq!(r.findings[0].location, "model.pkl");
}

#[test]
fn a_folder_s_size_hides_no_member() {
    // tarfile skips no data after a folder, a link or a device, whatever their
    // size field says: the next header is right after.
    for kind in [b'5', b'2', b'6'] {
        let data = [
            tar_header(b"d", 1024, kind, &[]),
            tar_member(b"evil.pkl", OS_SYSTEM, b'0'),
            vec![0; 1024],
        ]
        .concat();
        let r = scan(&data);
        assert_eq!(names(&r), ["os.system"], "type {}", kind as char);
        assert_eq!(r.findings[0].location, "evil.pkl");
    }
    // And a type tarfile does not know is a regular file.
    let unknown = [tar_member(b"evil.pkl", OS_SYSTEM, b'Z'), vec![0; 1024]].concat();
    assert_eq!(names(&scan(&unknown)), ["os.system"]);
}

#[test]
fn a_link_torch_extracts_is_a_dangerous_finding() {
    for (kind, name) in [(b'2', "symbolic"), (b'1', "hard")] {
        let link = tar_header(b"storages", 0, kind, &[(157, b"/home/user/evil.pkl")]);
        let r = scan(&[link, vec![0; 1024]].concat());
        assert_eq!(r.verdict(), Verdict::Unsafe);
        let finding = &r.findings[0];
        assert!(finding.dangerous);
        assert_eq!(finding.location, "storages");
        assert!(finding
            .name
            .starts_with(&format!("<tar {name} link storages -> /home/user/evil.pkl")));
    }
    // Links of other names are what extractfile reads: members scanned anyway.
    let other = tar_header(b"weights", 0, b'2', &[(157, b"/etc/passwd")]);
    assert_eq!(
        scan(&[other, vec![0; 1024]].concat()).verdict(),
        Verdict::Clean
    );
}

#[test]
fn members_tarfile_stops_listing_are_a_problem() {
    // The first member's data runs past the end: tarfile opens the archive,
    // then getmembers raises.
    let mut cut = tar_header(b"a.pkl", 4096, b'0', &[]);
    cut.extend_from_slice(b"\x80\x02K\x01.");
    let r = scan(&cut);
    assert_eq!(r.verdict(), Verdict::Unreadable);
    assert!(
        r.problems.iter().all(|p| p.kind == "malformed_archive"),
        "{:?}",
        r.problems
    );
    assert!(
        r.problems.iter().any(|p| p.reason.contains("ReadError")),
        "{:?}",
        r.problems
    );
}

#[test]
fn what_extract_writes_is_scanned_where_extractfile_reads_nothing() {
    // Size -1: extractfile reads nothing, extract (torch's, for storages) copies
    // copyfileobj's remainder of 16383 bytes.
    let mut data = tar_header(b"storages", 0, b'0', &[(124, b"-1\0\0\0\0\0\0\0\0\0\0")]);
    data.extend_from_slice(OS_SYSTEM);
    data.resize(512 + 16383, 0);
    let r = scan(&data);
    assert_eq!(names(&r), ["os.system"]);
    assert_eq!(r.findings[0].location, "storages (as extract writes it)");
}

/// `legacy_seed_views.pt` made a tar as well: its second pickle (the protocol
/// version) takes the rest of the first header as a string and POPs it, and
/// the tar's one member runs over the rest of the stream.
fn legacy_tar_polyglot() -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/torch/legacy_seed_views.pt");
    let legacy = std::fs::read(path).unwrap();
    let (magic, rest) = legacy.split_at(15);
    assert_eq!(&rest[..6], b"\x80\x02M\xe9\x03.");
    let mut swallow = magic.to_vec();
    swallow.extend_from_slice(b"\x80\x02X");
    swallow.extend_from_slice(&(512u32 - 22).to_le_bytes());
    let tail = [&b"0M\xe9\x03."[..], &rest[6..]].concat();
    let mut data = tar_header(&swallow, tail.len(), b'0', &[]);
    data.extend_from_slice(&tail);
    data
}

#[test]
fn a_load_refuses_a_legacy_file_that_tarfile_opens() {
    use tensorplay::checkpoint::{validate, LoadOptions};
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/torch/legacy_seed_views.pt");
    let legacy = std::fs::read(path).unwrap();
    assert!(validate(&legacy, &LoadOptions::default()).is_ok());
    let e = validate(&legacy_tar_polyglot(), &LoadOptions::default()).unwrap_err();
    assert_eq!(e.kind().code(), "unsafe_file");
    assert!(
        e.to_string().contains("torch.load reads it first as a tar"),
        "{e}"
    );
    // A plain tar stays refused as torch's old format.
    let tar = [tar_member(b"pickle", b"N.", b'0'), vec![0; 1024]].concat();
    assert_eq!(
        validate(&tar, &LoadOptions::default())
            .unwrap_err()
            .kind()
            .code(),
        "unsupported"
    );
}

#[test]
fn a_legacy_file_that_tarfile_opens_is_read_both_ways() {
    let polyglot = legacy_tar_polyglot();
    let r = scan(&polyglot);
    assert_eq!(r.verdict(), Verdict::Unreadable);
    assert!(
        r.problems.iter().any(|p| p.kind == "parser_disagreement"),
        "{:?}",
        r.problems
    );
    // Both readings ran: the legacy stream's five pickles, and the tar's member.
    assert!(r.pickles >= 5, "{}", r.pickles);
    // A payload in the tar is found, and then no disagreement is needed.
    let mut unsafe_one = polyglot.clone();
    unsafe_one.extend_from_slice(&vec![0; (512 - polyglot.len() % 512) % 512]);
    unsafe_one.extend_from_slice(&tar_member(b"storages", OS_SYSTEM, b'0'));
    let r = scan(&unsafe_one);
    assert_eq!(r.verdict(), Verdict::Unsafe);
}

#[test]
fn object_npy_arrays_carry_pickles() {
    let header = b"{'descr': '|O', 'fortran_order': False, 'shape': (1,), }          \n";
    let mut npy = b"\x93NUMPY\x01\x00".to_vec();
    npy.extend_from_slice(&(header.len() as u16).to_le_bytes());
    npy.extend_from_slice(header);
    npy.extend_from_slice(OS_SYSTEM);
    let r = scan(&npy);
    assert_eq!(r.format.name(), "npy");
    assert_eq!(names(&r), ["os.system"]);
}

#[test]
fn legacy_files_are_scanned_pickle_by_pickle() {
    let legacy = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/torch/legacy_format.pt"
    ))
    .unwrap();
    let r = scan(&legacy);
    assert_eq!(r.format.name(), "torch-legacy");
    assert_eq!(r.verdict(), Verdict::Clean);
    assert_eq!(r.pickles, 5);
}

#[test]
fn unsafe_globals_reads_every_protocol_and_refuses_to_call_a_broken_file_clean() {
    let options = ScanOptions::default();
    let p4 = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/torch/protocol_4.pt"
    ))
    .unwrap();
    assert_eq!(unsafe_globals(&p4, &options).unwrap(), Vec::<String>::new());
    assert!(unsafe_globals(b"\x80\x02]K\x01", &options).is_err());
    assert_eq!(
        unsafe_globals(
            &[&OS_SYSTEM[..OS_SYSTEM.len() - 1], b"\xff"].concat(),
            &options
        )
        .unwrap(),
        ["os.system"]
    );
}

#[test]
fn other_files_are_not_pickles() {
    assert_eq!(scan(b"{\"a\": 1}").format.name(), "not-a-pickle");
    // Text and nothing at all hold no pickle and are no model: skipped, not clean.
    assert_eq!(scan(b"{\"a\": 1}").verdict(), Verdict::Skipped);
    assert_eq!(scan(b"").verdict(), Verdict::Skipped);
    // Binary data of no known format could be anything: never clean.
    assert_eq!(scan(b"\x01\x02\x03\xfe\xff").verdict(), Verdict::Unreadable);
    // A truncated pickle is not clean.
    assert_eq!(scan(b"\x80\x02]q\x00(K\x01").verdict(), Verdict::Unreadable);
}

#[test]
fn get_unsafe_globals_reads_data_pkl_and_refuses_ambiguous_archives() {
    let options = ScanOptions::default();
    let ckpt = zipw::checkpoint(OS_SYSTEM, &[("data/0", b"abcd")]);
    assert_eq!(unsafe_globals(&ckpt, &options).unwrap(), ["os.system"]);
    // A twin whose name differs only in case: which one a reader sees is the
    // file's choice, so neither is trusted: the globals of both, or the refusal.
    let twins = |second: &[u8]| {
        zipw::write(
            &[
                Entry::new("a/data.pkl", b"\x80\x02N."),
                Entry::new("a/DATA.pkl", second),
                Entry::new("a/version", b"3\n"),
            ],
            Options::default(),
        )
    };
    assert_eq!(
        unsafe_globals(&twins(OS_SYSTEM), &options).unwrap(),
        ["os.system"]
    );
    let err = unsafe_globals(&twins(b"\x80\x02N."), &options).unwrap_err();
    assert!(err.to_string().contains("differ only in case"), "{err}");
    let missing = zipw::write(&[Entry::new("a/version", b"3\n")], Options::default());
    assert!(unsafe_globals(&missing, &options).is_err());
}

#[test]
fn reading_pieces_of_a_checkpoint_gives_the_answer_of_the_whole_file() {
    let options = ScanOptions::default();
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/torch");
    let mut answered = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "json") {
            continue;
        }
        let data = std::fs::read(&path).unwrap();
        let read_at = |offset: u64, n: usize| {
            let start = usize::try_from(offset).ok()?;
            data.get(start..start.checked_add(n)?).map(<[u8]>::to_vec)
        };
        let whole = unsafe_globals(&data, &options);
        match unsafe_globals_by_reading(data.len() as u64, &read_at, TAIL_READ, &options) {
            Some(names) => {
                answered += 1;
                assert_eq!(
                    Ok(names),
                    whole.map_err(|e| e.to_string()),
                    "{}",
                    path.display()
                );
            }
            // Legacy files and raw pickles are not zips, and directories with
            // more local headers than reads are worth: the map answers those.
            None => assert!(
                !data.starts_with(b"PK\x03\x04")
                    || whole.is_err()
                    || read_directory_only(&data, u64::MAX).is_ok_and(|i| i.entries.len() > 1024),
                "{}",
                path.display()
            ),
        }
    }
    assert!(
        answered >= 25,
        "only {answered} fixtures were answered from pieces"
    );
}

/// A reader of `data` for the scans by reading that notes each read's offset.
fn recording_reader<'a>(
    data: &'a [u8],
    reads: &'a std::cell::Cell<Vec<u64>>,
) -> impl Fn(u64, usize) -> Option<Vec<u8>> + 'a {
    move |offset, n| {
        let mut seen = reads.take();
        seen.push(offset);
        reads.set(seen);
        let start = usize::try_from(offset).ok()?;
        data.get(start..start.checked_add(n)?).map(<[u8]>::to_vec)
    }
}

#[test]
fn a_torch_checkpoint_is_answered_from_two_reads_and_a_prefixed_one_from_the_map() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/torch/shapes_and_strides.pt");
    let data = std::fs::read(path).unwrap();
    let pickles_only = ScanOptions {
        pickles_only: true,
        ..ScanOptions::default()
    };
    let reads = std::cell::Cell::new(Vec::new());
    let read_at = recording_reader(&data, &reads);
    // The end (the directory), then data.pkl's local header and payload, which
    // torch writes first, so that read holds the signature too, and the last
    // entry's local header (for an entry no directory lists before the
    // directory) when the first read did not hold it.
    let len = data.len() as u64;
    let last_header = |data: &[u8], reads: &std::cell::Cell<Vec<u64>>| -> u64 {
        let index =
            read_entries_by_reading(data.len() as u64, &recording_reader(data, reads), u64::MAX);
        reads.take();
        let index = index.expect("an index");
        index.entries.iter().map(|e| e.header_offset).max().unwrap()
    };
    let tail = len.saturating_sub(4 << 10);
    let last = last_header(&data, &reads);
    let then_last = if last < tail { vec![last] } else { vec![] };
    assert!(unsafe_globals_by_reading(len, &read_at, TAIL_READ, &ScanOptions::default()).is_some());
    assert_eq!(reads.take(), [&[tail, 0][..], &then_last].concat());
    assert!(scan_pickles_by_reading(len, &read_at, TAIL_READ, &pickles_only).is_some());
    assert_eq!(reads.take(), [&[tail, 0][..], &then_last].concat());

    // A directory bigger than the first read's page costs one more read: of it.
    // A first entry smaller than a tar block, one more: the block tarfile
    // would read as a header, which a zip may also be.
    let names: Vec<String> = (0..200).map(|i| format!("data/{i}")).collect();
    let records: Vec<(&str, &[u8])> = names.iter().map(|n| (n.as_str(), &b"\0\0"[..])).collect();
    let big = zipw::checkpoint(b"\x80\x02}q\x00.", &records);
    let read_big = recording_reader(&big, &reads);
    let len = big.len() as u64;
    let directory_offset = (read_entries_by_reading(len, &read_big, u64::MAX))
        .expect("an index")
        .directory_offset;
    reads.take();
    assert!(len - directory_offset > 4 << 10);
    let last = last_header(&big, &reads);
    assert!(scan_pickles_by_reading(len, &read_big, TAIL_READ, &pickles_only).is_some());
    assert_eq!(
        reads.take(),
        [len - (4 << 10), directory_offset, last, 0, 0]
    );

    // Bytes before the first entry: torch does not read it as a zip checkpoint,
    // so neither do the reads; the whole-file scan decides.
    let prefixed = [&b"junk"[..], &data].concat();
    let read_prefixed = |offset: u64, n: usize| {
        let start = usize::try_from(offset).ok()?;
        prefixed
            .get(start..start.checked_add(n)?)
            .map(<[u8]>::to_vec)
    };
    let len = prefixed.len() as u64;
    assert_eq!(
        unsafe_globals_by_reading(len, &read_prefixed, TAIL_READ, &ScanOptions::default()),
        None
    );
    assert!(scan_pickles_by_reading(len, &read_prefixed, TAIL_READ, &pickles_only).is_none());
}

/// A zip whose central directory lists its one stored entry `n` times.
fn listed_n_times(payload: &[u8], n: u16) -> Vec<u8> {
    let mut out = Vec::new();
    let crc = crc32fast::hash(payload);
    let len = payload.len() as u32;
    out.extend_from_slice(b"PK\x03\x04\x14\x00\x00\x00\x00\x00\x00\x00\x00\x00");
    for v in [crc, len, len] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out.extend_from_slice(b"\x01\x00\x00\x00a");
    out.extend_from_slice(payload);
    let directory = out.len() as u32;
    for _ in 0..n {
        out.extend_from_slice(b"PK\x01\x02\x14\x00\x14\x00\x00\x00\x00\x00\x00\x00\x00\x00");
        for v in [crc, len, len] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&[1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, b'a']);
    }
    let size = out.len() as u32 - directory;
    out.extend_from_slice(b"PK\x05\x06\x00\x00\x00\x00");
    out.extend_from_slice(&n.to_le_bytes());
    out.extend_from_slice(&n.to_le_bytes());
    out.extend_from_slice(&size.to_le_bytes());
    out.extend_from_slice(&directory.to_le_bytes());
    out.extend_from_slice(&[0, 0]);
    out
}

#[test]
fn overlapping_entries_nested_deep_stop_the_scan_instead_of_exploding() {
    // 40 listings, four levels: 2.5 million pickles for a scan that follows them all.
    let mut file = b"\x80\x02N.".to_vec();
    for _ in 0..4 {
        file = listed_n_times(&file, 40);
    }
    let r = scan(&file);
    assert_eq!(r.verdict(), Verdict::Unreadable);
    let budget = file.len() as u64 * tensorplay::scan::WORK_PER_FILE_BYTE;
    assert!(
        r.problems.iter().any(|p| p.kind == "limit"
            && p.to_string()
                .contains(&format!("read more than {budget} bytes"))),
        "{:?}",
        r.problems
    );
    assert!(u64::from(r.pickles) <= budget, "{} pickles", r.pickles);
}

#[test]
fn a_nested_zip_bomb_is_inflated_only_up_to_deflates_largest_ratio() {
    let deflated = |name: &str, data: &[u8]| Entry {
        method: 8,
        declared_size: Some(data.len() as u64),
        declared_in_local_header: true,
        ..Entry::new(name, &miniz_oxide::deflate::compress_to_vec(data, 9))
    };
    let zeros = vec![0u8; 16 << 20];
    let leaf = deflated("x.pkl", &zeros);
    let inner = zipw::write(
        &(0..10)
            .map(|i| Entry {
                name: format!("x{i}.pkl"),
                ..leaf.clone()
            })
            .collect::<Vec<_>>(),
        Options::default(),
    );
    let outer_entry = deflated("z.zip", &inner);
    let file = zipw::write(
        &(0..10)
            .map(|i| Entry {
                name: format!("z{i}.zip"),
                ..outer_entry.clone()
            })
            .collect::<Vec<_>>(),
        Options::default(),
    );
    // 1.6 GiB of zeros from a file of a few KiB.
    assert!(file.len() < 64 << 10, "{}", file.len());
    let r = scan(&file);
    assert_eq!(r.verdict(), Verdict::Unreadable);
    let budget = file.len() as u64 * tensorplay::scan::MAX_DEFLATE_RATIO;
    assert!(
        r.problems.iter().any(|p| p
            .to_string()
            .contains(&format!("inflate more than {budget} bytes"))),
        "{:?}",
        r.problems
    );
}

#[test]
fn deflated_storages_are_not_capped_by_the_pickle_limit() {
    // A re-zipped checkpoint: 4 MiB of float32 zeros in a deflated data/0, scanned
    // with max_pickle_bytes at 1 MiB. Payloads count against max_inflated_bytes.
    let pickle = b"\x80\x02ctorch._utils\n_rebuild_tensor_v2\n((X\x07\x00\x00\x00storagectorch\nFloatStorage\nX\x01\x00\x00\x000X\x03\x00\x00\x00cpuJ\x00\x00\x10\x00tQK\x00J\x00\x00\x10\x00\x85K\x01\x85\x89ccollections\nOrderedDict\n)RtR.";
    let zeros = vec![0u8; 4 << 20];
    let storage = Entry {
        method: 8,
        declared_size: Some(zeros.len() as u64),
        declared_in_local_header: true,
        ..Entry::new(
            "archive/data/0",
            &miniz_oxide::deflate::compress_to_vec(&zeros, 6),
        )
    };
    let file = zipw::write(
        &[
            Entry::new("archive/data.pkl", pickle),
            storage,
            Entry::new("archive/version", b"3\n"),
        ],
        Options::default(),
    );
    let mut options = ScanOptions::default();
    options.limits.max_pickle_bytes = 1 << 20;
    let r = scan_bytes(&file, &options);
    assert_eq!(r.verdict(), Verdict::Clean, "{:?}", r.problems);
}

#[test]
fn scanning_with_entries_read_in_pieces_gives_the_report_of_the_whole_file() {
    let options = ScanOptions::default();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let mut answered = 0;
    for dir in ["fixtures/torch", "malicious/files"] {
        for entry in std::fs::read_dir(root.join(dir)).unwrap() {
            let path = entry.unwrap().path();
            let data = std::fs::read(&path).unwrap();
            let read_at = |offset: u64, n: usize| {
                let start = usize::try_from(offset).ok()?;
                data.get(start..start.checked_add(n)?).map(<[u8]>::to_vec)
            };
            let by_reading = read_entries_by_reading(data.len() as u64, &read_at, u64::MAX);
            let strict = tensorplay::archive::zip::read_entries(&data, u64::MAX);
            match (&by_reading, &strict) {
                (Some(pieces), Ok(whole)) => assert_eq!(pieces, whole, "{}", path.display()),
                (Some(_), Err(e)) => {
                    panic!("{}: pieces read what the file refuses: {e}", path.display())
                }
                (None, _) => {}
            }
            answered += usize::from(by_reading.is_some());
            let whole = scan_bytes(&data, &options);
            let pieces = scan_file(&data, by_reading, &options, None);
            assert_eq!(summary(&pieces), summary(&whole), "{}", path.display());
        }
    }
    assert!(
        answered >= 30,
        "only {answered} files were indexed from pieces"
    );
}

#[test]
fn a_pickles_only_scan_from_reads_gives_the_report_of_the_whole_file() {
    let options = ScanOptions {
        pickles_only: true,
        ..ScanOptions::default()
    };
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let (mut answered, mut zips) = (0, 0);
    for dir in ["fixtures/torch", "malicious/files"] {
        for entry in std::fs::read_dir(root.join(dir)).unwrap() {
            let path = entry.unwrap().path();
            let data = std::fs::read(&path).unwrap();
            let read_at = |offset: u64, n: usize| {
                let start = usize::try_from(offset).ok()?;
                data.get(start..start.checked_add(n)?).map(<[u8]>::to_vec)
            };
            zips += usize::from(data.starts_with(b"PK\x03\x04"));
            let Some(pieces) =
                scan_pickles_by_reading(data.len() as u64, &read_at, TAIL_READ, &options)
            else {
                // Left to the whole-file scan: broken archives, archives other
                // readers read apart, and directories with more local headers
                // than reads are worth. Never another clean one.
                let listed = read_directory_only(&data, u64::MAX).map_or(0, |i| i.entries.len());
                if data.starts_with(b"PK\x03\x04") && listed <= 1024 {
                    let whole = scan_bytes(&data, &options);
                    assert_ne!(whole.verdict(), Verdict::Clean, "{}", path.display());
                }
                continue;
            };
            answered += 1;
            assert_eq!(
                summary(&pieces),
                summary(&scan_bytes(&data, &options)),
                "{}",
                path.display()
            );
        }
    }
    // The rest are broken archives, for the fallbacks of the whole-file scan.
    assert!(
        answered >= 100,
        "{answered} of {zips} zips answered from reads"
    );
}

#[test]
fn a_pickles_only_scan_reads_a_bounded_number_of_entries_one_by_one() {
    let options = ScanOptions {
        pickles_only: true,
        ..ScanOptions::default()
    };
    let zip_of = |n: usize| {
        let names: Vec<String> = (0..n).map(|i| format!("p/{i}.pkl")).collect();
        let entries: Vec<Entry> = names.iter().map(|n| Entry::new(n, b"N.")).collect();
        zipw::write(&entries, Options::default())
    };
    for (n, answered) in [(100, true), (5000, false)] {
        let data = zip_of(n);
        let reads = std::cell::Cell::new(0usize);
        let read_at = |offset: u64, len: usize| {
            reads.set(reads.get() + 1);
            let start = usize::try_from(offset).ok()?;
            data.get(start..start.checked_add(len)?).map(<[u8]>::to_vec)
        };
        let by_reading = scan_pickles_by_reading(data.len() as u64, &read_at, TAIL_READ, &options);
        assert_eq!(by_reading.is_some(), answered, "{n} entries");
        // The directory, then (only when answering) a header and a payload each.
        assert!(
            reads.get() <= 3 + 2 * usize::from(answered) * n,
            "{} reads",
            reads.get()
        );
        let whole = scan_bytes(&data, &options);
        assert_eq!(whole.pickles as usize, n);
        if let Some(r) = by_reading {
            assert_eq!(summary(&r), summary(&whole));
        }
    }
}

#[test]
fn a_pickles_only_scan_from_reads_skips_only_storages_that_change_nothing() {
    let options = ScanOptions {
        pickles_only: true,
        ..ScanOptions::default()
    };
    let clean = b"\x80\x02}q\x00.";
    let encrypted = Entry {
        flags: 1,
        ..Entry::new("t/data/1", b"\0\0\0\0")
    };
    let archives: [Vec<Entry>; 4] = [
        // An encrypted storage after data.pkl is still refused.
        vec![
            Entry::new("t/data.pkl", clean),
            Entry::new("t/data/0", b"\0\0\0\0"),
            encrypted,
            Entry::new("t/version", b"3\n"),
        ],
        // Storages before data.pkl, one holding a pickle; a second data.pkl after.
        vec![
            Entry::new("t/data/0", OS_SYSTEM),
            Entry::new("t/data.pkl", clean),
            Entry::new("t/data/1", b"\0\0\0\0"),
            Entry::new("t/data.pkl", OS_SYSTEM),
        ],
        // No data.pkl: no root, so `data/0` is an ordinary member, and read.
        vec![
            Entry::new("t/x.pkl", clean),
            Entry::new("t/data/0", OS_SYSTEM),
        ],
        // A pickle under the root that is not a storage.
        vec![
            Entry::new("t/data.pkl", clean),
            Entry::new("t/data/0", b"\0\0\0\0"),
            Entry::new("t/extra/evil.pkl", OS_SYSTEM),
        ],
    ];
    let mut verdicts = Vec::new();
    for entries in &archives {
        let data = zipw::write(entries, Options::default());
        let read_at = |offset: u64, n: usize| {
            let start = usize::try_from(offset).ok()?;
            data.get(start..start.checked_add(n)?).map(<[u8]>::to_vec)
        };
        let by_reading = scan_pickles_by_reading(data.len() as u64, &read_at, TAIL_READ, &options)
            .expect("answered from reads");
        assert_eq!(summary(&by_reading), summary(&scan_bytes(&data, &options)));
        verdicts.push(by_reading.verdict());
    }
    assert_eq!(
        verdicts,
        [
            Verdict::Unreadable,
            Verdict::Unsafe,
            Verdict::Unsafe,
            Verdict::Unsafe
        ]
    );
}

fn summary(
    r: &Report,
) -> (
    String,
    Vec<tensorplay::scan::Finding>,
    Vec<tensorplay::scan::Problem>,
    u32,
) {
    (
        r.format.name().to_owned(),
        r.findings.clone(),
        r.problems.clone(),
        r.pickles,
    )
}

/// `pickle.loads(b'...')` (or any refused call) handed the bytes of another
/// pickle: what the inner one holds is reported too, where it was found.
#[test]
fn bytes_handed_to_a_refused_call_are_scanned_as_a_file() {
    let mut outer = b"\x80\x02c_pickle\nloads\nC".to_vec();
    outer.push(OS_SYSTEM.len() as u8);
    outer.extend_from_slice(OS_SYSTEM);
    outer.extend_from_slice(b"\x85R.");
    let r = scan(&outer);
    assert_eq!(names(&r), ["_pickle.loads", "os.system"]);
    let inner = &r.findings[1];
    assert!(inner.dangerous);
    assert_eq!(inner.wrappers, ["pickle"]);
    assert!(inner.location.contains("bytes passed at byte"), "{inner:?}");
    // A gzip of the same payload handed to gzip.decompress, then to pickle.loads.
    let gz = wrap_gzip(OS_SYSTEM);
    let mut outer = b"\x80\x02cgzip\ndecompress\nC".to_vec();
    outer.push(gz.len() as u8);
    outer.extend_from_slice(&gz);
    outer.extend_from_slice(b"\x85R.");
    let r = scan(&outer);
    assert_eq!(names(&r), ["gzip.decompress", "os.system"]);
    assert_eq!(r.findings[1].wrappers, ["pickle", "gzip"]);
    // Bytes that are no pickle add no problem to a file that is unsafe anyway.
    let r = scan(b"\x80\x02cmymod\nThing\nC\x03\x01\x02\x03\x85R.");
    assert_eq!(names(&r), ["mymod.Thing"]);
    assert!(r.problems.is_empty(), "{:?}", r.problems);
}

/// A gzip member holding `data` stored (DEFLATE's uncompressed blocks).
fn wrap_gzip(data: &[u8]) -> Vec<u8> {
    let mut out = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff".to_vec();
    out.push(1);
    out.extend_from_slice(&(data.len() as u16).to_le_bytes());
    out.extend_from_slice(&(!(data.len() as u16)).to_le_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(&crc32fast::hash(data).to_le_bytes());
    out.extend_from_slice(&(data.len() as u32).to_le_bytes());
    out
}

#[test]
fn compressed_pickles_are_scanned_inside() {
    let r = scan(&wrap_gzip(OS_SYSTEM));
    assert_eq!(r.format.name(), "gzip");
    assert_eq!(names(&r), ["os.system"]);
    assert_eq!(r.findings[0].wrappers, ["gzip"]);
    let clean = wrap_gzip(b"\x80\x02}q\x00.");
    assert_eq!(scan(&clean).verdict(), Verdict::Clean);
    // Two members, the payload in the second: gzip readers read both.
    let two = [wrap_gzip(b"\x80\x02N."), wrap_gzip(OS_SYSTEM)].concat();
    assert_eq!(names(&scan(&two)), ["os.system"]);
    // A member cut short never scans clean; what decoded before the cut (a
    // streaming reader has run it by then) is reported beside the break.
    let cut = [wrap_gzip(OS_SYSTEM), wrap_gzip(b"\x80\x02N.")].concat();
    let r = scan(&cut[..cut.len() - 20]);
    assert_eq!(r.verdict(), Verdict::Unsafe);
    assert_eq!(names(&r), ["os.system"]);
    assert!(
        r.problems.iter().any(|p| p.reason.contains("gzip stream")),
        "{r:?}"
    );
    let cut = wrap_gzip(b"\x80\x02}q\x00.");
    assert_eq!(scan(&cut[..cut.len() - 10]).verdict(), Verdict::Unreadable);
}

/// `body` in a FRAME of `len` bytes (protocol 4).
fn framed(len: u64, body: &[u8]) -> Vec<u8> {
    let mut out = b"\x80\x04\x95".to_vec();
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(body);
    out
}

#[test]
fn an_opcode_that_crosses_its_frames_end_is_read_both_ways() {
    // BINBYTES of 3 bytes starts one byte before the frame's end. From memory
    // they are that byte and the next two, and SHORT_BINBYTES then swallows 99
    // bytes; a reader of a file takes the 3 bytes from the frame's end, and goes
    // on at the GLOBAL (the 99) and calls builtins.len.
    let mut body = b"B\x03\x00\x00\x00A".to_vec();
    body.extend_from_slice(b"AAC");
    let mut called = b"cbuiltins\nlen\nVabc\n\x85R0".to_vec();
    called.resize(99, b'N');
    body.extend_from_slice(&called);
    body.extend_from_slice(b"0.");
    let data = framed(6, &body);
    let r = scan(&data);
    assert_eq!(names(&r), ["builtins.len"], "{r:?}");
    assert!(
        r.problems
            .iter()
            .any(|p| p.kind == "parser_disagreement" && p.to_string().contains("readers disagree")),
        "{:?}",
        r.problems
    );
    let Err(refusal) = tensorplay::raw::open_pickle(&data, "x.pkl", &Default::default()) else {
        panic!("a load took a pickle CPython's readers read apart");
    };
    assert!(
        refusal.to_string().contains("read this pickle apart"),
        "{refusal}"
    );
}

#[test]
fn a_pickle_that_stops_inside_its_frame_is_read_on_from_the_frames_end() {
    // One reader starts the next pickle right after STOP, another at the frame's end.
    let hidden = b"cos\nsystem\n";
    let mut body = b"N.".to_vec();
    body.extend_from_slice(hidden);
    let mut data = framed(body.len() as u64 + 3, &body);
    data.extend_from_slice(b"\x80\x04N.");
    let r = scan(&data);
    assert_eq!(r.verdict(), Verdict::Unsafe, "{r:?}");
    assert_eq!(names(&r), ["os.system"]);
}

#[test]
fn text_arguments_read_apart_make_a_file_unreadable_at_least() {
    for data in [
        &b"I010\n."[..],
        b"I1\x00zz\n.",
        b"F1e500\n.",
        b"F1_0.5\n.",
        b"\x80\x02N\x88r\xff\xff\xff\x7f0N.",
    ] {
        let r = scan(data);
        assert_eq!(r.verdict(), Verdict::Unreadable, "{data:?}: {r:?}");
        assert!(
            r.problems
                .iter()
                .any(|p| p.kind == "parser_disagreement"
                    && p.to_string().contains("readers disagree")),
            "{:?}",
            r.problems
        );
    }
    // What follows is still looked at.
    let r = scan(b"F1e500\ncos\nsystem\n(S'ls'\ntR.");
    assert_eq!(names(&r), ["os.system"]);
    // The pickler's own text is read alike by all.
    let written = b"(I01\nI42\nL7L\nF1.5\nFinf\nF-1e+300\ntp0\ng0\n\x86.";
    assert_eq!(scan(written).verdict(), Verdict::Clean);
}

#[test]
fn a_global_on_the_last_line_without_its_newline_is_reported_as_python_reads_it() {
    let r = scan(b"\x80\x02cos\nsystemX");
    assert_eq!(names(&r), ["os.system"], "{r:?}");
    assert_eq!(r.verdict(), Verdict::Unsafe);
}

fn sevenzip(name: &str) -> Vec<u8> {
    let path = format!(
        "{}/tests/fixtures/sevenzip/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(path).unwrap()
}

#[test]
fn files_in_a_7z_archive_are_scanned() {
    let r = scan(&sevenzip("hostile_lzma2.7z"));
    assert_eq!(r.format.name(), "7z");
    assert_eq!(names(&r), ["os.system"]);
    assert_eq!(r.findings[0].wrappers, ["7z"]);
    assert_eq!(r.findings[0].location, "model/data.pkl");
    // Through the BCJ x86 filter after LZMA2, py7zr's default coders.
    let r = scan(&sevenzip("hostile_bcj.7z"));
    assert_eq!(names(&r), ["os.system"], "{r:?}");
    assert_eq!(r.findings[0].location, "data.pkl");
    for clean in ["lzma2.7z", "bzip2.7z", "deflate.7z", "zstd.7z", "bcj.7z"] {
        let r = scan(&sevenzip(clean));
        assert_eq!(r.verdict(), Verdict::Clean, "{clean}: {r:?}");
        assert!(r.pickles > 0, "{clean}");
    }
    // Ten digits in a member named like a model (small.bin) are not one.
    let r = scan(&sevenzip("copy.7z"));
    assert_eq!(r.verdict(), Verdict::Unreadable);
    assert!(
        r.problems[0]
            .to_string()
            .starts_with("small.bin: named like a model"),
        "{r:?}"
    );
    // What the reader cannot decode is never clean.
    for closed in [
        "aes.7z",
        "aes_header.7z",
        "ppmd.7z",
        "ppmd_x86.7z",
        "append_bad_crc.7z",
    ] {
        let r = scan(&sevenzip(closed));
        assert_eq!(r.verdict(), Verdict::Unreadable, "{closed}: {r:?}");
        assert!(
            r.problems[0].to_string().contains("7z archive"),
            "{:?}",
            r.problems
        );
    }
}

#[test]
fn a_pickle_whose_first_bytes_make_a_zlib_header_is_read_as_a_pickle() {
    // '(' 'S' is a valid zlib header (CMF 0x28, FCHECK ok) and the start of
    // pickle.dumps((...), 0)-style text.
    let data = b"(S'ls'\nios\nsystem\n.";
    let r = scan(data);
    assert_eq!(names(&r), ["os.system"], "{r:?}");
    let clean = b"(S'a'\nS'b'\ntp0\n.";
    let r = scan(clean);
    assert_eq!(r.verdict(), Verdict::Clean, "{r:?}");
}

#[test]
fn globals_python_resolves_before_a_break_are_reported() {
    // INST without MARK: pickle.py imports the class before it pops the mark.
    assert_eq!(names(&scan(b"\x80\x02ios\nsystem\n.")), ["os.system"]);
    // STACK_GLOBAL fed by py2 strings, which decode to str.
    for data in [
        &b"\x80\x04U\x02osU\x06system\x93U\x02ls\x85R."[..],
        b"\x80\x04T\x02\x00\x00\x00osT\x06\x00\x00\x00system\x93U\x02ls\x85R.",
        b"\x80\x04S'os'\nS'system'\n\x93U\x02ls\x85R.",
    ] {
        assert_eq!(names(&scan(data)), ["os.system"], "{data:?}");
    }
}

fn scan_listing(data: &[u8]) -> Report {
    let options = ScanOptions {
        list_allowlisted: true,
        ..ScanOptions::default()
    };
    scan_bytes(data, &options)
}

fn listed(r: &Report) -> Vec<(String, u64)> {
    (r.allowlisted.iter().flatten())
        .map(|f| (f.name.clone(), f.offset))
        .collect()
}

#[test]
fn listing_names_the_allowlisted_globals_beside_the_findings() {
    // An OrderedDict, then os.system: the VM reads this one (a global outside the allowlist).
    let data = b"\x80\x02ccollections\nOrderedDict\n)R0cos\nsystem\nX\x02\x00\x00\x00ls\x85R.";
    let r = scan_listing(data);
    assert_eq!(listed(&r), [("collections.OrderedDict".to_owned(), 2)]);
    assert_eq!(names(&r), ["os.system"]);
    assert_eq!(r.verdict(), Verdict::Unsafe);
    // A clean pickle the opcode walk answers for, with memoised STACK_GLOBAL names.
    let clean = b"\x80\x04\x8c\x0bcollections\x94\x8c\x0bOrderedDict\x94\x93)R.";
    let r = scan_listing(clean);
    assert_eq!(listed(&r), [("collections.OrderedDict".to_owned(), 30)]);
    assert_eq!(r.verdict(), Verdict::Clean);
    // Nothing is listed unless asked, and listing changes no verdict.
    assert!(scan(clean).allowlisted.is_none());
    assert_eq!(scan(data).verdict(), Verdict::Unsafe);
}

#[test]
fn listing_reads_the_main_pickle_of_a_checkpoint_a_load_accepts() {
    let pkl = b"\x80\x02ccollections\nOrderedDict\n)R.";
    let data = zipw::checkpoint(pkl, &[]);
    assert_eq!(scan(&data).verdict(), Verdict::Clean);
    let r = scan_listing(&data);
    assert_eq!(r.verdict(), Verdict::Clean);
    let found: Vec<_> = r.allowlisted.iter().flatten().collect();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].name, "collections.OrderedDict");
    assert_eq!(found[0].location, "archive/data.pkl");
    // Inside a wrapper, the wrapper is named.
    let r = scan_listing(&wrap_gzip(pkl));
    let found: Vec<_> = r.allowlisted.iter().flatten().collect();
    assert_eq!(found[0].wrappers, ["gzip"]);
}

fn safetensors_file(header: &str, data: &[u8]) -> Vec<u8> {
    let mut f = (header.len() as u64).to_le_bytes().to_vec();
    f.extend_from_slice(header.as_bytes());
    f.extend_from_slice(data);
    f
}

#[test]
fn safetensors_headers_are_checked() {
    let good = safetensors_file(
        r#"{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#,
        &[0; 8],
    );
    let r = scan(&good);
    assert_eq!(r.format.name(), "safetensors");
    assert_eq!(r.verdict(), Verdict::Clean);
    for (header, data, kind) in [
        (
            r#"{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}"#,
            8,
            "malformed_archive",
        ),
        (
            r#"{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,16]}}"#,
            8,
            "tensor_bounds",
        ),
        (
            r#"{"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},"b":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}}"#,
            8,
            "tensor_bounds",
        ),
    ] {
        let r = scan(&safetensors_file(header, &vec![0; data]));
        assert_eq!(r.verdict(), Verdict::Unreadable, "{header}");
        assert_eq!(r.problems[0].kind, kind, "{header}");
    }
    // A header length past the end of the file.
    let mut short = good.clone();
    short.truncate(20);
    assert_eq!(scan(&short).verdict(), Verdict::Unreadable);
}

#[test]
fn a_safetensors_file_that_is_also_a_pickle_is_read_as_both() {
    let polyglot = include_bytes!("malicious/files/safetensors_polyglot.bin");
    let r = scan(polyglot);
    assert_eq!(r.format.name(), "safetensors");
    assert!(r.problems.is_empty(), "{:?}", r.problems);
    assert_eq!(names(&r), ["os.system"]);
    // A pickle reading that a limit stops could go on to a global: never clean.
    let options = ScanOptions {
        limits: tensorplay::limits::Limits {
            max_pickle_bytes: 1000,
            ..Default::default()
        },
        ..ScanOptions::default()
    };
    let r = scan_bytes(polyglot, &options);
    assert_eq!(r.verdict(), Verdict::Unreadable);
    assert_eq!(r.problems[0].kind, "limit");
}

#[test]
fn a_tar_whose_first_member_name_is_a_pickle_is_read_as_both() {
    let polyglot = include_bytes!("malicious/files/tar_polyglot.tar");
    let r = scan(polyglot);
    assert_eq!(r.format.name(), "tar");
    assert_eq!(names(&r), ["os.system"]);
    assert!(
        r.findings[0].wrappers.is_empty(),
        "the file itself, not a member"
    );
}

#[test]
fn spans_are_scanned_as_files_of_their_own_under_their_labels() {
    use tensorplay::archive::streams::Compression;
    use tensorplay::scan::{scan_spans, Span};

    let benign = b"\x80\x02]q\x00.";
    let mut data = b"# a model card\n".to_vec();
    let at = data.len() as u64;
    data.extend_from_slice(OS_SYSTEM);
    data.extend_from_slice(benign);
    let span = |offset: u64, length: u64, label: &str| Span {
        offset,
        length,
        transforms: Vec::new(),
        label: label.to_owned(),
    };
    let spans = [
        span(at, OS_SYSTEM.len() as u64, "bytes item 'x'"),
        span(
            at + OS_SYSTEM.len() as u64,
            benign.len() as u64,
            "bytes item 'y'",
        ),
        span(data.len() as u64 - 2, 10, "bytes item 'z'"),
    ];
    for threads in [1, 4] {
        let r = scan_spans(&data, &spans, &ScanOptions::default(), threads);
        assert_eq!(r.format.name(), "items");
        assert_eq!(names(&r), ["os.system"]);
        assert_eq!(r.findings[0].location, "bytes item 'x'");
        assert_eq!(r.findings[0].offset, 2, "offsets are the span's own");
        let problems: Vec<_> = r
            .problems
            .iter()
            .map(|p| (p.kind, p.location.as_str()))
            .collect();
        assert_eq!(problems, [("pointer_out_of_range", "bytes item 'z'")]);
        assert_eq!(r.verdict(), Verdict::Unsafe);
    }
    // Behind a transform the span's bytes are what undoing it gives; a transform
    // that does not undo is a problem of the span.
    // A zlib stream of one stored DEFLATE block.
    let zlib = {
        let mut stored = vec![0x78, 0x01];
        stored.push(0x01);
        let len = OS_SYSTEM.len() as u16;
        stored.extend_from_slice(&len.to_le_bytes());
        stored.extend_from_slice(&(!len).to_le_bytes());
        stored.extend_from_slice(OS_SYSTEM);
        let adler = {
            let (mut a, mut b) = (1u32, 0u32);
            for byte in OS_SYSTEM {
                a = (a + u32::from(*byte)) % 65521;
                b = (b + a) % 65521;
            }
            (b << 16) | a
        };
        stored.extend_from_slice(&adler.to_be_bytes());
        stored
    };
    let spans = [
        Span {
            transforms: vec![Compression::Zlib],
            ..span(0, zlib.len() as u64, "a")
        },
        Span {
            transforms: vec![Compression::Zstd],
            ..span(0, zlib.len() as u64, "b")
        },
    ];
    let r = scan_spans(&zlib, &spans, &ScanOptions::default(), 1);
    assert_eq!(names(&r), ["os.system"]);
    assert_eq!(r.findings[0].location, "a");
    assert_eq!(r.problems.len(), 1);
    assert_eq!(r.problems[0].location, "b");
}

#[test]
fn a_scan_in_waves_fetches_no_tensor_byte_in_three_waves_and_reports_as_the_local_scan() {
    // A checkpoint torch wrote, of 50 tensors: its data.pkl is longer than the
    // first block, which every reading of a zip reads (is it also a tar?).
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/torch/many_tensors.pt"
    );
    let data = std::fs::read(path).unwrap();
    let payloads: Vec<std::ops::Range<usize>> = (read_entries(&data, u64::MAX).unwrap().entries)
        .iter()
        .filter(|e| e.name.windows(6).any(|w| w == b"/data/"))
        .map(|e| e.data_offset as usize..(e.data_offset + e.compressed_size) as usize)
        .collect();
    assert!(payloads.len() >= 50);
    let options = ScanOptions {
        pickles_only: true,
        ..ScanOptions::default()
    };
    let mut held = Pieces::new(data.len());
    let (mut fetched, mut waves) = (Vec::new(), 0);
    let report = loop {
        match scan_pickles_in_waves(data.len() as u64, &held, &options) {
            Wave::Fetch(ranges) => {
                waves += 1;
                for (offset, n) in ranges {
                    let (o, n) = (offset as usize, n as usize);
                    held.add(o, data[o..o + n].to_vec());
                    fetched.push(o..o + n);
                }
            }
            Wave::Settled(report) => break report,
            Wave::WholeFile => panic!("a torch zip settles by ranges"),
        }
    };
    assert!(waves <= 3, "{waves} waves: {fetched:?}");
    for range in &fetched {
        let payload = payloads
            .iter()
            .find(|p| p.start < range.end && range.start < p.end);
        assert!(payload.is_none(), "{range:?} reaches into {payload:?}");
    }
    assert_eq!(summary(&report), summary(&scan_bytes(&data, &options)));
}

#[test]
fn a_torch_export_archives_tensor_records_are_tensor_bytes_and_its_pickles_are_read() {
    // lin.bias of a real torch 2.13 archive: binary of no known format elsewhere.
    let bias: &[u8] = b"\x00\x00\x00\xc0\x00\x00\x80\xbf\x00\x00\x00\x00\x00\x00\x80\x3f";
    let entries = |extra: Vec<Entry>| {
        let mut all = vec![
            Entry::new("m/data/weights/weight_0", bias),
            Entry::new("m/data/constants/tensor_0", bias),
            Entry::new("m/archive_format", b"pt2"),
            Entry::new("m/archive_version", b"0"),
        ];
        all.extend(extra);
        zipw::write(&all, Options::default())
    };
    let clean = scan(&entries(vec![]));
    assert_eq!(clean.verdict(), Verdict::Clean, "{:?}", clean.problems);
    // A pickle in a weight record (use_pickle) or anywhere else is read as ever.
    let planted = scan(&entries(vec![Entry::new(
        "m/data/weights/weight_1",
        OS_SYSTEM,
    )]));
    assert_eq!(names(&planted), ["os.system"]);
    // Outside those two folders, or without archive_format, the bytes stay unknown.
    let elsewhere = scan(&entries(vec![Entry::new("m/data/other/x", bias)]));
    assert_eq!(elsewhere.verdict(), Verdict::Unreadable);
    let not_pt2 = zipw::write(
        &[Entry::new("m/data/weights/weight_0", bias)],
        Options::default(),
    );
    assert_eq!(scan(&not_pt2).verdict(), Verdict::Unreadable);
}
