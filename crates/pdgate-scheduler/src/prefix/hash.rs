//! Chained block hashes of a prompt (design.md §1 "KV block / block hash").

use pdgate_api::PromptInput;
use xxhash_rust::xxh3::{xxh3_64, xxh3_64_with_seed};

/// Bytes of text counted as one token (llm-d's estimate: characters ÷ 4).
pub const BYTES_PER_TOKEN: usize = 4;

/// Splits prompts into blocks and hashes them as a chain.
///
/// Block *i*'s hash is `xxh3_64_with_seed(block_i_bytes, hash_{i-1})`, the chain seeded with
/// `xxh3_64(model)`, so hash *i* covers blocks 0..=i of that model's prompt. Token-id prompts
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
        let mut prev = xxh3_64(model.as_bytes());
        match prompt {
            PromptInput::Text(text) => {
                let chunk = bt * BYTES_PER_TOKEN;
                let n = (text.len() / chunk).min(self.max_blocks);
                let mut out = Vec::with_capacity(n);
                for block in text.as_bytes().chunks_exact(chunk).take(n) {
                    prev = xxh3_64_with_seed(block, prev);
                    out.push(prev);
                }
                out
            }
            PromptInput::Tokens(ids) => {
                let n = (ids.len() / bt).min(self.max_blocks);
                let mut out = Vec::with_capacity(n);
                let mut buf = vec![0u8; bt * 4];
                for block in ids.chunks_exact(bt).take(n) {
                    for (dst, t) in buf.chunks_exact_mut(4).zip(block) {
                        dst.copy_from_slice(&t.to_le_bytes());
                    }
                    prev = xxh3_64_with_seed(&buf, prev);
                    out.push(prev);
                }
                out
            }
        }
    }
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
        let capped = BlockHasher {
            block_tokens: 1,
            max_blocks: 3,
        };
        assert_eq!(capped.hash("m", &PromptInput::Tokens(vec![1; 9])).len(), 3);
        // Text: 2 tokens × 4 bytes = 8-byte blocks; 17 bytes → 2 blocks.
        assert_eq!(h.hash("m", &PromptInput::Text("a".repeat(17))).len(), 2);
    }
}
