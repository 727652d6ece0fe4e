//! Approximate prefix index: chained block hashes of prompts ([`BlockHasher`]) and the map
//! block hash → endpoints believed to hold it ([`PrefixIndex`]), fed by the router's own picks.
//!
//! Source: llm-d `approx-prefix-cache-producer` (prefix hashing, per-server LRU, 4 bytes/token
//! estimate for text prompts).

mod bisect;
mod hash;
mod index;
mod passthrough;

pub use hash::{BlockHasher, BYTES_PER_TOKEN};
pub use index::{PrefixIndex, PrefixStats};
pub use passthrough::BuildPassThrough;
