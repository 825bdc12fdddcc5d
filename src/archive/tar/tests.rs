//! One test per rule of the model; `tests/test_tar_model.py` holds all of them
//! to CPython's tarfile on thousands of archives.

use super::*;

/// A header block: `fields` written over a plain ustar header of `name`, then
/// the checksum (unsigned, or signed as Sun's tar sums).
fn header_with(
    name: &[u8],
    size: &[u8],
    kind: u8,
    fields: &[(usize, &[u8])],
    signed: bool,
) -> Vec<u8> {
    let mut block = vec![0u8; 512];
    block[..name.len()].copy_from_slice(name);
    block[100..108].copy_from_slice(b"0000644\0");
    block[124..124 + size.len()].copy_from_slice(size);
    block[156] = kind;
    block[257..265].copy_from_slice(b"ustar\x0000");
    for (at, bytes) in fields {
        block[*at..*at + bytes.len()].copy_from_slice(bytes);
    }
    block[148..156].copy_from_slice(b"        ");
    let sum: i64 = if signed {
        block.iter().map(|b| i64::from(*b as i8)).sum()
    } else {
        block.iter().map(|b| i64::from(*b)).sum()
    };
    block[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
    block
}

fn header(name: &[u8], size: usize, kind: u8) -> Vec<u8> {
    header_with(name, format!("{size:011o}\0").as_bytes(), kind, &[], false)
}

fn padded(data: &[u8]) -> Vec<u8> {
    let mut out = data.to_vec();
    out.resize(data.len().div_ceil(512) * 512, 0);
    out
}

fn file(name: &[u8], body: &[u8]) -> Vec<u8> {
    [header(name, body.len(), b'0'), padded(body)].concat()
}

fn end(parts: &[Vec<u8>]) -> Vec<u8> {
    let mut out = parts.concat();
    out.extend_from_slice(&[0; 1024]);
    out
}

fn record(keyword: &str, value: &str) -> Vec<u8> {
    let body = format!(" {keyword}={value}\n");
    let mut n = body.len() + 1;
    while n.to_string().len() + body.len() != n {
        n += 1;
    }
    format!("{n}{body}").into_bytes()
}

fn pax(kind: u8, records: &[u8]) -> Vec<u8> {
    [
        header(b"././@PaxHeader", records.len(), kind),
        padded(records),
    ]
    .concat()
}

fn read(data: &[u8]) -> Result<Archive, Failure> {
    open(data, &Limits::default())
}

fn names(archive: &Archive) -> Vec<String> {
    archive.members.iter().map(Member::display_name).collect()
}

fn only(data: &[u8]) -> Member {
    let archive = read(data).expect("tarfile opens it");
    assert_eq!(archive.failure, None);
    assert_eq!(archive.members.len(), 1, "{:?}", names(&archive));
    archive.members.into_iter().next().unwrap()
}

#[test]
fn what_tarfile_opens_is_decided_by_the_first_block() {
    assert_eq!(tarfile_open(b""), Err(Failure::ReadError("empty file")));
    assert_eq!(
        tarfile_open(&[0; 511]),
        Err(Failure::ReadError("truncated header"))
    );
    assert!(!opens_as_tar(&[b'x'; 4096]));
    // An end-of-archive block first: an empty archive, whatever follows.
    let zeros_first = [&[0u8; 512][..], b"anything at all"].concat();
    assert_eq!(read(&zeros_first).map(|a| a.members.len()), Ok(0));
    let mut bad = header(b"a", 0, b'0');
    bad[0] = b'b';
    assert_eq!(
        tarfile_open(&bad),
        Err(Failure::ReadError("invalid header"))
    );
    assert!(opens_as_tar(&header(b"a", 0, b'0')));
}

#[test]
fn checksums_may_be_signed_and_spelled_as_int_reads_them() {
    let signed = header_with(&[0xe9; 60], b"00000000000\0", b'0', &[], true);
    assert!(opens_as_tar(&signed));
    let mut spelled = header(b"a", 0, b'0');
    let sum = String::from_utf8_lossy(&spelled[148..154]).into_owned();
    spelled[148..156].copy_from_slice(format!("0o{sum}").as_bytes());
    assert!(opens_as_tar(&spelled));
}

#[test]
fn a_bad_header_after_the_first_ends_the_archive_silently() {
    let mut second = file(b"b", b"x");
    second[0] = b'c';
    let archive = read(&[file(b"a", b"x"), second].concat()).unwrap();
    assert_eq!((names(&archive), archive.failure), (vec!["a".into()], None));
    // As does a header cut short.
    let archive = read(&[file(b"a", b"x"), vec![1; 100]].concat()).unwrap();
    assert_eq!((names(&archive), archive.failure), (vec!["a".into()], None));
    // A bad number field is a bad header too.
    let mode = header_with(b"m", b"1\0", b'0', &[(100, b"9\0")], false);
    assert_eq!(
        tarfile_open(&mode),
        Err(Failure::ReadError("invalid header"))
    );
}

#[test]
fn data_past_the_end_raises_at_the_next_member() {
    let data = header(b"a", 5000, b'0');
    let archive = read(&data).unwrap();
    assert_eq!(names(&archive), ["a"]);
    assert_eq!(
        archive.failure,
        Some(Failure::ReadError("unexpected end of data"))
    );
    let content = archive.members[0].file_content(&data, 0);
    assert_eq!(
        (content.bytes.len(), content.failure),
        (0, Some(Failure::ReadError("unexpected end of data")))
    );
}

#[test]
fn only_regular_and_unknown_types_skip_their_size() {
    let body = file(b"hidden", b"in the data");
    for kind in [b'1', b'2', b'3', b'4', b'5', b'6'] {
        let archive = read(&end(&[header(b"t", 512, kind), body.clone()])).unwrap();
        assert_eq!(names(&archive), ["t", "hidden"], "type {}", kind as char);
        assert!(!archive.members[0].has_data());
    }
    for kind in [b'0', 0, b'7', b'A', b'V', 0xff] {
        let archive = read(&end(&[header(b"t", 512, kind), body.clone()])).unwrap();
        assert_eq!(names(&archive), ["t"], "type {kind}");
        assert!(archive.members[0].has_data());
    }
}

#[test]
fn a_v7_regular_file_named_like_a_folder_is_a_folder() {
    let v7 = header_with(b"dir//", b"00000001000\0", 0, &[(257, &[0; 8])], false);
    let archive = read(&end(&[v7, file(b"inside", b"x")])).unwrap();
    assert_eq!(names(&archive), ["dir", "inside"]);
    assert_eq!(archive.members[0].kind, b'5');
}

#[test]
fn the_ustar_prefix_is_joined_except_to_gnu_types() {
    let prefixed = header_with(b"name", b"0\0", b'0', &[(345, b"pre/fix")], false);
    assert_eq!(only(&end(&[prefixed])).name, b"pre/fix/name");
    let folder = header_with(b"d//", b"0\0", b'5', &[(345, b"p")], false);
    assert_eq!(only(&end(&[folder])).name, b"p/d");
}

#[test]
fn octal_sizes_are_read_as_python_int_reads_them() {
    for (spelling, size) in [
        (&b" +0o1_3 \0"[..], 11),
        (b"\x1c13\0", 11),
        (b"\x80\0\0\0\0\0\0\0\0\0\0\x0b", 11),
    ] {
        let member = only(&end(&[
            header_with(b"s", spelling, b'0', &[], false),
            padded(b"hello world"),
        ]));
        assert_eq!(member.size, size, "{spelling:?}");
    }
}

#[test]
fn negative_sizes_move_the_next_header_back() {
    // Back to the start: the archive ends there.
    let back = header_with(b"b", b"-1000\0", b'0', &[], false);
    assert_eq!(read(&end(&[back])).map(|a| a.failure), Ok(None));
    // Before it: BytesIO refuses the seek.
    let before = header_with(b"b", b"-2000\0", b'0', &[], false);
    let archive = read(&end(&[before])).unwrap();
    assert_eq!(
        archive.failure,
        Some(Failure::Raises(PyException::ValueError))
    );
    // To itself: tarfile would list it forever.
    let looping = [
        file(b"a", b""),
        header_with(b"loop", b"-1000\0", b'0', &[], false),
    ]
    .concat();
    let limits = Limits {
        max_zip_entries: 50,
        ..Limits::default()
    };
    let archive = open(&end(&[looping]), &limits).unwrap();
    assert!(
        matches!(archive.failure, Some(Failure::Limit(_))),
        "{:?}",
        archive.failure
    );
}

#[test]
fn extract_copies_a_negative_size_s_remainder_and_extractfile_nothing() {
    let data = [
        header_with(b"storages", b"-1\0", b'0', &[], false),
        vec![b'p'; 20000],
    ]
    .concat();
    let member = &read(&data).unwrap().members[0];
    assert!(member.file_content(&data, 0).bytes.is_empty());
    assert!(member.extract_differs());
    let extracted = member.extracted_content(&data, 0);
    assert_eq!((extracted.bytes.len(), extracted.failure), (16383, None));
}

#[test]
fn gnu_long_names_and_links_rename_the_next_member() {
    let long = [header(b"././@LongLink", 7, b'L'), padded(b"lo\0ng")].concat();
    assert_eq!(only(&end(&[long.clone(), file(b"short", b"")])).name, b"lo");
    let link = [header(b"././@LongLink", 6, b'K'), padded(b"target")].concat();
    assert_eq!(
        only(&end(&[link, header(b"l", 0, b'2')])).linkname,
        b"target"
    );
    // One slash off a folder's long name, where a header's name loses them all.
    let folder = [header(b"././@LongLink", 5, b'L'), padded(b"d///\0")].concat();
    assert_eq!(only(&end(&[folder, header(b"x", 0, b'5')])).name, b"d//");
    // A bad header after one always raises.
    assert_eq!(
        read(&end(&[long])).err(),
        Some(Failure::ReadError("a bad header after a GNU or PAX header"))
    );
}

#[test]
fn old_gnu_sparse_maps_continue_in_extension_blocks() {
    let mut structs = Vec::new();
    for (offset, numbytes) in [(0u32, 2u32), (100, 2)] {
        structs.extend_from_slice(format!("{offset:011o}\0{numbytes:011o}\0").as_bytes());
    }
    let sparse = header_with(
        b"sp",
        b"4\0",
        b'S',
        &[(386, &structs), (482, b"\x01"), (483, b"310\0")],
        false,
    );
    let mut extension = vec![0u8; 512];
    extension[..24].copy_from_slice(b"00000000310\x0000000000002\x00");
    let data = end(&[sparse.clone(), extension, padded(b"abcdef")]);
    let member = only(&data);
    assert_eq!(
        member.sparse,
        Some(vec![(0, 2), (100, 2), (0, 0), (0, 0), (200, 2)])
    );
    assert_eq!(member.size, 200);
    let content = member.file_content(&data, 1 << 10);
    assert_eq!(content.failure, None);
    assert_eq!(&content.bytes[..3], b"ab\0");
    assert_eq!(&content.bytes[100..102], b"cd");
    // An extension block cut short: `s[0]` of nothing.
    let cut = [sparse, vec![0; 100]].concat();
    assert_eq!(
        tarfile_open(&cut),
        Err(Failure::Raises(PyException::IndexError))
    );
}

#[test]
fn pax_records_override_the_header_and_move_the_next_one() {
    let records = [record("path", "from/pax//"), record("size", "600")].concat();
    let data = end(&[
        pax(b'x', &records),
        header(b"h", 0, b'0'),
        vec![7; 1024],
        file(b"next", b""),
    ]);
    let archive = read(&data).unwrap();
    assert_eq!(names(&archive), ["from/pax", "next"]);
    assert_eq!(
        (archive.members[0].size, archive.members[0].offset),
        (600, 0)
    );
    // A size int() refuses is 0; a folder skips no size, whatever it says.
    let zero = end(&[
        pax(b'x', &record("size", "x")),
        file(b"h", b"abc"),
        file(b"n", b""),
    ]);
    assert_eq!(read(&zero).unwrap().members[0].size, 0);
    let folder = end(&[
        pax(b'x', &record("size", "512")),
        header(b"d", 0, b'5'),
        file(b"n", b""),
    ]);
    assert_eq!(names(&read(&folder).unwrap()), ["d", "n"]);
    // Any script's digits.
    let arabic = end(&[
        pax(b'x', &record("size", "\u{661}\u{663}")),
        file(b"h", b""),
    ]);
    assert_eq!(read(&arabic).unwrap().members[0].size, 13);
}

#[test]
fn a_global_size_is_the_members_size_but_not_what_tarfile_skips() {
    let data = end(&[
        pax(b'g', &record("size", "3")),
        file(b"a", b"hello"),
        file(b"b", b"world"),
    ]);
    let archive = read(&data).unwrap();
    assert_eq!(names(&archive), ["a", "b"]);
    assert!(archive.members.iter().all(|m| m.size == 3));
}

#[test]
fn the_last_size_keyword_set_first_wins() {
    let records = [
        record("size", "3"),
        record("GNU.sparse.realsize", "9"),
        record("size", "5"),
    ]
    .concat();
    assert_eq!(
        only(&end(&[pax(b'x', &records), file(b"a", b"abcdefghij")])).size,
        9
    );
    let bad = end(&[
        pax(b'x', &record("GNU.sparse.realsize", "x")),
        file(b"a", b""),
    ]);
    assert_eq!(
        tarfile_open(&bad),
        Err(Failure::Raises(PyException::ValueError))
    );
}

#[test]
fn pax_records_fail_as_tarfile_fails() {
    let zero_length = end(&[pax(b'x', b"0 path=x\n"), file(b"a", b"")]);
    assert_eq!(
        tarfile_open(&zero_length),
        Err(Failure::ReadError("invalid header"))
    );
    // Past the first member, the same header silently ends the archive.
    let later = end(&[file(b"a", b""), pax(b'x', b"0 path=x\n"), file(b"b", b"")]);
    assert_eq!(read(&later).map(|a| names(&a)), Ok(vec!["a".into()]));
    let charset = end(&[pax(b'x', b"12 hdrcharset=\xff\n"), file(b"a", b"")]);
    assert_eq!(
        tarfile_open(&charset),
        Err(Failure::Raises(PyException::UnicodeDecodeError))
    );
    let long_length = [b"9".repeat(20), b" path=x\n".to_vec()].concat();
    let overflow = end(&[pax(b'x', &long_length), file(b"a", b"")]);
    assert_eq!(
        tarfile_open(&overflow),
        Err(Failure::Raises(PyException::OverflowError))
    );
    let digits = [b"0".repeat(4301), b"9 path=x\n".to_vec()].concat();
    let too_many = end(&[pax(b'x', &digits), file(b"a", b"")]);
    assert_eq!(
        tarfile_open(&too_many),
        Err(Failure::Raises(PyException::ValueError))
    );
}

#[test]
fn pax_sparse_maps_of_every_version() {
    let body = b"abcdefg";
    let v00 = [
        record("GNU.sparse.size", "20"),
        record("GNU.sparse.offset", "10"),
        record("GNU.sparse.numbytes", "3"),
    ]
    .concat();
    let member = only(&end(&[pax(b'x', &v00), file(b"s", body)]));
    assert_eq!((member.sparse, member.size), (Some(vec![(10, 3)]), 20));
    let v01 = [
        record("GNU.sparse.map", "2,3,10,4"),
        record("GNU.sparse.realsize", "30"),
    ]
    .concat();
    let data = end(&[pax(b'x', &v01), file(b"s", body)]);
    let member = only(&data);
    assert_eq!(member.sparse, Some(vec![(2, 3), (10, 4)]));
    let content = member.file_content(&data, 1 << 10);
    assert_eq!(
        &content.bytes[..],
        b"\0\0abc\0\0\0\0\0defg\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0"
    );
    let v10 = [
        record("GNU.sparse.major", "1"),
        record("GNU.sparse.minor", "0"),
        record("GNU.sparse.realsize", "20"),
    ]
    .concat();
    let blocks = [padded(b"1\n4\n3\n"), padded(body)].concat();
    let data = end(&[pax(b'x', &v10), file(b"s", &blocks)]);
    let member = only(&data);
    assert_eq!(
        (member.sparse.clone(), member.offset_data),
        (Some(vec![(4, 3)]), 2048)
    );
    assert_eq!(
        &member.file_content(&data, 1 << 10).bytes[..8],
        b"\0\0\0\0abc\0"
    );
}

#[test]
fn extract_and_extractfile_replay_a_tangled_map_differently() {
    let map = record("GNU.sparse.map", "0,4,2,2");
    let data = end(&[
        pax(b'x', &[map, record("GNU.sparse.realsize", "4")].concat()),
        file(b"s", b"abcdXY"),
    ]);
    let member = only(&data);
    // extractfile looks each position up from the piece used last.
    assert_eq!(&member.file_content(&data, 64).bytes[..], b"abcd");
    // extract copies each piece over the file in turn.
    assert_eq!(&member.extracted_content(&data, 64).bytes[..], b"abXY");
}

#[test]
fn a_chain_too_long_for_python_s_stack_is_unknown() {
    let chain: Vec<Vec<u8>> = (0..120)
        .map(|_| pax(b'x', &record("comment", "c")))
        .collect();
    let data = end(&[chain.concat(), file(b"a", b"")]);
    assert!(matches!(tarfile_open(&data), Err(Failure::Limit(_))));
    assert!(may_be_tar(&data));
}

#[test]
fn members_past_the_limit_stop_the_reading() {
    let data = end(&(0..5)
        .map(|i| file(format!("m{i}").as_bytes(), b""))
        .collect::<Vec<_>>());
    let limits = Limits {
        max_zip_entries: 3,
        ..Limits::default()
    };
    let archive = open(&data, &limits).unwrap();
    assert_eq!(archive.members.len(), 3);
    assert!(matches!(archive.failure, Some(Failure::Limit(_))));
}
