//! CRC-32C of a concatenation from the CRCs of its parts, cheaply: `crc(A ‖ B)` is `crc(A)`
//! multiplied by x^(8·|B|) modulo the Castagnoli polynomial, XOR `crc(B)` (the pre- and
//! post-conditioning cancel out). The crc32c crate's `crc32c_combine` builds that factor with
//! GF(2) matrix squarings on every call, which cost several times the CRC of a 128 KiB batch
//! itself; here it is a product of precomputed powers (about one multiplication per bit of the
//! length), computed once per length and reused for both CRCs a rewritten batch needs.
//! Computing CRCs of byte ranges is the `crc32c` crate's; what is combined is the caller's.

/// CRC-32C's polynomial, bit-reflected (as the register holds it).
const POLY: u32 = 0x82F6_3B78;

/// `a · b mod P` over GF(2), both reflected (x⁰ is the top bit).
const fn mult_mod_p(a: u32, mut b: u32) -> u32 {
    let mut m = 1u32 << 31;
    let mut p = 0u32;
    while m != 0 {
        if a & m != 0 {
            p ^= b;
        }
        m >>= 1;
        b = if b & 1 != 0 { (b >> 1) ^ POLY } else { b >> 1 };
    }
    p
}

/// `X2N[k]` = x^(2^k) mod P, for every k a byte length's bit count (len · 8 < 2^67) can need.
const X2N: [u32; 67] = {
    let mut t = [0u32; 67];
    t[0] = 1 << 30; // x¹
    let mut k = 1;
    while k < t.len() {
        t[k] = mult_mod_p(t[k - 1], t[k - 1]);
        k += 1;
    }
    t
};

/// The factor that moves a CRC past `len` more bytes: x^(8·len) mod P.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shift(u32);

impl Shift {
    /// The factor for appending `len` bytes.
    pub fn bytes(len: usize) -> Self {
        let mut p = 1u32 << 31; // x⁰
        let mut n = len as u64;
        let mut k = 3; // 2³ bits per byte
        while n != 0 {
            if n & 1 != 0 {
                p = mult_mod_p(X2N[k], p);
            }
            n >>= 1;
            k += 1;
        }
        Self(p)
    }

    /// `crc(A ‖ B)` from `crc(A)` and `crc(B)`, `B` being as long as this shift.
    pub fn combine(self, crc_a: u32, crc_b: u32) -> u32 {
        mult_mod_p(self.0, crc_a) ^ crc_b
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn appending_nothing_leaves_a_crc_as_it_is() {
        assert_eq!(Shift::bytes(0).combine(0xdead_beef, 0), 0xdead_beef);
        assert_eq!(Shift::bytes(0).combine(crc32c::crc32c(b"abc"), crc32c::crc32c(b"")), crc32c::crc32c(b"abc"));
    }

    #[test]
    fn the_combined_crc_of_a_header_and_a_large_records_part_equals_the_crc_of_the_whole() {
        let whole: Vec<u8> = (0..3_000_017u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
        for split in [0, 1, 40, 4_096, 131_072, whole.len() - 1, whole.len()] {
            let (a, b) = whole.split_at(split);
            let got = Shift::bytes(b.len()).combine(crc32c::crc32c(a), crc32c::crc32c(b));
            assert_eq!(got, crc32c::crc32c(&whole), "split at {split}");
        }
    }

    proptest! {
        #[test]
        fn combining_agrees_with_the_crc_of_the_concatenation_and_with_the_crc32c_crate(
            a in proptest::collection::vec(any::<u8>(), 0..300),
            b in proptest::collection::vec(any::<u8>(), 0..3_000),
        ) {
            let whole: Vec<u8> = a.iter().chain(b.iter()).copied().collect();
            let (ca, cb) = (crc32c::crc32c(&a), crc32c::crc32c(&b));
            let got = Shift::bytes(b.len()).combine(ca, cb);
            prop_assert_eq!(got, crc32c::crc32c(&whole));
            prop_assert_eq!(got, crc32c::crc32c_combine(ca, cb, b.len()));
        }

        #[test]
        fn the_shift_for_any_length_matches_the_crc32c_crate(len in 0usize..(1 << 40), ca in any::<u32>(), cb in any::<u32>()) {
            prop_assert_eq!(Shift::bytes(len).combine(ca, cb), crc32c::crc32c_combine(ca, cb, len));
        }
    }
}
