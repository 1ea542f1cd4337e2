//! One module per `berth` command.

pub mod history;
pub mod plan;
pub mod render;
pub mod rollback;
pub mod run;
pub mod status;
pub mod sync;
pub mod validate;
