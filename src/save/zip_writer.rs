//! The archive `torch.save` writes, byte for byte: every record stored, its
//! payload padded (with an `FB` extra field) to the alignment, a data descriptor
//! after each non-empty record, ZIP64 where sizes or offsets need it, and ZIP64
//! end records always. The layout is planned as segments, so payloads can be
//! written straight from the tensors' memory, by Rust or by a Python file object.

use crate::save::serialization_id::serialization_id;
use crate::torch::records;

/// What a record holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Payload {
    /// The bytes of caller-owned buffer `index`, `len` long, with its CRC-32 (0 when off).
    Buffer { index: usize, len: u64, crc32: u32 },
    /// Small metadata written inline.
    Inline,
    /// Space reserved for `len` bytes that are not written (`skip_data`); CRC 0.
    Reserved { len: u64 },
}

#[derive(Debug, Clone)]
pub struct Record {
    /// The name under the root folder (`data.pkl`, `data/0`...).
    pub name: String,
    pub payload: Payload,
    /// The bytes of an inline record.
    pub inline: Vec<u8>,
}

impl Record {
    pub fn inline(name: &str, bytes: Vec<u8>) -> Record {
        Record {
            name: name.to_owned(),
            payload: Payload::Inline,
            inline: bytes,
        }
    }

    fn len(&self) -> u64 {
        match self.payload {
            Payload::Buffer { len, .. } | Payload::Reserved { len } => len,
            Payload::Inline => self.inline.len() as u64,
        }
    }

    fn crc(&self) -> u32 {
        match self.payload {
            Payload::Buffer { crc32, .. } => crc32,
            Payload::Inline => crc32fast::hash(&self.inline),
            Payload::Reserved { .. } => 0,
        }
    }
}

/// A piece of the output file, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    Bytes(Vec<u8>),
    /// The whole of caller buffer `index`.
    Buffer(usize),
    /// `len` bytes to skip (a hole in a file, zeros in a stream).
    Hole(u64),
}

const U32_MAX: u64 = 0xffff_ffff;

fn put16(out: &mut Vec<u8>, v: u16) {
    out.extend_from_slice(&v.to_le_bytes());
}
fn put32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}
fn put64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}
fn low32(v: u64) -> u32 {
    v.min(U32_MAX) as u32
}

struct Written {
    name: Vec<u8>,
    offset: u64,
    size: u64,
    crc: u32,
    flags: u16,
}

/// Plan the archive: `root` is the folder every record sits in; `crc` false
/// writes zeros where CRC-32s go. Returns the segments and the total size.
pub fn plan(root: &str, records: &[Record], alignment: u64, crc: bool) -> (Vec<Segment>, u64) {
    let alignment = alignment.max(1);
    let mut segments = Vec::new();
    let mut cursor = 0u64;
    let mut written: Vec<Written> = Vec::new();
    let mut head = Vec::new();
    let mut descriptor_crcs = Vec::new();
    let mut names_so_far: Vec<String> = Vec::new();
    let push_record = |record: &Record,
                       segments: &mut Vec<Segment>,
                       cursor: &mut u64,
                       head: &mut Vec<u8>,
                       written: &mut Vec<Written>| {
        let name = format!("{root}/{}", record.name).into_bytes();
        let size = record.len();
        let crc = if crc { record.crc() } else { 0 };
        let flags: u16 = if size == 0 { 0x0800 } else { 0x0808 };
        let zip64 = size >= U32_MAX || *cursor >= U32_MAX;
        let mut extra = Vec::new();
        if zip64 {
            let len = if size >= U32_MAX { 16 } else { 0 } + if *cursor >= U32_MAX { 8 } else { 0 };
            put16(&mut extra, 1);
            put16(&mut extra, len);
            if size >= U32_MAX {
                put64(&mut extra, size);
                put64(&mut extra, size);
            }
            if *cursor >= U32_MAX {
                put64(&mut extra, *cursor);
            }
        }
        let start = *cursor + 30 + name.len() as u64 + extra.len() as u64 + 4;
        let pad = (alignment - start % alignment) % alignment;
        put16(&mut extra, 0x4246);
        put16(&mut extra, pad as u16);
        extra.extend(std::iter::repeat_n(b'Z', pad as usize));
        put32(head, 0x0403_4b50);
        put16(head, 0);
        put16(head, flags);
        put16(head, 0);
        put32(head, 0);
        put32(head, 0);
        put32(head, 0);
        put32(head, 0);
        put16(head, name.len() as u16);
        put16(head, extra.len() as u16);
        head.extend_from_slice(&name);
        head.extend_from_slice(&extra);
        let offset = *cursor;
        *cursor = start + pad;
        match record.payload {
            Payload::Inline => head.extend_from_slice(&record.inline),
            Payload::Buffer { index, .. } => {
                segments.push(Segment::Bytes(std::mem::take(head)));
                segments.push(Segment::Buffer(index));
            }
            Payload::Reserved { len } => {
                segments.push(Segment::Bytes(std::mem::take(head)));
                segments.push(Segment::Hole(len));
            }
        }
        *cursor += size;
        if size > 0 {
            put32(head, 0x0807_4b50);
            put32(head, crc);
            if zip64 {
                put64(head, size);
                put64(head, size);
                *cursor += 24;
            } else {
                put32(head, size as u32);
                put32(head, size as u32);
                *cursor += 16;
            }
        }
        written.push(Written {
            name,
            offset,
            size,
            crc,
            flags,
        });
        (size > 0).then_some(crc)
    };
    for record in records {
        if let Some(c) = push_record(record, &mut segments, &mut cursor, &mut head, &mut written) {
            descriptor_crcs.push(c);
        }
        names_so_far.push(record.name.clone());
    }
    let names: Vec<&str> = names_so_far.iter().map(String::as_str).collect();
    let id = Record::inline(
        records::SERIALIZATION_ID,
        serialization_id(&names, &descriptor_crcs).into_bytes(),
    );
    push_record(&id, &mut segments, &mut cursor, &mut head, &mut written);

    let cd_start = cursor;
    // Header bytes not yet flushed are already counted in `cursor`.
    let pending = head.len() as u64;
    for w in &written {
        let zip64_size = w.size >= U32_MAX;
        let zip64_offset = w.offset >= U32_MAX;
        let mut extra = Vec::new();
        if zip64_size || zip64_offset {
            let len = if zip64_size { 16 } else { 0 } + if zip64_offset { 8 } else { 0 };
            put16(&mut extra, 1);
            put16(&mut extra, len);
            if zip64_size {
                put64(&mut extra, w.size);
                put64(&mut extra, w.size);
            }
            if zip64_offset {
                put64(&mut extra, w.offset);
            }
        }
        put32(&mut head, 0x0201_4b50);
        put16(&mut head, 0);
        put16(&mut head, 0);
        put16(&mut head, w.flags);
        put16(&mut head, 0);
        put32(&mut head, 0);
        put32(&mut head, w.crc);
        put32(&mut head, low32(w.size));
        put32(&mut head, low32(w.size));
        put16(&mut head, w.name.len() as u16);
        put16(&mut head, extra.len() as u16);
        put16(&mut head, 0);
        put16(&mut head, 0);
        put16(&mut head, 0);
        put32(&mut head, 0);
        put32(&mut head, low32(w.offset));
        head.extend_from_slice(&w.name);
        head.extend_from_slice(&extra);
    }
    let cd_size = head.len() as u64 - pending;
    let z64 = cd_start + cd_size;
    let count = written.len() as u64;
    put32(&mut head, 0x0606_4b50);
    put64(&mut head, 44);
    put16(&mut head, 0x031e);
    put16(&mut head, 45);
    put32(&mut head, 0);
    put32(&mut head, 0);
    put64(&mut head, count);
    put64(&mut head, count);
    put64(&mut head, cd_size);
    put64(&mut head, cd_start);
    put32(&mut head, 0x0706_4b50);
    put32(&mut head, 0);
    put64(&mut head, z64);
    put32(&mut head, 1);
    put32(&mut head, 0x0605_4b50);
    put16(&mut head, 0);
    put16(&mut head, 0);
    put16(&mut head, count.min(0xffff) as u16);
    put16(&mut head, count.min(0xffff) as u16);
    put32(&mut head, low32(cd_size));
    put32(&mut head, low32(cd_start));
    put16(&mut head, 0);
    let total = z64 + 56 + 20 + 22;
    segments.push(Segment::Bytes(head));
    (segments, total)
}
