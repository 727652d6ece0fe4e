//! Turns Mooncake [`TraceRecord`]s into [`WorkItem`]s: deterministic token ids per hash id,
//! concatenated block by block and cut to `input_length` (design.md §7).

use crate::rng::mix64;
use crate::trace::TraceRecord;
use crate::work::{WorkItem, WorkPrompt};

/// Block size of Mooncake `hash_ids`, in tokens.
pub const MOONCAKE_BLOCK_TOKENS: usize = 512;

/// Synthesized token ids lie in `0..TOKEN_ID_RANGE`, inside every common vocabulary.
pub const TOKEN_ID_RANGE: u64 = 50_000;

/// Token `j` of the block with hash id `hash_id`: a hash of `(hash_id, j)` mod
/// [`TOKEN_ID_RANGE`]. Equal ids give equal blocks, in every trace and on every run.
pub fn block_token(hash_id: u64, j: usize) -> u32 {
    (mix64(mix64(hash_id) ^ j as u64) % TOKEN_ID_RANGE) as u32
}

/// The prompt of one record: block `b` holds tokens `block_token(hash_ids[b], 0..block_tokens)`;
/// the result is cut to exactly `input_length` tokens. When `input_length` exceeds
/// `block_tokens · hash_ids.len()`, the last id keeps going (`block_token(last, block_tokens..)`);
/// a record with no ids uses `fallback_id` instead.
pub fn prompt_tokens(record: &TraceRecord, block_tokens: usize, fallback_id: u64) -> Vec<u32> {
    let bt = block_tokens.max(1);
    let n = record.input_length as usize;
    let last = record.hash_ids.len().saturating_sub(1);
    (0..n)
        .map(|p| {
            let b = p / bt;
            match record.hash_ids.get(b) {
                Some(&id) => block_token(id, p % bt),
                None => match record.hash_ids.last() {
                    Some(&id) => block_token(id, p - last * bt),
                    None => block_token(fallback_id, p),
                },
            }
        })
        .collect()
}

/// One [`WorkItem`] per record, in order: token-id prompt ([`prompt_tokens`]),
/// `max_tokens = output_length`, arrival `timestamp − first record's timestamp` (ms; records
/// earlier than the first arrive at 0). `block_tokens` is 512 for Mooncake traces.
pub fn mooncake_work(records: &[TraceRecord], block_tokens: usize) -> Vec<WorkItem> {
    let t0 = records.first().map_or(0, |r| r.timestamp);
    records
        .iter()
        .enumerate()
        .map(|(i, r)| WorkItem {
            at_ms: r.timestamp.saturating_sub(t0),
            prompt: WorkPrompt::Tokens(prompt_tokens(r, block_tokens, u64::MAX - i as u64)),
            max_tokens: r.output_length,
            conversation: None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(ts: u64, len: u32, ids: &[u64]) -> TraceRecord {
        TraceRecord {
            timestamp: ts,
            input_length: len,
            output_length: 7,
            hash_ids: ids.to_vec(),
        }
    }

    #[test]
    fn cuts_and_pads_to_input_length() {
        let cut = prompt_tokens(&rec(0, 5, &[1, 2]), 4, 0);
        assert_eq!(
            cut,
            vec![
                block_token(1, 0),
                block_token(1, 1),
                block_token(1, 2),
                block_token(1, 3),
                block_token(2, 0)
            ]
        );
        let padded = prompt_tokens(&rec(0, 10, &[1, 2]), 4, 0);
        assert_eq!(padded.len(), 10);
        assert_eq!(
            &padded[4..],
            &[0, 1, 2, 3, 4, 5].map(|j| block_token(2, j))[..]
        );
        assert_eq!(
            prompt_tokens(&rec(0, 2, &[]), 4, 9),
            vec![block_token(9, 0), block_token(9, 1)]
        );
        assert!(padded.iter().all(|&t| u64::from(t) < TOKEN_ID_RANGE));
    }

    #[test]
    fn work_items_are_relative_to_the_first_arrival() {
        let work = mooncake_work(&[rec(100, 3, &[0]), rec(350, 2, &[0])], 512);
        assert_eq!(
            work.iter().map(|w| w.at_ms).collect::<Vec<_>>(),
            vec![0, 250]
        );
        assert_eq!(work[1].max_tokens, 7);
        let (WorkPrompt::Tokens(a), WorkPrompt::Tokens(b)) = (&work[0].prompt, &work[1].prompt)
        else {
            panic!("token prompts expected")
        };
        assert_eq!(&a[..2], &b[..]);
    }
}
