//! Rollouts of changed Deployments: [`hash`] (pod-template hashes), [`revisions`]
//! (a Deployment's ReplicaSets by revision), [`phase`] (a Deployment's status → where its
//! rollout stands), [`steps`] (the rolling-step math), [`predict`] (a rollout before it
//! happens), [`track`] (follow a rollout with watches), [`engine`] (berth's own
//! controller, which writes the status and conditions), [`rollback`], and the parts of
//! progressive delivery: [`canary`] (a weight's pods, pure) and [`analysis`] (checks
//! measured and judged).

pub mod analysis;
pub mod canary;
pub mod engine;
pub mod hash;
pub mod phase;
pub mod predict;
pub mod revisions;
pub mod rollback;
pub mod steps;
pub mod track;
