//! A deterministic local tokenizer: one token per whitespace-separated word, its id a hash of
//! the word. Prefix-stable at word boundaries (a text prefix that ends between words gives a
//! token prefix), which is all prefix caching needs.

use pdgate_api::PromptInput;
use xxhash_rust::xxh3::xxh3_64;

/// Size of the simulated vocabulary; token ids are below it.
pub const VOCAB_SIZE: u32 = 128_000;

/// Token ids of `text`.
pub fn tokenize(text: &str) -> Vec<u32> {
    text.split_whitespace()
        .map(|w| (xxh3_64(w.as_bytes()) % VOCAB_SIZE as u64) as u32)
        .collect()
}

/// Token ids of a prompt: text is tokenized, token ids are taken as they are.
pub fn prompt_tokens(prompt: &PromptInput) -> Vec<u32> {
    match prompt {
        PromptInput::Text(t) => tokenize(t),
        PromptInput::Tokens(t) => t.clone(),
    }
}

const WORDS: &[&str] = &[
    "the",
    "model",
    "router",
    "prefill",
    "decode",
    "cache",
    "block",
    "token",
    "engine",
    "fleet",
    "request",
    "stream",
    "batch",
    "lease",
    "revision",
    "prefix",
    "kernel",
    "tensor",
    "layer",
    "answer",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "lazy",
    "dog",
    "and",
    "then",
    "again",
    "simulated",
    "output",
];

/// Most words [`remember_words`] keeps for [`word_of`].
pub const REMEMBERED_WORDS: usize = 65_536;

fn remembered() -> &'static std::sync::Mutex<lru::LruCache<u32, Box<str>>> {
    static SEEN: std::sync::OnceLock<std::sync::Mutex<lru::LruCache<u32, Box<str>>>> =
        std::sync::OnceLock::new();
    SEEN.get_or_init(|| {
        let cap = std::num::NonZeroUsize::new(REMEMBERED_WORDS).expect("non-zero");
        std::sync::Mutex::new(lru::LruCache::new(cap))
    })
}

/// Keeps the words of `text` so that [`word_of`] can give them back (`/tokenize` calls it;
/// the request path does not, it would cost a lock per word).
pub fn remember_words(text: &str) {
    let mut seen = remembered().lock().unwrap_or_else(|e| e.into_inner());
    for w in text.split_whitespace() {
        seen.put(tokenize(w)[0], w.into());
    }
}

/// The word of token `id`: an output-vocabulary word, a word [`remember_words`] kept, else
/// `<tok_ID>` (ids are hashes of words and cannot be inverted).
pub fn word_of(id: u32) -> String {
    if let Some(w) = WORDS.iter().find(|w| tokenize(w)[0] == id) {
        return (*w).to_string();
    }
    let mut seen = remembered().lock().unwrap_or_else(|e| e.into_inner());
    match seen.get(&id) {
        Some(w) => w.to_string(),
        None => format!("<tok_{id}>"),
    }
}

/// Seed of a request's output text: the same prompt gives the same words.
pub fn output_seed(tokens: &[u32]) -> u64 {
    let mut bytes = Vec::with_capacity(tokens.len() * 4);
    for t in tokens {
        bytes.extend_from_slice(&t.to_le_bytes());
    }
    xxh3_64(&bytes)
}

/// The output-vocabulary word of output token `index`.
fn output_word(seed: u64, index: usize) -> &'static str {
    let h = xxh3_64(&[seed.to_le_bytes(), (index as u64).to_le_bytes()].concat());
    WORDS[(h % WORDS.len() as u64) as usize]
}

/// Text of output token `index` (a leading space and a word).
pub fn output_token_text(seed: u64, index: usize) -> String {
    format!(" {}", output_word(seed, index))
}

/// Token id of output token `index`: the id of its word, so `/detokenize` gives the word
/// back (`/inference/v1/generate` answers these ids).
pub fn output_token_id(seed: u64, index: usize) -> u32 {
    (xxh3_64(output_word(seed, index).as_bytes()) % VOCAB_SIZE as u64) as u32
}

/// Token ids of output tokens `0..n`.
pub fn output_ids(seed: u64, n: usize) -> Vec<u32> {
    (0..n).map(|i| output_token_id(seed, i)).collect()
}

/// Text of output tokens `0..n`.
pub fn output_text(seed: u64, n: usize) -> String {
    (0..n).map(|i| output_token_text(seed, i)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn word_tokens_are_deterministic_and_prefix_stable() {
        let a = tokenize("the quick  brown\nfox jumps");
        assert_eq!(a.len(), 5);
        assert_eq!(a, tokenize("the quick brown fox jumps"));
        assert_eq!(&a[..3], &tokenize("the quick brown ")[..]);
        assert!(a.iter().all(|t| *t < VOCAB_SIZE));
        assert_eq!(output_text(7, 3), output_text(7, 3));
        assert_eq!(output_text(7, 3).split_whitespace().count(), 3);
        let words: Vec<String> = output_ids(7, 3).into_iter().map(word_of).collect();
        assert_eq!(format!(" {}", words.join(" ")), output_text(7, 3));
    }
}
