//! A rollout step's analysis: checks measured on an interval, each measurement judged by
//! its condition, the run decided by its count and failure limit. [`measure`] takes one
//! measurement (a Prometheus query, an HTTP check); this module judges them, pure.
//!
//! A check that cannot be measured — Prometheus down, a query with no data, a body that is
//! not JSON — fails that measurement: an analysis never promotes on what it could not see.

pub mod measure;

pub use crate::history::{Measurement, Value};
pub use measure::Unmeasured;

/// How a measurement broke its condition.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Broken {
    /// Not the text wanted.
    #[error("{0}, not {1:?}")]
    NotEqual(Value, String),
    /// A bound on a value that is no number.
    #[error("{0}, not a number")]
    NotNumber(Value),
    /// Over `max`.
    #[error("{0}, over the max {1}")]
    OverMax(Value, f64),
    /// Under `min`.
    #[error("{0}, under the min {1}")]
    UnderMin(Value, f64),
}

/// What a measurement must show.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Condition {
    /// A number at or under this.
    pub max: Option<f64>,
    /// A number at or over this.
    pub min: Option<f64>,
    /// A text (an HTTP check's JSON field) equal to this.
    pub equals: Option<String>,
}

impl Condition {
    /// Whether `value` meets the condition.
    ///
    /// # Errors
    /// The value, and the bound it broke.
    pub fn judge(&self, value: &Value) -> Result<(), Broken> {
        let number = match value {
            Value::Number(n) => Some(*n),
            Value::Text(t) => t.parse::<f64>().ok(),
        };
        if let Some(want) = &self.equals {
            let text = match value {
                Value::Text(t) => t.clone(),
                Value::Number(n) => n.to_string(),
            };
            if &text != want {
                return Err(Broken::NotEqual(value.clone(), want.clone()));
            }
        }
        if self.max.is_none() && self.min.is_none() {
            return Ok(());
        }
        let Some(n) = number else {
            return Err(Broken::NotNumber(value.clone()));
        };
        if let Some(max) = self.max.filter(|max| n.is_nan() || n > *max) {
            return Err(Broken::OverMax(value.clone(), max));
        }
        if let Some(min) = self.min.filter(|min| n.is_nan() || n < *min) {
            return Err(Broken::UnderMin(value.clone(), min));
        }
        Ok(())
    }
}

/// A measurement of `read` (a value, or why none) judged by `condition`.
pub fn judged(
    at: jiff::Timestamp,
    read: Result<Value, Unmeasured>,
    condition: &Condition,
) -> Measurement {
    match read {
        Ok(value) => {
            let judged = condition.judge(&value);
            Measurement {
                at,
                passed: judged.is_ok(),
                why: judged.err().map(|e| e.to_string()),
                value: Some(value),
            }
        }
        Err(why) => Measurement {
            at,
            value: None,
            passed: false,
            why: Some(why.to_string()),
        },
    }
}

/// Where a check's run stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// More measurements to take.
    Running,
    /// `count` measurements taken, no more failed than the limit allows.
    Passed,
    /// More failed than `failure_limit`: the rollout is aborted at once.
    Failed,
}

/// A check's measurements so far, against its `count` and `failure_limit`.
pub fn verdict(measurements: &[Measurement], count: u32, failure_limit: u32) -> Verdict {
    let failed = measurements.iter().filter(|m| !m.passed).count();
    if failed > failure_limit as usize {
        Verdict::Failed
    } else if measurements.len() >= count.max(1) as usize {
        Verdict::Passed
    } else {
        Verdict::Running
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at() -> jiff::Timestamp {
        jiff::Timestamp::UNIX_EPOCH
    }

    #[test]
    fn a_condition_names_the_bound_a_value_broke() {
        let max = Condition {
            max: Some(0.05),
            ..Condition::default()
        };
        assert_eq!(max.judge(&Value::Number(0.05)), Ok(()));
        let said = |r: Result<(), Broken>| r.unwrap_err().to_string();
        assert_eq!(
            said(max.judge(&Value::Number(0.2))),
            "0.2, over the max 0.05"
        );
        assert!(
            max.judge(&Value::Number(f64::NAN)).is_err(),
            "NaN never passes"
        );
        assert_eq!(
            said(max.judge(&Value::Text("fine".into()))),
            "\"fine\", not a number"
        );
        let min = Condition {
            min: Some(10.0),
            ..Condition::default()
        };
        assert_eq!(said(min.judge(&Value::Number(3.0))), "3, under the min 10");
        assert_eq!(min.judge(&Value::Text("12".into())), Ok(()));
        let equals = Condition {
            equals: Some("ok".into()),
            ..Condition::default()
        };
        assert_eq!(equals.judge(&Value::Text("ok".into())), Ok(()));
        assert_eq!(
            said(equals.judge(&Value::Text("degraded".into()))),
            "\"degraded\", not \"ok\""
        );
    }

    #[test]
    fn a_run_fails_past_its_limit_and_passes_at_its_count() {
        let max = Condition {
            max: Some(1.0),
            ..Condition::default()
        };
        let good = judged(at(), Ok(Value::Number(0.0)), &max);
        let bad = judged(at(), Ok(Value::Number(2.0)), &max);
        let unseen = judged(at(), Err(Unmeasured::NoData), &max);
        assert!(!unseen.passed, "what could not be measured fails");
        assert_eq!(verdict(&[], 3, 0), Verdict::Running);
        assert_eq!(
            verdict(&[good.clone(), good.clone()], 3, 0),
            Verdict::Running
        );
        assert_eq!(verdict(&vec![good.clone(); 3], 3, 0), Verdict::Passed);
        assert_eq!(verdict(&[good.clone(), bad.clone()], 3, 0), Verdict::Failed);
        assert_eq!(
            verdict(&[bad.clone(), good.clone()], 3, 1),
            Verdict::Running
        );
        assert_eq!(verdict(&[bad, good.clone(), good], 3, 1), Verdict::Passed);
        assert_eq!(verdict(&[unseen], 3, 0), Verdict::Failed);
    }
}
