//! One request inside the engine ([`Seq`]) and the events it sends to its HTTP handler.

use super::cache::{BlockId, PrefixCache};
use tokio::sync::mpsc::UnboundedSender;
use tokio::time::Instant;

/// How the engine treats a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeqMode {
    /// Ordinary request: prefill locally, decode `max_tokens`.
    Local,
    /// Prefill leg (`do_remote_decode`): one token, then the prompt blocks stay under a lease.
    PrefillLeg,
    /// Decode leg whose KV was pulled from a remote prefill: no prefill compute.
    RemoteDecode,
    /// Pooling request (`/v1/embeddings`): the prefill step only; its one "token" is the
    /// pooled output, not counted as a generated token.
    Pooling,
}

/// A lease created by a finished prefill leg.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseInfo {
    /// Lease id (`remote_request_id`).
    pub id: String,
    /// Prompt blocks held (`remote_block_ids`).
    pub blocks: Vec<BlockId>,
}

/// End of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finish {
    /// Prompt length.
    pub prompt_tokens: usize,
    /// Prompt tokens not computed for this request (`usage.prompt_tokens_details`).
    pub cached_tokens: usize,
    /// The lease, for a prefill leg.
    pub lease: Option<LeaseInfo>,
}

/// What the engine tells a request's handler.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SeqEvent {
    /// One more output token.
    Token,
    /// The request is done (after its last token).
    Finished(Finish),
}

/// A request in the waiting queue or the running batch.
pub struct Seq {
    pub(super) tx: UnboundedSender<SeqEvent>,
    pub(super) mode: SeqMode,
    pub(super) prompt_len: usize,
    /// Prompt token ids (the `token_ids` of its `BlockStored` events).
    pub(super) tokens: Vec<u32>,
    /// Chained hashes of the prompt's full blocks.
    pub(super) hashes: Vec<u64>,
    /// Fingerprint of the whole prompt (`cache::prompt_fingerprint`), kept on its lease.
    pub(super) fingerprint: u64,
    pub(super) max_tokens: usize,
    pub(super) arrived: Instant,
    /// Blocks held: prompt blocks, then output blocks.
    pub(super) blocks: Vec<BlockId>,
    /// Blocks still promised for future output.
    pub(super) reserved: usize,
    /// Prompt tokens whose KV exists (cached or computed).
    pub(super) computed: usize,
    /// Full prompt blocks published in the prefix cache (or found there).
    pub(super) registered: usize,
    pub(super) generated: usize,
    /// Prompt tokens scheduled for prefill in the current step.
    pub(super) chunk: usize,
    /// Decodes one token in the current step.
    pub(super) decode: bool,
    /// `cached_tokens` to report: prompt tokens found in this engine's own cache (never the
    /// tokens of a remote prefill, as vLLM 0.32 reports a decode leg).
    pub(super) reported_cached: usize,
    /// Leading prompt tokens a shared-storage KV connector loads at admission (beyond the
    /// local hits); `None` = no connector lookup.
    pub(super) external: Option<usize>,
}

impl Seq {
    /// A request not yet admitted.
    pub fn new(
        tx: UnboundedSender<SeqEvent>,
        mode: SeqMode,
        tokens: Vec<u32>,
        hashes: Vec<u64>,
        max_tokens: usize,
        arrived: Instant,
    ) -> Self {
        Seq {
            tx,
            mode,
            prompt_len: tokens.len(),
            tokens,
            hashes,
            fingerprint: 0,
            max_tokens,
            arrived,
            blocks: Vec::new(),
            reserved: 0,
            computed: 0,
            registered: 0,
            generated: 0,
            chunk: 0,
            decode: false,
            reported_cached: 0,
            external: None,
        }
    }

    /// Publishes the full prompt blocks computed so far, and records one `BlockStored` per
    /// run of consecutive announced blocks (in practice one per call: the blocks of a prefix
    /// hit, which are not announced again, come first).
    pub(super) fn register_blocks(&mut self, cache: &mut PrefixCache, block_size: usize) {
        let full = (self.computed / block_size).min(self.hashes.len());
        let mut run: Option<usize> = None;
        for i in self.registered..full {
            let announced = cache.register(self.blocks[i], self.hashes[i]);
            match (announced, run) {
                (true, None) => run = Some(i),
                (false, Some(start)) => {
                    self.announce(cache, start, i, block_size);
                    run = None;
                }
                _ => {}
            }
        }
        if let Some(start) = run {
            self.announce(cache, start, full, block_size);
        }
        self.registered = self.registered.max(full);
    }

    /// Records `BlockStored` for prompt blocks `start..end`.
    fn announce(&self, cache: &mut PrefixCache, start: usize, end: usize, block_size: usize) {
        if !cache.events.enabled() {
            return;
        }
        let parent = start.checked_sub(1).map(|p| self.hashes[p]);
        let tokens = &self.tokens[start * block_size..end * block_size];
        cache
            .events
            .stored(self.hashes[start..end].to_vec(), parent, tokens);
    }
}
