//! Deterministic token-id prompts with shared prefixes, so that conditional decode both
//! serves (a repeated prompt, cached on its decode pod) and defers (a new suffix).

use std::collections::VecDeque;

/// Tokens of each shared system prompt.
pub const SYSTEM_TOKENS: usize = 256;
/// Distinct shared system prompts.
pub const SYSTEM_PROMPTS: u64 = 32;
/// Tokens of each request's own suffix.
pub const SUFFIX_TOKENS: usize = 32;
/// One request in this many repeats a recent prompt exactly.
pub const REPEAT_ONE_IN: u64 = 4;
/// How many recent prompts a repeat draws from.
const RECENT: usize = 64;

/// splitmix64: a small, deterministic generator (no dependency, same sequence everywhere).
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Deterministic token-id prompts: one of [`SYSTEM_PROMPTS`] shared system prompts of
/// [`SYSTEM_TOKENS`] tokens plus a unique suffix of [`SUFFIX_TOKENS`] tokens; one request in
/// [`REPEAT_ONE_IN`] repeats one of the last 64 prompts exactly. A new prompt leaves 32
/// uncached tokens on any decode pod (≥ the decider's 16: the probe is deferred); a repeat
/// sent where its first copy ran is fully cached (the probe is served).
#[derive(Debug, Clone)]
pub struct PromptGen {
    state: u64,
    seed: u64,
    made: u64,
    recent: VecDeque<Vec<u32>>,
}

impl PromptGen {
    /// A generator; equal seeds give equal sequences.
    pub fn new(seed: u64) -> Self {
        PromptGen {
            state: mix(seed),
            seed,
            made: 0,
            recent: VecDeque::with_capacity(RECENT),
        }
    }

    fn next_u64(&mut self) -> u64 {
        self.state = mix(self.state);
        self.state
    }

    /// The next prompt.
    pub fn next_prompt(&mut self) -> Vec<u32> {
        let r = self.next_u64();
        if !self.recent.is_empty() && r.is_multiple_of(REPEAT_ONE_IN) {
            let i = (r >> 8) as usize % self.recent.len();
            return self.recent[i].clone();
        }
        let system = (r >> 16) % SYSTEM_PROMPTS;
        // Ids below 30,000; the system part depends on the system prompt only, the suffix on
        // the seed and the prompt's ordinal.
        let mut prompt: Vec<u32> = (0..SYSTEM_TOKENS as u64)
            .map(|j| (mix(system << 32 | j) % 30_000) as u32)
            .collect();
        self.made += 1;
        let unique = mix(self.seed ^ 0xA5A5_0000_0000_0000) ^ self.made;
        prompt.extend((0..SUFFIX_TOKENS as u64).map(|j| (mix(unique << 8 | j) % 30_000) as u32));
        if self.recent.len() == RECENT {
            self.recent.pop_front();
        }
        self.recent.push_back(prompt.clone());
        prompt
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompts_are_deterministic_share_prefixes_and_repeat() {
        let a: Vec<Vec<u32>> = {
            let mut g = PromptGen::new(7);
            (0..400).map(|_| g.next_prompt()).collect()
        };
        let mut g = PromptGen::new(7);
        assert!(a.iter().all(|p| *p == g.next_prompt()));
        assert!(a.iter().all(|p| p.len() == SYSTEM_TOKENS + SUFFIX_TOKENS));
        let distinct: std::collections::HashSet<&Vec<u32>> = a.iter().collect();
        let repeats = a.len() - distinct.len();
        assert!((60..=140).contains(&repeats), "{repeats} repeats");
        let systems: std::collections::HashSet<&[u32]> =
            a.iter().map(|p| &p[..SYSTEM_TOKENS]).collect();
        assert_eq!(systems.len(), SYSTEM_PROMPTS as usize);
        // Another seed: same system prompts, other suffixes.
        let b = PromptGen::new(8).next_prompt();
        assert!(systems.contains(&b[..SYSTEM_TOKENS]));
        assert!(!a.contains(&b));
    }
}
