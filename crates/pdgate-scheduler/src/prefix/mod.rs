//! Prefix indexes: chained block hashes of prompts ([`BlockHasher`]) and the map block hash →
//! endpoints holding it — approximate ([`PrefixIndex`], fed by the router's own picks) or
//! precise ([`PreciseIndex`], fed by the engines' KV events) — read through
//! [`PrefixSource`].
//!
//! Sources: llm-d `approx-prefix-cache-producer` (prefix hashing, per-server LRU, 4
//! bytes/token estimate for text prompts) and `precise-prefix-cache-producer`.

mod bisect;
pub mod burst;
mod hash;
mod index;
mod passthrough;
pub mod precise;
mod source;

pub use hash::{chain, seed, token_block_hash, BlockHasher, BYTES_PER_TOKEN};
pub use index::{PrefixIndex, PrefixStats};
pub use passthrough::BuildPassThrough;
pub use precise::PreciseIndex;
pub use source::PrefixSource;
