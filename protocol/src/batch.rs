//! Record batch v2 ("magic 2"): a zero-copy view over the bytes of one batch, its CRC32C
//! check, record iteration, control records, and a writer.
//!
//! Layout (all integers big-endian), as Kafka's `DefaultRecordBatch` defines it:
//!
//! ```text
//! off  size field
//!   0     8 baseOffset
//!   8     4 batchLength            (bytes after this field)
//!  12     4 partitionLeaderEpoch
//!  16     1 magic                  (= 2)
//!  17     4 crc                    (CRC32C of bytes 21..end)
//!  21     2 attributes
//!  23     4 lastOffsetDelta
//!  27     8 baseTimestamp
//!  35     8 maxTimestamp
//!  43     8 producerId
//!  51     2 producerEpoch
//!  53     4 baseSequence
//!  57     4 recordsCount
//!  61     … records
//! ```
//!
//! The CRC covers neither the base offset nor the partition leader epoch, so the log can assign
//! both without touching the CRC: a batch is stored exactly as produced.

use crate::varint;
use bytes::{BufMut, Bytes, BytesMut};
use thiserror::Error;

/// Size of the fixed batch header.
pub const BATCH_HEADER_BYTES: usize = 61;
/// Bytes before `batchLength`'s counted region starts (baseOffset + batchLength).
pub const LOG_OVERHEAD_BYTES: usize = 12;
/// The only supported magic.
pub const MAGIC_V2: i8 = 2;
/// Producer id meaning "no producer" (non-idempotent batch).
pub const NO_PRODUCER_ID: i64 = -1;
/// Producer epoch meaning "no producer".
pub const NO_PRODUCER_EPOCH: i16 = -1;
/// Sequence meaning "no sequence".
pub const NO_SEQUENCE: i32 = -1;

const OFF_BASE_OFFSET: usize = 0;
const OFF_LENGTH: usize = 8;
const OFF_LEADER_EPOCH: usize = 12;
const OFF_MAGIC: usize = 16;
const OFF_CRC: usize = 17;
const OFF_ATTRIBUTES: usize = 21;
const OFF_LAST_OFFSET_DELTA: usize = 23;
const OFF_BASE_TIMESTAMP: usize = 27;
const OFF_MAX_TIMESTAMP: usize = 35;
const OFF_PRODUCER_ID: usize = 43;
const OFF_PRODUCER_EPOCH: usize = 51;
const OFF_BASE_SEQUENCE: usize = 53;
const OFF_RECORDS_COUNT: usize = 57;

const ATTR_COMPRESSION_MASK: i16 = 0x07;
const ATTR_TIMESTAMP_TYPE: i16 = 0x08;
const ATTR_TRANSACTIONAL: i16 = 0x10;
const ATTR_CONTROL: i16 = 0x20;

/// Why a byte range is not a valid v2 batch. Each variant names what was wrong so that the
/// storage layer can report "corrupt at path+position" and the broker can pick a Kafka code.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum BatchError {
    #[error("batch truncated: need {needed} bytes, have {available}")]
    Truncated { needed: usize, available: usize },
    #[error("batch length {0} is invalid")]
    InvalidLength(i32),
    #[error("unsupported magic {0} (only v2 record batches are supported)")]
    UnsupportedMagic(i8),
    #[error("CRC mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    CrcMismatch { stored: u32, computed: u32 },
    #[error("record count {0} is invalid")]
    InvalidRecordCount(i32),
    #[error("malformed record: {0}")]
    MalformedRecord(&'static str),
    #[error("unknown compression codec {0}")]
    UnknownCompression(i16),
    #[error("compression error: {0}")]
    Compression(String),
    /// The batch's header and its records disagree, or a record is not well-formed (Kafka's
    /// `InvalidRecordException`: INVALID_RECORD).
    #[error("invalid records: {0}")]
    InvalidRecords(String),
}

/// What [`BatchView::validate_records`] found in one pass over a batch's records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordsSummary {
    /// Records encoded (equal to the header's count and `lastOffsetDelta + 1`).
    pub count: i32,
    /// The newest record timestamp (`-1` if every timestamp is negative).
    pub max_timestamp: i64,
    /// Offset delta of the first record carrying `max_timestamp` (0 if none does).
    pub offset_delta_of_max: i32,
    /// The oldest record timestamp but -1 (no timestamp); `i64::MAX` if there is none.
    pub min_timestamp: i64,
    /// Whether some record has a null key (refused on compacted topics).
    pub has_null_key: bool,
}

/// Compression codec from the low three attribute bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    None,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
}

impl Compression {
    pub fn from_attributes(attributes: i16) -> Result<Self, BatchError> {
        match attributes & ATTR_COMPRESSION_MASK {
            0 => Ok(Compression::None),
            1 => Ok(Compression::Gzip),
            2 => Ok(Compression::Snappy),
            3 => Ok(Compression::Lz4),
            4 => Ok(Compression::Zstd),
            other => Err(BatchError::UnknownCompression(other)),
        }
    }

    pub fn id(self) -> i16 {
        match self {
            Compression::None => 0,
            Compression::Gzip => 1,
            Compression::Snappy => 2,
            Compression::Lz4 => 3,
            Compression::Zstd => 4,
        }
    }
}

/// Size of the batch that starts at `buf[0]`, as its length field claims, without validating
/// anything else. `None` if fewer than 12 bytes are available or the length is negative.
pub fn claimed_batch_size(buf: &[u8]) -> Option<usize> {
    if buf.len() < LOG_OVERHEAD_BYTES {
        return None;
    }
    let len = i32::from_be_bytes([buf[8], buf[9], buf[10], buf[11]]);
    if len < 0 {
        return None;
    }
    Some(LOG_OVERHEAD_BYTES + len as usize)
}

/// A validated, zero-copy view over exactly one v2 record batch.
#[derive(Clone, Copy)]
pub struct BatchView<'a> {
    buf: &'a [u8],
}

impl std::fmt::Debug for BatchView<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchView")
            .field("base_offset", &self.base_offset())
            .field("last_offset_delta", &self.last_offset_delta())
            .field("producer_id", &self.producer_id())
            .field("producer_epoch", &self.producer_epoch())
            .field("base_sequence", &self.base_sequence())
            .field("records", &self.records_count())
            .field("transactional", &self.is_transactional())
            .field("control", &self.is_control())
            .finish()
    }
}

#[inline]
fn be_i16(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([b[at], b[at + 1]])
}
#[inline]
fn be_i32(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
#[inline]
fn be_i64(b: &[u8], at: usize) -> i64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    i64::from_be_bytes(a)
}

impl<'a> BatchView<'a> {
    /// Parse the batch at the start of `buf`, checking magic, length and CRC32C. Returns the
    /// view and the number of bytes it spans. Trailing bytes are ignored.
    pub fn parse(buf: &'a [u8]) -> Result<(Self, usize), BatchError> {
        let view = Self::parse_unchecked_crc(buf)?;
        let stored = view.crc();
        let computed = view.compute_crc();
        if stored != computed {
            return Err(BatchError::CrcMismatch { stored, computed });
        }
        let size = view.buf.len();
        Ok((view, size))
    }

    /// Parse checking magic and lengths but not the CRC (for tools that show corrupt batches).
    pub fn parse_unchecked_crc(buf: &'a [u8]) -> Result<Self, BatchError> {
        if buf.len() < LOG_OVERHEAD_BYTES {
            return Err(BatchError::Truncated { needed: LOG_OVERHEAD_BYTES, available: buf.len() });
        }
        let len = be_i32(buf, OFF_LENGTH);
        if len < (BATCH_HEADER_BYTES - LOG_OVERHEAD_BYTES) as i32 {
            return Err(BatchError::InvalidLength(len));
        }
        let size = LOG_OVERHEAD_BYTES + len as usize;
        if buf.len() < BATCH_HEADER_BYTES.min(size) {
            return Err(BatchError::Truncated { needed: size, available: buf.len() });
        }
        let magic = buf[OFF_MAGIC] as i8;
        if magic != MAGIC_V2 {
            return Err(BatchError::UnsupportedMagic(magic));
        }
        if buf.len() < size {
            return Err(BatchError::Truncated { needed: size, available: buf.len() });
        }
        let view = BatchView { buf: &buf[..size] };
        if view.records_count() < 0 {
            return Err(BatchError::InvalidRecordCount(view.records_count()));
        }
        if view.last_offset_delta() < 0 {
            return Err(BatchError::InvalidRecordCount(view.last_offset_delta()));
        }
        Ok(view)
    }

    pub fn bytes(&self) -> &'a [u8] {
        self.buf
    }
    pub fn size(&self) -> usize {
        self.buf.len()
    }
    pub fn base_offset(&self) -> i64 {
        be_i64(self.buf, OFF_BASE_OFFSET)
    }
    pub fn last_offset(&self) -> i64 {
        self.base_offset() + i64::from(self.last_offset_delta())
    }
    pub fn batch_length(&self) -> i32 {
        be_i32(self.buf, OFF_LENGTH)
    }
    pub fn partition_leader_epoch(&self) -> i32 {
        be_i32(self.buf, OFF_LEADER_EPOCH)
    }
    pub fn magic(&self) -> i8 {
        self.buf[OFF_MAGIC] as i8
    }
    pub fn crc(&self) -> u32 {
        be_i32(self.buf, OFF_CRC) as u32
    }
    pub fn compute_crc(&self) -> u32 {
        crc32c::crc32c(&self.buf[OFF_ATTRIBUTES..])
    }
    pub fn attributes(&self) -> i16 {
        be_i16(self.buf, OFF_ATTRIBUTES)
    }
    pub fn compression(&self) -> Result<Compression, BatchError> {
        Compression::from_attributes(self.attributes())
    }
    pub fn is_log_append_time(&self) -> bool {
        self.attributes() & ATTR_TIMESTAMP_TYPE != 0
    }
    pub fn is_transactional(&self) -> bool {
        self.attributes() & ATTR_TRANSACTIONAL != 0
    }
    pub fn is_control(&self) -> bool {
        self.attributes() & ATTR_CONTROL != 0
    }
    pub fn last_offset_delta(&self) -> i32 {
        be_i32(self.buf, OFF_LAST_OFFSET_DELTA)
    }
    pub fn base_timestamp(&self) -> i64 {
        be_i64(self.buf, OFF_BASE_TIMESTAMP)
    }
    pub fn max_timestamp(&self) -> i64 {
        be_i64(self.buf, OFF_MAX_TIMESTAMP)
    }
    pub fn producer_id(&self) -> i64 {
        be_i64(self.buf, OFF_PRODUCER_ID)
    }
    pub fn producer_epoch(&self) -> i16 {
        be_i16(self.buf, OFF_PRODUCER_EPOCH)
    }
    pub fn base_sequence(&self) -> i32 {
        be_i32(self.buf, OFF_BASE_SEQUENCE)
    }
    /// Last sequence, wrapping at i32::MAX as Kafka's `DefaultRecordBatch.incrementSequence`.
    pub fn last_sequence(&self) -> i32 {
        let base = self.base_sequence();
        if base == NO_SEQUENCE {
            return NO_SEQUENCE;
        }
        let delta = self.last_offset_delta();
        if base > i32::MAX - delta {
            delta - (i32::MAX - base) - 1
        } else {
            base + delta
        }
    }
    pub fn records_count(&self) -> i32 {
        be_i32(self.buf, OFF_RECORDS_COUNT)
    }
    /// The raw (possibly compressed) records section.
    pub fn records_bytes(&self) -> &'a [u8] {
        &self.buf[BATCH_HEADER_BYTES..]
    }

    /// Decode the records (decompressing if needed). Allocates only for compressed batches.
    pub fn records(&self) -> Result<Vec<Record>, BatchError> {
        let compression = self.compression()?;
        let raw = crate::compression::decompress(compression, self.records_bytes())?;
        let count = self.records_count();
        // A record is at least 7 bytes, so a count larger than that is a lie; refuse before
        // allocating for it.
        if count as usize > raw.len() / 7 + 1 {
            return Err(BatchError::InvalidRecordCount(count));
        }
        let mut out = Vec::with_capacity(count as usize);
        let mut cur = &raw[..];
        for _ in 0..count {
            let (rec, used) = Record::decode(cur, self.base_offset(), self.base_timestamp())?;
            out.push(rec);
            cur = &cur[used..];
        }
        Ok(out)
    }

    /// Decode the records without copying them: `owner` must be the buffer this batch was
    /// parsed from (keys and values become slices of it); a compressed batch is decompressed
    /// into one new buffer that its records share.
    pub fn records_shared(&self, owner: &Bytes) -> Result<Vec<Record>, BatchError> {
        let compression = self.compression()?;
        let raw: Bytes = match crate::compression::decompress(compression, self.records_bytes())? {
            std::borrow::Cow::Borrowed(b) => {
                let range = owner.as_ptr() as usize..owner.as_ptr() as usize + owner.len();
                if range.contains(&(b.as_ptr() as usize)) && b.as_ptr() as usize + b.len() <= range.end {
                    owner.slice_ref(b)
                } else {
                    Bytes::copy_from_slice(b)
                }
            }
            std::borrow::Cow::Owned(v) => Bytes::from(v),
        };
        let count = self.records_count();
        if count as usize > raw.len() / 7 + 1 {
            return Err(BatchError::InvalidRecordCount(count));
        }
        let slice = |s: &[u8]| raw.slice_ref(s);
        let mut out = Vec::with_capacity(count as usize);
        let mut cur = &raw[..];
        for _ in 0..count {
            let (rec, used) = Record::decode_with(cur, self.base_offset(), self.base_timestamp(), &slice)?;
            out.push(rec);
            cur = &cur[used..];
        }
        Ok(out)
    }

    /// Kafka's `LogValidator` checks of a produced batch's records, in one pass that allocates
    /// nothing for an uncompressed batch (a compressed one is decompressed once): at least one
    /// record; the header's record count equal to `lastOffsetDelta + 1` and to the records
    /// actually encoded, with nothing after the last; every record well-formed (its fields
    /// exactly fill its length); offset deltas 0, 1, 2, … in order (Kafka rewrites out-of-order
    /// deltas of compressed batches and keeps those of uncompressed ones; Sluice refuses both,
    /// so no two records can ever claim one offset). The CRC is not checked here.
    pub fn validate_records(&self) -> Result<RecordsSummary, BatchError> {
        let count = self.records_count();
        if count < 1 {
            return Err(BatchError::InvalidRecords(format!("a batch must hold at least one record, not {count}")));
        }
        let delta = self.last_offset_delta();
        if i64::from(delta) + 1 != i64::from(count) {
            return Err(BatchError::InvalidRecords(format!(
                "inconsistent batch offset range: last offset delta {delta} with {count} records"
            )));
        }
        let raw = crate::compression::decompress(self.compression()?, self.records_bytes())?;
        let mut cur: &[u8] = &raw;
        let mut summary = RecordsSummary {
            count,
            max_timestamp: -1,
            offset_delta_of_max: 0,
            min_timestamp: i64::MAX,
            has_null_key: false,
        };
        let base_ts = self.base_timestamp();
        for i in 0..count {
            if cur.is_empty() {
                return Err(BatchError::InvalidRecords(format!("the header counts {count} records, {i} are encoded")));
            }
            let (r, used) = skip_record(cur)?;
            if r.offset_delta != i64::from(i) {
                return Err(BatchError::InvalidRecords(format!(
                    "record {i} has offset delta {}, expected {i}",
                    r.offset_delta
                )));
            }
            let ts = base_ts.wrapping_add(r.timestamp_delta);
            if ts > summary.max_timestamp {
                summary.max_timestamp = ts;
                summary.offset_delta_of_max = i;
            }
            if ts != -1 && ts < summary.min_timestamp {
                summary.min_timestamp = ts;
            }
            summary.has_null_key |= r.null_key;
            cur = &cur[used..];
        }
        if !cur.is_empty() {
            return Err(BatchError::InvalidRecords(format!(
                "{} bytes after the {count} records the header counts",
                cur.len()
            )));
        }
        Ok(summary)
    }

    /// For a control batch: its record's type (the key's second field) and its value. `None`
    /// for a batch of records.
    pub fn control_record(&self) -> Result<Option<(i16, Option<Bytes>)>, BatchError> {
        if !self.is_control() {
            return Ok(None);
        }
        let rec = self.records()?.into_iter().next().ok_or(BatchError::MalformedRecord("empty control batch"))?;
        let key = rec.key.as_ref().ok_or(BatchError::MalformedRecord("control key missing"))?;
        if key.len() < 4 {
            return Err(BatchError::MalformedRecord("control key too short"));
        }
        Ok(Some((i16::from_be_bytes([key[2], key[3]]), rec.value)))
    }

    /// For a control batch: its marker, decoded from the first record's key and value.
    pub fn control_marker(&self) -> Result<Option<ControlMarker>, BatchError> {
        let Some((kind, value)) = self.control_record()? else { return Ok(None) };
        let kind = match kind {
            0 => ControlType::Abort,
            1 => ControlType::Commit,
            _ => return Ok(None),
        };
        let coordinator_epoch = match &value {
            Some(v) if v.len() >= 6 => i32::from_be_bytes([v[2], v[3], v[4], v[5]]),
            _ => -1,
        };
        Ok(Some(ControlMarker { kind, coordinator_epoch }))
    }
}

/// Rewrite the base offset of the batch that starts at `buf[0]` (CRC is unaffected).
pub fn set_base_offset(buf: &mut [u8], base_offset: i64) {
    buf[OFF_BASE_OFFSET..OFF_BASE_OFFSET + 8].copy_from_slice(&base_offset.to_be_bytes());
}

/// Rewrite the partition leader epoch of the batch at `buf[0]` (CRC is unaffected).
pub fn set_partition_leader_epoch(buf: &mut [u8], epoch: i32) {
    buf[OFF_LEADER_EPOCH..OFF_LEADER_EPOCH + 4].copy_from_slice(&epoch.to_be_bytes());
}

/// Stamp the batch at `buf[0]` with the broker's append time (topic config
/// `message.timestamp.type=LogAppendTime`): set the timestamp-type attribute and the max
/// timestamp, and recompute the CRC, exactly as Kafka does. The caller has validated the batch.
pub fn set_log_append_time(buf: &mut [u8], timestamp: i64) {
    let size = claimed_batch_size(buf).unwrap_or(0).min(buf.len());
    if size < BATCH_HEADER_BYTES {
        return;
    }
    let attributes = be_i16(buf, OFF_ATTRIBUTES) | ATTR_TIMESTAMP_TYPE;
    buf[OFF_ATTRIBUTES..OFF_ATTRIBUTES + 2].copy_from_slice(&attributes.to_be_bytes());
    buf[OFF_MAX_TIMESTAMP..OFF_MAX_TIMESTAMP + 8].copy_from_slice(&timestamp.to_be_bytes());
    let crc = crc32c::crc32c(&buf[OFF_ATTRIBUTES..size]);
    buf[OFF_CRC..OFF_CRC + 4].copy_from_slice(&crc.to_be_bytes());
}

/// Set the producer id, epoch and base sequence of the batch at `buf[0]` and recompute its CRC
/// (what a producer does when it assigns sequences to a batch it built earlier).
pub fn set_producer(buf: &mut [u8], producer_id: i64, producer_epoch: i16, base_sequence: i32) {
    let size = claimed_batch_size(buf).unwrap_or(0).min(buf.len());
    if size < BATCH_HEADER_BYTES {
        return;
    }
    buf[OFF_PRODUCER_ID..OFF_PRODUCER_ID + 8].copy_from_slice(&producer_id.to_be_bytes());
    buf[OFF_PRODUCER_EPOCH..OFF_PRODUCER_EPOCH + 2].copy_from_slice(&producer_epoch.to_be_bytes());
    buf[OFF_BASE_SEQUENCE..OFF_BASE_SEQUENCE + 4].copy_from_slice(&base_sequence.to_be_bytes());
    let crc = crc32c::crc32c(&buf[OFF_ATTRIBUTES..size]);
    buf[OFF_CRC..OFF_CRC + 4].copy_from_slice(&crc.to_be_bytes());
}

/// Rewrite the (validated) batch in `buf` with codec `target` (topic config `compression.type`),
/// as Kafka's broker does: the records are the same bytes, decompressed and compressed again;
/// the header keeps its offsets, timestamps, producer id, epoch, sequence and flags; its codec
/// bits, length and CRC change. `None` when the batch already has that codec. `level`: the
/// codec's level where it has one (`None`: its default).
pub fn recompress(buf: &[u8], target: Compression, level: Option<i32>) -> Result<Option<Bytes>, BatchError> {
    let view = BatchView::parse_unchecked_crc(buf)?;
    if view.compression()? == target {
        return Ok(None);
    }
    let raw = crate::compression::decompress(view.compression()?, view.records_bytes())?;
    let body = crate::compression::compress_level(target, &raw, level)?;
    let total = BATCH_HEADER_BYTES + body.len();
    let length = i32::try_from(total - LOG_OVERHEAD_BYTES).map_err(|_| BatchError::Compression("too large".into()))?;
    let mut out = BytesMut::with_capacity(total);
    out.extend_from_slice(&buf[..BATCH_HEADER_BYTES]);
    out.extend_from_slice(&body);
    let attributes = (view.attributes() & !ATTR_COMPRESSION_MASK) | target.id();
    out[OFF_LENGTH..OFF_LENGTH + 4].copy_from_slice(&length.to_be_bytes());
    out[OFF_ATTRIBUTES..OFF_ATTRIBUTES + 2].copy_from_slice(&attributes.to_be_bytes());
    let crc = crc32c::crc32c(&out[OFF_ATTRIBUTES..]);
    out[OFF_CRC..OFF_CRC + 4].copy_from_slice(&crc.to_be_bytes());
    Ok(Some(out.freeze()))
}

/// One record of a batch as stored: its absolute offset and timestamp, where its key lies and
/// whether its value is null, and the bytes it spans — in the records section
/// [`BatchView::raw_records`] returns (decompressed if the batch is compressed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawRecord {
    pub offset: i64,
    pub timestamp: i64,
    pub key: Option<std::ops::Range<usize>>,
    pub null_value: bool,
    pub span: std::ops::Range<usize>,
}

impl<'a> BatchView<'a> {
    /// The records section (decompressed if need be: then one allocation) and where each record
    /// lies in it — nothing copied per record (the log cleaner's view of a batch).
    pub fn raw_records(&self) -> Result<(std::borrow::Cow<'a, [u8]>, Vec<RawRecord>), BatchError> {
        let raw = crate::compression::decompress(self.compression()?, self.records_bytes())?;
        let count = self.records_count();
        if count as usize > raw.len() / 7 + 1 {
            return Err(BatchError::InvalidRecordCount(count));
        }
        let bad = |what: &'static str| BatchError::MalformedRecord(what);
        let mut out = Vec::with_capacity(count as usize);
        let mut pos = 0usize;
        for _ in 0..count {
            let rest = raw.get(pos..).ok_or(bad("record past the batch"))?;
            let (len, n) = varint::decode_varint(rest).ok_or(bad("bad length"))?;
            if len < 1 || rest.len() - n < len as usize {
                return Err(bad("record length"));
            }
            let end = pos + n + len as usize;
            let mut cur = &raw[pos + n + 1..end]; // after the attributes byte
            let ts_delta = read_varint(&mut cur)?;
            let off_delta = read_varint(&mut cur)?;
            let key_len = read_varint(&mut cur)?;
            let key = if key_len < 0 {
                None
            } else {
                if cur.len() < key_len as usize {
                    return Err(bad("key longer than its record"));
                }
                let at = end - cur.len();
                cur = &cur[key_len as usize..];
                Some(at..at + key_len as usize)
            };
            let value_len = read_varint(&mut cur)?;
            out.push(RawRecord {
                offset: self.base_offset().wrapping_add(off_delta),
                timestamp: self.base_timestamp().wrapping_add(ts_delta),
                key,
                null_value: value_len < 0,
                span: pos..end,
            });
            pos = end;
        }
        Ok((raw, out))
    }
}

/// The batch `view` with only `kept` of its records (from [`BatchView::raw_records`], whose
/// records section is `raw`), as Kafka's log cleaner writes it: base offset, last offset delta,
/// partition leader epoch, attributes (codec, timestamp type, transactional, control), producer
/// id, epoch, base sequence and base timestamp stay, so each kept record's bytes are copied as
/// they are (its offset and timestamp deltas still hold; the removed records' offsets become
/// gaps); the count, max timestamp (unless log-append-time), length and CRC follow the kept
/// records; the records are compressed again with the batch's codec. An empty `kept` gives a
/// batch of zero records (what Kafka keeps to preserve a producer's last sequence).
pub fn filtered(view: &BatchView<'_>, raw: &[u8], kept: &[&RawRecord]) -> Result<Bytes, BatchError> {
    let mut body = Vec::with_capacity(kept.iter().map(|r| r.span.len()).sum());
    let mut max_ts = -1i64;
    for r in kept {
        body.extend_from_slice(raw.get(r.span.clone()).ok_or(BatchError::MalformedRecord("record outside the batch"))?);
        max_ts = max_ts.max(r.timestamp);
    }
    let body = crate::compression::compress(view.compression()?, &body)?;
    let total = BATCH_HEADER_BYTES + body.len();
    let length = i32::try_from(total - LOG_OVERHEAD_BYTES).map_err(|_| BatchError::Compression("too large".into()))?;
    let max_ts = if view.is_log_append_time() || kept.is_empty() { view.max_timestamp() } else { max_ts };
    let mut out = BytesMut::with_capacity(total);
    out.extend_from_slice(&view.bytes()[..BATCH_HEADER_BYTES]);
    out.extend_from_slice(&body);
    out[OFF_LENGTH..OFF_LENGTH + 4].copy_from_slice(&length.to_be_bytes());
    out[OFF_MAX_TIMESTAMP..OFF_MAX_TIMESTAMP + 8].copy_from_slice(&max_ts.to_be_bytes());
    out[OFF_RECORDS_COUNT..OFF_RECORDS_COUNT + 4].copy_from_slice(&(kept.len() as i32).to_be_bytes());
    let crc = crc32c::crc32c(&out[OFF_ATTRIBUTES..]);
    out[OFF_CRC..OFF_CRC + 4].copy_from_slice(&crc.to_be_bytes());
    Ok(out.freeze())
}

/// Iterate over consecutive batches in `buf`, validating each (CRC included).
pub fn iter_batches(buf: &[u8]) -> BatchIter<'_> {
    BatchIter { buf, pos: 0 }
}

pub struct BatchIter<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Iterator for BatchIter<'a> {
    type Item = Result<(usize, BatchView<'a>), BatchError>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.pos >= self.buf.len() {
            return None;
        }
        match BatchView::parse(&self.buf[self.pos..]) {
            Ok((view, size)) => {
                let at = self.pos;
                self.pos += size;
                Some(Ok((at, view)))
            }
            Err(e) => {
                self.pos = self.buf.len();
                Some(Err(e))
            }
        }
    }
}

/// One record header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub key: String,
    pub value: Option<Bytes>,
}

/// A decoded record with absolute offset and timestamp.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub offset: i64,
    pub timestamp: i64,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Vec<Header>,
}

fn take_bytes(cur: &mut &[u8], len: i64, slice: &dyn Fn(&[u8]) -> Bytes) -> Result<Option<Bytes>, BatchError> {
    if len < 0 {
        return Ok(None);
    }
    let len = len as usize;
    if cur.len() < len {
        return Err(BatchError::MalformedRecord("field longer than record"));
    }
    let b = slice(&cur[..len]);
    *cur = &cur[len..];
    Ok(Some(b))
}

fn read_varint(cur: &mut &[u8]) -> Result<i64, BatchError> {
    let (v, n) = varint::decode_varint(cur).ok_or(BatchError::MalformedRecord("bad varint"))?;
    *cur = &cur[n..];
    Ok(v)
}

/// The fields of one record that validation needs.
struct SkippedRecord {
    timestamp_delta: i64,
    offset_delta: i64,
    null_key: bool,
}

/// Walk one record without copying anything; returns what validation needs and the bytes it
/// spans. Its fields must exactly fill its declared length (Kafka's "Invalid record size").
fn skip_record(buf: &[u8]) -> Result<(SkippedRecord, usize), BatchError> {
    let bad = |what: &str| BatchError::InvalidRecords(what.to_string());
    let (len, n) = varint::decode_varint(buf).ok_or_else(|| bad("bad record length"))?;
    if len < 1 || (buf.len() - n) < len as usize {
        return Err(bad("record length beyond the batch"));
    }
    let total = n + len as usize;
    let mut cur = &buf[n + 1..total]; // after the attributes byte
    let field = |cur: &mut &[u8]| -> Result<i64, BatchError> {
        let (v, used) = varint::decode_varint(cur).ok_or_else(|| bad("malformed record field"))?;
        *cur = &cur[used..];
        Ok(v)
    };
    let skip = |cur: &mut &[u8], len: i64| -> Result<(), BatchError> {
        if len < -1 || (len > 0 && cur.len() < len as usize) {
            return Err(bad("record field longer than its record"));
        }
        if len > 0 {
            *cur = &cur[len as usize..];
        }
        Ok(())
    };
    let timestamp_delta = field(&mut cur)?;
    let offset_delta = field(&mut cur)?;
    let key_len = field(&mut cur)?;
    skip(&mut cur, key_len)?;
    let value_len = field(&mut cur)?;
    skip(&mut cur, value_len)?;
    let headers = field(&mut cur)?;
    if headers < 0 || headers as usize > cur.len() {
        return Err(bad("invalid header count"));
    }
    for _ in 0..headers {
        let k = field(&mut cur)?;
        if k < 0 {
            return Err(bad("null header key"));
        }
        skip(&mut cur, k)?;
        let v = field(&mut cur)?;
        skip(&mut cur, v)?;
    }
    if !cur.is_empty() {
        return Err(bad("record fields do not fill the record's length"));
    }
    Ok((SkippedRecord { timestamp_delta, offset_delta, null_key: key_len < 0 }, total))
}

impl Record {
    /// Decode one record from `buf`; returns it and the bytes consumed.
    pub fn decode(buf: &[u8], base_offset: i64, base_timestamp: i64) -> Result<(Record, usize), BatchError> {
        Record::decode_with(buf, base_offset, base_timestamp, &Bytes::copy_from_slice)
    }

    /// As [`Record::decode`], with keys, values and header values made by `slice` from the
    /// sub-slices of `buf` (to share a buffer instead of copying).
    pub fn decode_with(
        buf: &[u8],
        base_offset: i64,
        base_timestamp: i64,
        slice: &dyn Fn(&[u8]) -> Bytes,
    ) -> Result<(Record, usize), BatchError> {
        let (len, n) = varint::decode_varint(buf).ok_or(BatchError::MalformedRecord("bad length"))?;
        if len < 0 || (buf.len() - n) < len as usize {
            return Err(BatchError::MalformedRecord("record length"));
        }
        let total = n + len as usize;
        let mut cur = &buf[n..total];
        if cur.is_empty() {
            return Err(BatchError::MalformedRecord("empty record"));
        }
        cur = &cur[1..]; // attributes (unused)
        let ts_delta = read_varint(&mut cur)?;
        let off_delta = read_varint(&mut cur)?;
        let key_len = read_varint(&mut cur)?;
        let key = take_bytes(&mut cur, key_len, slice)?;
        let val_len = read_varint(&mut cur)?;
        let value = take_bytes(&mut cur, val_len, slice)?;
        let hcount = read_varint(&mut cur)?;
        if hcount < 0 || hcount as usize > cur.len() {
            return Err(BatchError::MalformedRecord("header count"));
        }
        let mut headers = Vec::with_capacity(hcount as usize);
        for _ in 0..hcount {
            let klen = read_varint(&mut cur)?;
            let k = take_bytes(&mut cur, klen, slice)?.ok_or(BatchError::MalformedRecord("null header key"))?;
            // lossy, as Kafka's `Utils.utf8`: a stored record must never stop a reader
            let key = String::from_utf8_lossy(&k).into_owned();
            let vlen = read_varint(&mut cur)?;
            let value = take_bytes(&mut cur, vlen, slice)?;
            headers.push(Header { key, value });
        }
        Ok((
            Record {
                offset: base_offset.wrapping_add(off_delta),
                timestamp: base_timestamp.wrapping_add(ts_delta),
                key,
                value,
                headers,
            },
            total,
        ))
    }
}

/// COMMIT or ABORT.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControlType {
    Abort,
    Commit,
}

/// A transaction marker as carried by a control batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ControlMarker {
    pub kind: ControlType,
    pub coordinator_epoch: i32,
}

/// A record to be written by [`BatchBuilder`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NewRecord {
    pub timestamp: i64,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Vec<Header>,
}

/// Builds a v2 batch (base offset 0, to be assigned by the log).
#[derive(Debug, Clone)]
pub struct BatchBuilder {
    pub compression: Compression,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub transactional: bool,
    pub control: bool,
    pub log_append_time: bool,
    pub partition_leader_epoch: i32,
}

impl Default for BatchBuilder {
    fn default() -> Self {
        BatchBuilder {
            compression: Compression::None,
            producer_id: NO_PRODUCER_ID,
            producer_epoch: NO_PRODUCER_EPOCH,
            base_sequence: NO_SEQUENCE,
            transactional: false,
            control: false,
            log_append_time: false,
            partition_leader_epoch: -1,
        }
    }
}

fn put_bytes_field(out: &mut Vec<u8>, b: &Option<Bytes>) {
    match b {
        None => varint::put_varint(out, -1),
        Some(b) => {
            varint::put_varint(out, b.len() as i64);
            out.extend_from_slice(b);
        }
    }
}

impl BatchBuilder {
    /// Encode `records` into one batch. Panics never; an empty record list gives a batch with
    /// zero records (valid on the wire, though producers never send one).
    pub fn build(&self, records: &[NewRecord]) -> Result<Bytes, BatchError> {
        let base_ts = records.first().map(|r| r.timestamp).unwrap_or(0);
        let max_ts = records.iter().map(|r| r.timestamp).max().unwrap_or(base_ts);
        let mut body = Vec::with_capacity(records.len() * 32);
        let mut rec = Vec::with_capacity(64);
        for (i, r) in records.iter().enumerate() {
            rec.clear();
            rec.push(0u8);
            varint::put_varint(&mut rec, r.timestamp - base_ts);
            varint::put_varint(&mut rec, i as i64);
            put_bytes_field(&mut rec, &r.key);
            put_bytes_field(&mut rec, &r.value);
            varint::put_varint(&mut rec, r.headers.len() as i64);
            for h in &r.headers {
                varint::put_varint(&mut rec, h.key.len() as i64);
                rec.extend_from_slice(h.key.as_bytes());
                put_bytes_field(&mut rec, &h.value);
            }
            varint::put_varint(&mut body, rec.len() as i64);
            body.extend_from_slice(&rec);
        }
        let body = crate::compression::compress(self.compression, &body)?;
        let mut attributes = self.compression.id();
        if self.log_append_time {
            attributes |= ATTR_TIMESTAMP_TYPE;
        }
        if self.transactional {
            attributes |= ATTR_TRANSACTIONAL;
        }
        if self.control {
            attributes |= ATTR_CONTROL;
        }
        let last_delta = records.len().saturating_sub(1) as i32;
        let total = BATCH_HEADER_BYTES + body.len();
        let mut out = BytesMut::with_capacity(total);
        out.put_i64(0);
        out.put_i32((total - LOG_OVERHEAD_BYTES) as i32);
        out.put_i32(self.partition_leader_epoch);
        out.put_i8(MAGIC_V2);
        out.put_u32(0); // CRC placeholder
        out.put_i16(attributes);
        out.put_i32(last_delta);
        out.put_i64(base_ts);
        out.put_i64(max_ts);
        out.put_i64(self.producer_id);
        out.put_i16(self.producer_epoch);
        out.put_i32(self.base_sequence);
        out.put_i32(records.len() as i32);
        out.extend_from_slice(&body);
        let crc = crc32c::crc32c(&out[OFF_ATTRIBUTES..]);
        out[OFF_CRC..OFF_CRC + 4].copy_from_slice(&crc.to_be_bytes());
        Ok(out.freeze())
    }

    /// A control batch carrying one COMMIT/ABORT marker.
    pub fn control_marker(
        producer_id: i64,
        producer_epoch: i16,
        marker: ControlMarker,
        timestamp: i64,
    ) -> Result<Bytes, BatchError> {
        let kind: i16 = match marker.kind {
            ControlType::Abort => 0,
            ControlType::Commit => 1,
        };
        let mut key = Vec::with_capacity(4);
        key.extend_from_slice(&0i16.to_be_bytes());
        key.extend_from_slice(&kind.to_be_bytes());
        let mut value = Vec::with_capacity(6);
        value.extend_from_slice(&0i16.to_be_bytes());
        value.extend_from_slice(&marker.coordinator_epoch.to_be_bytes());
        let b = BatchBuilder { producer_id, producer_epoch, transactional: true, control: true, ..Default::default() };
        b.build(&[NewRecord {
            timestamp,
            key: Some(Bytes::from(key)),
            value: Some(Bytes::from(value)),
            headers: vec![],
        }])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn rec(ts: i64, k: Option<&[u8]>, v: Option<&[u8]>) -> NewRecord {
        NewRecord {
            timestamp: ts,
            key: k.map(Bytes::copy_from_slice),
            value: v.map(Bytes::copy_from_slice),
            headers: vec![Header { key: "h".into(), value: Some(Bytes::from_static(b"x")) }],
        }
    }

    #[test]
    fn roundtrip_and_crc() {
        let b = BatchBuilder { producer_id: 7, producer_epoch: 1, base_sequence: 3, ..Default::default() }
            .build(&[rec(100, Some(b"k"), Some(b"v")), rec(105, None, Some(b"w"))])
            .unwrap();
        let (v, size) = BatchView::parse(&b).unwrap();
        assert_eq!(size, b.len());
        assert_eq!(v.records_count(), 2);
        assert_eq!(v.last_offset_delta(), 1);
        assert_eq!(v.max_timestamp(), 105);
        assert_eq!(v.producer_id(), 7);
        assert_eq!(v.last_sequence(), 4);
        let recs = v.records().unwrap();
        assert_eq!(recs[1].offset, 1);
        assert_eq!(recs[1].timestamp, 105);
        assert_eq!(recs[0].key.as_deref(), Some(&b"k"[..]));
        assert_eq!(recs[1].key, None);
        // base offset and leader epoch are outside the CRC
        let mut m = b.to_vec();
        set_base_offset(&mut m, 1234);
        set_partition_leader_epoch(&mut m, 9);
        let (v, _) = BatchView::parse(&m).unwrap();
        assert_eq!(v.base_offset(), 1234);
        assert_eq!(v.partition_leader_epoch(), 9);
        // any other byte flip is caught
        m[40] ^= 1;
        assert!(matches!(BatchView::parse(&m), Err(BatchError::CrcMismatch { .. })));
    }

    #[test]
    fn log_append_time_restamps_and_keeps_crc_valid() {
        let mut b = BatchBuilder::default().build(&[rec(5, None, Some(b"v"))]).unwrap().to_vec();
        set_log_append_time(&mut b, 777);
        let (v, _) = BatchView::parse(&b).unwrap();
        assert!(v.is_log_append_time());
        assert_eq!(v.max_timestamp(), 777);
    }

    #[test]
    fn set_producer_keeps_crc_valid() {
        let mut b = BatchBuilder::default().build(&[rec(5, None, Some(b"v"))]).unwrap().to_vec();
        set_producer(&mut b, 77, 3, 1000);
        let (v, _) = BatchView::parse(&b).unwrap();
        assert_eq!((v.producer_id(), v.producer_epoch(), v.base_sequence()), (77, 3, 1000));
    }

    #[test]
    fn sequence_wraps() {
        let b = BatchBuilder { producer_id: 1, producer_epoch: 0, base_sequence: i32::MAX - 1, ..Default::default() }
            .build(&[rec(0, None, None), rec(0, None, None), rec(0, None, None)])
            .unwrap();
        let (v, _) = BatchView::parse(&b).unwrap();
        assert_eq!(v.last_sequence(), 0);
    }

    #[test]
    fn control_marker_roundtrip() {
        let m = ControlMarker { kind: ControlType::Commit, coordinator_epoch: 5 };
        let b = BatchBuilder::control_marker(9, 2, m, 1).unwrap();
        let (v, _) = BatchView::parse(&b).unwrap();
        assert!(v.is_control() && v.is_transactional());
        assert_eq!(v.control_marker().unwrap(), Some(m));
    }

    #[test]
    fn compressed_roundtrip() {
        for c in [Compression::Gzip, Compression::Snappy, Compression::Lz4, Compression::Zstd] {
            let recs: Vec<_> = (0..50).map(|i| rec(i, Some(b"key"), Some(&[i as u8; 100]))).collect();
            let b = BatchBuilder { compression: c, ..Default::default() }.build(&recs).unwrap();
            let (v, _) = BatchView::parse(&b).unwrap();
            assert_eq!(v.compression().unwrap(), c);
            let out = v.records().unwrap();
            assert_eq!(out.len(), 50);
            assert_eq!(out[49].value.as_deref(), Some(&[49u8; 100][..]));
        }
    }

    /// Rewrite header field `at` (4 bytes) and fix the CRC, as a malicious producer would.
    fn with_i32(b: &[u8], at: usize, v: i32) -> Vec<u8> {
        let mut m = b.to_vec();
        m[at..at + 4].copy_from_slice(&v.to_be_bytes());
        let crc = crc32c::crc32c(&m[OFF_ATTRIBUTES..]);
        m[OFF_CRC..OFF_CRC + 4].copy_from_slice(&crc.to_be_bytes());
        m
    }

    fn three(c: Compression) -> Vec<u8> {
        BatchBuilder { compression: c, ..Default::default() }
            .build(&[rec(100, Some(b"a"), Some(b"1")), rec(400, Some(b"b"), Some(b"2")), rec(250, None, Some(b"3"))])
            .unwrap()
            .to_vec()
    }

    #[test]
    fn validation_accepts_what_clients_build_and_summarises_it() {
        for c in [Compression::None, Compression::Gzip, Compression::Snappy, Compression::Lz4, Compression::Zstd] {
            let b = three(c);
            let (v, _) = BatchView::parse(&b).unwrap();
            let s = v.validate_records().unwrap();
            assert_eq!(
                s,
                RecordsSummary {
                    count: 3,
                    max_timestamp: 400,
                    offset_delta_of_max: 1,
                    min_timestamp: 100,
                    has_null_key: true
                }
            );
        }
    }

    #[test]
    fn validation_refuses_a_header_that_disagrees_with_its_records() {
        for c in [Compression::None, Compression::Lz4] {
            let b = three(c);
            // three records claiming one offset ("one offset, two values")
            let delta0 = with_i32(&b, OFF_LAST_OFFSET_DELTA, 0);
            // offsets burnt beyond the records
            let delta999 = with_i32(&b, OFF_LAST_OFFSET_DELTA, 999);
            // a count larger, or smaller, than the records encoded (delta kept consistent)
            let more = with_i32(&with_i32(&b, OFF_RECORDS_COUNT, 4), OFF_LAST_OFFSET_DELTA, 3);
            let fewer = with_i32(&with_i32(&b, OFF_RECORDS_COUNT, 2), OFF_LAST_OFFSET_DELTA, 1);
            let none = with_i32(&with_i32(&b, OFF_RECORDS_COUNT, 0), OFF_LAST_OFFSET_DELTA, -1);
            for (what, bad) in [("delta 0", delta0), ("delta 999", delta999), ("count 4", more), ("count 2", fewer)] {
                let (v, _) = BatchView::parse(&bad).unwrap();
                assert!(
                    matches!(v.validate_records(), Err(BatchError::InvalidRecords(_))),
                    "{c:?} {what}: {:?}",
                    v.validate_records()
                );
            }
            assert!(BatchView::parse(&none).is_err() || BatchView::parse(&none).unwrap().0.validate_records().is_err());
        }
    }

    #[test]
    fn validation_refuses_repeated_offset_deltas_and_ragged_records() {
        // records built by hand: deltas 0, 0
        let m = hand_built(&[&[0u8, 0, 0, 1, 2, b'v'], &[0u8, 0, 0, 1, 2, b'v']]);
        let (v, _) = BatchView::parse(&m).unwrap();
        assert!(matches!(v.validate_records(), Err(BatchError::InvalidRecords(_))), "{:?}", v.validate_records());
        // a record whose length covers a byte its fields do not use
        let m = hand_built(&[&[0u8, 0, 0, 1, 2, b'v', 0, 0xff]]);
        let (v, _) = BatchView::parse(&m).unwrap();
        assert!(matches!(v.validate_records(), Err(BatchError::InvalidRecords(_))), "{:?}", v.validate_records());
    }

    /// A batch whose records section is `records` (each framed with its length), its header
    /// counting them, with a valid CRC.
    fn hand_built(records: &[&[u8]]) -> Vec<u8> {
        let recs: Vec<NewRecord> = records.iter().map(|_| rec(1, None, None)).collect();
        let b = BatchBuilder::default().build(&recs).unwrap().to_vec();
        let mut m = b[..BATCH_HEADER_BYTES].to_vec();
        for r in records {
            varint::put_varint(&mut m, r.len() as i64);
            m.extend_from_slice(r);
        }
        let len = (m.len() - LOG_OVERHEAD_BYTES) as i32;
        with_i32(&m, OFF_LENGTH, len)
    }

    const CODECS: [Compression; 5] =
        [Compression::None, Compression::Gzip, Compression::Snappy, Compression::Lz4, Compression::Zstd];

    proptest! {
        /// Recompression keeps every record and every header field but the codec, and the
        /// result is a valid batch (CRC included) of the target codec.
        #[test]
        fn recompress_keeps_records_and_header(
            values in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..200), 1..20),
            from in 0usize..5,
            to in 0usize..5,
            transactional in any::<bool>(),
            level in proptest::option::of(1i32..9),
        ) {
            let records: Vec<NewRecord> = values
                .iter()
                .enumerate()
                .map(|(i, v)| rec(1000 + i as i64 * 7, Some(&v[..v.len().min(3)]), Some(v)))
                .collect();
            let b = BatchBuilder {
                compression: CODECS[from],
                producer_id: 42,
                producer_epoch: 3,
                base_sequence: 17,
                transactional,
                ..Default::default()
            }
            .build(&records)
            .unwrap();
            let mut placed = b.to_vec();
            set_base_offset(&mut placed, 900);
            let out = recompress(&placed, CODECS[to], level).unwrap();
            prop_assert_eq!(out.is_none(), from == to);
            let Some(out) = out else { return Ok(()) };
            let (before, _) = BatchView::parse(&placed).unwrap();
            let (after, size) = BatchView::parse(&out).unwrap();
            prop_assert_eq!(size, out.len());
            prop_assert_eq!(after.compression().unwrap(), CODECS[to]);
            prop_assert_eq!(after.attributes() & !ATTR_COMPRESSION_MASK, before.attributes() & !ATTR_COMPRESSION_MASK);
            prop_assert_eq!(&out[..OFF_LENGTH], &placed[..OFF_LENGTH]);
            prop_assert_eq!(&out[OFF_LAST_OFFSET_DELTA..BATCH_HEADER_BYTES], &placed[OFF_LAST_OFFSET_DELTA..BATCH_HEADER_BYTES]);
            prop_assert_eq!(after.records().unwrap(), before.records().unwrap());
        }

        /// A filtered batch keeps exactly the chosen records with their offsets and timestamps,
        /// the header's offsets, producer fields and flags, and is valid (CRC included).
        #[test]
        fn filtered_keeps_exactly_the_chosen_records(
            values in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..60), 1..20),
            keep in proptest::collection::vec(any::<bool>(), 20),
            codec in 0usize..5,
            log_append_time in any::<bool>(),
        ) {
            let records: Vec<NewRecord> = values
                .iter()
                .enumerate()
                .map(|(i, v)| rec(5000 - i as i64 * 11 + (i as i64 % 3) * 40, Some(&v[..v.len().min(2)]), Some(v)))
                .collect();
            let b = BatchBuilder {
                compression: CODECS[codec],
                producer_id: 9,
                producer_epoch: 2,
                base_sequence: 30,
                transactional: true,
                log_append_time,
                partition_leader_epoch: 4,
                ..Default::default()
            }
            .build(&records)
            .unwrap();
            let mut placed = b.to_vec();
            set_base_offset(&mut placed, 700);
            let (before, _) = BatchView::parse(&placed).unwrap();
            let all = before.records().unwrap();
            let kept: Vec<Record> = all.iter().zip(&keep).filter(|(_, k)| **k).map(|(r, _)| r.clone()).collect();
            let (raw, spans) = before.raw_records().unwrap();
            prop_assert_eq!(spans.len(), all.len());
            for (s, r) in spans.iter().zip(&all) {
                prop_assert_eq!((s.offset, s.timestamp, s.null_value), (r.offset, r.timestamp, r.value.is_none()));
                prop_assert_eq!(s.key.clone().map(|k| raw[k].to_vec()), r.key.as_ref().map(|k| k.to_vec()));
            }
            let chosen: Vec<&RawRecord> = spans.iter().zip(&keep).filter(|(_, k)| **k).map(|(s, _)| s).collect();
            let out = filtered(&before, &raw, &chosen).unwrap();
            let (after, size) = BatchView::parse(&out).unwrap();
            prop_assert_eq!(size, out.len());
            prop_assert_eq!(after.base_offset(), 700);
            prop_assert_eq!(after.last_offset(), before.last_offset());
            prop_assert_eq!(after.attributes(), before.attributes());
            prop_assert_eq!(after.partition_leader_epoch(), 4);
            prop_assert_eq!((after.producer_id(), after.producer_epoch(), after.base_sequence()), (9, 2, 30));
            prop_assert_eq!(after.records_count() as usize, kept.len());
            let expect_max = if log_append_time || kept.is_empty() {
                before.max_timestamp()
            } else {
                kept.iter().map(|r| r.timestamp).max().unwrap_or(-1)
            };
            prop_assert_eq!(after.max_timestamp(), expect_max);
            prop_assert_eq!(after.records().unwrap(), kept);
        }

        #[test]
        fn parse_never_panics(data in proptest::collection::vec(any::<u8>(), 0..300)) {
            if let Ok((v, _)) = BatchView::parse(&data) {
                let _ = v.records_shared(&Bytes::copy_from_slice(&data));
                let _ = v.records();
                let _ = v.control_marker();
            }
        }

        #[test]
        fn validation_never_panics_and_agrees_with_decoding(
            data in proptest::collection::vec(any::<u8>(), 0..300),
            flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..4),
        ) {
            let base = three(Compression::None);
            let mut m = base.clone();
            for (at, x) in flips {
                let i = BATCH_HEADER_BYTES.min(m.len() - 1) + at % (m.len() - BATCH_HEADER_BYTES);
                m[i] ^= x;
            }
            m.extend_from_slice(&data[..data.len() % 3]);
            let len = (m.len() - LOG_OVERHEAD_BYTES) as i32;
            let m = with_i32(&m, OFF_LENGTH, len);
            if let Ok((v, _)) = BatchView::parse(&m) {
                if let Ok(s) = v.validate_records() {
                    // whatever validation accepts decodes into exactly that many records
                    let recs = v.records().unwrap();
                    prop_assert_eq!(recs.len() as i32, s.count);
                    for (i, r) in recs.iter().enumerate() {
                        prop_assert_eq!(r.offset, i as i64);
                    }
                }
            }
            if let Ok((v, _)) = BatchView::parse(&data) {
                let _ = v.validate_records();
            }
        }

        #[test]
        fn build_parse_roundtrip(
            recs in proptest::collection::vec(
                (any::<i32>(), proptest::option::of(proptest::collection::vec(any::<u8>(), 0..20)),
                 proptest::option::of(proptest::collection::vec(any::<u8>(), 0..50))), 1..20),
            codec in 0i16..5,
        ) {
            let new: Vec<NewRecord> = recs.iter().map(|(t, k, v)| NewRecord {
                timestamp: i64::from(*t),
                key: k.clone().map(Bytes::from),
                value: v.clone().map(Bytes::from),
                headers: vec![],
            }).collect();
            let c = Compression::from_attributes(codec).unwrap();
            let b = BatchBuilder { compression: c, ..Default::default() }.build(&new).unwrap();
            let (v, _) = BatchView::parse(&b).unwrap();
            let out = v.records().unwrap();
            prop_assert_eq!(&v.records_shared(&b).unwrap(), &out, "shared decoding = copying decoding");
            prop_assert_eq!(out.len(), new.len());
            for (i, (o, n)) in out.iter().zip(new.iter()).enumerate() {
                prop_assert_eq!(o.offset, i as i64);
                prop_assert_eq!(o.timestamp, n.timestamp);
                prop_assert_eq!(&o.key, &n.key);
                prop_assert_eq!(&o.value, &n.value);
            }
        }
    }
}
