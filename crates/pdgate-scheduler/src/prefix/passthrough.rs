//! A hasher for keys that are already hashes (xxh3 block hashes): no second hashing.

use std::hash::{BuildHasher, Hasher};

/// Builds [`PassThrough`] hashers; use for maps keyed by block hashes.
#[derive(Debug, Default, Clone, Copy)]
pub struct BuildPassThrough;

/// Returns the `u64` it is fed; folds other input (never used for block hashes).
#[derive(Debug, Default, Clone, Copy)]
pub struct PassThrough(u64);

impl Hasher for PassThrough {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

impl BuildHasher for BuildPassThrough {
    type Hasher = PassThrough;
    fn build_hasher(&self) -> PassThrough {
        PassThrough(0)
    }
}
