//! Image updates written back to git: policies that pick a repository's newest tag
//! ([`policy`]), the fields of the repository's files they own ([`markers`], found in a
//! commit by [`files`]), what a scan changes ([`plan`], pure), the commit and its push
//! ([`write`], each recorded by [`log`]), a whole scan ([`scan`]), and what berth
//! remembers between scans ([`state`]).

pub mod files;
pub mod log;
pub mod markers;
pub mod plan;
pub mod policy;
pub mod scan;
pub mod state;
pub mod write;
