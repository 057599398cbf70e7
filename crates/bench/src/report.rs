//! Reports: what one benchmark run measured, printed as text or JSON.

use crate::measure::Summary;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// One measured quantity.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Metric {
    pub name: String,
    pub unit: String,
    #[serde(flatten)]
    pub summary: Summary,
    /// The target from the issue, if this metric has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_met: Option<bool>,
}

/// The result of one benchmark subcommand.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    pub bench: String,
    pub params: Value,
    pub metrics: Vec<Metric>,
    /// Engine counters and other single facts about the run.
    pub info: Map<String, Value>,
}

impl Report {
    pub fn new(bench: &str, params: impl Serialize) -> Report {
        Report {
            bench: bench.to_string(),
            params: serde_json::to_value(params).unwrap_or(Value::Null),
            metrics: Vec::new(),
            info: Map::new(),
        }
    }

    pub fn metric(&mut self, name: impl Into<String>, unit: &str, samples: &[f64]) -> &mut Metric {
        self.metrics.push(Metric {
            name: name.into(),
            unit: unit.to_string(),
            summary: Summary::of(samples),
            target: None,
            target_met: None,
        });
        self.metrics.last_mut().expect("just pushed")
    }

    pub fn info(&mut self, key: &str, value: impl Serialize) {
        self.info.insert(
            key.to_string(),
            serde_json::to_value(value).unwrap_or(Value::Null),
        );
    }

    pub fn print(&self, json: bool) {
        if json {
            println!(
                "{}",
                serde_json::to_string_pretty(self).expect("report serializes")
            );
            return;
        }
        println!("== {} {}", self.bench, self.params);
        for m in &self.metrics {
            let target = match (&m.target, m.target_met) {
                (Some(t), Some(true)) => format!("  [target {t}: met]"),
                (Some(t), _) => format!("  [target {t}: MISSED]"),
                _ => String::new(),
            };
            println!(
                "  {:<44} median {:>14} {:<10} (min {}, max {}, n={}){}",
                m.name,
                fmt_num(m.summary.median),
                m.unit,
                fmt_num(m.summary.min),
                fmt_num(m.summary.max),
                m.summary.samples.len(),
                target
            );
        }
        for (k, v) in &self.info {
            println!("  {k}: {v}");
        }
    }
}

impl Metric {
    /// Records a target: `at_least` true means higher is better.
    pub fn target(&mut self, text: &str, bound: f64, at_least: bool) {
        let met = if at_least {
            self.summary.median >= bound
        } else {
            self.summary.median <= bound
        };
        self.target = Some(text.to_string());
        self.target_met = Some(met);
    }
}

/// Human formatting: thousands separators for large numbers, 3 significant
/// decimals for small ones.
pub fn fmt_num(x: f64) -> String {
    if !x.is_finite() {
        return format!("{x}");
    }
    if x.abs() >= 1000.0 {
        let n = x.round() as i128;
        let s = n.abs().to_string();
        let mut out = String::new();
        for (i, c) in s.chars().enumerate() {
            if i > 0 && (s.len() - i).is_multiple_of(3) {
                out.push(',');
            }
            out.push(c);
        }
        if n < 0 {
            out.insert(0, '-');
        }
        out
    } else if x.abs() >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.3}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_format() {
        assert_eq!(fmt_num(1234567.4), "1,234,567");
        assert_eq!(fmt_num(12.34), "12.3");
        assert_eq!(fmt_num(0.5), "0.500");
    }
}
