//! A canary's step math, pure: how many pods of each version a step's weight means, and
//! which step a Deployment's ReplicaSets show (a restarted berth carries on from there).
//!
//! The weight is the share of the Deployment's pods running the new version, both
//! versions behind the same Service: no mesh, so the weight is what the replica counts
//! can say. The total stays at `spec.replicas` throughout.

/// The pods of each version at one weight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Split {
    /// Pods of the new version.
    pub new: i32,
    /// Pods of the old version.
    pub old: i32,
}

impl Split {
    /// The share of `replicas` pods a `weight` (0–100 %) gives the new version: rounded
    /// up, so a step above 0 % runs at least one new pod, and short of 100 % keeps at
    /// least one old pod while there are two or more. At 20 % of 10: 2 and 8; at 20 % of
    /// 3: 1 and 2; at 90 % of 3: 2 and 1; with one replica any weight above 0 is the new
    /// pod alone.
    pub fn at(replicas: i32, weight: u8) -> Split {
        let replicas = replicas.max(0);
        let new = match weight {
            0 => 0,
            100.. => replicas,
            w => {
                let exact = i64::from(replicas) * i64::from(w);
                let up = i32::try_from((exact + 99) / 100).unwrap_or(replicas);
                up.clamp(1, (replicas - 1).max(1)).min(replicas)
            }
        };
        Split {
            new,
            old: replicas - new,
        }
    }

    /// The weight the pods really give the new version, in whole percent (rounded down).
    pub fn weight(self) -> u8 {
        let total = i64::from(self.new) + i64::from(self.old);
        match total {
            0 => 0,
            t => u8::try_from(i64::from(self.new.max(0)) * 100 / t).unwrap_or(100),
        }
    }
}

/// The step a canary of `weights` stands at, from the new version's pods the cluster
/// shows: the last step whose split it has reached (`None`: none yet, the canary has
/// not started). A step is reached once its new pods are there; its pause and analysis
/// are run again when berth carries on from it.
pub fn step_shown(weights: &[u8], replicas: i32, new_pods: i32) -> Option<usize> {
    (weights.iter()).rposition(|&w| w > 0 && new_pods >= Split::at(replicas, w).new)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_weight_rounds_up_and_keeps_both_versions_short_of_the_last_step() {
        let split = |r, w| {
            let s = Split::at(r, w);
            (s.new, s.old)
        };
        assert_eq!(split(10, 20), (2, 8));
        assert_eq!(split(10, 50), (5, 5));
        assert_eq!(split(10, 100), (10, 0));
        assert_eq!(split(10, 0), (0, 10));
        assert_eq!(split(10, 1), (1, 9), "at least one new pod");
        assert_eq!(split(10, 99), (9, 1), "at least one old pod before 100 %");
        assert_eq!(split(3, 20), (1, 2));
        assert_eq!(split(3, 50), (2, 1));
        assert_eq!(split(3, 90), (2, 1));
        assert_eq!(split(2, 50), (1, 1));
        assert_eq!(split(1, 20), (1, 0), "one replica: the new pod alone");
        assert_eq!(split(0, 50), (0, 0));
        for r in 0..40 {
            for w in 0..=100 {
                let s = Split::at(r, w);
                assert_eq!(s.new + s.old, r, "the total stays at replicas ({r}, {w} %)");
                assert!(s.new >= 0 && s.old >= 0);
            }
        }
    }

    #[test]
    fn the_weight_pods_give_is_what_the_counts_say() {
        assert_eq!(Split::at(10, 20).weight(), 20);
        assert_eq!(Split::at(3, 20).weight(), 33);
        assert_eq!(Split { new: 0, old: 0 }.weight(), 0);
    }

    #[test]
    fn the_step_shown_is_the_last_one_the_new_pods_reach() {
        let weights = [20, 50, 100];
        assert_eq!(step_shown(&weights, 10, 0), None);
        assert_eq!(step_shown(&weights, 10, 1), None);
        assert_eq!(step_shown(&weights, 10, 2), Some(0));
        assert_eq!(step_shown(&weights, 10, 4), Some(0));
        assert_eq!(step_shown(&weights, 10, 5), Some(1));
        assert_eq!(step_shown(&weights, 10, 10), Some(2));
        // Steps whose splits coincide (few replicas): the later one.
        assert_eq!(step_shown(&[20, 30], 3, 1), Some(1));
    }
}
