//! Where manifests come from: [`git`] fetches and checks out an app's commit;
//! [`known_hosts`] verifies ssh host keys; [`watch`] turns commits in a local repository
//! into sync triggers.

pub mod git;
pub mod known_hosts;
pub mod watch;
