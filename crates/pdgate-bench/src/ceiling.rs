//! The offline ceiling of prefix-cache reuse for a workload: the best hit share any router
//! could reach on a fleet, computed from the exact prompts sent, in order.
//!
//! The hit rule is the engine's (vLLM, and `pdgate sim`): a prompt of `n` tokens is looked up
//! as its full `block_size` blocks, chained (block i stands for tokens 0..(i+1)·block_size); it
//! hits the longest run of leading blocks already cached, capped at `(n − 1) / block_size`
//! blocks because the last prompt token is always computed; hits count `blocks · block_size`
//! tokens, queries `n` tokens (`vllm:prefix_cache_hits_total` / `queries_total`). After the
//! lookup every full block of the prompt is cached.
//!
//! - [`infinite_cache`]: nothing is ever evicted — every repeated block hits. No router, on
//!   any fleet, can do better.
//! - [`lru_cache`]: one LRU cache as large as the whole fleet (Σ `num_gpu_blocks`), the prompts
//!   replayed in order: what a perfect router would get if the fleet pooled its memory — a
//!   practical upper bound (it ignores blocks pinned by running requests, output blocks, and
//!   the split into separate engines, all of which only lower real reuse). A prompt's blocks
//!   are touched last to first, so its head outlives its tail (vLLM frees a request's blocks
//!   in reverse order for the same reason: a tail is useless without its head).
//!
//! Pure and deterministic. Prompts are token ids as the engine sees them: chat prompts are
//! tokenized by [`sim_prompt_tokens`] exactly as the simulator does.

use crate::engine_cache::ratio;
use crate::work::{WorkItem, WorkPrompt};
use lru::LruCache;
use pdgate_api::PromptInput;
use pdgate_scheduler::prefix::BlockHasher;
use serde::Serialize;
use std::collections::HashSet;

/// Hit and query tokens of one cache model over a workload.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct CacheShare {
    /// Prompt tokens served from the cache.
    pub hit_tokens: u64,
    /// Prompt tokens looked up (Σ prompt lengths).
    pub query_tokens: u64,
}

impl CacheShare {
    /// `hit_tokens / query_tokens`, 0..1 (0 with no query).
    pub fn share(&self) -> f64 {
        ratio(self.hit_tokens, self.query_tokens)
    }
}

/// Both ceilings of one workload on one fleet geometry.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Ceiling {
    /// Tokens per KV block used.
    pub block_size: usize,
    /// Capacity of the LRU model, blocks (the whole fleet's).
    pub capacity_blocks: usize,
    /// Every repeated block hits ([`infinite_cache`]).
    pub infinite: CacheShare,
    /// `infinite.share()`.
    pub infinite_share: f64,
    /// One LRU cache of `capacity_blocks` ([`lru_cache`]).
    pub lru: CacheShare,
    /// `lru.share()`.
    pub lru_share: f64,
}

impl Ceiling {
    /// Both ceilings of `prompts` (token ids, in arrival order).
    pub fn compute(prompts: &[Vec<u32>], block_size: usize, capacity_blocks: usize) -> Self {
        let infinite = infinite_cache(prompts, block_size);
        let lru = lru_cache(prompts, block_size, capacity_blocks);
        Ceiling {
            block_size,
            capacity_blocks,
            infinite,
            infinite_share: infinite.share(),
            lru,
            lru_share: lru.share(),
        }
    }
}

/// Chained keys of the full blocks of `tokens`: key i stands for tokens 0..(i+1)·block_size
/// (the router's own [`BlockHasher`], uncapped). Empty when `block_size` is 0.
pub fn block_keys(tokens: &[u32], block_size: usize) -> Vec<u64> {
    if block_size == 0 {
        return Vec::new();
    }
    let hasher = BlockHasher {
        block_tokens: block_size,
        max_blocks: usize::MAX,
    };
    hasher.hash("", &PromptInput::Tokens(tokens.to_vec()))
}

/// Most blocks of an `n`-token prompt that may hit: `(n − 1) / block_size`.
fn max_hit_blocks(n: usize, block_size: usize) -> usize {
    n.saturating_sub(1) / block_size.max(1)
}

/// A cache model replayed by [`replay_prompts`].
trait CacheModel {
    /// True when block `key` is cached.
    fn contains(&self, key: u64) -> bool;
    /// Caches a prompt's full blocks, `keys` in prompt order.
    fn store(&mut self, keys: &[u64]);
}

/// Nothing is ever evicted.
impl CacheModel for HashSet<u64> {
    fn contains(&self, key: u64) -> bool {
        HashSet::contains(self, &key)
    }
    fn store(&mut self, keys: &[u64]) {
        self.extend(keys);
    }
}

/// One LRU cache of `capacity` blocks.
struct Lru {
    cache: LruCache<u64, ()>,
    capacity: usize,
}

impl CacheModel for Lru {
    fn contains(&self, key: u64) -> bool {
        self.cache.contains(&key)
    }
    /// Last block first, so the prompt's head ends most recent and its tail goes first.
    fn store(&mut self, keys: &[u64]) {
        for k in keys.iter().rev() {
            self.cache.put(*k, ());
            if self.cache.len() > self.capacity {
                self.cache.pop_lru();
            }
        }
    }
}

/// The infinite-cache ceiling: every block seen before hits (module docs for the rule).
pub fn infinite_cache(prompts: &[Vec<u32>], block_size: usize) -> CacheShare {
    replay_prompts(prompts, block_size, &mut HashSet::new())
}

/// The fleet-capacity LRU ceiling: one LRU cache of `capacity_blocks` blocks (module docs).
pub fn lru_cache(prompts: &[Vec<u32>], block_size: usize, capacity_blocks: usize) -> CacheShare {
    let mut model = Lru {
        cache: LruCache::unbounded(),
        capacity: capacity_blocks,
    };
    replay_prompts(prompts, block_size, &mut model)
}

/// Looks every prompt up in `model`, counting hits by the engine's rule, then stores it.
fn replay_prompts(
    prompts: &[Vec<u32>],
    block_size: usize,
    model: &mut impl CacheModel,
) -> CacheShare {
    let mut out = CacheShare::default();
    for p in prompts {
        let keys = block_keys(p, block_size);
        let cap = max_hit_blocks(p.len(), block_size);
        let hits = keys
            .iter()
            .take(cap)
            .take_while(|k| model.contains(**k))
            .count();
        out.hit_tokens += (hits * block_size) as u64;
        out.query_tokens += p.len() as u64;
        model.store(&keys);
    }
    out
}

/// The token ids the simulator computes for `item`: token prompts as they are; chat
/// messages flattened by `pdgate_api::openai::flatten_messages` and tokenized by
/// `pdgate_sim::tokenizer::tokenize` — the simulator's own two rules, so the ceiling and the
/// engine count the same blocks. (A real engine's tokenizer differs for chat text: there the
/// chat ceiling is an estimate.)
pub fn sim_prompt_tokens(item: &WorkItem) -> Vec<u32> {
    match &item.prompt {
        WorkPrompt::Tokens(t) => t.clone(),
        WorkPrompt::Chat(messages) => {
            let json = serde_json::to_string(messages).unwrap_or_default();
            pdgate_api::openai::flatten_messages(Some(&json))
                .map(|text| pdgate_sim::tokenizer::tokenize(&text))
                .unwrap_or_default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::work::ChatMessage;

    /// A prompt of `blocks` 2-token blocks named by letters plus `extra` loose tokens: block
    /// `b` holds `[b, b]`.
    fn p(blocks: &str, extra: usize) -> Vec<u32> {
        let mut v: Vec<u32> = blocks.bytes().flat_map(|b| [b as u32, b as u32]).collect();
        v.extend(std::iter::repeat_n(0, extra));
        v
    }

    fn share(hit_tokens: u64, query_tokens: u64) -> CacheShare {
        CacheShare {
            hit_tokens,
            query_tokens,
        }
    }

    #[test]
    fn keys_are_chained() {
        let a = block_keys(&p("ab", 1), 2);
        assert_eq!(a.len(), 2);
        assert_eq!(block_keys(&p("ab", 0), 2), a);
        // Same second block after a different first block: a different key.
        assert_ne!(block_keys(&p("cb", 0), 2)[1], a[1]);
        assert_eq!(block_keys(&p("a", 0), 2)[0], a[0]);
        assert!(block_keys(&[1, 2, 3], 0).is_empty());
    }

    #[test]
    fn infinite_cache_counts_every_repeated_leading_block() {
        // block size 2:
        // "ab"+1 (5 tok): cold → 0 hits.
        // "abc"+1 (7 tok): a,b cached → 2 blocks = 4 tokens.
        // "ab" (4 tok): both cached but capped at (4−1)/2 = 1 block = 2 tokens.
        // "xb"+1 (5 tok): x unseen → 0 (b after x is another key).
        // "abcx" (8 tok): a,b,c cached, x-after-c unseen → 3 blocks = 6 tokens.
        let prompts = [
            p("ab", 1),
            p("abc", 1),
            p("ab", 0),
            p("xb", 1),
            p("abcx", 0),
        ];
        assert_eq!(
            infinite_cache(&prompts, 2),
            share(4 + 2 + 6, 5 + 7 + 4 + 5 + 8)
        );
        assert_eq!(infinite_cache(&[], 2), share(0, 0));
        assert_eq!(infinite_cache(&prompts, 2).share(), 12.0 / 29.0);
    }

    #[test]
    fn lru_cache_evicts_least_recent_tails_first() {
        // Capacity 3 blocks of 2 tokens.
        // 1. "ab"+1: 0 hits; cache (MRU first) a b.
        // 2. "cd"+1: 0 hits; touched d then c → c d a b, over 3 → b evicted: c d a.
        // 3. "ab"+1: a hits, b evicted → 1 block = 2 tokens; touched b, a → a b c (d evicted).
        // 4. "cd"+1: c hits, d gone → 2 tokens; touched d, c → c d a (b evicted).
        // 5. "ab"+1: a hits → 2 tokens.
        let prompts = [p("ab", 1), p("cd", 1), p("ab", 1), p("cd", 1), p("ab", 1)];
        assert_eq!(lru_cache(&prompts, 2, 3), share(6, 25));
        // With room for everything it equals the infinite cache: 2 blocks on each repeat.
        assert_eq!(lru_cache(&prompts, 2, 4), share(12, 25));
        assert_eq!(lru_cache(&prompts, 2, 4), infinite_cache(&prompts, 2));
        // No capacity: no hit.
        assert_eq!(lru_cache(&prompts, 2, 0), share(0, 25));
    }

    #[test]
    fn a_prompt_longer_than_the_cache_keeps_its_head() {
        // Capacity 2, prompt of 3 blocks: tail evicted while inserting, head kept, so the
        // repeat hits a, b (capped at (7−1)/2 = 3 blocks anyway).
        let prompts = [p("abc", 1), p("abc", 1)];
        assert_eq!(lru_cache(&prompts, 2, 2), share(4, 14));
        assert_eq!(infinite_cache(&prompts, 2), share(6, 14));
    }

    #[test]
    fn chat_prompts_are_tokenized_as_the_simulator_does() {
        let item = WorkItem {
            at_ms: 0,
            prompt: WorkPrompt::Chat(vec![
                ChatMessage {
                    role: "system".into(),
                    content: "be brief".into(),
                },
                ChatMessage {
                    role: "user".into(),
                    content: "hi there".into(),
                },
            ]),
            max_tokens: 1,
            conversation: None,
        };
        let want = pdgate_sim::tokenizer::tokenize("system: be brief\nuser: hi there\n");
        assert_eq!(want.len(), 6);
        assert_eq!(sim_prompt_tokens(&item), want);
        let tokens = WorkItem {
            prompt: WorkPrompt::Tokens(vec![7, 8]),
            ..item
        };
        assert_eq!(sim_prompt_tokens(&tokens), vec![7, 8]);
    }

    #[test]
    fn compute_fills_both_shares() {
        let prompts = [p("ab", 1), p("ab", 1)];
        let c = Ceiling::compute(&prompts, 2, 1);
        assert_eq!((c.infinite, c.lru), (share(4, 10), share(2, 10)));
        assert_eq!((c.infinite_share, c.lru_share), (0.4, 0.2));
    }
}
