//! Zig-zag varints (Kafka's `ByteUtils.readVarint`/`readVarlong`) and unsigned varints used by
//! flexible versions.

/// Append a zig-zag encoded signed varint (up to 64 bits).
pub fn put_varint(out: &mut Vec<u8>, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        out.push((z as u8 & 0x7f) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

/// Decode a zig-zag varint. Returns value and bytes consumed, or `None` if truncated or longer
/// than 10 bytes.
pub fn decode_varint(buf: &[u8]) -> Option<(i64, usize)> {
    let (z, n) = decode_uvarint(buf)?;
    Some((((z >> 1) as i64) ^ -((z & 1) as i64), n))
}

/// Decode an unsigned varint (up to 64 bits).
pub fn decode_uvarint(buf: &[u8]) -> Option<(u64, usize)> {
    let mut v: u64 = 0;
    for (i, b) in buf.iter().enumerate().take(10) {
        v |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some((v, i + 1));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn roundtrip(v in any::<i64>()) {
            let mut b = Vec::new();
            put_varint(&mut b, v);
            prop_assert_eq!(decode_varint(&b), Some((v, b.len())));
        }
        #[test]
        fn never_panics(b in proptest::collection::vec(any::<u8>(), 0..12)) {
            let _ = decode_varint(&b);
        }
    }

    #[test]
    fn known_values() {
        let mut b = Vec::new();
        put_varint(&mut b, -1);
        assert_eq!(b, [1]);
        b.clear();
        put_varint(&mut b, 300);
        assert_eq!(b, [0xd8, 0x04]);
    }
}
