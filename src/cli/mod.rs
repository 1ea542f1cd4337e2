//! One module per `berth` command.

pub mod history;
pub mod render;
pub mod run;
pub mod sync;
pub mod validate;
