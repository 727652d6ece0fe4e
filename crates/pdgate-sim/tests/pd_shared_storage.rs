//! The shared-storage connectors between workers (vLLM `ExampleConnector` for KV,
//! `ECExampleConnector` for encoder output; llm-d's `kv-shared-storage` / `ec-shared-storage`):
//! workers on 127.0.0.1:0 sharing a fresh directory, requests shaped as llm-d's coordinator
//! sends them, assertions on the workers' own counters, metrics text, usage and headers.

mod common;

use common::epd::{chat, image, post_chat};
use common::*;
use pdgate_api::media::{encode_leg_body, media_items};
use pdgate_sim::storage::{kv_key, KvRecord, EC_RECORD_FILE, KV_RECORD_FILE};
use pdgate_sim::transfer_config::{EcTransferConfig, KvTransferConfig};
use pdgate_sim::{SimConfig, WorkerHandle, WorkerSpec};
use serde_json::{json, Value};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A fresh directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Self {
        let name = format!(
            "pdgate-sim-shared-{}-{:016x}",
            std::process::id(),
            rand::random::<u64>()
        );
        let dir = std::env::temp_dir().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Fails the test when `f` takes more than 30 s.
async fn bounded<F: Future<Output = ()>>(f: F) {
    tokio::time::timeout(Duration::from_secs(30), f)
        .await
        .expect("test took more than 30 s");
}

/// `extra_config` with `shared_storage_path` = `dir`, as JSON text.
fn extra(dir: &Path) -> String {
    json!({"shared_storage_path": dir.to_str().unwrap()}).to_string()
}

/// Fast settings with `--kv-transfer-config` ExampleConnector on `dir`.
fn kv_cfg(dir: &Path) -> SimConfig {
    let json = format!(
        r#"{{"kv_connector":"ExampleConnector","kv_role":"kv_both","kv_connector_extra_config":{}}}"#,
        extra(dir)
    );
    SimConfig {
        kv_transfer: Some(KvTransferConfig::parse(&json).unwrap()),
        ..fast()
    }
}

/// Fast settings with `--ec-transfer-config` ECExampleConnector on `dir`, as `role`.
fn ec_cfg(dir: &Path, role: &str) -> SimConfig {
    let json = format!(
        r#"{{"ec_connector":"ECExampleConnector","ec_role":"{role}","ec_connector_extra_config":{}}}"#,
        extra(dir)
    );
    SimConfig {
        ec_transfer: Some(EcTransferConfig::parse(&json).unwrap()),
        ..fast()
    }
}

async fn pd(dir: &Path, p_rev: &str, d_rev: &str) -> (WorkerHandle, WorkerHandle) {
    let spec = |name: &str, role: &str, rev: &str| WorkerSpec::new(name, role).with_revision(rev);
    let p = worker(spec("prefill-0", "prefill", p_rev), kv_cfg(dir)).await;
    let d = worker(spec("decode-0", "decode", d_rev), kv_cfg(dir)).await;
    (p, d)
}

/// llm-d's kv-shared-storage prefill body (completions format): 1 token, not streamed.
async fn prefill_leg(p: &WorkerHandle, prompt: Value) -> Resp {
    let r = post(
        &p.url(),
        "/v1/completions",
        json!({"model": "pdgate-sim", "prompt": prompt, "max_tokens": 1, "stream": false,
               "kv_transfer_params": {"do_remote_decode": true, "do_remote_prefill": false}}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    r
}

/// llm-d's kv-shared-storage decode body: the client's, with the decode flags.
async fn decode_leg(d: &WorkerHandle, prompt: Value) -> Resp {
    let r = post(
        &d.url(),
        "/v1/completions",
        json!({"model": "pdgate-sim", "prompt": prompt, "max_tokens": 5,
               "kv_transfer_params": {"do_remote_decode": false, "do_remote_prefill": true}}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    r
}

fn header<'a>(r: &'a Resp, name: &str) -> Option<&'a str> {
    r.headers.get(name).and_then(|v| v.to_str().ok())
}

/// The KV record of `tokens` in `dir`.
fn record(dir: &Path, tokens: &[u32]) -> KvRecord {
    let path = dir.join(kv_key(tokens, &[])).join(KV_RECORD_FILE);
    serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap()
}

fn line(name: &str, labels: &str, v: u64) -> String {
    format!(r#"{name}{{engine="0",model_name="pdgate-sim"{labels}}} {v}"#)
}

#[tokio::test]
async fn the_decode_loads_what_the_prefill_stored() {
    bounded(async {
        let dir = TempDir::new();
        let (p, d) = pd(&dir.0, "rev-a", "rev-a").await;
        let prompt = tokens(1, 100);
        let pre = prefill_leg(&p, json!(prompt)).await;
        assert_eq!(pre.body["usage"]["completion_tokens"], 1);
        assert!(pre.body.get("kv_transfer_params").is_none(), "{}", pre.body);
        assert_eq!(header(&pre, "x-sim-kv-load"), Some("miss"));
        // 100 tokens store align(100) = 96, under the hash of those 96 token ids.
        let rec = record(&dir.0, &prompt[..96]);
        assert_eq!(
            (
                rec.num_tokens,
                rec.block_size,
                rec.writer.revision.as_deref()
            ),
            (96, 16, Some("rev-a"))
        );
        assert_eq!(
            (rec.writer.engine_id.as_str(), rec.writer.model.as_str()),
            (p.engine_id(), "pdgate-sim")
        );
        let ps = p.stats();
        assert_eq!(
            (ps.kv_storage_stores, ps.leases, ps.prefill_legs),
            (1, 0, 0)
        );
        assert_eq!(ps.kv_storage_lookups.get("miss"), Some(&1));

        let r = decode_leg(&d, json!(prompt)).await;
        assert_eq!(r.body["usage"]["completion_tokens"], 5);
        assert_eq!(r.body["usage"]["prompt_tokens"], 100);
        assert_eq!(
            r.body["usage"]["prompt_tokens_details"]["cached_tokens"], 0,
            "loaded tokens are not cached tokens of a decode leg (vLLM 0.32)"
        );
        // Which revision computed the KV shows in the decode's answer.
        let got = [
            "x-sim-kv-load",
            "x-sim-kv-loaded-tokens",
            "x-sim-kv-writer",
            "x-sim-kv-writer-revision",
        ]
        .map(|h| header(&r, h));
        assert_eq!(
            got,
            [Some("hit"), Some("96"), Some(p.engine_id()), Some("rev-a")]
        );
        // align(99) = 96 tokens loaded, the last 4 computed here.
        let ds = d.stats();
        assert_eq!(
            (
                ds.prompt_tokens_external_kv_transfer,
                ds.prompt_tokens_local_compute,
                ds.prefix_cache_hits,
                ds.external_prefix_cache_queries,
                ds.external_prefix_cache_hits,
                ds.kv_storage_stores,
            ),
            (96, 4, 0, 100, 96, 0)
        );
        assert_eq!(ds.kv_storage_lookups.get("hit"), Some(&1));
        let m = metrics(&d).await;
        assert_metric_lines(
            &m,
            &[
                line(
                    "vllm:prompt_tokens_by_source_total",
                    r#",source="external_kv_transfer""#,
                    96,
                ),
                line(
                    "vllm:prompt_tokens_by_source_total",
                    r#",source="local_compute""#,
                    4,
                ),
                line("vllm:external_prefix_cache_queries_total", "", 100),
                line("vllm:external_prefix_cache_hits_total", "", 96),
                line("pdgate_sim_kv_storage_lookups_total", r#",result="hit""#, 1),
            ],
        );
        let pm = metrics(&p).await;
        assert_metric_lines(
            &pm,
            &[line(
                "pdgate_sim_kv_storage_stores_total",
                r#",result="ok""#,
                1,
            )],
        );

        // The loaded blocks entered the decode's own cache: a repeat hits them locally.
        let again = decode_leg(&d, json!(prompt)).await;
        assert_eq!(
            again.body["usage"]["prompt_tokens_details"]["cached_tokens"],
            96
        );
    })
    .await;
}

#[tokio::test]
async fn a_text_prompt_is_found_by_its_token_ids() {
    bounded(async {
        let dir = TempDir::new();
        let (p, d) = pd(&dir.0, "rev-a", "rev-a").await;
        // 40 words = 40 tokens: stored and loaded align(39) = 32.
        let text: String = (0..40).map(|i| format!("word{i} ")).collect();
        prefill_leg(&p, json!(text)).await;
        let ids = pdgate_sim::tokenizer::tokenize(&text);
        assert_eq!(record(&dir.0, &ids[..32]).num_tokens, 32);
        let r = decode_leg(&d, json!(text)).await;
        assert_eq!(header(&r, "x-sim-kv-loaded-tokens"), Some("32"));
        assert_eq!(d.stats().prompt_tokens_external_kv_transfer, 32);
    })
    .await;
}

#[tokio::test]
async fn a_different_prompt_is_not_found_and_computed_locally() {
    bounded(async {
        let dir = TempDir::new();
        let (p, d) = pd(&dir.0, "rev-a", "rev-a").await;
        prefill_leg(&p, json!(tokens(1, 100))).await;
        let r = decode_leg(&d, json!(tokens(1000, 100))).await;
        assert_eq!(r.body["usage"]["completion_tokens"], 5);
        assert_eq!(header(&r, "x-sim-kv-load"), Some("miss"));
        assert_eq!(header(&r, "x-sim-kv-loaded-tokens"), Some("0"));
        assert_eq!(header(&r, "x-sim-kv-writer-revision"), None);
        let ds = d.stats();
        assert_eq!(
            (
                ds.prompt_tokens_external_kv_transfer,
                ds.prompt_tokens_local_compute,
                ds.external_prefix_cache_hits,
            ),
            (0, 100, 0)
        );
        assert_eq!(ds.kv_storage_lookups.get("miss"), Some(&1));
        // Nothing was loaded, so the decode stored its own prompt (as vLLM's connector).
        assert_eq!(ds.kv_storage_stores, 1);
        assert_eq!(record(&dir.0, &tokens(1000, 96)).writer.worker, "decode-0");
        // vLLM's quirk: a prompt of k·16 + 1 tokens stores align(33) = 32 tokens but looks up
        // align(32) = 16, so its own record is never found.
        prefill_leg(&p, json!(tokens(5000, 33))).await;
        let r = decode_leg(&d, json!(tokens(5000, 33))).await;
        assert_eq!(header(&r, "x-sim-kv-load"), Some("miss"));
    })
    .await;
}

#[tokio::test]
async fn another_revision_is_detected_and_not_loaded() {
    bounded(async {
        let dir = TempDir::new();
        let (p, d) = pd(&dir.0, "rev-b", "rev-a").await;
        let prompt = tokens(1, 100);
        prefill_leg(&p, json!(prompt)).await;
        let r = decode_leg(&d, json!(prompt)).await;
        assert_eq!(header(&r, "x-sim-kv-load"), Some("revision_mismatch"));
        assert_eq!(header(&r, "x-sim-kv-writer-revision"), Some("rev-b"));
        assert_eq!(header(&r, "x-sim-kv-loaded-tokens"), Some("0"));
        let ds = d.stats();
        assert_eq!(ds.kv_storage_lookups.get("revision_mismatch"), Some(&1));
        assert_eq!(
            (
                ds.prompt_tokens_external_kv_transfer,
                ds.prompt_tokens_local_compute
            ),
            (0, 100),
            "KV of another revision is recomputed"
        );
        let m = metrics(&d).await;
        assert_metric_lines(
            &m,
            &[line(
                "pdgate_sim_kv_storage_lookups_total",
                r#",result="revision_mismatch""#,
                1,
            )],
        );
        // The decode stored its own revision's KV in place; a worker of rev-a now loads it.
        assert_eq!(
            record(&dir.0, &prompt[..96]).writer.revision.as_deref(),
            Some("rev-a")
        );
        let d2 = worker(
            WorkerSpec::new("decode-1", "decode").with_revision("rev-a"),
            kv_cfg(&dir.0),
        )
        .await;
        let r = decode_leg(&d2, json!(prompt)).await;
        assert_eq!(header(&r, "x-sim-kv-load"), Some("hit"));
        assert_eq!(header(&r, "x-sim-kv-writer"), Some(d.engine_id()));
    })
    .await;
}

#[tokio::test]
async fn nixl_stays_the_default() {
    bounded(async {
        let p = worker_rev("prefill-0", "prefill", "rev-a").await;
        let pre = prefill_leg(&p, json!(tokens(1, 100))).await;
        assert_eq!(
            pre.body["kv_transfer_params"]["remote_engine_id"],
            p.engine_id()
        );
        assert_eq!(header(&pre, "x-sim-kv-load"), None);
        assert_eq!(p.stats().leases, 1);
        let m = metrics(&p).await;
        assert!(
            !m.contains("pdgate_sim_kv_storage") && !m.contains("external_prefix_cache"),
            "{m}"
        );
    })
    .await;
}

#[tokio::test]
async fn encoder_output_goes_through_the_shared_storage() {
    bounded(async {
        let dir = TempDir::new();
        let e = worker(
            WorkerSpec::new("encode-0", "encode").with_revision("rev-a"),
            ec_cfg(&dir.0, "ec_producer"),
        )
        .await;
        let p = worker(
            WorkerSpec::new("prefill-0", "prefill").with_revision("rev-a"),
            ec_cfg(&dir.0, "ec_consumer"),
        )
        .await;
        let media = [image(1), image(2)];
        let body = chat(&media, 1);
        let items = media_items(&pdgate_api::RawObject::parse(body.to_string().into()).unwrap());
        // The coordinator's encode legs: one per item; nothing comes back on the wire.
        let leg = Value::Object(encode_leg_body("pdgate-sim", &items[0]));
        let r = post_chat(&e, leg).await;
        assert_eq!(r.status, 200, "{}", r.body);
        assert!(r.body.get("ec_transfer_params").is_none(), "{}", r.body);
        assert!(dir.0.join(&items[0].hash).join(EC_RECORD_FILE).is_file());
        let es = e.stats();
        assert_eq!(
            (es.encode_items, es.ec_storage_stores, es.ec_leases),
            (1, 1, 0)
        );

        // The prefill loads item 0 by its mm_hash and encodes item 1 itself (a consumer
        // stores nothing).
        let r = post_chat(&p, body).await;
        assert_eq!(r.status, 200, "{}", r.body);
        let ps = p.stats();
        assert_eq!(
            (
                ps.remote_encoded_items,
                ps.local_encoded_items,
                ps.ec_storage_stores
            ),
            (1, 1, 0)
        );
        assert_eq!(
            (
                ps.ec_storage_lookups.get("hit"),
                ps.ec_storage_lookups.get("miss")
            ),
            (Some(&1), Some(&1))
        );
        assert_metric_lines(
            &metrics(&p).await,
            &[line(
                "pdgate_sim_ec_storage_lookups_total",
                r#",result="hit""#,
                1,
            )],
        );

        // A prefill of another revision does not load the encoder's output.
        let other = worker(
            WorkerSpec::new("prefill-1", "prefill").with_revision("rev-b"),
            ec_cfg(&dir.0, "ec_consumer"),
        )
        .await;
        let r = post_chat(&other, chat(&media[..1], 1)).await;
        assert_eq!(r.status, 200, "{}", r.body);
        let os = other.stats();
        assert_eq!(os.ec_storage_lookups.get("revision_mismatch"), Some(&1));
        assert_eq!((os.remote_encoded_items, os.local_encoded_items), (0, 1));
    })
    .await;
}
