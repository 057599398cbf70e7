//! Summaries of one phase: throughput and latency percentiles from the
//! per-operation samples, and operations per journal sync. Pure.

use serde::Serialize;

/// What one phase measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    pub phase: String,
    /// Operations timed (readdir: complete directory listings).
    pub ops: u64,
    pub seconds: f64,
    pub ops_per_sec: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
    /// readdir only: entries returned per second.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entries_per_sec: Option<f64>,
    /// The server's journal syncs during the phase, when it is known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub journal_syncs: Option<u64>,
    /// `ops / journal_syncs` when there were syncs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ops_per_sync: Option<f64>,
    /// CPU seconds used during the phase by this process and the
    /// `--cpu-of` processes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_seconds: Option<f64>,
    /// `ops / cpu_seconds`: throughput per CPU-second, independent of how
    /// much of a shared machine the run got.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ops_per_cpu_sec: Option<f64>,
}

/// The `p`-quantile (0 ≤ p ≤ 1) of ascending `sorted` samples, nearest
/// rank: the smallest sample with at least `p` of all samples at or below
/// it. `None` when there are no samples.
pub fn percentile(sorted: &[u64], p: f64) -> Option<u64> {
    if sorted.is_empty() {
        return None;
    }
    let p = p.clamp(0.0, 1.0);
    let rank = (p * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.saturating_sub(1).min(sorted.len() - 1)])
}

/// The median of `xs` (mean of the middle two for an even count).
pub fn median(xs: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = xs.iter().copied().filter(|x| !x.is_nan()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    })
}

/// What was counted besides the operations' latencies.
#[derive(Debug, Clone, Copy, Default)]
pub struct Counts {
    /// readdir: entries returned.
    pub entries: Option<u64>,
    /// The server's journal syncs during the phase.
    pub journal_syncs: Option<u64>,
    /// CPU seconds used during the phase.
    pub cpu_seconds: Option<f64>,
}

/// Summarises a phase: `latencies_ns` (one per operation, any order),
/// the wall time of the whole phase, and what else was counted.
pub fn summarize(phase: String, mut latencies_ns: Vec<u64>, seconds: f64, c: Counts) -> Summary {
    latencies_ns.sort_unstable();
    let ops = latencies_ns.len() as u64;
    let us = |p: f64| percentile(&latencies_ns, p).map_or(0.0, |ns| ns as f64 / 1000.0);
    let rate = |n: u64| {
        if seconds > 0.0 {
            n as f64 / seconds
        } else {
            0.0
        }
    };
    Summary {
        phase,
        ops,
        seconds,
        ops_per_sec: rate(ops),
        p50_us: us(0.50),
        p99_us: us(0.99),
        max_us: us(1.0),
        entries_per_sec: c.entries.map(rate),
        journal_syncs: c.journal_syncs,
        ops_per_sync: c
            .journal_syncs
            .filter(|&s| s > 0)
            .map(|s| ops as f64 / s as f64),
        cpu_seconds: c.cpu_seconds,
        ops_per_cpu_sec: c.cpu_seconds.filter(|&s| s > 0.0).map(|s| ops as f64 / s),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_nearest_rank() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&v, 0.50), Some(50));
        assert_eq!(percentile(&v, 0.99), Some(99));
        assert_eq!(percentile(&v, 1.0), Some(100));
        assert_eq!(percentile(&v, 0.0), Some(1));
        assert_eq!(percentile(&[7], 0.5), Some(7));
        assert_eq!(percentile(&[1, 2], 0.5), Some(1));
        assert_eq!(percentile(&[1, 2], 0.51), Some(2));
        assert_eq!(percentile(&[], 0.5), None);
        // Out-of-range p is clamped, never a panic.
        assert_eq!(percentile(&v, 7.0), Some(100));
        assert_eq!(percentile(&v, -1.0), Some(1));
    }

    #[test]
    fn medians() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[f64::NAN, 5.0]), Some(5.0));
    }

    #[test]
    fn summary_rates_and_syncs() {
        let lat: Vec<u64> = (1..=1000).rev().map(|i| i * 1000).collect();
        let c = Counts {
            journal_syncs: Some(250),
            cpu_seconds: Some(0.5),
            ..Counts::default()
        };
        let s = summarize("file-create".into(), lat, 2.0, c);
        assert_eq!(s.ops, 1000);
        assert_eq!(s.ops_per_sec, 500.0);
        assert_eq!(s.p50_us, 500.0);
        assert_eq!(s.p99_us, 990.0);
        assert_eq!(s.max_us, 1000.0);
        assert_eq!(s.ops_per_sync, Some(4.0));
        assert_eq!(s.entries_per_sec, None);
        assert_eq!(s.ops_per_cpu_sec, Some(2000.0));
        let c = Counts {
            entries: Some(400),
            journal_syncs: Some(0),
            cpu_seconds: Some(0.0),
        };
        let r = summarize("file-readdir".into(), vec![10; 4], 0.5, c);
        assert_eq!(r.entries_per_sec, Some(800.0));
        assert_eq!(r.ops_per_sync, None, "no syncs: no ratio");
        assert_eq!(r.ops_per_cpu_sec, None);
        let empty = summarize("x".into(), vec![], 0.0, Counts::default());
        assert_eq!((empty.ops, empty.ops_per_sec, empty.p50_us), (0, 0.0, 0.0));
    }
}
