//! Time: the kernel's timestamps are CLOCK_MONOTONIC nanoseconds (bpf_ktime_get_ns); the
//! records print them as RFC 3339 UTC.

fn clock_ns(id: libc::clockid_t) -> u64 {
    read_ns(id).unwrap_or(0)
}

/// Clock `id`'s time, ns; None when the kernel refuses it (a process's CPU-time clock once
/// the process is gone).
pub fn read_ns(id: libc::clockid_t) -> Option<u64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer to a timespec
    let rc = unsafe { libc::clock_gettime(id, &mut ts) };
    (rc == 0).then(|| ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

/// The CPU time the calling thread has run, ns (CLOCK_THREAD_CPUTIME_ID).
pub fn thread_cpu_ns() -> anyhow::Result<u64> {
    read_ns(libc::CLOCK_THREAD_CPUTIME_ID)
        .ok_or_else(|| anyhow::anyhow!("cannot read this thread's CPU clock"))
}

/// Now, on the kernel's clock (CLOCK_MONOTONIC ns, as bpf_ktime_get_ns).
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// The length of a clock tick (USER_HZ), ns: the unit of /proc/stat's and /proc/PID/stat's
/// CPU times.
pub fn tick_ns() -> u64 {
    // SAFETY: sysconf has no preconditions
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    1_000_000_000 / hz
}

/// Now, in ns since boot, suspend included (CLOCK_BOOTTIME: /proc/PID/stat's start time).
pub fn boottime_ns() -> u64 {
    clock_ns(libc::CLOCK_BOOTTIME)
}

/// Now, in ns since the Unix epoch.
pub fn realtime_ns() -> u64 {
    clock_ns(libc::CLOCK_REALTIME)
}

/// Wall-clock time of a CLOCK_MONOTONIC timestamp.
pub struct Clock {
    /// realtime - monotonic, in ns
    offset: i128,
}

impl Clock {
    pub fn new() -> Clock {
        Clock {
            offset: clock_ns(libc::CLOCK_REALTIME) as i128
                - clock_ns(libc::CLOCK_MONOTONIC) as i128,
        }
    }

    /// The wall-clock time (ns since the Unix epoch) of a monotonic one.
    pub fn wall_ns(&self, mono_ns: u64) -> i128 {
        mono_ns as i128 + self.offset
    }
}

/// RFC 3339 UTC with microseconds of a time in ns since the Unix epoch, e.g.
/// 2026-11-22T01:08:27.123456Z (written digit by digit: two per connection, and `format!`
/// was a seventh of the pipeline's time).
pub fn rfc3339_utc(ns: i128) -> String {
    let secs = ns.div_euclid(1_000_000_000) as i64;
    let micros = (ns.rem_euclid(1_000_000_000) / 1000) as u64;
    let (days, sod) = (secs.div_euclid(86400), secs.rem_euclid(86400) as u64);
    let (y, m, d) = civil_from_days(days);
    let mut b = *b"0000-00-00T00:00:00.000000Z";
    let fields: [(usize, usize, u64); 7] = [
        (0, 4, y.clamp(0, 9999) as u64),
        (5, 2, m as u64),
        (8, 2, d as u64),
        (11, 2, sod / 3600),
        (14, 2, sod % 3600 / 60),
        (17, 2, sod % 60),
        (20, 6, micros),
    ];
    for (at, width, mut v) in fields {
        for i in (at..at + width).rev() {
            b[i] = b'0' + (v % 10) as u8;
            v /= 10;
        }
    }
    std::str::from_utf8(&b).expect("ASCII digits").to_owned()
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian (H. Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_known_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(20_413), (2025, 11, 21));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        let epoch = Clock { offset: 0 };
        assert_eq!(rfc3339_utc(epoch.wall_ns(0)), "1970-01-01T00:00:00.000000Z");
        assert_eq!(
            rfc3339_utc(epoch.wall_ns(1_795_312_107_123_456_789)),
            "2026-11-22T01:48:27.123456Z"
        );
        let later = Clock {
            offset: 86_399_999_999_000,
        };
        assert_eq!(rfc3339_utc(later.wall_ns(0)), "1970-01-01T23:59:59.999999Z");
    }
}
