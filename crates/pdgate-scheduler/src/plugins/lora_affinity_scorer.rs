//! `lora-affinity-scorer` — prefers engines that have the request's LoRA adapter loaded, or
//! room to load it.
//!
//! - **Type:** `lora-affinity-scorer`
//! - **Extension points:** Scorer (llm-d category `Affinity`)
//! - **Parameters:** none.
//! - **Inputs:** the request's `model`, and per candidate its engine's LoRA state
//!   ([`crate::LoraInfo`], from the labels of the `vllm:lora_requests_info` series with the
//!   highest value: `running_lora_adapters`, `waiting_lora_adapters`, `max_lora`) and its
//!   `/v1/models` objects.
//! - **Outputs:** when the model is a LoRA adapter, per candidate, the first that holds of:
//!   the adapter is running there → [`ACTIVE_SCORE`] `1.0`; running + waiting adapters
//!   < `max_lora` (room for one more, even if this one is waiting) → [`ROOM_SCORE`] `0.8`;
//!   the adapter is waiting there → [`WAITING_SCORE`] `0.6`; else `0` (also for an engine
//!   without LoRA metrics: its `max_lora` counts as 0). The model is a LoRA adapter when the
//!   first candidate whose `/v1/models` lists it gives it a `parent` (vLLM's base model of an
//!   adapter), or — model lists unknown — when some candidate's LoRA state lists it running or
//!   waiting. Any other model (the base model) is no adapter: every candidate scores 0, and
//!   the other scorers decide.
//! - **Limitations:** llm-d scores the target model whatever it is, so a request for the base
//!   model there gets 0.8 on every engine with a free adapter slot; pdgate does not treat the
//!   base model as an adapter. An engine that stops exporting `vllm:lora_requests_info`, or
//!   whose scrape fails, has no LoRA state (llm-d keeps the last one). A `max_lora` that is
//!   not an integer counts as 0 (llm-d keeps the previous value). Only vLLM exports the
//!   metric; other engines score 0.
//!   Source: llm-d `pkg/epp/framework/plugins/scheduling/scorer/loraaffinity/lora_affinity.go`,
//!   metric parsing in `pkg/epp/framework/plugins/datalayer/extractor/metrics/{extractor.go,loraspec.go}`.

use crate::endpoint::{EndpointState, LoraInfo};
use crate::plugin::Scorer;
use crate::plugin_build::{decode, BuildCtx, Built, NoParams, PluginError, PluginType, Stage};
use crate::request::RequestCtx;
use serde_yaml_ng::Value;
use std::sync::Arc;

/// Registry entry.
pub const TYPE: PluginType = PluginType {
    name: "lora-affinity-scorer",
    stage: Stage::Consumer,
    build,
};

/// Score of an engine running the adapter.
pub const ACTIVE_SCORE: f64 = 1.0;
/// Score of an engine with room for one more adapter.
pub const ROOM_SCORE: f64 = 0.8;
/// Score of an engine where the adapter waits to be loaded (and no room).
pub const WAITING_SCORE: f64 = 0.6;

/// The scorer.
#[derive(Debug, Default)]
pub struct LoraAffinityScorer;

/// The score of an engine with LoRA state `lora` (`None`: no metric) for adapter `adapter`.
pub fn adapter_score(lora: Option<&LoraInfo>, adapter: &str) -> f64 {
    let Some(l) = lora else {
        return 0.0;
    };
    let has = |list: &[String]| list.iter().any(|a| a == adapter);
    if has(&l.running) {
        ACTIVE_SCORE
    } else if l.running.len() + l.waiting.len() < l.max_lora {
        ROOM_SCORE
    } else if has(&l.waiting) {
        WAITING_SCORE
    } else {
        0.0
    }
}

/// Whether `model` is a LoRA adapter for these candidates: the first `/v1/models` object with
/// its id says (a non-null `parent` = adapter); without any, whether some engine lists it as
/// running or waiting.
pub fn is_adapter(model: &str, candidates: &[&Arc<EndpointState>]) -> bool {
    let mut listed = false;
    for c in candidates {
        if let Some(cards) = c.load.model_cards() {
            if let Some(card) = cards
                .iter()
                .find(|m| m.get("id").and_then(|v| v.as_str()) == Some(model))
            {
                return card.get("parent").is_some_and(|p| !p.is_null());
            }
        }
        listed = listed
            || c.load
                .lora()
                .is_some_and(|l| l.running.iter().chain(&l.waiting).any(|a| a == model));
    }
    listed
}

impl Scorer for LoraAffinityScorer {
    fn score(&self, ctx: &RequestCtx<'_>, candidates: &[&Arc<EndpointState>], out: &mut [f64]) {
        out.fill(0.0);
        let model = ctx.model();
        if !is_adapter(model, candidates) {
            return;
        }
        for (o, c) in out.iter_mut().zip(candidates) {
            *o = adapter_score(c.load.lora().as_deref(), model);
        }
    }
}

fn build(params: Option<&Value>, _: &mut BuildCtx<'_>) -> Result<Built, PluginError> {
    decode::<NoParams>(params)?;
    Ok(Built {
        scorer: Some(Arc::new(LoraAffinityScorer)),
        ..Built::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testutil::ep;
    use crate::request::SchedulingRequest;
    use pdgate_api::PromptInput;
    use serde_json::json;

    fn lora(running: &str, waiting: &str, max: &str) -> Option<LoraInfo> {
        Some(LoraInfo::from_labels(running, waiting, max))
    }

    #[test]
    fn order_of_checks_active_room_waiting_none() {
        let s = |l: Option<LoraInfo>| adapter_score(l.as_ref(), "a");
        assert_eq!(s(lora("a,b", "", "2")), 1.0, "running wins even when full");
        assert_eq!(
            s(lora("b", "a", "3")),
            0.8,
            "room (1 + 1 < 3) before waiting"
        );
        assert_eq!(s(lora("b", "c", "3")), 0.8);
        assert_eq!(s(lora("b", "a", "2")), 0.6, "full (1 + 1 = 2), waiting");
        assert_eq!(
            s(lora("b,c", "", "2")),
            0.0,
            "full, neither running nor waiting"
        );
        assert_eq!(s(lora("", "", "")), 0.0, "no max_lora: no room");
        assert_eq!(s(None), 0.0, "no metric");
        // Repeated names count once (llm-d keeps them in a map).
        assert_eq!(s(lora("b,b,b", "", "2")), 0.8);
    }

    fn scores(model: &str, cards: bool) -> Vec<f64> {
        let eps = [
            ep("e1", None),
            ep("e2", None),
            ep("e3", None),
            ep("e4", None),
        ];
        eps[0].load.set_lora(lora("a", "", "1"));
        eps[1].load.set_lora(lora("", "b", "4"));
        eps[2].load.set_lora(lora("x,y", "b", "2"));
        if cards {
            for e in &eps {
                e.load.set_model_cards(vec![
                    json!({"id": "base", "parent": null}),
                    json!({"id": "a", "parent": "base"}),
                    json!({"id": "b", "parent": "base"}),
                ]);
            }
        }
        let c: Vec<_> = eps.iter().collect();
        let prompt = PromptInput::Tokens(vec![]);
        let req = SchedulingRequest::new("r", model, &prompt);
        let ctx = RequestCtx::new(&req, 0);
        let mut out = vec![0.5; c.len()];
        LoraAffinityScorer.score(&ctx, &c, &mut out);
        out
    }

    #[test]
    fn scores_the_requested_adapter_and_leaves_the_base_model_alone() {
        // "a": e1 running it; e2 has room (0 + 1 < 4); e3 full (2 + 1 ≥ 2), not waiting; e4
        // has no LoRA metric.
        assert_eq!(scores("a", true), [1.0, 0.8, 0.0, 0.0]);
        // "b": e1 full (1 + 0 ≥ 1); e2 room; e3 full and waiting.
        assert_eq!(scores("b", true), [0.0, 0.8, 0.6, 0.0]);
        // The base model is no adapter (parent null): all 0.
        assert_eq!(scores("base", true), [0.0; 4]);
        // Model lists unknown: an adapter some engine lists is scored, anything else is not.
        assert_eq!(scores("b", false), [0.0, 0.8, 0.6, 0.0]);
        assert_eq!(scores("base", false), [0.0; 4]);
    }

    #[test]
    fn any_parameter_is_refused() {
        let v: Value = serde_yaml_ng::from_str("maxLora: 2").unwrap();
        let mut ctx = BuildCtx {
            built: &[],
            profiles: &[],
            next_slot: 0,
        };
        let e = build(Some(&v), &mut ctx).err().unwrap();
        assert_eq!(e.key.as_deref(), Some("maxLora"));
    }
}
