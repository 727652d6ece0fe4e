//! The step against an axum server on 127.0.0.1 (port 0), with the loopback seam on unless a
//! test says otherwise. Each test is bounded by a timeout of its own.

use super::fetch::MAX_REDIRECTS;
use super::guard::BlockReason;
use super::{replace_media_urls, MediaError, MediaUrlSettings, PartLocation};
use axum::body::Body;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The PNG signature: eight bytes whose base64 is `iVBORw0KGgo=`.
const PNG: &[u8] = b"\x89PNG\r\n\x1a\n";

#[derive(Default)]
struct Gauge {
    now: AtomicUsize,
    most: AtomicUsize,
}

async fn server() -> (String, Arc<Gauge>) {
    let gauge = Arc::new(Gauge::default());
    let g = gauge.clone();
    let app = Router::new()
        .route(
            "/img.png",
            get(|| async { ([(header::CONTENT_TYPE, "image/png")], PNG) }),
        )
        .route(
            "/untyped",
            get(|| async { Response::new(Body::from("abc")) }),
        )
        .route("/missing", get(|| async { StatusCode::NOT_FOUND }))
        .route("/big", get(|| async { vec![7u8; 32] }))
        .route(
            "/chunked",
            get(|| async {
                let chunks = (0..4).map(|_| Ok::<_, std::io::Error>(Bytes::from(vec![1u8; 8])));
                Body::from_stream(futures_util::stream::iter(chunks))
            }),
        )
        .route(
            "/to-metadata",
            get(|| async { redirect("http://169.254.169.254/latest/") }),
        )
        .route("/to-img", get(|| async { redirect("img.png") }))
        .route(
            "/to-localhost",
            get(|| async { redirect("//localhost/img.png") }),
        )
        .route("/loop", get(|| async { redirect("/loop") }))
        .route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_secs(5)).await;
                PNG
            }),
        )
        .route(
            "/gauge",
            get(move || {
                let g = g.clone();
                async move {
                    let now = g.now.fetch_add(1, Ordering::SeqCst) + 1;
                    g.most.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(40)).await;
                    g.now.fetch_sub(1, Ordering::SeqCst);
                    ([(header::CONTENT_TYPE, "image/gif")], "G")
                }
            }),
        );
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", l.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(l, app).await.unwrap() });
    (base, gauge)
}

fn redirect(to: &'static str) -> Response {
    (StatusCode::FOUND, [(header::LOCATION, to)]).into_response()
}

fn seam() -> MediaUrlSettings {
    MediaUrlSettings {
        allow_loopback_for_tests: true,
        max_download_bytes: 16,
        download_timeout: Duration::from_secs(3),
        ..MediaUrlSettings::default()
    }
}

fn chat(url: &str) -> String {
    format!(
        r#"{{"model":"m","messages":[{{"role":"user","content":[{{"type":"text","text":"what?"}},{{"type":"image_url","image_url":{{"url":"{url}","detail":"low"}}}}]}}],"stream":true}}"#
    )
}

async fn run(settings: &MediaUrlSettings, body: &str) -> Result<Option<Bytes>, MediaError> {
    tokio::time::timeout(
        Duration::from_secs(10),
        replace_media_urls(settings, body.as_bytes()),
    )
    .await
    .expect("step ended in time")
}

const AT: PartLocation = PartLocation {
    message: 0,
    part: 1,
};

#[tokio::test]
async fn downloaded_png_becomes_a_data_uri_and_the_rest_is_kept() {
    let (base, _) = server().await;
    let body = chat(&format!("{base}/img.png?sig=1"));
    let out = run(&seam(), &body).await.unwrap().unwrap();
    let want = chat("data:image/png;base64,iVBORw0KGgo=");
    assert_eq!(std::str::from_utf8(&out).unwrap(), want);
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["messages"][0]["content"][1]["image_url"]["detail"], "low");
}

#[tokio::test]
async fn relative_redirect_is_followed_and_missing_type_defaults() {
    let (base, _) = server().await;
    let out = run(&seam(), &chat(&format!("{base}/to-img"))).await;
    assert_eq!(
        out.unwrap().unwrap(),
        chat("data:image/png;base64,iVBORw0KGgo=")
    );
    let out = run(&seam(), &chat(&format!("{base}/untyped"))).await;
    assert_eq!(
        out.unwrap().unwrap(),
        chat("data:application/octet-stream;base64,YWJj")
    );
}

/// Runs the step on a one-image chat body and checks the error and its status.
async fn refused(settings: &MediaUrlSettings, url: &str, want: MediaError, status: u16) {
    let e = run(settings, &chat(url)).await.unwrap_err();
    assert_eq!(e, want, "{url}");
    assert_eq!(e.status(), status, "{url}");
}

fn blocked(host: &str, reason: BlockReason) -> MediaError {
    let host = host.into();
    MediaError::Blocked {
        at: AT,
        host,
        reason,
    }
}

fn not_allowed(host: &str, redirect: bool) -> MediaError {
    let host = host.into();
    MediaError::HostNotAllowed {
        at: AT,
        host,
        redirect,
    }
}

#[tokio::test]
async fn failed_downloads_map_to_their_statuses() {
    let (base, _) = server().await;
    let s = seam();
    let host = "127.0.0.1".to_string();
    let e = MediaError::Status {
        at: AT,
        host,
        status: 404,
    };
    assert_eq!(
        e.to_string(),
        "messages[0].content[1].image_url.url: download from \"127.0.0.1\" answered HTTP 404"
    );
    refused(&s, &format!("{base}/missing"), e, 502).await;
    for path in ["big", "chunked"] {
        let e = MediaError::TooLarge {
            at: AT,
            max_bytes: 16,
        };
        refused(&s, &format!("{base}/{path}"), e, 400).await;
    }
    let e = MediaError::TooManyRedirects {
        at: AT,
        max: MAX_REDIRECTS,
    };
    refused(&s, &format!("{base}/loop"), e, 502).await;
}

#[tokio::test]
async fn redirects_are_checked_again() {
    let (base, _) = server().await;
    let e = blocked("169.254.169.254", BlockReason::LinkLocal);
    refused(&seam(), &format!("{base}/to-metadata"), e, 400).await;
    let only_ip = MediaUrlSettings {
        allowed_domains: vec!["127.0.0.1".into()],
        ..seam()
    };
    let e = not_allowed("localhost", true);
    refused(&only_ip, &format!("{base}/to-localhost"), e, 400).await;
}

#[tokio::test]
async fn slow_download_times_out_with_504() {
    let (base, _) = server().await;
    let s = MediaUrlSettings {
        download_timeout: Duration::from_millis(200),
        ..seam()
    };
    let e = MediaError::Timeout {
        at: AT,
        after_ms: 200,
    };
    refused(&s, &format!("{base}/slow"), e, 504).await;
}

#[tokio::test]
async fn loopback_is_refused_without_the_seam() {
    let (base, _) = server().await;
    let s = MediaUrlSettings::default();
    let e = blocked("127.0.0.1", BlockReason::Loopback);
    refused(&s, &format!("{base}/img.png"), e, 400).await;
    let port = base.rsplit(':').next().unwrap();
    let e = blocked("localhost", BlockReason::Loopback);
    refused(&s, &format!("http://localhost:{port}/img.png"), e, 400).await;
    let e = blocked("::ffff:127.0.0.1", BlockReason::Loopback);
    refused(&s, &format!("http://[::ffff:127.0.0.1]:{port}/"), e, 400).await;
}

#[tokio::test]
async fn client_mistakes_are_refused_before_any_download() {
    let (base, gauge) = server().await;
    let s = MediaUrlSettings {
        max_entries: 2,
        ..seam()
    };
    let part = |u: &str| format!(r#"{{"type":"image_url","image_url":{{"url":"{u}"}}}}"#);
    let g = format!("{base}/gauge");
    let three = format!(
        r#"{{"messages":[{{"content":[{},{}]}},{{"content":[{}]}}]}}"#,
        part(&g),
        part(&g),
        part(&g)
    );
    let e = run(&s, &three).await.unwrap_err();
    assert_eq!(e, MediaError::TooManyEntries { got: 3, max: 2 });
    assert_eq!(e.to_string(), "too many multimodal entries: got 3, max 2");
    assert_eq!(e.status(), 400);
    let bad_data = format!(
        r#"{{"messages":[{{"content":[{},{}]}}]}}"#,
        part(&g),
        part("data:text/html;base64,PGI+")
    );
    let e = run(&s, &bad_data).await.unwrap_err();
    assert_eq!(e.status(), 400);
    assert_eq!(
        e.to_string(),
        "messages[0].content[1].image_url.url: invalid data URL: data URI content type \"text/html\" not allowed"
    );
    let e = MediaError::Scheme {
        at: AT,
        scheme: "ftp".into(),
    };
    refused(&s, "ftp://h/x.png", e, 400).await;
    let listed = MediaUrlSettings {
        allowed_domains: vec!["images.example.com".into()],
        ..seam()
    };
    let e = not_allowed("127.0.0.1", false);
    refused(&listed, &format!("{base}/img.png"), e, 400).await;
    // https is spoken: to a plain-HTTP server the TLS handshake fails (502, said so).
    let tls_url = format!("{}/img.png", base.replacen("http://", "https://", 1));
    let e = run(&s, &chat(&tls_url)).await.unwrap_err();
    assert!(
        matches!(&e, MediaError::Transport { detail, .. } if detail.starts_with("TLS: ")),
        "{e:?}"
    );
    assert_eq!(e.status(), 502);
    assert_eq!(
        gauge.most.load(Ordering::SeqCst),
        0,
        "nothing was downloaded"
    );
}

#[tokio::test]
async fn downloads_run_concurrently_up_to_the_limit() {
    let (base, gauge) = server().await;
    let s = MediaUrlSettings {
        max_concurrent_downloads: 2,
        ..seam()
    };
    let part = format!(r#"{{"type":"image_url","image_url":{{"url":"{base}/gauge"}}}}"#);
    let parts = vec![part; 5].join(",");
    let body = format!(r#"{{"messages":[{{"role":"user","content":[{parts}]}}]}}"#);
    let out = run(&s, &body).await.unwrap().unwrap();
    let inlined = r#"{"type":"image_url","image_url":{"url":"data:image/gif;base64,Rw=="}}"#;
    let want = format!(
        r#"{{"messages":[{{"role":"user","content":[{}]}}]}}"#,
        [inlined; 5].join(",")
    );
    assert_eq!(std::str::from_utf8(&out).unwrap(), want);
    assert_eq!(gauge.most.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn bodies_without_downloads_are_left_alone() {
    let s = MediaUrlSettings::default();
    for body in [
        r#"{"model":"m","messages":[{"role":"user","content":"hello"}]}"#,
        r#"{"model":"m","prompt":"image_url"}"#,
        r#"{"messages":[{"content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgo="}}]}]}"#,
        "image_url but not json",
    ] {
        assert_eq!(run(&s, body).await, Ok(None), "{body}");
    }
}
