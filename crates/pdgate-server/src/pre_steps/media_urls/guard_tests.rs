//! Pure parts: address classification, host allow-list, URL forms, data URLs, base64, and the
//! body scan and splice. Every expectation is worked out by hand.

use super::fetch::base64_encode;
use super::guard::{
    blocked, check_data_url, host_allowed, AddressPolicy, BlockReason, Target, TargetError,
};
use super::scan::{image_parts, may_hold_image_parts, splice};
use super::{MediaUrlArgs, MediaUrlSettings, PartLocation};
use clap::Parser;
use std::net::IpAddr;
use std::time::Duration;

fn class(ip: &str, policy: AddressPolicy) -> Option<BlockReason> {
    blocked(ip.parse::<IpAddr>().unwrap(), policy)
}

#[test]
fn blocked_ranges_are_refused_by_default() {
    use BlockReason::*;
    let p = AddressPolicy::default();
    let cases = [
        ("0.0.0.0", Unspecified),
        ("0.1.2.3", Unspecified),
        ("::", Unspecified),
        ("127.0.0.1", Loopback),
        ("127.255.0.9", Loopback),
        ("::1", Loopback),
        ("::ffff:127.0.0.1", Loopback),
        ("169.254.169.254", LinkLocal),
        ("169.254.0.1", LinkLocal),
        ("::ffff:169.254.169.254", LinkLocal),
        ("fe80::1", LinkLocal),
        ("febf::1", LinkLocal),
        ("100.64.0.1", SharedAddressSpace),
        ("100.127.255.254", SharedAddressSpace),
        ("fc00::1", UniqueLocal),
        ("fd12:3456::1", UniqueLocal),
        ("224.0.0.1", Multicast),
        ("239.255.255.250", Multicast),
        ("ff02::1", Multicast),
        ("255.255.255.255", Reserved),
        ("240.0.0.1", Reserved),
        ("::7f00:1", Reserved),
        ("10.0.0.1", Private),
        ("10.255.255.255", Private),
        ("172.16.0.1", Private),
        ("172.31.255.255", Private),
        ("192.168.1.1", Private),
        ("::ffff:10.1.2.3", Private),
        ("64:ff9b::a9fe:a9fe", LinkLocal),
        ("2002:7f00:1::", Loopback),
        ("2002:a9fe:a9fe::1", LinkLocal),
    ];
    for (ip, want) in cases {
        assert_eq!(class(ip, p), Some(want), "{ip}");
    }
}

#[test]
fn public_addresses_pass() {
    let p = AddressPolicy::default();
    for ip in [
        "8.8.8.8",
        "1.1.1.1",
        "100.63.255.255",
        "100.128.0.0",
        "172.15.255.255",
        "172.32.0.0",
        "169.253.255.255",
        "192.167.1.1",
        "223.255.255.255",
        "2001:4860:4860::8888",
        "::ffff:8.8.8.8",
        "64:ff9b::808:808",
        "2002:808:808::1",
    ] {
        assert_eq!(class(ip, p), None, "{ip}");
    }
}

#[test]
fn private_flag_opens_rfc1918_only_and_loopback_seam_opens_loopback_only() {
    let private = AddressPolicy {
        allow_private_networks: true,
        allow_loopback: false,
    };
    for ip in [
        "10.0.0.1",
        "172.16.0.1",
        "192.168.0.1",
        "::ffff:192.168.0.1",
    ] {
        assert_eq!(class(ip, private), None, "{ip}");
    }
    assert_eq!(class("fd00::1", private), Some(BlockReason::UniqueLocal));
    assert_eq!(
        class("100.64.0.1", private),
        Some(BlockReason::SharedAddressSpace)
    );
    assert_eq!(class("127.0.0.1", private), Some(BlockReason::Loopback));
    assert_eq!(
        class("169.254.169.254", private),
        Some(BlockReason::LinkLocal)
    );
    let seam = AddressPolicy {
        allow_private_networks: false,
        allow_loopback: true,
    };
    assert_eq!(class("127.0.0.1", seam), None);
    assert_eq!(class("::1", seam), None);
    assert_eq!(class("10.0.0.1", seam), Some(BlockReason::Private));
}

#[test]
fn domain_allow_list_is_exact_and_case_blind() {
    let list = vec!["images.example.com".to_string(), "cdn.test".to_string()];
    assert!(host_allowed("images.example.com", &list));
    assert!(host_allowed("IMAGES.Example.COM", &list));
    assert!(host_allowed("cdn.test", &list));
    assert!(!host_allowed("example.com", &list));
    assert!(!host_allowed("evil.images.example.com", &list));
    assert!(!host_allowed("images.example.com.evil", &list));
    assert!(host_allowed("anything.at.all", &[]));
}

#[test]
fn targets_parse_and_describe_without_query() {
    let t = Target::parse("HTTP://User:pw@Img.Example.com:8080/a/b.png?sig=secret#frag").unwrap();
    assert_eq!(
        t,
        Target {
            https: false,
            host: "img.example.com".into(),
            port: 8080,
            host_header: "Img.Example.com:8080".into(),
            path_and_query: "/a/b.png?sig=secret".into(),
        }
    );
    assert_eq!(t.describe(), "http://Img.Example.com:8080/a/b.png");
    let v6 = Target::parse("https://[::1]/x").unwrap();
    assert_eq!((v6.host.as_str(), v6.port, v6.https), ("::1", 443, true));
    assert_eq!(v6.host_header, "[::1]");
    assert_eq!(Target::parse("http://h").unwrap().path_and_query, "/");
    assert_eq!(
        Target::parse("ftp://h/x"),
        Err(TargetError::Scheme("ftp".into()))
    );
    assert_eq!(
        Target::parse("file:///etc/passwd"),
        Err(TargetError::Scheme("file".into()))
    );
    assert!(matches!(
        Target::parse("not a url"),
        Err(TargetError::Invalid(_))
    ));
    assert!(matches!(
        Target::parse("/relative.png"),
        Err(TargetError::Invalid(_))
    ));
}

#[test]
fn redirect_locations_resolve_against_the_target() {
    let t = Target::parse("http://h:81/a/b.png?q=1").unwrap();
    assert_eq!(t.join("http://x/y"), "http://x/y");
    assert_eq!(t.join("//other/z"), "http://other/z");
    assert_eq!(t.join("/root.png"), "http://h:81/root.png");
    assert_eq!(t.join("c.png"), "http://h:81/a/c.png");
    assert_eq!(t.join("?q=2"), "http://h:81/a/b.png?q=2");
}

#[test]
fn data_urls_need_base64_and_an_image_type() {
    for ok in [
        "data:image/png;base64,iVBORw0KGgo=",
        "data:IMAGE/JPEG;BASE64,AAAA",
        "data:image/webp;charset=x;base64,UklGRg==",
        "data:image/gif;base64,R0lG",
        "DATA:image/png;base64,iVBORw0KGgo=",
    ] {
        assert_eq!(check_data_url(ok), Ok(()), "{ok}");
    }
    let refused = [
        (
            "data:image/png;base64,!!!notbase64",
            "data URI payload is not valid base64",
        ),
        (
            "data:image/png;base64,",
            "data URI payload is not valid base64",
        ),
        (
            "data:image/png;base64,iVBORw0KGgo=%%",
            "data URI payload is not valid base64",
        ),
        (
            "data:image/png;base64,iVBORw0KGg",
            "data URI payload is not valid base64",
        ),
        (
            "data:image/png;base64,iVBO=w0K",
            "data URI payload is not valid base64",
        ),
        ("data:image/png,rawbytes", "data URI must be base64-encoded"),
        ("data:image/png;base64", "missing comma in data URI"),
        ("data:;base64,AAAA", "data URI missing media type"),
        (
            "data:text/html;base64,PGgxPg==",
            "data URI content type \"text/html\" not allowed",
        ),
        (
            "data:image/svg+xml;base64,PHN2Zz4=",
            "data URI content type \"image/svg+xml\" not allowed",
        ),
    ];
    for (url, why) in refused {
        assert_eq!(check_data_url(url), Err(why.to_string()), "{url}");
    }
}

#[test]
fn base64_matches_rfc4648_vectors() {
    let vectors = [
        ("", ""),
        ("f", "Zg=="),
        ("fo", "Zm8="),
        ("foo", "Zm9v"),
        ("foob", "Zm9vYg=="),
        ("fooba", "Zm9vYmE="),
        ("foobar", "Zm9vYmFy"),
    ];
    for (input, want) in vectors {
        assert_eq!(base64_encode(input.as_bytes()), want, "{input:?}");
    }
    assert_eq!(base64_encode(&[0xff, 0xfe, 0xfd]), "//79");
    assert_eq!(base64_encode(b"\x89PNG\r\n\x1a\n"), "iVBORw0KGgo=");
}

#[test]
fn scan_finds_image_parts_only_and_splices_in_place() {
    let body = br#"{"model":"m", "messages":[{"role":"system","content":"text"},
 {"role":"user","content":[{"type":"text","text":"image_url"},
  {"type":"image_url","image_url":{"url" : "http://a/x.png","detail":"high"}},
  {"type":"image_url","image_url":{"url":7}},
  {"type":"input_image","image_url":{"url":"http://b/"}},
  {"type":"image_url","image_url":{"url":"data:image/png;base64,AA\u003d\u003d"}}]}]}"#;
    assert!(may_hold_image_parts(body));
    let parts = image_parts(body);
    let seen: Vec<_> = parts.iter().map(|p| (p.at, p.url.as_str())).collect();
    assert_eq!(
        seen,
        [
            (
                PartLocation {
                    message: 1,
                    part: 1
                },
                "http://a/x.png"
            ),
            (
                PartLocation {
                    message: 1,
                    part: 4
                },
                "data:image/png;base64,AA=="
            ),
        ]
    );
    assert_eq!(&body[parts[0].span.clone()], br#""http://a/x.png""#);
    let out = splice(
        body,
        vec![(parts[0].span.clone(), "data:a/b;base64,QQ==".into())],
    );
    let want = String::from_utf8_lossy(body).replace(
        r#""url" : "http://a/x.png""#,
        r#""url" : "data:a/b;base64,QQ==""#,
    );
    assert_eq!(String::from_utf8_lossy(&out), want);
}

#[test]
fn scan_passes_over_bodies_without_image_parts() {
    assert!(!may_hold_image_parts(
        br#"{"messages":[{"role":"user","content":"hi"}]}"#
    ));
    assert!(may_hold_image_parts(br#"{"t":"caf\u00e9"}"#));
    assert!(image_parts(br#"{"t":"caf\u00e9"}"#).is_empty());
    assert!(image_parts(b"not json image_url").is_empty());
    assert!(image_parts(br#"["image_url"]"#).is_empty());
    assert!(image_parts(br#"{"messages":"image_url"}"#).is_empty());
    let escaped = br#"{"messages":[{"content":[{"type":"\u0069mage_url","\u0069mage_url":{"url":"http://h/"}}]}]}"#;
    assert!(may_hold_image_parts(escaped));
    assert_eq!(image_parts(escaped).len(), 1);
}

#[derive(clap::Parser)]
struct Cli {
    #[command(flatten)]
    media: MediaUrlArgs,
}

#[test]
fn flags_default_to_llm_d_and_map_to_settings() {
    let off = Cli::try_parse_from(["x"]).unwrap().media;
    assert_eq!(off.settings(), None);
    let on = Cli::try_parse_from(["x", "--replace-media-urls"])
        .unwrap()
        .media;
    assert_eq!(on.settings(), Some(MediaUrlSettings::default()));
    let d = MediaUrlSettings::default();
    assert_eq!(d.download_timeout, Duration::from_secs(10));
    assert_eq!(
        (
            d.max_concurrent_downloads,
            d.max_entries,
            d.max_download_bytes
        ),
        (10, 0, 10_485_760)
    );
    let set = Cli::try_parse_from([
        "x",
        "--replace-media-urls",
        "--media-download-timeout-ms=250",
        "--media-max-concurrent-downloads=3",
        "--media-max-entries=4",
        "--media-max-download-mib=2",
        "--media-allow-private-networks",
        "--media-allowed-domains= Img.Example.com,cdn.test",
    ])
    .unwrap()
    .media
    .settings()
    .unwrap();
    assert_eq!(
        set,
        MediaUrlSettings {
            download_timeout: Duration::from_millis(250),
            max_concurrent_downloads: 3,
            max_entries: 4,
            max_download_bytes: 2_097_152,
            allow_private_networks: true,
            allowed_domains: vec!["img.example.com".into(), "cdn.test".into()],
            allow_loopback_for_tests: false,
        }
    );
    for bad in [
        "--media-max-concurrent-downloads=0",
        "--media-max-download-mib=0",
        "--media-download-timeout-ms=0",
        "--media-max-entries=-1",
        // An empty entry (the list could end up empty: any host), or one no host can equal.
        "--media-allowed-domains=a.com,,b.com",
        "--media-allowed-domains=",
        "--media-allowed-domains=http://a.com",
        "--media-allowed-domains=*.a.com",
    ] {
        assert!(Cli::try_parse_from(["x", bad]).is_err(), "{bad}");
    }
}
