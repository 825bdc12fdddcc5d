//! `.data/serialization_id`: 40 digits torch derives from the record names and
//! CRCs. Nobody validates it, but byte-identical output needs it, so we compute
//! it as torch's C++ writer does: libstdc++'s `std::hash<std::string>` over the
//! names, iterated in `std::unordered_set` order, and a hash-combine of the CRCs.

const MUL: u64 = 0xc6a4_a793_5bd1_e995;
const SEED: u64 = 0xc70f_6907;

fn shift_mix(v: u64) -> u64 {
    v ^ (v >> 47)
}

/// libstdc++'s `_Hash_bytes` (the 64-bit MurmurHash2 variant) with its string seed.
pub fn std_hash(bytes: &[u8]) -> u64 {
    let mut h = SEED ^ (bytes.len() as u64).wrapping_mul(MUL);
    let mut chunks = bytes.chunks_exact(8);
    for chunk in &mut chunks {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let w = u64::from_le_bytes(word);
        h ^= shift_mix(w.wrapping_mul(MUL)).wrapping_mul(MUL);
        h = h.wrapping_mul(MUL);
    }
    let tail = chunks.remainder();
    if !tail.is_empty() {
        let mut word = [0u8; 8];
        if let Some(dst) = word.get_mut(..tail.len()) {
            dst.copy_from_slice(tail);
        }
        h ^= u64::from_le_bytes(word);
        h = h.wrapping_mul(MUL);
    }
    shift_mix(shift_mix(h).wrapping_mul(MUL))
}

/// `hash_combine` as torch writes it.
fn combine(seed: u64, v: u64) -> u64 {
    seed ^ v
        .wrapping_add(0x9e37_79b9)
        .wrapping_add(seed << 6)
        .wrapping_add(seed >> 2)
}

const PRIMES: &[u64] = &[
    17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73, 79, 83, 89, 97, 103, 109, 113, 127,
    137, 139, 149, 157, 167, 179, 193, 199, 211, 227, 241, 257, 277, 293, 313, 337, 359, 383, 409,
    439, 467, 503, 541, 577, 619, 661, 709, 761, 823, 887, 953, 1031, 1109, 1193, 1289, 1381, 1493,
    1613, 1741, 1879, 2029, 2179, 2357, 2549, 2753, 2971, 3209, 3469, 3739, 4027, 4349, 4703, 5087,
    5503, 5953, 6427, 6949, 7517, 8123, 8783, 9497, 10273, 11113, 12011, 12983, 14033, 15173,
    16411, 17749, 19183, 20753, 22447, 24281, 26267, 28411, 30727, 33223, 35933, 38873, 42043,
    45481, 49201, 53201, 57557, 62233, 67307, 72817, 78779, 85229, 92203, 99733, 107897, 116731,
    126271, 136607, 147793, 159871, 172933, 187091, 202409, 218971, 236897, 256279, 277261, 299951,
    324503, 351061, 379787, 410857, 444487, 480881, 520241, 562841, 608903, 658753, 712697, 771049,
    834181, 902483, 976369, 1056323, 1142821, 1236397, 1337629, 1447153, 1565659, 1693859, 1832561,
    1982627, 2144977, 2320627, 2510653, 2716249, 2938679, 3179303, 3439651, 3721303, 4026031,
    4355707, 4712381, 5098259, 5515729, 5967347, 6456007, 6984629, 7556579, 8175383, 8844859,
    9569143, 10352717, 11200489, 12117689, 13109983, 14183539, 15345007, 16601593, 17961079,
    19431899, 21023161, 22744717, 24607243, 26622317, 28802401, 31160981, 33712729, 36473443,
    39460231, 42691603, 46187573, 49969847, 54061849, 58488943, 63278561, 68460391, 74066549,
    80131819, 86693767, 93793069, 101473717, 109783337, 118773397, 128499677, 139022417, 150406843,
    162723577, 176048909, 190465427, 206062531, 222936881, 241193053, 260944219, 282312799,
    305431229, 330442829, 357502601, 386778277, 418451333, 452718089, 489790921, 529899637,
    573292817, 620239453, 671030513, 725980837, 785430967, 849749479, 919334987, 994618837,
    1076067617, 1164186217, 1259520799, 1362662261, 1474249943, 1594975441, 1725587117, 1866894511,
    2019773507, 2185171673, 2364114217, 2557710269, 2767159799, 2993761039, 3238918481, 3504151727,
    3791104843, 4101556399, 4294967291,
];

/// libstdc++'s `_Prime_rehash_policy::_M_next_bkt`.
fn next_bucket_count(x: u64) -> u64 {
    const SMALL: [u64; 14] = [2, 2, 2, 3, 5, 5, 7, 7, 11, 11, 11, 11, 13, 13];
    if let Some(n) = usize::try_from(x).ok().and_then(|i| SMALL.get(i)) {
        return *n;
    }
    PRIMES.iter().copied().find(|p| *p >= x).unwrap_or(x)
}

/// The iteration order of a libstdc++ `unordered_set<string>` after inserting
/// `names` in order (hashes given): a singly linked list where each bucket's
/// nodes are contiguous, new buckets start at the front.
fn unordered_set_order(hashes: &[u64]) -> Vec<usize> {
    let mut list: Vec<usize> = Vec::new();
    let mut buckets = 1u64;
    let mut next_resize = 0u64;
    let insert = |list: &mut Vec<usize>, item: usize, nb: u64| {
        let bucket = hashes.get(item).map_or(0, |h| h % nb);
        match list
            .iter()
            .position(|i| hashes.get(*i).map_or(0, |h| h % nb) == bucket)
        {
            Some(pos) => list.insert(pos, item),
            None => list.insert(0, item),
        }
    };
    for item in 0..hashes.len() {
        let n = list.len() as u64;
        if n + 1 > next_resize {
            let min = (n + 1).max(if next_resize == 0 { 11 } else { 0 });
            if min >= buckets {
                let nb = next_bucket_count((min + 1).max(2 * buckets));
                let old = std::mem::take(&mut list);
                for i in old {
                    insert(&mut list, i, nb);
                }
                buckets = nb;
                next_resize = nb;
            } else {
                next_resize = buckets;
            }
        }
        insert(&mut list, item, buckets);
    }
    list
}

/// The 40-digit id for records written (names without the archive prefix) with the
/// CRCs of those that have a data descriptor.
pub fn serialization_id(names: &[&str], descriptor_crcs: &[u32]) -> String {
    let hashes: Vec<u64> = names.iter().map(|n| std_hash(n.as_bytes())).collect();
    let name_part = unordered_set_order(&hashes)
        .into_iter()
        .filter_map(|i| hashes.get(i).copied())
        .fold(0u64, combine);
    let crc_part = descriptor_crcs
        .iter()
        .fold(0u64, |acc, crc| combine(acc, u64::from(*crc)));
    format!("{name_part:020}{crc_part:020}")
}
