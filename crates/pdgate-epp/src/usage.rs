//! Reading `usage` from the model server's response as it passes through the EPP: the one
//! reader of [`pdgate_api::usage_reader`].

pub use pdgate_api::usage_reader::{UsageReader, MAX_JSON_BYTES};
