//! The pieces the `pdgate` binary composes: an in-process simulated fleet behind a router
//! ([`fleet`]) and the `demo` subcommand ([`demo`]). The binary itself only parses flags.

pub mod demo;
pub mod fleet;
pub mod rollout;
