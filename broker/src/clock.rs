//! The broker's wall clock: the one place code reads the time of day (record timestamps,
//! transaction and session deadlines, retention).

/// Wall-clock milliseconds since the epoch (0 if the clock is before it).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}
