//! What a file holds that the disk does not: the writes and truncations since its last
//! successful fsync, in order, overlaid on the synced bytes for every read, applied to the disk
//! by an fsync, and — on a power cut — dropped whole, or kept up to a random prefix, or kept up
//! to a prefix whose last page is torn. Pure (no I/O), so its rules are unit-tested here.

/// One change to a file's contents not yet on disk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    Write { offset: u64, data: Vec<u8> },
    Truncate { len: u64 },
}

impl Op {
    fn bytes(&self) -> u64 {
        match self {
            Op::Write { data, .. } => data.len() as u64,
            Op::Truncate { .. } => 0,
        }
    }
}

/// The page a torn write tears within (a disk writes whole sectors; a page is what Linux
/// writes back).
pub const PAGE: u64 = 4096;

/// Unsynced changes of one file.
#[derive(Clone, Debug, Default)]
pub struct Overlay {
    /// Changes since the last fsync, in the order they were made.
    pub pending: Vec<Op>,
    /// Changes whose fsync failed (EIO): still visible to reads, as Linux keeps such pages in
    /// its cache marked clean, but never written to disk by a later fsync (fsyncgate).
    pub lost: Vec<Op>,
}

impl Overlay {
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty() && self.lost.is_empty()
    }

    /// Record a write. A write that continues the previous one (an append) extends it, so a
    /// log's appends stay one change however many writes they took.
    pub fn write(&mut self, offset: u64, data: &[u8]) {
        if let Some(Op::Write { offset: o, data: d }) = self.pending.last_mut() {
            if *o + d.len() as u64 == offset {
                d.extend_from_slice(data);
                return;
            }
        }
        self.pending.push(Op::Write { offset, data: data.to_vec() });
    }

    pub fn truncate(&mut self, len: u64) {
        self.pending.push(Op::Truncate { len });
    }

    /// The file's size as its user sees it, given the size on disk.
    pub fn size(&self, disk_size: u64) -> u64 {
        self.lost.iter().chain(&self.pending).fold(disk_size, |size, op| match op {
            Op::Write { offset, data } => size.max(offset + data.len() as u64),
            Op::Truncate { len } => *len,
        })
    }

    /// Overlay the unsynced changes on `buf`, which holds the disk's bytes `[offset, offset +
    /// buf.len())` (zeros past the disk's end), and cut it to the visible size.
    pub fn read(&self, disk_size: u64, offset: u64, buf: &mut Vec<u8>) {
        let end = offset + buf.len() as u64;
        for op in self.lost.iter().chain(&self.pending) {
            match op {
                Op::Write { offset: o, data } => {
                    let from = (*o).max(offset);
                    let to = (o + data.len() as u64).min(end);
                    if from < to {
                        buf[(from - offset) as usize..(to - offset) as usize]
                            .copy_from_slice(&data[(from - o) as usize..(to - o) as usize]);
                    }
                }
                Op::Truncate { len } => {
                    // bytes beyond a truncation read as zeros if the file grows again
                    if *len < end {
                        let from = len.saturating_sub(offset) as usize;
                        buf[from..].iter_mut().for_each(|b| *b = 0);
                    }
                }
            }
        }
        let visible = self.size(disk_size).saturating_sub(offset).min(buf.len() as u64);
        buf.truncate(visible as usize);
    }

    /// Unsynced bytes (what a power cut can lose).
    pub fn pending_bytes(&self) -> u64 {
        self.pending.iter().map(Op::bytes).sum()
    }

    /// fsync succeeded: the pending changes to apply to the disk, in order.
    pub fn take_for_sync(&mut self) -> Vec<Op> {
        std::mem::take(&mut self.pending)
    }

    /// fsync failed: the pending changes are never written, though reads still see them.
    pub fn fail_sync(&mut self) {
        let pending = std::mem::take(&mut self.pending);
        self.lost.extend(pending);
    }

    /// Power cut: the changes that reached the disk anyway. `keep` bytes of the pending writes
    /// (in order; a truncation within them counts as reached), and with `tear` the last page
    /// they touch loses its bytes from `tear` (0..PAGE, relative to that page) on.
    pub fn survivors(&self, keep: u64, tear: Option<u64>) -> Vec<Op> {
        let mut out = Vec::new();
        let mut left = keep;
        for op in &self.pending {
            match op {
                Op::Truncate { .. } => out.push(op.clone()),
                Op::Write { offset, data } => {
                    if left == 0 {
                        break;
                    }
                    let n = left.min(data.len() as u64);
                    left -= n;
                    let mut data = data[..n as usize].to_vec();
                    if left == 0 {
                        if let Some(t) = tear {
                            // zero the end of the last page this write reached
                            let end = offset + n;
                            let page_start = (end - 1) / PAGE * PAGE;
                            let torn_from = (page_start + t % PAGE).max(*offset);
                            if torn_from < end {
                                data[(torn_from - offset) as usize..].iter_mut().for_each(|b| *b = 0);
                            }
                        }
                        out.push(Op::Write { offset: *offset, data });
                        break;
                    }
                    out.push(Op::Write { offset: *offset, data });
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// A file modelled as bytes: what every read through the overlay must equal.
    fn apply(model: &mut Vec<u8>, op: &Op) {
        match op {
            Op::Write { offset, data } => {
                let end = *offset as usize + data.len();
                if model.len() < end {
                    model.resize(end, 0);
                }
                model[*offset as usize..end].copy_from_slice(data);
            }
            Op::Truncate { len } => model.resize(*len as usize, 0),
        }
    }

    fn read_all(o: &Overlay, disk: &[u8]) -> Vec<u8> {
        let size = o.size(disk.len() as u64);
        let mut buf = disk.to_vec();
        buf.resize(size as usize + 17, 0);
        o.read(disk.len() as u64, 0, &mut buf);
        buf
    }

    #[test]
    fn reads_see_every_change_in_order_and_a_sync_makes_the_disk_equal() {
        for seed in 0..300u64 {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let mut disk: Vec<u8> = (0..rng.gen_range(0..300)).map(|_| rng.gen()).collect();
            let mut model = disk.clone();
            let mut o = Overlay::default();
            for _ in 0..rng.gen_range(1..30) {
                let op = if rng.gen_bool(0.85) {
                    let offset = if rng.gen_bool(0.5) { model.len() as u64 } else { rng.gen_range(0..400) };
                    Op::Write { offset, data: (0..rng.gen_range(1..200)).map(|_| rng.gen()).collect() }
                } else {
                    Op::Truncate { len: rng.gen_range(0..400) }
                };
                match &op {
                    Op::Write { offset, data } => o.write(*offset, data),
                    Op::Truncate { len } => o.truncate(*len),
                }
                apply(&mut model, &op);
                assert_eq!(read_all(&o, &disk), model, "seed {seed}");
                // a window read equals the model's window
                let from = rng.gen_range(0..model.len() as u64 + 5);
                let mut window = vec![0u8; 64];
                for (i, b) in window.iter_mut().enumerate() {
                    *b = disk.get(from as usize + i).copied().unwrap_or(0);
                }
                o.read(disk.len() as u64, from, &mut window);
                let want: Vec<u8> = model.iter().skip(from as usize).take(64).copied().collect();
                assert_eq!(window, want, "seed {seed} window at {from}");
                if rng.gen_bool(0.2) {
                    for op in o.take_for_sync() {
                        apply(&mut disk, &op);
                    }
                    assert_eq!(disk, model, "seed {seed}: a sync leaves the disk equal to what was read");
                }
            }
        }
    }

    #[test]
    fn a_power_cut_keeps_a_prefix_of_the_unsynced_bytes_and_a_tear_zeroes_the_last_page_end() {
        let mut o = Overlay::default();
        o.write(0, &[1; 5000]);
        o.write(5000, &[2; 5000]); // an append: one change
        assert_eq!(o.pending.len(), 1);
        assert_eq!(o.pending_bytes(), 10_000);
        assert!(o.survivors(0, None).is_empty());
        let kept = o.survivors(6000, None);
        assert_eq!(kept, vec![Op::Write { offset: 0, data: [vec![1; 5000], vec![2; 1000]].concat() }]);
        // torn: the page holding byte 5999 is 4096..8192; from 4096 + 100 on it reads zeros
        let torn = o.survivors(6000, Some(100));
        let Op::Write { data, .. } = &torn[0] else { panic!("a write") };
        assert_eq!(data.len(), 6000);
        assert!(data[..4196].iter().all(|b| *b == 1));
        assert!(data[4196..].iter().all(|b| *b == 0));
        assert_eq!(o.survivors(u64::MAX, None), o.pending);
    }

    #[test]
    fn a_failed_fsync_leaves_the_data_visible_but_never_synced() {
        let mut o = Overlay::default();
        o.write(0, b"acknowledged?");
        o.fail_sync();
        assert_eq!(read_all(&o, b""), b"acknowledged?");
        assert!(o.take_for_sync().is_empty(), "a later fsync writes nothing of it");
        assert_eq!(o.pending_bytes(), 0);
        assert!(!o.is_empty());
    }
}
