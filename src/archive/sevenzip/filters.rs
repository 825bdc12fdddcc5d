//! The filters a 7z folder may apply after its decompressor: the branch
//! converters (BCJ) for x86, ARM, ARM Thumb, PowerPC, SPARC and IA-64 code, and
//! Delta. Each maps the decompressor's output to the file's bytes in place and
//! keeps its length, so a chain of them costs no memory beyond the folder's
//! output.
//!
//! Written from the filters' description (the LZMA SDK's and XZ Utils' branch
//! converters, which 7-Zip, liblzma and pybcj share): an encoder rewrites the
//! relative target of a call or branch instruction as an absolute one (easier to
//! compress), and the decoder turns it back, its position counted from the start
//! of the folder's output. They are decoded here over the whole output at once,
//! which is what the streaming decoders produce: the bytes too close to the end
//! to hold a whole instruction (the last four for x86, the tail past the last
//! aligned instruction for the others) are left as they are. The unit tests hold
//! every filter to vectors liblzma decodes; `tests/sevenzip.rs` and
//! `tests/test_sevenzip_py7zr.py` hold them to archives py7zr writes.

/// A filter of a 7z folder, after its decompressor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Filter {
    /// BCJ: x86 CALL (E8) and JMP (E9) with a 32-bit relative target.
    X86,
    /// ARM BL, 4-byte aligned.
    Arm,
    /// ARM Thumb BL (a pair of 16-bit halves), 2-byte aligned.
    ArmThumb,
    /// PowerPC `bl` (big-endian), 4-byte aligned.
    PowerPc,
    /// SPARC `call`, 4-byte aligned.
    Sparc,
    /// IA-64 branches in the slots of 16-byte bundles.
    Ia64,
    /// Delta: each byte is stored as its difference from the byte `distance`
    /// (1 to 256) before it.
    Delta { distance: usize },
}

impl Filter {
    /// Decode `data`, the whole output of the coder before this one, in place.
    pub(super) fn decode(self, data: &mut [u8]) {
        match self {
            Filter::X86 => x86(data),
            Filter::Arm => arm(data),
            Filter::ArmThumb => arm_thumb(data),
            Filter::PowerPc => powerpc(data),
            Filter::Sparc => sparc(data),
            Filter::Ia64 => ia64(data),
            Filter::Delta { distance } => delta(data, distance),
        }
    }
}

/// A position in the stream as the filters count it: modulo 2^32.
fn position(at: usize) -> u32 {
    // Truncation is the filters' own arithmetic (their positions are 32-bit).
    at as u32
}

/// Whether the byte could be the top byte of a near 32-bit displacement: the
/// sign extension of a target within 16 MiB.
fn is_sign_byte(b: u8) -> bool {
    b == 0x00 || b == 0xFF
}

/// x86: a CALL or JMP opcode (E8, E9) followed by a 32-bit little-endian
/// displacement whose top byte is 00 or FF was converted to an absolute target,
/// unless an opcode byte among the three bytes before it suggests that it is
/// not the start of an instruction. Converted instructions are skipped whole;
/// otherwise the scan goes on at the next byte.
fn x86(data: &mut [u8]) {
    // Of the E8/E9 bytes left unconverted, those 1 to 3 bytes before the one
    // at hand (bit d: d bytes before), and of those, the ones whose own fourth
    // following byte was 00 or FF. Kept relative to `last`, the last E8/E9 seen.
    let (mut near, mut near_sign) = (0u32, 0u32);
    let mut last: Option<usize> = None;
    let mut at = 0usize;
    while let Some(window) = at.checked_add(5).and_then(|end| data.get_mut(at..end)) {
        let Ok(ins) = <&mut [u8; 5]>::try_from(window) else {
            break;
        };
        if ins[0] & 0xFE != 0xE8 {
            at += 1;
            continue;
        }
        // Age the history by the distance from the last opcode byte.
        let gap = last.map_or(usize::MAX, |last| at - last);
        last = Some(at);
        if gap > 3 {
            (near, near_sign) = (0, 0);
        } else {
            // gap is 1 to 3: what was d bytes before is now d + gap before,
            // and what is more than 3 bytes before is forgotten.
            near = (near << gap) & 0b1110;
            near_sign = (near_sign << gap) & 0b1110;
        }
        let sign = is_sign_byte(ins[4]);
        if sign && near.count_ones() <= 1 && near_sign == 0 {
            let pos = position(at).wrapping_add(5);
            let src = u32::from_le_bytes([ins[1], ins[2], ins[3], ins[4]]);
            let mut dest = src.wrapping_sub(pos);
            if near != 0 {
                // One unconverted opcode lies `d` bytes before: the encoder
                // converted again when byte 3 - d of its result looked like a
                // sign byte (that byte is the earlier opcode's fourth following
                // byte). Once more is enough: after it the byte is the
                // complement of that earlier byte, which is no sign byte (or the
                // instruction would not be converted at all).
                let d = near.trailing_zeros();
                let bits = 32 - 8 * d;
                if is_sign_byte((dest >> (bits - 8)) as u8) {
                    dest = (dest ^ ((1u32 << bits) - 1)).wrapping_sub(pos);
                }
            }
            let [b0, b1, b2, _] = dest.to_le_bytes();
            let top = if dest & (1 << 24) != 0 { 0xFF } else { 0x00 };
            *ins = [ins[0], b0, b1, b2, top];
            (near, near_sign) = (0, 0);
            at += 5;
        } else {
            near |= 1;
            if sign {
                near_sign |= 1;
            }
            at += 1;
        }
    }
}

/// ARM: a BL (fourth byte EB) holds a 24-bit word offset from its address + 8.
fn arm(data: &mut [u8]) {
    for (i, word) in data.chunks_exact_mut(4).enumerate() {
        let Ok(word) = <&mut [u8; 4]>::try_from(word) else {
            continue;
        };
        if word[3] != 0xEB {
            continue;
        }
        let src = u32::from_le_bytes([word[0], word[1], word[2], 0]) << 2;
        let pos = position(i.wrapping_mul(4)).wrapping_add(8);
        let dest = src.wrapping_sub(pos) >> 2;
        let [b0, b1, b2, _] = dest.to_le_bytes();
        *word = [b0, b1, b2, word[3]];
    }
}

/// ARM Thumb: a BL pair (F000-F7FF, then F800-FFFF, as little-endian halves)
/// holds a 22-bit halfword offset from its address + 4; the scan goes on after
/// a converted pair, else at the next halfword.
fn arm_thumb(data: &mut [u8]) {
    let mut at = 0usize;
    while let Some(window) = at.checked_add(4).and_then(|end| data.get_mut(at..end)) {
        let Ok(ins) = <&mut [u8; 4]>::try_from(window) else {
            break;
        };
        if ins[1] & 0xF8 != 0xF0 || ins[3] & 0xF8 != 0xF8 {
            at += 2;
            continue;
        }
        let src = (u32::from(ins[1] & 7) << 19
            | u32::from(ins[0]) << 11
            | u32::from(ins[3] & 7) << 8
            | u32::from(ins[2]))
            << 1;
        let pos = position(at).wrapping_add(4);
        let dest = src.wrapping_sub(pos) >> 1;
        *ins = [
            (dest >> 11) as u8,
            0xF0 | ((dest >> 19) & 7) as u8,
            dest as u8,
            0xF8 | ((dest >> 8) & 7) as u8,
        ];
        at += 4;
    }
}

/// PowerPC: `bl` (opcode 18 with AA = 0 and LK = 1, big-endian) holds a 24-bit
/// word offset from its own address.
fn powerpc(data: &mut [u8]) {
    for (i, word) in data.chunks_exact_mut(4).enumerate() {
        let Ok(word) = <&mut [u8; 4]>::try_from(word) else {
            continue;
        };
        if word[0] >> 2 != 0x12 || word[3] & 3 != 1 {
            continue;
        }
        let src = u32::from_be_bytes([word[0] & 3, word[1], word[2], word[3] & !3]);
        let dest = src.wrapping_sub(position(i.wrapping_mul(4)));
        let [b0, b1, b2, b3] = dest.to_be_bytes();
        *word = [0x48 | (b0 & 3), b1, b2, (word[3] & 3) | b3];
    }
}

/// SPARC: `call` (top bits 01) whose 30-bit word displacement is within 2^22
/// words of its address (its next bits all equal), big-endian.
fn sparc(data: &mut [u8]) {
    for (i, word) in data.chunks_exact_mut(4).enumerate() {
        let Ok(word) = <&mut [u8; 4]>::try_from(word) else {
            continue;
        };
        let call = (word[0] == 0x40 && word[1] & 0xC0 == 0x00)
            || (word[0] == 0x7F && word[1] & 0xC0 == 0xC0);
        if !call {
            continue;
        }
        let src = u32::from_be_bytes(*word) << 2;
        let dest = src.wrapping_sub(position(i.wrapping_mul(4))) >> 2;
        // The displacement sign-extended from bit 22 to bit 29, under the
        // opcode bits 01.
        let sign = if dest & (1 << 22) != 0 {
            0x3FC0_0000
        } else {
            0
        };
        let dest = sign | (dest & 0x003F_FFFF) | 0x4000_0000;
        *word = dest.to_be_bytes();
    }
}

/// IA-64: in each 16-byte bundle, the template (its low 5 bits) says which of
/// the three 41-bit slots hold branch-unit instructions; an IP-relative branch
/// among them (opcode 5, bits 9..11 zero) holds a 21-bit bundle offset from the
/// bundle's address.
fn ia64(data: &mut [u8]) {
    // Which slots (bit 0 for slot 0) are branches, by template.
    const BRANCH_SLOTS: [u8; 32] = [
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, //
        4, 4, 6, 6, 0, 0, 7, 7, 4, 4, 0, 0, 4, 4, 0, 0,
    ];
    for (i, bundle) in data.chunks_exact_mut(16).enumerate() {
        let Ok(bundle) = <&mut [u8; 16]>::try_from(bundle) else {
            continue;
        };
        let template = usize::from(bundle[0] & 0x1F);
        let slots = BRANCH_SLOTS.get(template).copied().unwrap_or(0);
        let pos = position(i.wrapping_mul(16));
        for slot in 0..3usize {
            if slots >> slot & 1 == 0 {
                continue;
            }
            // The slot starts at bit 5 + 41 * slot; the six bytes from its
            // first byte hold it whole.
            let start = 5 + 41 * slot;
            let (first, shift) = (start / 8, start % 8);
            let Some(bytes) = bundle.get_mut(first..first + 6) else {
                continue;
            };
            let mut raw = [0u8; 8];
            if let Some(low) = raw.get_mut(..6) {
                low.copy_from_slice(bytes);
            }
            let word = u64::from_le_bytes(raw);
            let mut ins = word >> shift;
            if (ins >> 37) & 0xF != 0x5 || (ins >> 9) & 0x7 != 0 {
                continue;
            }
            // imm20b (bits 13..32) and its sign (bit 36), in bundles.
            let src = ((ins >> 13) & 0xF_FFFF) as u32 | (((ins >> 36) & 1) as u32) << 20;
            let dest = (src << 4).wrapping_sub(pos) >> 4;
            ins &= !(0x8F_FFFFu64 << 13);
            ins |= u64::from(dest & 0xF_FFFF) << 13;
            ins |= u64::from(dest & 0x10_0000) << (36 - 20);
            let word = (word & ((1u64 << shift) - 1)) | (ins << shift);
            if let Some(low) = word.to_le_bytes().get(..6) {
                bytes.copy_from_slice(low);
            }
        }
    }
}

/// Delta: each byte is the sum of its stored value and the decoded byte
/// `distance` before it (the bytes before the start count as zeros).
fn delta(data: &mut [u8], distance: usize) {
    for i in distance..data.len() {
        let earlier = data.get(i - distance).copied().unwrap_or(0);
        if let Some(b) = data.get_mut(i) {
            *b = b.wrapping_add(earlier);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The vectors are liblzma's decodings (Python's lzma module, a raw stream of
    // the filter over LZMA2 chunks stored uncompressed): see
    // tests/fixtures/sevenzip/filter_vectors.py, which prints them.

    fn decoded(filter: Filter, data: &[u8]) -> Vec<u8> {
        let mut out = data.to_vec();
        filter.decode(&mut out);
        out
    }

    #[test]
    fn short_vectors_decode_as_liblzma_decodes_them() {
        let cases: &[(Filter, &[u8], &[u8])] = &[
            (
                Filter::X86,
                &[
                    0xE8, 0x00, 0x01, 0x00, 0x00, 0x90, 0x90, 0xE9, 0xFB, 0xFF, 0xFF, 0xFF, 0x90,
                    0xE8, 0xE8, 0x41, 0x42, 0x00, 0x00, 0xE8, 0x10, 0x20, 0x30, 0x00, 0x90, 0xE8,
                    0x00, 0x00, 0x00, 0xFF, 0xE8, 0x00, 0x00, 0x00,
                ],
                &[
                    0xE8, 0xFB, 0x00, 0x00, 0x00, 0x90, 0x90, 0xE9, 0xEF, 0xFF, 0xFF, 0xFF, 0x90,
                    0xE8, 0xD6, 0x41, 0x42, 0x00, 0x00, 0xE8, 0xF8, 0x1F, 0x30, 0x00, 0x90, 0xE8,
                    0xE2, 0xFF, 0xFF, 0x00, 0xE8, 0x00, 0x00, 0x00,
                ],
            ),
            (
                Filter::Arm,
                &[
                    0x10, 0x00, 0x00, 0xEB, 0xFC, 0xFF, 0xFF, 0xEB, 0x00, 0x00, 0x00, 0xEA, 0x01,
                    0x02, 0x03, 0xEB, 0x01, 0x02,
                ],
                &[
                    0x0E, 0x00, 0x00, 0xEB, 0xF9, 0xFF, 0xFF, 0xEB, 0x00, 0x00, 0x00, 0xEA, 0xFC,
                    0x01, 0x03, 0xEB, 0x01, 0x02,
                ],
            ),
            (
                Filter::ArmThumb,
                &[
                    0x00, 0xF0, 0x00, 0xF8, 0xFF, 0xB7, 0xFF, 0xF7, 0xFE, 0xFF, 0x00, 0xF0, 0x00,
                    0xF8, 0x00, 0xF0, 0x01, 0xF8,
                ],
                &[
                    0xFF, 0xF7, 0xFE, 0xFF, 0xFF, 0xB7, 0xFF, 0xF7, 0xF9, 0xFF, 0xFF, 0xF7, 0xF9,
                    0xFF, 0xFF, 0xF7, 0xF8, 0xFF,
                ],
            ),
            (
                Filter::PowerPc,
                &[
                    0x48, 0x00, 0x01, 0x01, 0x4B, 0xFF, 0xFF, 0xFD, 0x48, 0x00, 0x01, 0x00, 0x49,
                    0x23, 0x45, 0x67, 0x48, 0x00,
                ],
                &[
                    0x48, 0x00, 0x01, 0x01, 0x4B, 0xFF, 0xFF, 0xF9, 0x48, 0x00, 0x01, 0x00, 0x49,
                    0x23, 0x45, 0x67, 0x48, 0x00,
                ],
            ),
            (
                Filter::Sparc,
                &[
                    0x40, 0x00, 0x00, 0x10, 0x7F, 0xFF, 0xFF, 0xFF, 0x40, 0x40, 0x00, 0x00, 0x7F,
                    0x00, 0x00, 0x00, 0x40, 0x00, 0x00,
                ],
                &[
                    0x40, 0x00, 0x00, 0x10, 0x7F, 0xFF, 0xFF, 0xFE, 0x40, 0x40, 0x00, 0x00, 0x7F,
                    0x00, 0x00, 0x00, 0x40, 0x00, 0x00,
                ],
            ),
            // An unconverted opcode 1, 2 and 3 bytes before one that is converted,
            // whose first result has a sign byte where that opcode's fourth
            // following byte was: converted once more.
            (
                Filter::X86,
                &[
                    0xE8, 0xE8, 0x00, 0x00, 0x01, 0x00, 0x90, 0x90, 0x90, 0x90, 0x90,
                ],
                &[
                    0xE8, 0xE8, 0xFF, 0xFF, 0xFE, 0x00, 0x90, 0x90, 0x90, 0x90, 0x90,
                ],
            ),
            (
                Filter::X86,
                &[
                    0xE8, 0x90, 0xE8, 0x00, 0x01, 0x00, 0x00, 0x00, 0x90, 0x90, 0x90,
                ],
                &[
                    0xE8, 0x90, 0xE8, 0xFF, 0xFE, 0x00, 0x00, 0x00, 0x90, 0x90, 0x90,
                ],
            ),
            (
                Filter::X86,
                &[
                    0xE8, 0x90, 0x90, 0xE8, 0x08, 0x00, 0x00, 0x00, 0x90, 0x90, 0x90,
                ],
                &[
                    0xE8, 0x90, 0x90, 0xE8, 0xF7, 0x00, 0x00, 0x00, 0x90, 0x90, 0x90,
                ],
            ),
        ];
        for (filter, input, output) in cases {
            assert_eq!(decoded(*filter, input), *output, "{filter:?}");
        }
    }

    /// Bytes rich in the opcodes and prefixes the filters look for: an
    /// xorshift32 stream, half of whose bytes are drawn from them.
    fn pattern(seed: u32, len: usize) -> Vec<u8> {
        const ALPHABET: [u8; 16] = [
            0x00, 0xFF, 0xE8, 0xE9, 0xEB, 0xF0, 0xF8, 0xF7, 0x40, 0x7F, 0x48, 0x4B, 0x01, 0x05,
            0x10, 0xC0,
        ];
        let mut x = seed;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                if x & 0x100 != 0 {
                    ALPHABET[(x >> 28) as usize]
                } else {
                    (x >> 20) as u8
                }
            })
            .collect()
    }

    /// Every other bundle made a branch bundle (template 0x10) whose slot 2 is an
    /// IP-relative branch.
    fn ia64_bundles(mut data: Vec<u8>) -> Vec<u8> {
        for bundle in data.chunks_exact_mut(32) {
            bundle[0] = (bundle[0] & 0xE0) | 0x10;
            bundle[12] &= 0xF8;
            bundle[15] = 0x50 | (bundle[15] & 0x0F);
        }
        data
    }

    /// x86 opcodes and sign bytes in clusters, for the history of unconverted ones.
    fn dense_x86(data: Vec<u8>) -> Vec<u8> {
        let opcodes = [0xE8, 0xE9, 0x00, 0xFF];
        data.into_iter()
            .map(|b| {
                if b & 4 != 0 {
                    opcodes[usize::from(b & 3)]
                } else {
                    b
                }
            })
            .collect()
    }

    #[test]
    fn long_vectors_decode_as_liblzma_decodes_them() {
        const SEED: u32 = 0x0123_4567;
        const LEN: usize = 4099;
        let plain = pattern(SEED, LEN);
        assert_eq!(crc32fast::hash(&plain), 0x58d1_d96c);
        let cases: &[(Filter, Vec<u8>, u32, usize)] = &[
            (Filter::X86, plain.clone(), 0xb6f8_caac, 58),
            (Filter::X86, dense_x86(plain.clone()), 0x2f77_3ef4, 391),
            (Filter::X86, dense_x86(pattern(99, LEN)), 0xccfb_9f8b, 349),
            (Filter::Arm, plain.clone(), 0x5b2b_91e4, 85),
            (Filter::ArmThumb, plain.clone(), 0x56a6_c0e9, 40),
            (Filter::PowerPc, plain.clone(), 0x67fe_7639, 41),
            (Filter::Sparc, plain.clone(), 0xd0da_0e47, 49),
            (Filter::Ia64, ia64_bundles(plain.clone()), 0x544c_6620, 248),
        ];
        for (filter, input, crc, changed) in cases {
            let output = decoded(*filter, input);
            assert_eq!(output.len(), input.len());
            let differ = input.iter().zip(&output).filter(|(a, b)| a != b).count();
            assert_eq!(differ, *changed, "{filter:?}");
            assert_eq!(crc32fast::hash(&output), *crc, "{filter:?}");
        }
    }

    #[test]
    fn delta_adds_the_byte_distance_before() {
        let plain = pattern(0x0123_4567, 4099);
        for (distance, crc) in [(1, 0x77f8_b97b), (4, 0xc144_2e94), (256, 0x4412_e64a)] {
            let output = decoded(Filter::Delta { distance }, &plain);
            assert_eq!(crc32fast::hash(&output), crc, "{distance}");
            assert_eq!(output[..distance], plain[..distance]);
        }
        assert_eq!(
            decoded(Filter::Delta { distance: 2 }, &[1, 2, 3, 4, 255]),
            [1, 2, 4, 6, 3]
        );
    }

    #[test]
    fn short_and_empty_inputs_are_left_alone() {
        for filter in [
            Filter::X86,
            Filter::Arm,
            Filter::ArmThumb,
            Filter::PowerPc,
            Filter::Sparc,
            Filter::Ia64,
            Filter::Delta { distance: 1 },
        ] {
            assert_eq!(decoded(filter, &[]), [] as [u8; 0]);
        }
        // Too short for a whole instruction: the last four bytes of x86, an
        // unaligned tail of the others.
        assert_eq!(decoded(Filter::X86, &[0xE8, 0, 0, 0]), [0xE8, 0, 0, 0]);
        assert_eq!(decoded(Filter::Arm, &[0, 0, 0]), [0, 0, 0]);
        assert_eq!(
            decoded(Filter::Ia64, &ia64_bundles(vec![0; 15])),
            ia64_bundles(vec![0; 15])
        );
    }
}
