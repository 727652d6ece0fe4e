//! The `token-producer` step both front ends (`serve`, `epp`) run before scheduling: the
//! prompt the scheduler sees (`InferenceRequest::prompt`) becomes the engine's token ids, so
//! prefix block hashes match the ids the engines publish in their KV events. The body sent
//! to the engines is not touched.
//!
//! Built once from the scheduler's parameters ([`pdgate_scheduler::Scheduler::token_producer`]);
//! the `vllm` backend without `vllm.url` renders on an engine of the fleet serving the model
//! (schedulable ones, in turn). A backend failure keeps the text prompt (the estimate): logged
//! at most once per [`crate::log_limit::INTERVAL_MS`] and counted in
//! `pdgate_tokenization_fallbacks_total{backend, reason}`; every prompt is counted in
//! `pdgate_tokenizations_total{backend, outcome}`.

use crate::metrics::Metrics;
use pdgate_api::{InferenceRequest, PromptInput};
use pdgate_scheduler::plugins::token_producer::{BackendParams, TokenProducerParams};
use pdgate_scheduler::Snapshot;
use pdgate_tokens::{Backend, LoadError, LocalTokenizer, Outcome, TokenProducer, VllmRenderer};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A configured token producer and the engine rotation of its `vllm` backend.
#[derive(Debug)]
pub struct PromptTokens {
    producer: TokenProducer,
    next: AtomicUsize,
}

impl PromptTokens {
    /// Builds the producer the parameters describe (`None` → `None`: no tokenization).
    ///
    /// Errors: the `local` backend's files are missing or malformed ([`LoadError`] names
    /// the file).
    pub fn from_params(params: Option<&TokenProducerParams>) -> Result<Option<Self>, LoadError> {
        let Some(p) = params else {
            return Ok(None);
        };
        let backend = match p.backend() {
            BackendParams::Estimate => Backend::Estimate,
            BackendParams::Local(l) => Backend::Local(Box::new(LocalTokenizer::load(
                Path::new(&l.tokenizer),
                l.chat_template.as_deref().map(Path::new),
            )?)),
            BackendParams::Vllm(v) => Backend::Vllm {
                renderer: VllmRenderer::new(v.timeout.0),
                base: v.url.clone(),
            },
        };
        Ok(Some(PromptTokens {
            producer: TokenProducer::new(p.model_name.clone(), backend),
            next: AtomicUsize::new(0),
        }))
    }

    /// [`Self::from_params`] with the scheduler's `token-producer` parameters, shared.
    ///
    /// Errors: the `local` backend's files, as a start-up error whose source is
    /// `token-producer` (both front ends report start-up errors in this type).
    pub fn load(
        scheduler: &pdgate_scheduler::Scheduler,
    ) -> Result<Option<std::sync::Arc<Self>>, pdgate_fleet::discovery::DiscoveryError> {
        Self::from_params(scheduler.token_producer())
            .map(|t| t.map(std::sync::Arc::new))
            .map_err(|e| pdgate_fleet::discovery::DiscoveryError {
                source_name: "token-producer".into(),
                message: e.to_string(),
            })
    }

    /// The producer.
    pub fn producer(&self) -> &TokenProducer {
        &self.producer
    }

    /// `http://{address}` of a schedulable endpoint serving `model`, taken in turn.
    fn engine(&self, snapshot: &Snapshot, model: &str) -> Option<String> {
        let serving: Vec<_> = (snapshot.endpoints.iter())
            .filter(|e| e.endpoint.schedulable() && e.load.serves(model))
            .collect();
        if serving.is_empty() {
            return None;
        }
        let i = self.next.fetch_add(1, Ordering::Relaxed) % serving.len();
        Some(format!("http://{}", serving[i].endpoint.address))
    }

    /// Replaces `req.prompt` by its token ids when the backend produces them; counts and,
    /// on a failure, logs (rate-limited). Never fails.
    pub async fn apply(&self, req: &mut InferenceRequest, snapshot: &Snapshot, metrics: &Metrics) {
        let engine = match self.producer.needs_engine() && req.model == self.producer.model() {
            true => self.engine(snapshot, &req.model),
            false => None,
        };
        let done = self.producer.tokenize(req, engine.as_deref()).await;
        let backend = self.producer.backend_name();
        metrics
            .tokenizations
            .with_label_values(&[backend, done.outcome.label()])
            .inc();
        if let Outcome::Fallback(why) = &done.outcome {
            metrics
                .tokenization_fallbacks
                .with_label_values(&[backend, why.label()])
                .inc();
            if crate::log_limit::allow(&crate::log_limit::TOKENIZATION_FALLBACKS) {
                tracing::warn!(
                    backend,
                    engine = engine.as_deref().unwrap_or("-"),
                    model = %req.model,
                    error = %why,
                    "token-producer failed; the prompt is hashed at its byte estimate"
                );
            }
        }
        if let Some(ids) = done.ids {
            req.prompt = PromptInput::Tokens(ids);
        }
    }
}

/// The shared step: a chat request rendered by a coordinator's `render` step carries its
/// engine token ids ([`InferenceRequest::rendered_token_ids`], `pdgate_server`'s render step), which are its prompt;
/// otherwise tokenizes `req`'s prompt when a token producer is configured.
pub async fn tokenize_prompt(
    tokens: Option<&PromptTokens>,
    req: &mut InferenceRequest,
    snapshot: &Snapshot,
    metrics: &Metrics,
) {
    if let Some(ids) = req.rendered_token_ids() {
        req.prompt = PromptInput::Tokens(ids);
        return;
    }
    if let Some(t) = tokens {
        t.apply(req, snapshot, metrics).await;
    }
}
