//! Writing checkpoints as `torch.save` does: the aligned zip archive, its
//! records in torch's order, and the serialization id.

pub mod serialization_id;
pub mod zip_writer;

use crate::torch::records as names;
use zip_writer::{Payload, Record};

/// A storage to write: caller buffer `index` of `len` bytes, or reserved space.
#[derive(Debug, Clone, Copy)]
pub struct StorageRecord {
    pub len: u64,
    pub index: usize,
    pub crc32: u32,
    /// `skip_data`: reserve the space, write nothing.
    pub reserved: bool,
}

/// The records of a checkpoint in torch's order: `data.pkl`, `.format_version`,
/// `.storage_alignment`, `byteorder`, `data/0..`, `version`; with the byteorder
/// record "disabled", torch 2.13 still appends it after `version`.
pub fn checkpoint_records(
    pickle: Vec<u8>,
    storages: &[StorageRecord],
    alignment: u64,
    byteorder_last: bool,
) -> Vec<Record> {
    let byteorder = if cfg!(target_endian = "big") {
        "big"
    } else {
        "little"
    };
    let mut records = vec![
        Record::inline(names::DATA_PKL, pickle),
        Record::inline(names::FORMAT_VERSION, b"1".to_vec()),
        Record::inline(names::STORAGE_ALIGNMENT, alignment.to_string().into_bytes()),
    ];
    if !byteorder_last {
        records.push(Record::inline(
            names::BYTEORDER,
            byteorder.as_bytes().to_vec(),
        ));
    }
    for (key, s) in storages.iter().enumerate() {
        let payload = if s.reserved {
            Payload::Reserved { len: s.len }
        } else {
            Payload::Buffer {
                index: s.index,
                len: s.len,
                crc32: s.crc32,
            }
        };
        records.push(Record {
            name: names::storage_record(key),
            payload,
            inline: Vec::new(),
        });
    }
    records.push(Record::inline(names::VERSION, b"3\n".to_vec()));
    if byteorder_last {
        records.push(Record::inline(
            names::BYTEORDER,
            byteorder.as_bytes().to_vec(),
        ));
    }
    records
}

/// CRC-32 of a payload, on several threads for big ones.
pub fn crc32(bytes: &[u8]) -> u32 {
    const CHUNK: usize = 16 << 20;
    if bytes.len() <= 2 * CHUNK {
        return crc32fast::hash(bytes);
    }
    let parts: Vec<(u32, usize)> = std::thread::scope(|scope| {
        let handles: Vec<_> = bytes
            .chunks(CHUNK.max(bytes.len().div_ceil(crate::limits::default_threads())))
            .map(|part| scope.spawn(move || (crc32fast::hash(part), part.len())))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or((0, 0)))
            .collect()
    });
    let mut hasher = crc32fast::Hasher::new_with_initial(0);
    let mut first = true;
    for (crc, len) in parts {
        if first {
            hasher = crc32fast::Hasher::new_with_initial_len(crc, len as u64);
            first = false;
        } else {
            hasher.combine(&crc32fast::Hasher::new_with_initial_len(crc, len as u64));
        }
    }
    hasher.finalize()
}
