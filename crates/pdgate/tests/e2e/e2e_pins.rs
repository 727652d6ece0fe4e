//! Pins are per phase (design.md §5.3, issue 5): the seed's bug was a 500 when a client
//! pinned only the decode worker, because the prefill hop looked it up in the prefill pool.

use crate::support;

use pdgate_scenario::fleet::{self, FleetSpec};
use pdgate_scheduler::DEFAULT_CONFIG_YAML;
use serde_json::{json, Value};
use std::collections::BTreeSet;

/// Status, served-by headers and the body of a completions request.
async fn send(url: &str, headers: &[(&str, &str)], body: &Value) -> (u16, [String; 3], Value) {
    let r = support::send(url, headers, body).await;
    (r.status, r.served(), r.body)
}

fn body(first: u32) -> Value {
    // 64 fresh tokens: always split out (≥ 16 uncached).
    support::body(first, 64, 2)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decode_only_pin_fixes_decode_and_leaves_prefill_free() {
    let f = fleet::start(&FleetSpec::new(2, 3, 50.0), DEFAULT_CONFIG_YAML)
        .await
        .unwrap();
    let mut prefills = BTreeSet::new();
    for (i, header) in ["x-worker-instance-id", "x-dynamo-worker-instance-id"]
        .iter()
        .cycle()
        .take(12)
        .enumerate()
    {
        let (status, served, v) =
            send(&f.url(), &[(header, "decode-2")], &body(i as u32 * 100)).await;
        assert_eq!(status, 200, "{header}: {v}");
        assert_eq!(served[0], "split");
        assert_eq!(served[2], "decode-2", "decode runs on the pinned endpoint");
        assert!(served[1].starts_with("prefill-"), "{served:?}");
        prefills.insert(served[1].clone());
    }
    assert_eq!(
        prefills.len(),
        2,
        "prefill still chosen freely: {prefills:?}"
    );
    // The body form (Dynamo nvext) pins the same way; a header wins over it.
    let mut b = body(5000);
    b["nvext"] = json!({"decode_worker_id": "decode-0"});
    let (status, served, _) = send(&f.url(), &[], &b).await;
    assert_eq!((status, served[2].as_str()), (200, "decode-0"));
    let (_, served, _) = send(&f.url(), &[("x-worker-instance-id", "decode-1")], &b).await;
    // Decode reads the decode pin before the worker pin: nvext.decode_worker_id wins here.
    assert_eq!(served[2], "decode-0");
    // A prefill pin on a prompt too short to split still runs prefill there (a pin is never
    // silently unused).
    let short = json!({"model": "pdgate-sim", "prompt": [1, 2, 3], "max_tokens": 2});
    let (status, served, _) =
        send(&f.url(), &[("x-prefill-instance-id", "prefill-0")], &short).await;
    assert_eq!(status, 200);
    assert_eq!(
        (served[0].as_str(), served[1].as_str()),
        ("split", "prefill-0")
    );
    // A prefill pin fixes prefill only.
    let (status, served, _) = send(
        &f.url(),
        &[("x-prefill-instance-id", "prefill-1")],
        &body(7000),
    )
    .await;
    assert_eq!((status, served[1].as_str()), (200, "prefill-1"));
    assert_eq!(f.in_flight(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_pins_are_400_naming_the_header_and_count_as_rejections() {
    let f = fleet::start(&FleetSpec::new(1, 2, 50.0), DEFAULT_CONFIG_YAML)
        .await
        .unwrap();
    for (headers, want) in [
        (
            vec![("x-worker-instance-id", "decode-9")],
            "header `x-worker-instance-id`: endpoint `decode-9` is not known",
        ),
        (
            vec![("x-worker-instance-id", "prefill-0")],
            "header `x-worker-instance-id`: endpoint `prefill-0` has role `prefill`, which cannot run the decode phase",
        ),
        (
            vec![("x-prefill-instance-id", "decode-0")],
            "header `x-prefill-instance-id`: endpoint `decode-0` has role `decode`, which cannot run the prefill phase",
        ),
        (
            vec![("x-dp-rank", "1")],
            "header `x-dp-rank`: DP rank 1 is given without an endpoint to pin (`x-worker-instance-id` or `x-decode-instance-id`)",
        ),
        (
            vec![("x-worker-instance-id", "decode-0"), ("x-dp-rank", "x")],
            "header `x-dp-rank`",
        ),
    ] {
        let (status, _, v) = send(&f.url(), &headers, &body(1)).await;
        assert_eq!(status, 400, "{headers:?}: {v}");
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(msg.starts_with(want), "{headers:?}: {msg}");
    }
    // Unreadable or ambiguous hint headers are 400, never read as absent.
    let raw = |name: &'static str, values: &[&[u8]]| {
        let mut h = reqwest::header::HeaderMap::new();
        for v in values {
            h.append(name, reqwest::header::HeaderValue::from_bytes(v).unwrap());
        }
        reqwest::Client::new()
            .post(format!("{}/v1/completions", f.url()))
            .headers(h)
            .json(&body(1))
            .send()
    };
    for (name, values, want) in [
        (
            "x-worker-instance-id",
            vec![b"d\xc3\xa9code".as_slice()],
            "header `x-worker-instance-id`: not a visible ASCII string",
        ),
        (
            "x-dp-rank",
            vec![b"\xc3\xa9".as_slice()],
            "header `x-dp-rank`: not a visible ASCII string",
        ),
        (
            "x-worker-instance-id",
            vec![b"decode-0".as_slice(), b"zzz".as_slice()],
            "header `x-worker-instance-id`: given more than once with different values",
        ),
    ] {
        let r = raw(name, &values).await.unwrap();
        assert_eq!(r.status(), 400, "{name}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["error"]["message"], want);
    }
    let m = support::metrics(&f.url()).await;
    assert!(
        m.contains("pdgate_pin_rejections_total{reason=\"unknown_endpoint\"} 1"),
        "{m}"
    );
    assert!(
        m.contains("pdgate_pin_rejections_total{reason=\"wrong_role\"} 2"),
        "{m}"
    );
    assert_eq!(f.in_flight(), 0);
}
