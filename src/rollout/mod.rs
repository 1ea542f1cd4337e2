//! Rollouts of changed Deployments: [`hash`] (pod-template hashes), [`revisions`]
//! (a Deployment's ReplicaSets by revision), [`phase`] (a Deployment's status → where its
//! rollout stands), [`steps`] (the rolling-step math), [`predict`] (a rollout before it
//! happens), [`track`] (follow a rollout with watches), [`engine`] (berth's own
//! controller, which writes the status and conditions), [`rollback`], and the parts of
//! progressive delivery: [`canary`] (a weight's pods, pure), [`analysis`] (checks
//! measured and judged) and [`gate`] (a running canary's standing, and the requests of
//! `berth promote` and `berth abort`).

pub mod analysis;
pub mod canary;
pub mod engine;
pub mod gate;
pub mod hash;
pub mod phase;
pub mod predict;
pub mod revisions;
pub mod rollback;
pub mod steps;
pub mod track;
