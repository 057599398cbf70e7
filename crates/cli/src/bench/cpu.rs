//! CPU time spent during a phase: this process (every thread) and other
//! processes named with `--cpu-of` (e.g. the server and the mount daemon).
//! On a shared machine this says how much of the machine a run really got:
//! operations per CPU-second do not depend on what else runs.

use anyhow::{Context, Result};

/// CPU seconds (user + system) of this process so far.
pub fn own() -> f64 {
    // SAFETY: getrusage writes into the zeroed struct we own.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// User + system clock ticks from the text of `/proc/<pid>/stat`.
fn ticks(stat: &str) -> Option<u64> {
    // The command name (field 2) may hold spaces and parentheses: the
    // fields after it start after the last ')'. utime and stime are fields
    // 14 and 15, i.e. the 12th and 13th after the name.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut f = rest.split_whitespace().skip(11);
    let utime: u64 = f.next()?.parse().ok()?;
    let stime: u64 = f.next()?.parse().ok()?;
    Some(utime + stime)
}

/// CPU seconds (user + system) of process `pid` so far.
pub fn of(pid: u32) -> Result<f64> {
    let path = format!("/proc/{pid}/stat");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    let t = ticks(&text).with_context(|| format!("cannot parse {path}"))?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1);
    Ok(t as f64 / hz as f64)
}

/// CPU seconds of this process plus `pids`.
pub fn total(pids: &[u32]) -> Result<f64> {
    let mut s = own();
    for &p in pids {
        s += of(p)?;
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_stat_with_odd_names() {
        let line = "4242 (sextant (x) y) S 1 4242 4242 0 -1 4194560 100 0 0 0 \
                    250 70 0 0 20 0 5 0 123 456 789";
        assert_eq!(ticks(line), Some(320));
        assert_eq!(ticks("garbage"), None);
        assert_eq!(ticks("1 (x) S 1 2"), None);
    }

    #[test]
    fn own_and_self_by_pid_advance() {
        let a = total(&[std::process::id()]).unwrap();
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        assert!(total(&[std::process::id()]).unwrap() >= a);
        assert!(of(u32::MAX).is_err());
    }
}
