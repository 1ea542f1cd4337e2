//! Rollouts of changed Deployments: [`hash`] (pod-template hashes), [`revisions`]
//! (a Deployment's ReplicaSets by revision), [`phase`] (a Deployment's status → where its
//! rollout stands), [`steps`] (the rolling-step math), [`predict`] (a rollout before it
//! happens), [`track`] (follow a rollout with watches), [`engine`] (berth's own
//! controller, which writes the status and conditions) and [`rollback`].

pub mod engine;
pub mod hash;
pub mod phase;
pub mod predict;
pub mod revisions;
pub mod rollback;
pub mod steps;
pub mod track;
