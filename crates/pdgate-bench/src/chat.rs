//! The built-in `chat` workload: multi-turn conversations over a few long shared system
//! prompts, generated from a seed (no download). Turn k re-sends the whole history plus a new
//! user message, so later turns share long prefixes with earlier ones and conversations that
//! use the same system prompt share its prefix.

use crate::rng::SplitMix64;
use crate::words::sentences;
use crate::work::{ChatMessage, WorkItem, WorkPrompt};

/// Shape of the chat workload. Ranges are inclusive `(low, high)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatWorkloadConfig {
    /// Seed; the same config gives the same items.
    pub seed: u64,
    /// Number of distinct system prompts shared among conversations.
    pub system_prompts: usize,
    /// Length of each system prompt, in words.
    pub system_prompt_words: (usize, usize),
    /// Number of conversations.
    pub conversations: usize,
    /// Turns (requests) per conversation.
    pub turns: usize,
    /// Length of each user message, in words.
    pub user_words: (usize, usize),
    /// Length of each synthetic assistant reply kept in the history, in words.
    pub assistant_words: (usize, usize),
    /// Requested output length of each turn (`max_tokens`), in tokens.
    pub output_tokens: (u32, u32),
    /// Gap between the starts of consecutive conversations, in ms.
    pub conversation_gap_ms: (u64, u64),
    /// Think time between a turn's arrival and the next turn's, in ms.
    pub think_time_ms: (u64, u64),
}

impl Default for ChatWorkloadConfig {
    /// 4 system prompts of 1,000–2,000 words, 48 conversations of 6 turns, users of 20–80
    /// words, replies of 40–160 words, 64–256 output tokens, a conversation starting every
    /// 0.5–2 s, 3–10 s of think time; seed 42.
    fn default() -> Self {
        ChatWorkloadConfig {
            seed: 42,
            system_prompts: 4,
            system_prompt_words: (1_000, 2_000),
            conversations: 48,
            turns: 6,
            user_words: (20, 80),
            assistant_words: (40, 160),
            output_tokens: (64, 256),
            conversation_gap_ms: (500, 2_000),
            think_time_ms: (3_000, 10_000),
        }
    }
}

fn pick(rng: &mut SplitMix64, (lo, hi): (usize, usize)) -> usize {
    rng.range(lo as u64, hi as u64) as usize
}

/// Generates the workload: `conversations × turns` chat items sorted by arrival (ms). Item
/// `conversation` is the conversation index; within one conversation turns arrive in order
/// and turn k+1's `messages` start with turn k's.
pub fn chat_workload(cfg: &ChatWorkloadConfig) -> Vec<WorkItem> {
    let mut rng = SplitMix64::new(cfg.seed);
    let systems: Vec<String> = (0..cfg.system_prompts)
        .map(|i| {
            let n = pick(&mut rng, cfg.system_prompt_words);
            format!("You are assistant number {i}. {}", sentences(&mut rng, n))
        })
        .collect();
    let mut items = Vec::with_capacity(cfg.conversations * cfg.turns);
    let mut start = 0u64;
    for c in 0..cfg.conversations {
        if c > 0 {
            start += rng.range(cfg.conversation_gap_ms.0, cfg.conversation_gap_ms.1);
        }
        let mut history = Vec::new();
        if !systems.is_empty() {
            let s = rng.range(0, systems.len() as u64 - 1) as usize;
            history.push(message("system", systems[s].clone()));
        }
        let mut at = start;
        for turn in 0..cfg.turns {
            if turn > 0 {
                let reply = pick(&mut rng, cfg.assistant_words);
                history.push(message("assistant", sentences(&mut rng, reply)));
                at += rng.range(cfg.think_time_ms.0, cfg.think_time_ms.1);
            }
            let user = pick(&mut rng, cfg.user_words);
            history.push(message("user", sentences(&mut rng, user)));
            let out = rng.range(
                u64::from(cfg.output_tokens.0),
                u64::from(cfg.output_tokens.1),
            );
            items.push(WorkItem {
                at_ms: at,
                prompt: WorkPrompt::Chat(history.clone()),
                max_tokens: u32::try_from(out).unwrap_or(u32::MAX),
                conversation: Some(c as u32),
            });
        }
    }
    items.sort_by_key(|i| i.at_ms);
    items
}

fn message(role: &str, content: String) -> ChatMessage {
    ChatMessage {
        role: role.to_string(),
        content,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn messages(item: &WorkItem) -> &[ChatMessage] {
        match &item.prompt {
            WorkPrompt::Chat(m) => m,
            WorkPrompt::Tokens(_) => &[],
        }
    }

    #[test]
    fn deterministic_for_a_seed() {
        let cfg = ChatWorkloadConfig::default();
        let a = chat_workload(&cfg);
        assert_eq!(a, chat_workload(&cfg));
        assert_eq!(a.len(), 48 * 6);
        let other = chat_workload(&ChatWorkloadConfig { seed: 7, ..cfg });
        assert_ne!(a, other);
        assert!(a.windows(2).all(|w| w[0].at_ms <= w[1].at_ms));
        assert_eq!(a[0].at_ms, 0);
        let sys_words = messages(&a[0])[0].content.split(' ').count();
        assert!((1_005..=2_005).contains(&sys_words), "{sys_words}");
    }

    #[test]
    fn each_turn_extends_the_previous_one() {
        let items = chat_workload(&ChatWorkloadConfig::default());
        for c in [0u32, 17, 47] {
            let conv: Vec<&WorkItem> = items.iter().filter(|i| i.conversation == Some(c)).collect();
            assert_eq!(conv.len(), 6);
            for pair in conv.windows(2) {
                let (prev, next) = (messages(pair[0]), messages(pair[1]));
                assert_eq!(next.len(), prev.len() + 2);
                assert_eq!(&next[..prev.len()], prev);
                assert_eq!(next[prev.len()].role, "assistant");
                assert_eq!(next[prev.len() + 1].role, "user");
                assert!(pair[1].at_ms >= pair[0].at_ms + 3_000);
            }
            assert_eq!(messages(conv[0])[0].role, "system");
        }
    }
}
