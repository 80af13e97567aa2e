//! A key's lock id, computed in the client: the value PostgreSQL's
//! `hashtextextended(key, 0)` gives, so that the locking statement binds a sorted
//! `int8[]` instead of the keys' text and the server neither hashes nor deduplicates.
//!
//! `hashtextextended` hashes the bytes of the text in the database's encoding (for a
//! deterministic collation) with `hash_bytes_extended`, PostgreSQL's 64-bit variant of
//! Bob Jenkins' lookup3 hash; its words are read in the server's byte order. So the
//! value here (UTF-8 bytes, little-endian words) is the server's in a UTF-8 or
//! `SQL_ASCII` database on a little-endian server: once per handle, the server's
//! encoding is read and its ids of keys covering every length of the hash's tail are
//! compared with these ([`read_server`](super::server::read_server)); when either
//! differs, the server hashes the keys in the locking statement instead.

/// The initial value of the three state words, before the length is added.
const GOLDEN: u32 = 0x9e37_79b9;
/// PostgreSQL's extra constant added to the initial state.
const PG_INIT: u32 = 3_923_095;

/// `hashtextextended(key, 0)` as PostgreSQL computes it for UTF-8 text on a
/// little-endian server.
pub(super) fn lock_id(key: &str) -> i64 {
    i64::from_ne_bytes(hash_bytes_extended(key.as_bytes()).to_ne_bytes())
}

/// Reads up to four bytes as a little-endian word, missing high bytes zero.
fn word(bytes: &[u8]) -> u32 {
    bytes
        .iter()
        .rev()
        .fold(0u32, |w, &b| (w << 8) | u32::from(b))
}

/// lookup3's reversible mix of the three state words.
fn mix(a: &mut u32, b: &mut u32, c: &mut u32) {
    *a = a.wrapping_sub(*c);
    *a ^= c.rotate_left(4);
    *c = c.wrapping_add(*b);
    *b = b.wrapping_sub(*a);
    *b ^= a.rotate_left(6);
    *a = a.wrapping_add(*c);
    *c = c.wrapping_sub(*b);
    *c ^= b.rotate_left(8);
    *b = b.wrapping_add(*a);
    *a = a.wrapping_sub(*c);
    *a ^= c.rotate_left(16);
    *c = c.wrapping_add(*b);
    *b = b.wrapping_sub(*a);
    *b ^= a.rotate_left(19);
    *a = a.wrapping_add(*c);
    *c = c.wrapping_sub(*b);
    *c ^= b.rotate_left(4);
    *b = b.wrapping_add(*a);
}

/// lookup3's final mix.
fn finish(a: &mut u32, b: &mut u32, c: &mut u32) {
    *c ^= *b;
    *c = c.wrapping_sub(b.rotate_left(14));
    *a ^= *c;
    *a = a.wrapping_sub(c.rotate_left(11));
    *b ^= *a;
    *b = b.wrapping_sub(a.rotate_left(25));
    *c ^= *b;
    *c = c.wrapping_sub(b.rotate_left(16));
    *a ^= *c;
    *a = a.wrapping_sub(c.rotate_left(4));
    *b ^= *a;
    *b = b.wrapping_sub(a.rotate_left(14));
    *c ^= *b;
    *c = c.wrapping_sub(b.rotate_left(24));
}

/// PostgreSQL's `hash_bytes_extended(bytes, len, 0)` with little-endian words: twelve
/// bytes at a time into the three words, the last one to eleven bytes likewise except
/// that the third word's lowest byte is left to the length (its bytes go one place
/// up), then the final mix, always (also for an empty key); `b` is the high half of
/// the result and `c` the low half.
fn hash_bytes_extended(bytes: &[u8]) -> u64 {
    // PostgreSQL adds the length as a 32-bit value (a text value is at most 1 GB).
    let len = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
    let init = GOLDEN.wrapping_add(len).wrapping_add(PG_INIT);
    let (mut a, mut b, mut c) = (init, init, init);
    let mut blocks = bytes.chunks_exact(12);
    for block in &mut blocks {
        a = a.wrapping_add(word(&block[0..4]));
        b = b.wrapping_add(word(&block[4..8]));
        c = c.wrapping_add(word(&block[8..12]));
        mix(&mut a, &mut b, &mut c);
    }
    let tail = blocks.remainder();
    a = a.wrapping_add(word(&tail[..tail.len().min(4)]));
    if tail.len() > 4 {
        b = b.wrapping_add(word(&tail[4..tail.len().min(8)]));
    }
    if tail.len() > 8 {
        c = c.wrapping_add(word(&tail[8..]) << 8);
    }
    finish(&mut a, &mut b, &mut c);
    (u64::from(b) << 32) | u64::from(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `SELECT k, hashtextextended(k, 0)` on PostgreSQL 15 (x86-64, UTF-8 database):
    /// every tail length from 0 to 11, then one and two full blocks with tails, and
    /// multi-byte text.
    const SERVER: &[(&str, i64)] = &[
        ("", -6_939_563_903_564_495_251),
        ("a", 3_591_986_179_850_072_241),
        ("ab", 2_833_316_173_711_343_549),
        ("abc", -6_747_756_470_228_489_321),
        ("abcd", -1_038_429_303_365_892_052),
        ("abcde", 3_076_356_108_696_143_428),
        ("abcdef", 290_958_262_752_763_840),
        ("abcdefg", -6_158_032_784_613_548_338),
        ("abcdefgh", -8_882_191_227_074_733_005),
        ("abcdefghi", -3_278_210_106_038_014_113),
        ("abcdefghij", -3_183_301_415_634_409_076),
        ("abcdefghijk", 3_112_909_444_737_856_467),
        ("abcdefghijkl", -7_556_637_188_122_330_412),
        ("abcdefghijklm", 8_871_624_171_452_417_744),
        ("abcdefghijklmnopqrstuvw", -1_198_571_854_151_947_912),
        ("abcdefghijklmnopqrstuvwx", -1_933_194_731_779_935_345),
        ("abcdefghijklmnopqrstuvwxy", 5_649_064_133_428_767_341),
        (
            "6f1c2a9e-4b7d-4e2a-9c3f-1a2b3c4d5e6f",
            3_758_414_073_260_404_426,
        ),
        ("é", -763_932_721_387_459_829),
        ("日本語", 2_870_829_529_307_104_068),
        ("ünïcödé ✓", -684_374_742_352_570_594),
        ("tab\there", 5_478_197_470_510_433_655),
    ];

    #[test]
    fn lock_ids_are_the_servers_hashtextextended() {
        assert!(!SERVER.is_empty());
        for &(key, expected) in SERVER {
            assert_eq!(lock_id(key), expected, "{key:?}");
        }
    }
}
