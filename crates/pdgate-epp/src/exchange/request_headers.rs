//! The request headers: checked against the header limits as a whole, then kept (`:path` as
//! the path, `content-length` as the declared length); the router-owned ones a client sent
//! are named for removal.

use super::{Answers, Exchange};
use crate::limits::{MAX_REQUEST_HEADERS, MAX_REQUEST_HEADER_BYTES};
use envoy_types::pb::envoy::config::core::v3::HeaderMap as EnvoyHeaders;
use http::{HeaderName, HeaderValue};
use pdgate_api::headers;

impl Exchange {
    /// Keeps the request's headers (`:path` as the path; the other pseudo-headers dropped),
    /// after checking the whole list against [`MAX_REQUEST_HEADERS`] and
    /// [`MAX_REQUEST_HEADER_BYTES`] (nothing is kept from a list over either).
    ///
    /// Errors: the 431 answer naming the limit.
    pub(super) fn read_request_headers(&mut self, h: Option<&EnvoyHeaders>) -> Result<(), Answers> {
        let list = h.map(|h| h.headers.as_slice()).unwrap_or_default();
        let value_of = |hv: &envoy_types::pb::envoy::config::core::v3::HeaderValue| -> usize {
            if hv.raw_value.is_empty() {
                hv.value.len()
            } else {
                hv.raw_value.len()
            }
        };
        let fields = list.iter().filter(|hv| !hv.key.starts_with(':')).count();
        let bytes: usize = list.iter().map(|hv| hv.key.len() + value_of(hv)).sum();
        let too_large = http::StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE;
        if fields > MAX_REQUEST_HEADERS {
            return Err(self.refuse(
                "too_many_headers",
                too_large,
                format!("request has {fields} header fields; the limit is {MAX_REQUEST_HEADERS}"),
            ));
        }
        if bytes > MAX_REQUEST_HEADER_BYTES {
            return Err(self.refuse(
                "headers_too_large",
                too_large,
                format!(
                    "request headers are {bytes} bytes; the limit is {MAX_REQUEST_HEADER_BYTES}"
                ),
            ));
        }
        for hv in list {
            let value = if hv.raw_value.is_empty() {
                hv.value.as_bytes()
            } else {
                &hv.raw_value
            };
            let key = hv.key.to_ascii_lowercase();
            if key == ":path" {
                self.path = String::from_utf8_lossy(value).into_owned();
                continue;
            }
            if key.starts_with(':') {
                continue;
            }
            if let (Ok(n), Ok(v)) = (
                HeaderName::from_bytes(key.as_bytes()),
                HeaderValue::from_bytes(value),
            ) {
                if n == http::header::CONTENT_LENGTH {
                    self.declared = v.to_str().ok().and_then(|v| v.trim().parse().ok());
                }
                self.headers.append(n, v);
            }
        }
        Ok(())
    }

    /// Router-owned headers the client sent: removed before the request goes upstream.
    pub(super) fn owned_to_remove(&self) -> Vec<String> {
        let mut names: Vec<String> = (self.headers.keys())
            .map(|k| k.as_str())
            .filter(|k| headers::is_internal(k))
            .map(str::to_string)
            .collect();
        names.dedup();
        names
    }
}
