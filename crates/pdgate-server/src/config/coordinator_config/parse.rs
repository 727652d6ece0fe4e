//! Text-level helpers of the coordinator file: addresses, environment overrides, and the
//! line a key or a step is on.

use super::raw::{GoDuration, RawFile};
use serde_yaml_ng::Value;

/// How a YAML value reads in an error ("a number", "a mapping", …).
pub(crate) fn describe(v: &Value) -> String {
    match v {
        Value::Null => "nothing".into(),
        Value::Bool(b) => format!("the boolean `{b}`"),
        Value::Number(n) => format!("the number `{n}` (add a unit, e.g. `{n}s`)"),
        Value::String(s) => format!("the string `{s}`"),
        Value::Sequence(_) => "a list".into(),
        Value::Mapping(_) => "a mapping".into(),
        Value::Tagged(_) => "a tagged value".into(),
    }
}

/// `server.listen_addr` as Go's `net/http` reads it: `:PORT` (every interface, IPv6 and IPv4:
/// host `::`), `HOST:PORT`, `[V6]:PORT`.
///
/// Errors: no port, or a port that is not a number (0 binds a free port, as in Go).
pub(super) fn listen_addr(addr: &str) -> Result<(String, u16), String> {
    let bad = || format!("`{addr}` is not `HOST:PORT`, `[IPV6]:PORT` or `:PORT`");
    let (host, port) = addr.rsplit_once(':').ok_or_else(bad)?;
    if host.contains(':') && !(host.starts_with('[') && host.ends_with(']')) {
        return Err(bad());
    }
    let port: u16 = port.parse().map_err(|_| bad())?;
    let host = match host {
        // Go's `:PORT`: every interface, IPv6 and IPv4 (`threads::spawn_server_threads` binds
        // `[::]` dual-stack, or `0.0.0.0` where IPv6 is unavailable).
        "" => "::",
        h => h
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(h),
    };
    Ok((host.to_string(), port))
}

/// An upstream base URL (`http://HOST[:PORT]`, no path: `gateway.address`, a render step's
/// `address`) as the `HOST:PORT` pdgate's flags take; port 80 when absent. `what` names the
/// upstream in errors ("gateway", "render service").
///
/// Errors: another scheme (pdgate's upstream client speaks plain HTTP/1.1), a path, no host.
pub(super) fn upstream_address(url: &str, what: &str) -> Result<String, String> {
    let scheme_end = url.find("://").map_or(0, |i| i + 3);
    let scheme = url[..scheme_end].to_ascii_lowercase();
    let rest = (scheme == "http://").then(|| &url[scheme_end..]).ok_or_else(|| {
        if scheme == "https://" {
            format!("`{url}`: an https {what} is not supported (pdgate's upstream client speaks plain HTTP); use an http:// address")
        } else {
            format!("`{url}` is not an http:// URL")
        }
    })?;
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    if rest.contains('@') {
        return Err(format!(
            "`{url}`: credentials in the URL are not supported (they would not be sent)"
        ));
    }
    if rest.contains('/') || rest.contains('?') {
        return Err(format!(
            "`{url}`: give the {what}'s base URL without a path"
        ));
    }
    let host_port = match rest.rsplit_once(':') {
        // `[v6]` alone has colons inside the brackets only.
        Some((h, p)) if !rest.ends_with(']') => {
            let p: u16 = p
                .parse()
                .map_err(|_| format!("`{url}`: `{p}` is not a port"))?;
            format!("{h}:{p}")
        }
        _ => format!("{rest}:80"),
    };
    if host_port.starts_with(':') {
        return Err(format!("`{url}` names no host"));
    }
    Ok(host_port)
}

/// Sets `key` (a dotted path of [`super::ENV_KEYS`]) from an environment value, read as llm-d's
/// loader reads it: integers, Go booleans (`1`, `t`, `true`, `TRUE`, `0`, `f`, `false`, …) and
/// Go durations.
///
/// Errors: the value does not read as the key's type.
pub(super) fn set_from_env(raw: &mut RawFile, key: &str, value: &str) -> Result<(), String> {
    // As Go's strconv.Atoi and ParseBool read them: no surrounding space.
    let int = || {
        value
            .parse::<i64>()
            .map_err(|_| format!("`{value}` is not an integer"))
    };
    let dur = || pdgate_scheduler::flow::duration::parse(value).map(GoDuration);
    let boolean = || match value {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
        _ => Err(format!("`{value}` is not a boolean")),
    };
    let s = || Some(value.to_string());
    match key {
        "log_level" => raw.log_level = Some(int()?),
        "server.listen_addr" => raw.server.listen_addr = s(),
        "server.read_timeout" => raw.server.read_timeout = Some(dur()?),
        "server.write_timeout" => raw.server.write_timeout = Some(dur()?),
        "server.shutdown_timeout" => raw.server.shutdown_timeout = Some(dur()?),
        "server.max_request_body_size" => raw.server.max_request_body_size = Some(int()?),
        "gateway.address" => raw.gateway.address = s(),
        "gateway.max_idle_conns_per_host" => raw.gateway.max_idle_conns_per_host = Some(int()?),
        "gateway.idle_conn_timeout" => raw.gateway.idle_conn_timeout = Some(dur()?),
        "gateway.timeout" => raw.gateway.timeout = Some(dur()?),
        "pipeline.kv_connector" => raw.pipeline.kv_connector = s(),
        "pipeline.ec_connector" => raw.pipeline.ec_connector = s(),
        "pipeline.use_openai_format" => raw.pipeline.use_openai_format = Some(boolean()?),
        other => return Err(format!("`{other}` cannot be set from the environment")),
    }
    Ok(())
}

/// Decodes `yaml` strictly.
///
/// Errors: `(line, message)`, the message naming the dotted key at fault (from
/// `serde_path_to_error`, as serde_yaml_ng alone points a value error at its section's first
/// key): a bad value is placed on its key's line, a repeated key on its second copy, an
/// unknown key (and anything inside `pipeline.steps`) where the parser stopped.
pub(super) fn decode(yaml: &str) -> Result<RawFile, (Option<usize>, String)> {
    let de = serde_yaml_ng::Deserializer::from_str(yaml);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let stopped_at = e.inner().location().map(|l| l.line());
        let text = e.inner().to_string();
        let text = text.rfind(" at line ").map_or(&text[..], |i| &text[..i]);
        // serde_yaml_ng's own prefix, `PARENT: `, when it has one.
        let (parent, rest) = match text.split_once(": ") {
            Some((p, r)) if !p.contains(' ') && path.starts_with(p) => (Some(p), r),
            _ => (None, text),
        };
        if let Some(key) = rest
            .strip_prefix("duplicate field `")
            .and_then(|r| r.strip_suffix('`'))
        {
            let dotted = parent.map_or(key.to_string(), |p| format!("{p}.{key}"));
            return (
                key_line_nth(yaml, &dotted, 1).or(stopped_at),
                text.to_string(),
            );
        }
        if path.contains('[') || rest.starts_with("unknown field") || path == "." {
            return (stopped_at, text.to_string());
        }
        (
            key_line(yaml, &path).or(stopped_at),
            format!("{path}: {rest}"),
        )
    })
}

/// 1-based line of the dotted `key` (block-style YAML: each part found below the previous,
/// indented deeper), when the file has it.
pub(super) fn key_line(yaml: &str, key: &str) -> Option<usize> {
    key_line_nth(yaml, key, 0)
}

/// 1-based line of the `nth` (0-based) copy of the dotted `key`'s last part within the first
/// copy of its parents (a repeated key's second copy is `nth` 1), when the file has it.
pub(super) fn key_line_nth(yaml: &str, key: &str, nth: usize) -> Option<usize> {
    let (parents, last) = match key.rsplit_once('.') {
        Some((p, l)) => (Some(p), l),
        None => (None, key),
    };
    let lines: Vec<&str> = yaml.lines().collect();
    let (from, parent_indent) = match parents {
        None => (0, None),
        Some(p) => {
            let at = key_line_first(yaml, p)?;
            (at, Some(indent_of(lines[at - 1])))
        }
    };
    // The parent's direct children sit at the indent of its first child line.
    let mut child_indent = parent_indent.is_none().then_some(0);
    let mut seen = 0;
    for (i, l) in lines.iter().enumerate().skip(from) {
        let t = l.trim_start();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        let ind = indent_of(l);
        if parent_indent.is_some_and(|p| ind <= p) {
            break;
        }
        if *child_indent.get_or_insert(ind) != ind {
            continue;
        }
        if t.strip_prefix(last)
            .is_some_and(|r| r.trim_start().starts_with(':'))
        {
            if seen == nth {
                return Some(i + 1);
            }
            seen += 1;
        }
    }
    None
}

fn indent_of(l: &str) -> usize {
    l.len() - l.trim_start().len()
}

/// 1-based line of the first copy of the dotted `key` (each part found below the previous,
/// indented deeper).
fn key_line_first(yaml: &str, key: &str) -> Option<usize> {
    let mut from = 0;
    let mut indent: Option<usize> = None;
    let lines: Vec<&str> = yaml.lines().collect();
    let mut found = None;
    for part in key.split('.') {
        let at = (from..lines.len()).find(|&i| {
            let l = lines[i];
            let ind = l.len() - l.trim_start().len();
            indent.is_none_or(|p| ind > p)
                && l.trim_start()
                    .strip_prefix(part)
                    .is_some_and(|r| r.trim_start().starts_with(':'))
        })?;
        indent = Some(lines[at].len() - lines[at].trim_start().len());
        from = at + 1;
        found = Some(at + 1);
    }
    found
}

/// 1-based line of `pipeline.steps[i]` (its `- type:` or `- ` line), when the file has it.
pub(super) fn step_line(yaml: &str, i: usize) -> Option<usize> {
    let start = key_line(yaml, "pipeline.steps")?;
    let lines: Vec<&str> = yaml.lines().collect();
    let steps_indent = lines[start - 1].len() - lines[start - 1].trim_start().len();
    (start..lines.len())
        .filter(|&n| {
            let l = lines[n];
            let t = l.trim_start();
            t.starts_with("- ") && l.len() - t.len() >= steps_indent
        })
        .nth(i)
        .map(|n| n + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_addresses_read_like_go() {
        assert_eq!(listen_addr(":8080"), Ok(("::".into(), 8080)));
        assert_eq!(listen_addr("[::]:8080"), Ok(("::".into(), 8080)));
        assert_eq!(listen_addr("0.0.0.0:8080"), Ok(("0.0.0.0".into(), 8080)));
        assert_eq!(listen_addr("127.0.0.1:9"), Ok(("127.0.0.1".into(), 9)));
        assert_eq!(listen_addr("[::1]:8080"), Ok(("::1".into(), 8080)));
        assert_eq!(
            listen_addr("8080").unwrap_err(),
            "`8080` is not `HOST:PORT`, `[IPV6]:PORT` or `:PORT`"
        );
        assert!(listen_addr("::1:8080").is_err());
        assert_eq!(listen_addr("127.0.0.1:0"), Ok(("127.0.0.1".into(), 0)));
    }

    #[test]
    fn upstream_urls_become_host_port() {
        assert_eq!(
            upstream_address("http://inference-gateway:80", "gateway"),
            Ok("inference-gateway:80".into())
        );
        assert_eq!(upstream_address("http://gw", "gateway"), Ok("gw:80".into()));
        assert_eq!(
            upstream_address("http://gw:8081/", "gateway"),
            Ok("gw:8081".into())
        );
        assert_eq!(
            upstream_address("HTTP://gw:1", "gateway"),
            Ok("gw:1".into())
        );
        assert_eq!(
            upstream_address("http://[::1]", "gateway"),
            Ok("[::1]:80".into())
        );
        assert_eq!(
            upstream_address("http://[::1]:9", "gateway"),
            Ok("[::1]:9".into())
        );
        assert!(upstream_address("http://u:p@gw:1", "gateway")
            .unwrap_err()
            .contains("credentials"));
        assert!(upstream_address("https://gw", "gateway")
            .unwrap_err()
            .contains("an https gateway is not supported"));
        assert!(upstream_address("gw:80", "gateway")
            .unwrap_err()
            .contains("not an http:// URL"));
        assert!(upstream_address("http://gw/v1", "gateway")
            .unwrap_err()
            .contains("without a path"));
        assert!(upstream_address("http://gw:x", "gateway")
            .unwrap_err()
            .contains("`x` is not a port"));
    }

    #[test]
    fn lines_of_keys_and_steps() {
        let y = "# c\nserver:\n  listen_addr: \":1\"\npipeline:\n  kv_connector: x\n  steps:\n    # a comment\n    - type: prefill\n    - type: decode\n      params:\n        kv_connector: y\n";
        assert_eq!(key_line(y, "server.listen_addr"), Some(3));
        assert_eq!(key_line(y, "pipeline.kv_connector"), Some(5));
        assert_eq!(key_line(y, "gateway.address"), None);
        assert_eq!(step_line(y, 0), Some(8));
        assert_eq!(step_line(y, 1), Some(9));
        assert_eq!(step_line(y, 2), None);
    }

    #[test]
    fn environment_values_read_as_their_types() {
        let mut r = RawFile::default();
        set_from_env(&mut r, "server.read_timeout", "45s").unwrap();
        assert_eq!(r.server.read_timeout.unwrap().0.as_secs(), 45);
        set_from_env(&mut r, "pipeline.use_openai_format", "F").unwrap();
        assert_eq!(r.pipeline.use_openai_format, Some(false));
        assert_eq!(
            set_from_env(&mut r, "server.max_request_body_size", "lots").unwrap_err(),
            "`lots` is not an integer"
        );
        assert!(set_from_env(&mut r, "gateway.timeout", "30")
            .unwrap_err()
            .contains("without a unit"));
    }
}
