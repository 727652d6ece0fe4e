//! Finding the image parts of a chat body and rewriting their URLs in place. The body is read
//! through borrowed [`RawValue`]s, so no JSON tree is built and every byte but the rewritten
//! URL strings is kept as the client sent it (key order, spacing, number forms).
//!
//! The parts looked at are llm-d's: `messages[*].content[*]` objects whose `type` is
//! `"image_url"` and whose `image_url` is an object with a string `url`. Anything of another
//! shape is skipped, not refused. A key given twice counts by its last value (as Go's and
//! Python's JSON decoders do).

use super::PartLocation;
use bytes::Bytes;
use serde_json::value::RawValue;
use std::collections::HashMap;
use std::ops::Range;

/// An image part found in a body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImagePart {
    /// Where it is.
    pub at: PartLocation,
    /// `image_url.url`, decoded.
    pub url: String,
    /// The byte range of the URL's JSON string literal in the body, quotes included.
    pub span: Range<usize>,
}

/// Whether `body` may hold an image part: false when it contains neither `image_url` nor a
/// `\u00` escape (which could spell it), so the common text-only body is passed over by a
/// byte scan.
pub fn may_hold_image_parts(body: &[u8]) -> bool {
    contains(body, b"image_url") || contains(body, b"\\u00")
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

type Object<'a> = HashMap<String, &'a RawValue>;

/// The image parts of `body`, in document order; none when it is not a JSON object with a
/// `messages` array.
pub fn image_parts(body: &[u8]) -> Vec<ImagePart> {
    let mut found = Vec::new();
    let Ok(text) = std::str::from_utf8(body) else {
        return found;
    };
    let Some(messages) = object(text)
        .and_then(|top| top.get("messages").copied())
        .and_then(array)
    else {
        return found;
    };
    for (message, raw) in messages.into_iter().enumerate() {
        let Some(content) = object(raw.get())
            .and_then(|m| m.get("content").copied())
            .and_then(array)
        else {
            continue;
        };
        for (part, raw) in content.into_iter().enumerate() {
            let Some(url) = object(raw.get()).and_then(|p| image_url_of(&p)) else {
                continue;
            };
            let Ok(decoded) = serde_json::from_str::<String>(url.get()) else {
                continue;
            };
            if let Some(span) = span_in(body, url.get()) {
                found.push(ImagePart {
                    at: PartLocation { message, part },
                    url: decoded,
                    span,
                });
            }
        }
    }
    found
}

/// The raw `image_url.url` of a content part of type `image_url`.
fn image_url_of<'a>(part: &Object<'a>) -> Option<&'a RawValue> {
    let kind = serde_json::from_str::<String>(part.get("type")?.get()).ok()?;
    if kind != "image_url" {
        return None;
    }
    let url = *object(part.get("image_url")?.get())?.get("url")?;
    url.get().starts_with('"').then_some(url)
}

fn object(text: &str) -> Option<Object<'_>> {
    serde_json::from_str(text).ok()
}

fn array(raw: &RawValue) -> Option<Vec<&RawValue>> {
    serde_json::from_str(raw.get()).ok()
}

/// Where `inner`, a slice borrowed from `body`, stands in it.
fn span_in(body: &[u8], inner: &str) -> Option<Range<usize>> {
    let start = (inner.as_ptr() as usize).checked_sub(body.as_ptr() as usize)?;
    let end = start.checked_add(inner.len())?;
    (end <= body.len() && body.get(start..end) == Some(inner.as_bytes())).then_some(start..end)
}

/// `body` with each span replaced by the JSON string of its new URL. Spans must not overlap;
/// any that does, or that falls outside the body, is left as it was.
pub fn splice(body: &[u8], mut replacements: Vec<(Range<usize>, String)>) -> Bytes {
    replacements.sort_by_key(|(span, _)| span.start);
    let extra: usize = replacements.iter().map(|(_, url)| url.len() + 2).sum();
    let mut out = Vec::with_capacity(body.len() + extra);
    let mut at = 0;
    for (span, url) in replacements {
        if span.start < at || span.end > body.len() || span.start > span.end {
            continue;
        }
        out.extend_from_slice(&body[at..span.start]);
        // Serialising a string into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut out, &url);
        at = span.end;
    }
    out.extend_from_slice(&body[at..]);
    Bytes::from(out)
}
