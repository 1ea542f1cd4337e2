//! One module per `berth` command.

pub mod render;
pub mod validate;
