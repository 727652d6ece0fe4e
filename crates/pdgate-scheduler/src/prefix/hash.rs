//! Chained block hashes of a prompt (design.md §1 "KV block / block hash").

use pdgate_api::PromptInput;
use xxhash_rust::xxh3::xxh3_64;

/// Bytes of text counted as one token (llm-d's estimate: characters ÷ 4).
pub const BYTES_PER_TOKEN: usize = 4;

/// Splits prompts into blocks and hashes them as a chain.
///
/// Block *i*'s hash is `chain(hash_{i-1}, xxh3_64(block_i_bytes))`, the chain seeded with
/// `xxh3_64(model)`, so hash *i* covers blocks 0..=i of that model's prompt ([`chain`] is one
/// folded 64×64→128-bit multiply, so the blocks' own hashes do not wait on each other and the
/// sequential part of a 1,024-block prompt costs ~1 µs instead of a whole xxh3 per block).
/// Token-id prompts
/// hash `block_tokens` ids (little-endian u32) per block; text prompts hash
/// `block_tokens × 4` bytes per block (≈ 4 bytes per token). Only full blocks are hashed, and
/// at most `max_blocks` of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockHasher {
    /// Tokens per block (≥ 1).
    pub block_tokens: usize,
    /// Cap on hashed blocks per prompt (≥ 1).
    pub max_blocks: usize,
}

impl BlockHasher {
    /// The prompt's block hashes, at most `max_blocks` (the only per-pick allocation).
    pub fn hash(&self, model: &str, prompt: &PromptInput) -> Vec<u64> {
        let bt = self.block_tokens.max(1);
        let mut prev = seed(model);
        match prompt {
            PromptInput::Text(text) => {
                let chunk = bt * BYTES_PER_TOKEN;
                let n = (text.len() / chunk).min(self.max_blocks);
                let mut out = Vec::with_capacity(n);
                for block in text.as_bytes().chunks_exact(chunk).take(n) {
                    prev = chain(prev, xxh3_64(block));
                    out.push(prev);
                }
                out
            }
            PromptInput::Tokens(ids) => {
                let n = (ids.len() / bt).min(self.max_blocks);
                let mut out = Vec::with_capacity(n);
                let ids = &ids[..n * bt];
                // Block sizes known at compile time let the copy and the hash be unrolled
                // (about 2.5× faster than a block size read at run time).
                match bt {
                    16 => chain_tokens::<64>(ids, prev, &mut out),
                    32 => chain_tokens::<128>(ids, prev, &mut out),
                    64 => chain_tokens::<256>(ids, prev, &mut out),
                    _ => {
                        let mut buf = vec![0u8; bt * 4];
                        for block in ids.chunks_exact(bt) {
                            for (dst, t) in buf.chunks_exact_mut(4).zip(block) {
                                dst.copy_from_slice(&t.to_le_bytes());
                            }
                            prev = chain(prev, xxh3_64(&buf));
                            out.push(prev);
                        }
                    }
                }
                out
            }
        }
    }
}

/// The root of a model's chain: `xxh3_64(model)` (block 0's hash is `chain(seed, ...)`).
pub fn seed(model: &str) -> u64 {
    xxh3_64(model.as_bytes())
}

/// The own hash of one block of token ids: `xxh3_64` of the ids as little-endian u32 bytes,
/// the value [`BlockHasher::hash`] chains for a token prompt (`tokens.len()` = the block
/// size; 16, 32 and 64 take an unrolled path).
pub fn token_block_hash(tokens: &[u32]) -> u64 {
    fn fixed<const BYTES: usize>(tokens: &[u32]) -> u64 {
        let mut buf = [0u8; BYTES];
        for (dst, t) in buf.chunks_exact_mut(4).zip(tokens) {
            dst.copy_from_slice(&t.to_le_bytes());
        }
        xxh3_64(&buf)
    }
    match tokens.len() {
        16 => fixed::<64>(tokens),
        32 => fixed::<128>(tokens),
        64 => fixed::<256>(tokens),
        _ => {
            let bytes: Vec<u8> = tokens.iter().flat_map(|t| t.to_le_bytes()).collect();
            xxh3_64(&bytes)
        }
    }
}

/// Appends the chain hashes of `ids` (whole blocks of `BYTES / 4` tokens) to `out`.
fn chain_tokens<const BYTES: usize>(ids: &[u32], mut prev: u64, out: &mut Vec<u64>) {
    let mut buf = [0u8; BYTES];
    for block in ids.chunks_exact(BYTES / 4) {
        for (dst, t) in buf.chunks_exact_mut(4).zip(block) {
            dst.copy_from_slice(&t.to_le_bytes());
        }
        prev = chain(prev, xxh3_64(&buf));
        out.push(prev);
    }
}

/// Links a block's own hash `block` to the chain hash `prev` of the blocks before it: the
/// folded multiply of `prev` and `block`, each offset by an odd constant (the mixing step of
/// wyhash / foldhash), so that neither a zero `prev` nor a zero `block` fixes the result.
pub fn chain(prev: u64, block: u64) -> u64 {
    let p = u128::from(prev ^ 0x9E37_79B9_7F4A_7C15) * u128::from(block ^ 0xD6E8_FEB8_6659_FD93);
    (p as u64) ^ ((p >> 64) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chains_full_blocks_only_and_caps() {
        let h = BlockHasher {
            block_tokens: 2,
            max_blocks: 10,
        };
        let a = h.hash("m", &PromptInput::Tokens(vec![1, 2, 3, 4, 5]));
        let b = h.hash("m", &PromptInput::Tokens(vec![1, 2, 3, 9]));
        assert_eq!(a.len(), 2);
        assert_eq!(a[0], b[0]);
        assert_ne!(a[1], b[1]);
        let other_model = h.hash("n", &PromptInput::Tokens(vec![1, 2]));
        assert_ne!(other_model[0], a[0]);
        // The unrolled block sizes hash as the generic path does.
        let ids: Vec<u32> = (0..200).collect();
        for bt in [16, 32, 64] {
            let fast = BlockHasher {
                block_tokens: bt,
                max_blocks: 100,
            };
            let generic: Vec<u64> = {
                let mut prev = xxh3_64(b"m");
                ids.chunks_exact(bt)
                    .map(|b| {
                        let bytes: Vec<u8> = b.iter().flat_map(|t| t.to_le_bytes()).collect();
                        prev = chain(prev, xxh3_64(&bytes));
                        prev
                    })
                    .collect()
            };
            assert_eq!(
                fast.hash("m", &PromptInput::Tokens(ids.clone())),
                generic,
                "{bt}"
            );
        }
        let capped = BlockHasher {
            block_tokens: 1,
            max_blocks: 3,
        };
        assert_eq!(capped.hash("m", &PromptInput::Tokens(vec![1; 9])).len(), 3);
        // Order matters: the same blocks swapped give other hashes.
        let swapped = h.hash("m", &PromptInput::Tokens(vec![3, 4, 1, 2]));
        assert_ne!(swapped[1], a[1]);
        // Text: 2 tokens × 4 bytes = 8-byte blocks; 17 bytes → 2 blocks.
        assert_eq!(h.hash("m", &PromptInput::Text("a".repeat(17))).len(), 2);
    }
}
