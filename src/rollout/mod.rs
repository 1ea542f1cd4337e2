//! Rollouts of changed Deployments: [`hash`] (pod-template hashes), [`revisions`]
//! (a Deployment's ReplicaSets by revision), [`status`] (conditions → phase), [`steps`]
//! (the rolling-step math), [`predict`] (a rollout before it happens), [`track`] (follow a
//! rollout with watches) and [`rollback`].

pub mod conditions;
pub mod engine;
pub mod hash;
pub mod predict;
pub mod revisions;
pub mod rollback;
pub mod status;
pub mod steps;
pub mod track;
