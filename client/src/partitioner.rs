//! The Java client's default partitioner, so a key lands on the same partition as with the Java
//! client and librdkafka's `murmur2_random`: `murmur2(key) & 0x7fffffff % partitions`; records
//! without a key stick to one partition until its batch is sent (KIP-480), then move on.

/// Kafka's `Utils.murmur2` (seed 0x9747b28c), bit for bit.
pub fn murmur2(data: &[u8]) -> i32 {
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let len = data.len();
    let mut h: u32 = 0x9747_b28c ^ (len as u32);
    let mut chunks = data.chunks_exact(4);
    for c in &mut chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let rest = chunks.remainder();
    if rest.len() >= 3 {
        h ^= u32::from(rest[2]) << 16;
    }
    if rest.len() >= 2 {
        h ^= u32::from(rest[1]) << 8;
    }
    if !rest.is_empty() {
        h ^= u32::from(rest[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// The partition of a keyed record (Java's `BuiltInPartitioner.partitionForKey`).
pub fn partition_for_key(key: &[u8], partitions: i32) -> i32 {
    (murmur2(key) & 0x7fff_ffff) % partitions.max(1)
}

/// Partition choice for records without a key: one partition per topic until
/// [`Sticky::batch_sent`] says its batch left, then a different one.
#[derive(Debug)]
pub struct Sticky {
    current: std::collections::HashMap<String, i32>,
    state: u64,
}

impl Default for Sticky {
    fn default() -> Self {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0x2545_f491_4f6c_dd1d);
        Sticky { current: Default::default(), state: seed | 1 }
    }
}

impl Sticky {
    fn next_random(&mut self) -> u64 {
        // xorshift64*
        self.state ^= self.state >> 12;
        self.state ^= self.state << 25;
        self.state ^= self.state >> 27;
        self.state.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// The partition for a record of `topic`: by key if it has one, else the sticky one.
    pub fn partition(&mut self, topic: &str, key: Option<&[u8]>, partitions: i32) -> i32 {
        if let Some(k) = key {
            return partition_for_key(k, partitions);
        }
        let partitions = partitions.max(1);
        if let Some(p) = self.current.get(topic).copied().filter(|p| *p < partitions) {
            return p;
        }
        let p = (self.next_random() % partitions as u64) as i32;
        self.current.insert(topic.to_string(), p);
        p
    }

    /// The batch for `partition` of `topic` was sent: unkeyed records move to another partition.
    pub fn batch_sent(&mut self, topic: &str, partition: i32, partitions: i32) {
        if self.current.get(topic) != Some(&partition) || partitions <= 1 {
            return;
        }
        let step = 1 + (self.next_random() % (partitions as u64 - 1)) as i32;
        self.current.insert(topic.to_string(), (partition + step) % partitions);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn murmur2_matches_kafka() {
        // Kafka's UtilsTest.testMurmur2 vectors
        let cases: [(&[u8], i32); 6] = [
            (b"21", -973_932_308),
            (b"foobar", -790_332_482),
            (b"a-little-bit-long-string", -985_981_536),
            (b"a-little-bit-longer-string", -1_486_304_829),
            (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58_897_971),
            (b"abc", 479_470_107),
        ];
        for (data, want) in cases {
            assert_eq!(murmur2(data), want, "{}", String::from_utf8_lossy(data));
        }
    }

    #[test]
    fn sticky_partitions_stay_until_the_batch_is_sent() {
        let mut s = Sticky::default();
        let p = s.partition("t", None, 6);
        assert!((0..6).contains(&p));
        assert_eq!(s.partition("t", None, 6), p);
        s.batch_sent("t", p, 6);
        let q = s.partition("t", None, 6);
        assert_ne!(q, p, "the next batch goes elsewhere");
        assert_eq!(s.partition("t", Some(b"21"), 6), partition_for_key(b"21", 6), "keys ignore stickiness");
        assert_eq!(s.partition("one", None, 1), 0);
    }
}
