//! In-process simulated fleets behind a router (all on 127.0.0.1 ephemeral ports): the fleet
//! itself ([`fleet`]), the `pdgate demo` comparison ([`demo`]) and the revision-rollout
//! scenario ([`rollout`]). The `pdgate` binary parses flags and calls these; the end-to-end
//! tests of `crates/pdgate/tests` use them too.

pub mod demo;
pub mod fleet;
pub mod rollout;
