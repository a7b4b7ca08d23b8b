//! Durability settings: the WAL sync of a single node (`sync`, `sync_interval`) and the free
//! space reserve (`disk_reserve`).
//!
//! In cluster mode `sync` does not apply: the Raft log is the write-ahead log, and an entry
//! counts as written on a node only once the log has fsynced it (appends arriving meanwhile
//! share one fsync).

use std::time::Duration;

use ebb_storage::SyncMode;

use crate::error::Result;

/// The interval `sync = "interval"` uses unless `sync_interval` says otherwise.
pub const DEFAULT_INTERVAL: Duration = Duration::from_millis(100);

/// The mode `mode` (`always`, `interval` or `none`) names, with `interval` (`"100ms"`, `"1s"`,
/// or milliseconds) for the interval mode; either may be absent, keeping `current`'s part.
pub(super) fn sync_mode(
    mode: Option<&str>,
    interval: Option<&str>,
    current: SyncMode,
) -> Result<SyncMode> {
    let every = match interval {
        Some(s) => super::parse::interval(
            "sync_interval",
            s,
            Duration::from_millis(1)..=Duration::from_secs(60),
        )?,
        None => match current {
            SyncMode::Interval(d) => d,
            _ => DEFAULT_INTERVAL,
        },
    };
    let mode = match mode {
        None if interval.is_none() => return Ok(current),
        None => match current {
            SyncMode::Interval(_) => "interval",
            _ => return Err(super::bad("sync_interval is set but sync is not \"interval\"")),
        },
        Some(m) => m,
    };
    match mode.trim().to_ascii_lowercase().as_str() {
        "always" => Ok(SyncMode::Always),
        "interval" => Ok(SyncMode::Interval(every)),
        "none" => Ok(SyncMode::None),
        other => Err(super::bad(format!(
            "sync: {other:?} is not one of \"always\", \"interval\" or \"none\""
        ))),
    }
}

/// The free space kept for deletes, erasures, drops and compactions: writes that add data are
/// refused below it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum DiskReserve {
    /// 5% of the data directory's file system, at most 2 GiB.
    Default,
    /// This many bytes (0: no reserve).
    Bytes(u64),
    /// This share of the file system, in percent.
    Percent(f64),
}

impl DiskReserve {
    /// Parses `"2GiB"`, `"512MiB"`, a number of bytes, `"10%"`, or `"0"`.
    pub(super) fn parse(s: &str) -> Result<DiskReserve> {
        let t = s.trim();
        if let Some(p) = t.strip_suffix('%') {
            let p: f64 = p
                .trim()
                .parse()
                .map_err(|_| super::bad(format!("disk_reserve: not a percentage: {s:?}")))?;
            if !(0.0..=50.0).contains(&p) {
                return Err(super::bad("disk_reserve must be between 0% and 50%"));
            }
            return Ok(DiskReserve::Percent(p));
        }
        if t == "0" {
            return Ok(DiskReserve::Bytes(0));
        }
        Ok(DiskReserve::Bytes(super::bytes("disk_reserve", t)? as u64))
    }

    /// The reserve in bytes on a file system of `total` bytes.
    pub fn bytes(self, total: u64) -> u64 {
        match self {
            DiskReserve::Default => ebb_storage::disk::default_reserve(total),
            DiskReserve::Bytes(b) => b,
            DiskReserve::Percent(p) => (total as f64 * p / 100.0) as u64,
        }
    }

    /// The reserve of `dir`'s file system, ready to check writes against.
    pub fn for_dir(self, dir: &std::path::Path) -> std::sync::Arc<ebb_storage::disk::Reserve> {
        let total = match ebb_storage::disk::space(dir) {
            Ok(s) => s.total,
            Err(e) => {
                tracing::warn!(dir = %dir.display(), error = %e, "cannot measure the data volume");
                0
            }
        };
        std::sync::Arc::new(ebb_storage::disk::Reserve::new(dir, self.bytes(total)))
    }
}

/// How a mode is shown (`ebb server --check-config`, `system.nodes`).
pub fn describe(mode: SyncMode) -> String {
    match mode {
        SyncMode::Always => "always".into(),
        SyncMode::Interval(d) => format!("interval ({} ms)", d.as_millis()),
        _ => "none".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_and_intervals_parse_and_bad_values_are_refused() {
        let ms = Duration::from_millis;
        assert_eq!(sync_mode(None, None, SyncMode::Always).ok(), Some(SyncMode::Always));
        assert_eq!(sync_mode(Some("none"), None, SyncMode::Always).ok(), Some(SyncMode::None));
        assert_eq!(
            sync_mode(Some("Interval"), None, SyncMode::Always).ok(),
            Some(SyncMode::Interval(DEFAULT_INTERVAL))
        );
        assert_eq!(
            sync_mode(Some("interval"), Some("250ms"), SyncMode::Always).ok(),
            Some(SyncMode::Interval(ms(250)))
        );
        assert_eq!(
            sync_mode(None, Some("2s"), SyncMode::Interval(ms(5))).ok(),
            Some(SyncMode::Interval(ms(2000)))
        );
        assert_eq!(
            sync_mode(Some("interval"), Some("40"), SyncMode::None).ok(),
            Some(SyncMode::Interval(ms(40)))
        );
        assert_eq!(DiskReserve::parse("10%").ok(), Some(DiskReserve::Percent(10.0)));
        assert_eq!(DiskReserve::parse("2GiB").ok(), Some(DiskReserve::Bytes(2 << 30)));
        assert_eq!(DiskReserve::parse("0").ok(), Some(DiskReserve::Bytes(0)));
        assert_eq!(DiskReserve::Default.bytes(100 << 30), 2 << 30);
        assert_eq!(DiskReserve::Percent(10.0).bytes(1000), 100);
        for bad in ["-1%", "80%", "lots", "%"] {
            assert!(DiskReserve::parse(bad).is_err(), "{bad}");
        }
        for (mode, interval) in [
            (Some("sometimes"), None),
            (Some("interval"), Some("0ms")),
            (Some("interval"), Some("2m")),
            (Some("interval"), Some("fast")),
            (None, Some("100ms")),
        ] {
            assert!(sync_mode(mode, interval, SyncMode::Always).is_err(), "{mode:?} {interval:?}");
        }
    }
}
