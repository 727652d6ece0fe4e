//! Unit tests of `endpoints_file`: the endpoints file and flag forms, limits, and the registry keeping loads by name.

use super::*;
use crate::registry::EndpointRegistry;
use parking_lot::Mutex;
use std::sync::Arc;

#[test]
fn deep_nesting_is_refused_before_parsing() {
    let deep = format!(
        "endpoints: {}{}\n",
        "[".repeat(200_000),
        "]".repeat(200_000)
    );
    let started = std::time::Instant::now();
    let e = parse_endpoints_yaml(&deep, "eps.yaml").unwrap_err();
    assert_eq!(e.message, "line 1: nested deeper than 64 levels");
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    let indented = format!("endpoints:\n{}- a\n", " ".repeat(200));
    let e = parse_endpoints_yaml(&indented, "eps.yaml").unwrap_err();
    assert_eq!(e.message, "line 2: indented deeper than 64 levels");
    // Brackets in quotes and comments do not count; ordinary flow maps pass.
    let ok = format!(
        "endpoints: # {}\n- {{name: \"{}\", address: 127.0.0.1:9000, labels: {{a.b/c: d}}}}\n",
        "[".repeat(100),
        "[".repeat(100)
    );
    assert_eq!(parse_endpoints_yaml(&ok, "eps.yaml").unwrap().len(), 1);
}

#[test]
fn a_huge_dp_size_is_refused_before_any_rank_is_built() {
    let e = parse_endpoints_yaml(
        "endpoints:\n- name: w\n  address: 127.0.0.1:9000\n  dp_size: 4000000000\n",
        "eps.yaml",
    )
    .unwrap_err();
    assert_eq!(
        e.message,
        "endpoints[0] (w): `dp_size` 4000000000 is over 1024"
    );
    let ok = parse_endpoints_yaml(
        "endpoints:\n- name: w\n  address: 127.0.0.1:9000\n  dp_size: 1024\n",
        "eps.yaml",
    )
    .unwrap();
    assert_eq!(ok.len(), 1024);
}

#[test]
fn entries_times_dp_size_over_the_file_cap_are_refused_with_the_count() {
    // 10 entries of 1,001 ranks: 10,010 endpoints from a 0.6 KB file.
    let entries = |n: usize, dp: u32| -> String {
        (0..n)
            .map(|i| {
                format!(
                    "- name: w{i}\n  address: 127.0.0.1:{}\n  dp_size: {dp}\n",
                    9000 + i
                )
            })
            .collect()
    };
    let yaml = format!("endpoints:\n{}", entries(10, 1001));
    let started = std::time::Instant::now();
    let e = parse_endpoints_yaml(&yaml, "eps.yaml").unwrap_err();
    assert_eq!(
        e.to_string(),
        "eps.yaml: 10010 endpoints (10 entries, counting each `dp_size` rank), over the limit \
         of 10000 per endpoints file"
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(1));
    // Ranks and plain entries count alike: 9 × 1,000 + 1,000 plain entries is the cap itself.
    let plain: String = (0..1000)
        .map(|i| format!("- address: 127.0.0.2:{}\n", 10_000 + i))
        .collect();
    let yaml = format!("endpoints:\n{}{plain}", entries(9, 1000));
    assert_eq!(
        parse_endpoints_yaml(&yaml, "eps.yaml").unwrap().len() as u64,
        MAX_ENDPOINTS_PER_FILE
    );
    let yaml = format!("{yaml}- address: 127.0.0.3:1\n");
    assert_eq!(
        parse_endpoints_yaml(&yaml, "eps.yaml").unwrap_err().message,
        "10001 endpoints (1010 entries, counting each `dp_size` rank), over the limit of 10000 \
         per endpoints file"
    );
}

#[test]
fn file_and_flag_forms_parse_and_errors_name_the_entry() {
    let eps = parse_endpoints_yaml(
        "endpoints:\n- name: p0\n  address: 127.0.0.1:9000\n  labels: {llm-d.ai/role: prefill}\n- address: 127.0.0.1:9001\n  ready: false\n",
        "eps.yaml",
    )
    .unwrap();
    assert_eq!(eps[0].role, Some(Role::Prefill));
    assert_eq!(
        (eps[1].name.as_str(), eps[1].ready, eps[1].role),
        ("127.0.0.1:9001", false, None)
    );

    let e = parse_endpoints_yaml(
        "endpoints:\n- address: 127.0.0.1:9000\n  labels: {llm-d.ai/role: gpu}\n",
        "eps.yaml",
    )
    .unwrap_err();
    assert!(
        e.to_string().starts_with(
            "eps.yaml: endpoints[0] (127.0.0.1:9000): label llm-d.ai/role: unknown role \"gpu\""
        ),
        "{e}"
    );
    let e = parse_endpoints_yaml("endpoints:\n- address: x\n", "eps.yaml").unwrap_err();
    assert_eq!(
        e.to_string(),
        "eps.yaml: endpoints[0] (x): address \"x\" must be host:port (no scheme, no path)"
    );
    let e = parse_endpoints_yaml("endpoints:\n- adress: 1.2.3.4:5\n", "eps.yaml").unwrap_err();
    assert!(
        e.to_string().contains("unknown field `adress`") && e.to_string().contains("line 2"),
        "{e}"
    );
    let ep =
        parse_endpoint_flag("127.0.0.1:8001,name=d0,role=decode,revision=a,example.com/zone=z1")
            .unwrap();
    assert_eq!(
        (ep.name.as_str(), ep.role, ep.revision()),
        ("d0", Some(Role::Decode), Some("a"))
    );
    assert_eq!(ep.labels["example.com/zone"], "z1");
    let flag_err = |f: &str| parse_endpoint_flag(f).unwrap_err().to_string();
    assert_eq!(
        flag_err("127.0.0.1:8001,decode"),
        "--endpoint: \"127.0.0.1:8001,decode\": expected key=value, got \"decode\""
    );
    assert_eq!(
        flag_err("http://127.0.0.1:8001"),
        "--endpoint: \"http://127.0.0.1:8001\": address \"http://127.0.0.1:8001\" must be host:port (no scheme, no path)"
    );
    assert_eq!(
        flag_err("127.0.0.1:8001,name="),
        "--endpoint: \"127.0.0.1:8001,name=\": `name` has an empty value"
    );
    assert_eq!(
        flag_err("127.0.0.1:8001,role=decode,role=prefill"),
        "--endpoint: \"127.0.0.1:8001,role=decode,role=prefill\": `role` given twice"
    );
    assert!(flag_err("127.0.0.1:8001,rol=decode").ends_with(
        "unknown key `rol` (expected name, role, revision, or a prefixed label key such as example.com/zone)"
    ));
}

#[test]
fn loads_survive_a_rebuild_by_name() {
    let reg = EndpointRegistry::default();
    reg.apply(vec![parse_endpoint_flag("127.0.0.1:1,name=a").unwrap()]);
    let guard = pdgate_scheduler::InFlightGuard::book(&reg.snapshot().endpoints[0].load);
    reg.apply(vec![
        parse_endpoint_flag("127.0.0.1:1,name=a").unwrap(),
        parse_endpoint_flag("127.0.0.1:2,name=b").unwrap(),
    ]);
    let snap = reg.snapshot();
    assert_eq!((snap.version, snap.endpoints[0].load.in_flight()), (2, 1));
    drop(guard);
    assert_eq!(snap.endpoints[0].load.in_flight(), 0);
}

#[test]
fn departed_endpoints_are_retired_and_listeners_see_each_snapshot() {
    let reg = EndpointRegistry::default();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    reg.on_change(Box::new(move |snap| {
        s.lock().push((snap.version, snap.endpoints.len()))
    }));
    let ep = |f: &str| parse_endpoint_flag(f).unwrap();
    reg.apply(vec![ep("127.0.0.1:1,name=a"), ep("127.0.0.1:2,name=b")]);
    let old_a = reg.snapshot().endpoints[0].load.clone();
    reg.apply(vec![ep("127.0.0.1:2,name=b")]);
    assert!(old_a.is_retired());
    assert!(!reg.snapshot().endpoints[0].load.is_retired());
    reg.apply(vec![ep("127.0.0.1:1,name=a"), ep("127.0.0.1:2,name=b")]);
    let new_a = &reg.snapshot().endpoints[0].load;
    assert!(!Arc::ptr_eq(new_a, &old_a) && !new_a.is_retired());
    assert_eq!(*seen.lock(), [(1, 2), (2, 1), (3, 2)]);
}

#[test]
fn ill_typed_files_say_the_shape_expected_not_a_rust_type() {
    for (yaml, want) in [
        ("5", "eps.yaml: invalid type: integer `5`, expected a mapping"),
        ("[5]", "eps.yaml: invalid type: sequence, expected a mapping"),
        (
            "endpoints: [5]",
            "eps.yaml: endpoints[0]: invalid type: integer `5`, expected a mapping at line 1 column 13",
        ),
    ] {
        let e = parse_endpoints_yaml(yaml, "eps.yaml").unwrap_err().to_string();
        assert_eq!(e, want, "{yaml}");
    }
}
