//! A tiny zip writer for tests: stored entries, with knobs to make it lie.

#[derive(Clone)]
pub struct Entry {
    pub name: String,
    pub data: Vec<u8>,
    /// Name written in the local header, if it should differ from the central directory's.
    pub local_name: Option<String>,
    pub flags: u16,
    pub method: u16,
    /// Declared uncompressed size, if it should differ from the data's length:
    /// in the central directory only (a lie), or in both headers (a compressed entry).
    pub declared_size: Option<u64>,
    pub declared_in_local_header: bool,
    /// Local header offset to declare, if it should point elsewhere.
    pub offset_override: Option<u64>,
}

impl Entry {
    pub fn new(name: &str, data: &[u8]) -> Self {
        Entry {
            name: name.into(),
            data: data.into(),
            local_name: None,
            flags: 0,
            method: 0,
            declared_size: None,
            declared_in_local_header: false,
            offset_override: None,
        }
    }
}

/// Options for the end records.
#[derive(Clone, Copy, Default)]
pub struct Options {
    /// Always write ZIP64 end records (torch does).
    pub zip64: bool,
    /// Claim this many entries in the end records.
    pub claimed_entries: Option<u64>,
}

fn u16le(v: &mut Vec<u8>, x: u16) {
    v.extend_from_slice(&x.to_le_bytes());
}
fn u32le(v: &mut Vec<u8>, x: u32) {
    v.extend_from_slice(&x.to_le_bytes());
}
fn u64le(v: &mut Vec<u8>, x: u64) {
    v.extend_from_slice(&x.to_le_bytes());
}

pub fn write(entries: &[Entry], options: Options) -> Vec<u8> {
    let mut out = Vec::new();
    let mut offsets = Vec::new();
    for e in entries {
        offsets.push(out.len() as u64);
        let local = e.local_name.as_deref().unwrap_or(&e.name);
        u32le(&mut out, 0x0403_4b50);
        u16le(&mut out, 20);
        u16le(&mut out, e.flags);
        u16le(&mut out, e.method);
        u32le(&mut out, 0);
        u32le(&mut out, 0);
        u32le(&mut out, e.data.len() as u32);
        let local_size = match (e.declared_size, e.declared_in_local_header) {
            (Some(size), true) => size,
            _ => e.data.len() as u64,
        };
        u32le(&mut out, local_size as u32);
        u16le(&mut out, local.len() as u16);
        u16le(&mut out, 0);
        out.extend_from_slice(local.as_bytes());
        out.extend_from_slice(&e.data);
    }
    let cd_start = out.len() as u64;
    for (e, offset) in entries.iter().zip(&offsets) {
        u32le(&mut out, 0x0201_4b50);
        u16le(&mut out, 20);
        u16le(&mut out, 20);
        u16le(&mut out, e.flags);
        u16le(&mut out, e.method);
        u32le(&mut out, 0);
        u32le(&mut out, 0);
        u32le(&mut out, e.data.len() as u32);
        u32le(
            &mut out,
            e.declared_size.unwrap_or(e.data.len() as u64) as u32,
        );
        u16le(&mut out, e.name.len() as u16);
        u16le(&mut out, 0);
        u16le(&mut out, 0);
        u16le(&mut out, 0);
        u16le(&mut out, 0);
        u32le(&mut out, 0);
        u32le(&mut out, e.offset_override.unwrap_or(*offset) as u32);
        out.extend_from_slice(e.name.as_bytes());
    }
    let cd_size = out.len() as u64 - cd_start;
    let count = options.claimed_entries.unwrap_or(entries.len() as u64);
    if options.zip64 {
        let z64 = out.len() as u64;
        u32le(&mut out, 0x0606_4b50);
        u64le(&mut out, 44);
        u16le(&mut out, 45);
        u16le(&mut out, 45);
        u32le(&mut out, 0);
        u32le(&mut out, 0);
        u64le(&mut out, count);
        u64le(&mut out, count);
        u64le(&mut out, cd_size);
        u64le(&mut out, cd_start);
        u32le(&mut out, 0x0706_4b50);
        u32le(&mut out, 0);
        u64le(&mut out, z64);
        u32le(&mut out, 1);
    }
    u32le(&mut out, 0x0605_4b50);
    u16le(&mut out, 0);
    u16le(&mut out, 0);
    u16le(&mut out, count.min(0xffff) as u16);
    u16le(&mut out, count.min(0xffff) as u16);
    u32le(&mut out, cd_size as u32);
    u32le(
        &mut out,
        if options.zip64 {
            0xffff_ffff
        } else {
            cd_start as u32
        },
    );
    u16le(&mut out, 0);
    out
}

/// A minimal torch checkpoint: `archive/data.pkl`, `version` and the given records.
pub fn checkpoint(pickle: &[u8], records: &[(&str, &[u8])]) -> Vec<u8> {
    let mut entries = vec![Entry::new("archive/data.pkl", pickle)];
    for (name, data) in records {
        entries.push(Entry::new(&format!("archive/{name}"), data));
    }
    entries.push(Entry::new("archive/version", b"3\n"));
    write(
        &entries,
        Options {
            zip64: true,
            claimed_entries: None,
        },
    )
}
