//! Image updates written back to git: policies that pick a repository's newest tag
//! ([`policy`]), and the fields of the repository's files they own ([`markers`]).

pub mod markers;
pub mod policy;
