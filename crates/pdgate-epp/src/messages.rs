//! Builders of the ext_proc answers pdgate's EPP sends (`envoy.service.ext_proc.v3`), for
//! Envoy's `FULL_DUPLEX_STREAMED` body mode: every body chunk Envoy sends is answered with a
//! `StreamedBodyResponse`, and answers go in the order headers → body (→ trailers) for the
//! request, then the same for the response.

use envoy_types::pb::envoy::config::core::v3::{
    header_value_option::HeaderAppendAction, HeaderValue, HeaderValueOption,
};
use envoy_types::pb::envoy::r#type::v3::HttpStatus;
use envoy_types::pb::envoy::service::ext_proc::v3::{
    body_mutation::Mutation, processing_response::Response, BodyMutation, BodyResponse,
    CommonResponse, HeaderMutation, HeadersResponse, ImmediateResponse, ProcessingResponse,
    StreamedBodyResponse, TrailersResponse,
};
use envoy_types::pb::google::protobuf::Struct;

/// Largest body chunk sent back to Envoy, bytes: some Envoy builds cap a streamed chunk at
/// 64 KiB; the reference EPP uses 62,000 for a margin (its `bodyByteLimit`).
pub const MAX_CHUNK_BYTES: usize = 62_000;

/// Which half of the exchange a message belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Half {
    /// The client's request, on its way to the model server.
    Request,
    /// The model server's response, on its way to the client.
    Response,
}

/// Headers to set (overwriting any copy) and to remove, as a mutation.
fn mutation(set: &[(String, String)], remove: &[String]) -> Option<HeaderMutation> {
    if set.is_empty() && remove.is_empty() {
        return None;
    }
    Some(HeaderMutation {
        set_headers: set
            .iter()
            .map(|(k, v)| HeaderValueOption {
                header: Some(HeaderValue {
                    key: k.clone(),
                    raw_value: v.as_bytes().to_vec(),
                    ..Default::default()
                }),
                append_action: HeaderAppendAction::OverwriteIfExistsOrAdd as i32,
                ..Default::default()
            })
            .collect(),
        remove_headers: remove.to_vec(),
    })
}

/// The answer to a headers message: `set` applied and `remove` removed; for the request
/// half, the route cache cleared (so the destination header takes effect); `metadata` as
/// dynamic metadata.
pub fn headers(
    half: Half,
    set: &[(String, String)],
    remove: &[String],
    metadata: Option<Struct>,
) -> ProcessingResponse {
    let common = CommonResponse {
        header_mutation: mutation(set, remove),
        clear_route_cache: half == Half::Request,
        ..Default::default()
    };
    let answer = HeadersResponse {
        response: Some(common),
    };
    ProcessingResponse {
        response: Some(match half {
            Half::Request => Response::RequestHeaders(answer),
            Half::Response => Response::ResponseHeaders(answer),
        }),
        dynamic_metadata: metadata,
        ..Default::default()
    }
}

/// `body` as streamed body answers of at most [`MAX_CHUNK_BYTES`] each; the last carries
/// `end_of_stream` when `end` is set. An empty body is one empty chunk.
pub fn body(half: Half, body: &[u8], end: bool) -> Vec<ProcessingResponse> {
    Chunks::new(half, bytes::Bytes::copy_from_slice(body), end).collect()
}

/// The answers of [`body`], made one at a time: a request body goes back to Envoy as it
/// takes the answers, never copied whole a second time (what it holds is the body, counted
/// by the in-flight budget, and the answers queued).
#[derive(Debug)]
pub struct Chunks {
    half: Half,
    body: bytes::Bytes,
    end: bool,
    /// True once the first answer (the only one of an empty body) was made.
    started: bool,
}

impl Chunks {
    /// The answers carrying `body` (see [`body`]).
    pub fn new(half: Half, body: bytes::Bytes, end: bool) -> Chunks {
        Chunks {
            half,
            body,
            end,
            started: false,
        }
    }
}

impl Iterator for Chunks {
    type Item = ProcessingResponse;

    fn next(&mut self) -> Option<ProcessingResponse> {
        if self.started && self.body.is_empty() {
            return None;
        }
        self.started = true;
        let chunk = self.body.split_to(self.body.len().min(MAX_CHUNK_BYTES));
        let answer = BodyResponse {
            response: Some(CommonResponse {
                body_mutation: Some(BodyMutation {
                    mutation: Some(Mutation::StreamedResponse(StreamedBodyResponse {
                        body: Vec::from(chunk),
                        end_of_stream: self.end && self.body.is_empty(),
                        ..Default::default()
                    })),
                }),
                ..Default::default()
            }),
        };
        Some(ProcessingResponse {
            response: Some(match self.half {
                Half::Request => Response::RequestBody(answer),
                Half::Response => Response::ResponseBody(answer),
            }),
            ..Default::default()
        })
    }
}

/// The answer to a trailers message: nothing changed.
pub fn trailers(half: Half) -> ProcessingResponse {
    let answer = TrailersResponse::default();
    ProcessingResponse {
        response: Some(match half {
            Half::Request => Response::RequestTrailers(answer),
            Half::Response => Response::ResponseTrailers(answer),
        }),
        ..Default::default()
    }
}

/// An immediate response to the client (Envoy sends it instead of calling any upstream):
/// `status`, headers `set`, `body`; `details` goes to Envoy's access log.
pub fn immediate(
    status: u16,
    set: &[(String, String)],
    body: Vec<u8>,
    details: &str,
) -> ProcessingResponse {
    ProcessingResponse {
        response: Some(Response::ImmediateResponse(ImmediateResponse {
            status: Some(HttpStatus {
                code: i32::from(status),
            }),
            headers: mutation(set, &[]),
            body,
            details: details
                .chars()
                .filter(|c| c.is_ascii_graphic() || *c == ' ')
                .take(256)
                .collect(),
            ..Default::default()
        })),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(r: &ProcessingResponse) -> (usize, bool) {
        let Some(Response::RequestBody(b)) = &r.response else {
            panic!("not a request body answer: {r:?}")
        };
        let m = b.response.as_ref().unwrap().body_mutation.as_ref().unwrap();
        let Some(Mutation::StreamedResponse(s)) = &m.mutation else {
            panic!("not streamed: {m:?}")
        };
        (s.body.len(), s.end_of_stream)
    }

    #[test]
    fn bodies_split_at_the_chunk_limit_and_only_the_last_ends_the_stream() {
        let sizes: Vec<_> = body(Half::Request, &[7u8; 200_000], true)
            .iter()
            .map(chunk)
            .collect();
        assert_eq!(
            sizes,
            vec![
                (62_000, false),
                (62_000, false),
                (62_000, false),
                (14_000, true)
            ]
        );
        assert_eq!(
            body(Half::Request, b"", true)
                .iter()
                .map(chunk)
                .collect::<Vec<_>>(),
            vec![(0, true)]
        );
        assert_eq!(
            body(Half::Request, &[1; 62_000], false)
                .iter()
                .map(chunk)
                .collect::<Vec<_>>(),
            vec![(62_000, false)]
        );
    }

    #[test]
    fn request_headers_clear_the_route_cache_and_response_headers_do_not() {
        let set = [("x-a".to_string(), "1".to_string())];
        let Some(Response::RequestHeaders(h)) = headers(Half::Request, &set, &[], None).response
        else {
            panic!()
        };
        let c = h.response.unwrap();
        assert!(c.clear_route_cache);
        let hv = c.header_mutation.unwrap().set_headers[0]
            .header
            .clone()
            .unwrap();
        assert_eq!(
            (hv.key.as_str(), hv.raw_value.as_slice()),
            ("x-a", &b"1"[..])
        );
        let Some(Response::ResponseHeaders(h)) = headers(Half::Response, &[], &[], None).response
        else {
            panic!()
        };
        assert!(!h.response.unwrap().clear_route_cache);
    }
}
