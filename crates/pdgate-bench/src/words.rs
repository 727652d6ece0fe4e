//! Deterministic filler text for the built-in workloads: sentences drawn from a fixed
//! vocabulary by a seeded generator, so the same seed always gives the same words.

use crate::rng::SplitMix64;

/// The vocabulary (plain English words, one token or two in common tokenizers).
#[rustfmt::skip]
const WORDS: &[&str] = &[
    "the", "system", "request", "answer", "model", "token", "cache", "prefix", "router",
    "decode", "prefill", "latency", "budget", "server", "cluster", "memory", "block", "stream",
    "policy", "review", "customer", "order", "invoice", "support", "ticket", "account",
    "refund", "shipping", "product", "warranty", "question", "summary", "report", "quarter",
    "revenue", "growth", "market", "risk", "plan", "schedule", "meeting", "project", "deadline",
    "design", "test", "release", "version", "update", "issue", "feature", "user", "team",
    "always", "never", "carefully", "briefly", "clearly", "politely", "quickly", "exactly",
    "must", "should", "may", "will", "can", "explain", "describe", "compare", "check", "verify",
    "list", "include", "avoid", "mention", "follow", "provide", "return", "keep", "a", "an",
    "of", "to", "in", "for", "with", "on", "by", "from", "and", "or", "but", "if", "when",
    "each", "every", "all", "any", "new", "old", "small", "large", "first", "last", "next",
    "previous", "important", "simple", "detailed", "short", "long", "safe", "fast", "slow",
    "correct", "helpful", "formal", "friendly", "technical", "legal", "medical", "financial",
    "data", "table", "format", "language", "style", "tone", "example", "context",
];

/// `n` words as sentences of 6–14 words, each capitalized and ended with a period.
pub(crate) fn sentences(rng: &mut SplitMix64, n: usize) -> String {
    let mut out = String::new();
    let mut left_in_sentence = 0;
    for i in 0..n {
        let word = WORDS[rng.range(0, WORDS.len() as u64 - 1) as usize];
        if left_in_sentence == 0 {
            left_in_sentence = rng.range(6, 14);
            if i > 0 {
                out.push(' ');
            }
            let mut chars = word.chars();
            if let Some(c) = chars.next() {
                out.extend(c.to_uppercase());
                out.push_str(chars.as_str());
            }
        } else {
            out.push(' ');
            out.push_str(word);
        }
        left_in_sentence -= 1;
        if left_in_sentence == 0 || i + 1 == n {
            out.push('.');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn word_count_and_determinism() {
        let a = sentences(&mut SplitMix64::new(3), 40);
        assert_eq!(a.split(' ').count(), 40);
        assert!(a.ends_with('.'));
        assert!(a.chars().next().is_some_and(char::is_uppercase));
        assert_eq!(a, sentences(&mut SplitMix64::new(3), 40));
        assert_eq!(sentences(&mut SplitMix64::new(3), 0), "");
    }
}
