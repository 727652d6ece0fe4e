//! Multimodal items of a chat request, for encoder disaggregation (vLLM "EPD": encode workers
//! compute the media embeddings and the prefill worker pulls them).
//!
//! [`media_items`] lists the media parts of a body in request order, [`content_hash`] is the key
//! an encoder and a prefill agree on (like vLLM's `mm_hash`), and [`encode_leg_body`] is the
//! body of the encode request for one item (one item per encode request, as vLLM's disagg EPD
//! proxy sends them). The encode worker answers one [`EcTransferEntry`] per item in
//! `ec_transfer_params`; the router hands those entries to the prefill in the same field.
//! Pure functions: no IO.

use crate::raw_object::RawObject;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

/// What a media part carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MediaKind {
    /// `image_url` parts.
    Image,
    /// `input_audio` and `audio_url` parts.
    Audio,
    /// `video_url` parts.
    Video,
}

impl MediaKind {
    /// `image`, `audio` or `video`.
    pub fn as_str(self) -> &'static str {
        match self {
            MediaKind::Image => "image",
            MediaKind::Audio => "audio",
            MediaKind::Video => "video",
        }
    }

    /// The kind of a content part `type`; `None` for text and unknown types.
    pub fn of_part_type(t: &str) -> Option<Self> {
        match t {
            "image_url" => Some(MediaKind::Image),
            "input_audio" | "audio_url" => Some(MediaKind::Audio),
            "video_url" => Some(MediaKind::Video),
            _ => None,
        }
    }
}

/// Content part types that are media.
pub const MEDIA_PART_TYPES: &[&str] = &["image_url", "input_audio", "video_url", "audio_url"];

/// Body field carrying the encoder handoff: an array of [`EcTransferEntry`], on encode answers
/// and on the prefill (or aggregated) request.
pub const EC_TRANSFER_PARAMS: &str = "ec_transfer_params";

/// One element of `ec_transfer_params`: where the encoder output of one media item waits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EcTransferEntry {
    /// [`content_hash`] of the item.
    pub mm_hash: String,
    /// Engine id of the encoder holding the output.
    pub encoder_engine_id: String,
    /// Lease id on that encoder (single consumer).
    pub lease_id: String,
    /// Host of the encoder's side channel.
    pub remote_host: String,
    /// Port of the encoder's side channel.
    pub remote_port: u16,
    /// Any other field, kept verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// One media part of a chat request.
#[derive(Debug, Clone, PartialEq)]
pub struct MediaItem {
    /// Position among the request's media items (0-based, in message then part order).
    pub index: usize,
    /// Image, audio or video.
    pub kind: MediaKind,
    /// The content part as sent, verbatim.
    pub part: Value,
    /// [`content_hash`] of `part`.
    pub hash: String,
}

impl MediaItem {
    /// [`Self::hash`] as the number it spells: xxh3-64 of the part's canonical bytes (the key
    /// the scheduler's multimodal plugins read, [`content_hash`] without the text form).
    pub fn key(&self) -> u64 {
        u64::from_str_radix(&self.hash, 16).unwrap_or_default()
    }
}

/// The [`MediaItem::key`] of every media part of a chat body, in request order (duplicates
/// kept); empty for text-only and `/v1/completions` bodies. See [`media_items`].
pub fn media_keys(body: &RawObject) -> Vec<u64> {
    media_items(body).iter().map(MediaItem::key).collect()
}

/// The media parts of a chat body, in request order: every part of type `image_url`,
/// `input_audio`, `video_url` or `audio_url` in `messages[*].content` arrays.
///
/// String contents, text parts, non-object parts and bodies without `messages` (as
/// `/v1/completions` bodies) give nothing. Never fails: validating `messages` is
/// [`crate::openai::flatten_messages`]' job. No tree is built but of the media parts
/// themselves, and a body whose `messages` never spells a media part type is not read at all.
pub fn media_items(body: &RawObject) -> Vec<MediaItem> {
    let Some(raw) = body.raw("messages") else {
        return Vec::new();
    };
    if !mentions_media(raw) {
        return Vec::new();
    }
    let Ok(messages) = serde_json::from_str::<Vec<&RawValue>>(raw) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for m in messages {
        let Ok(ContentOf { content: Some(c) }) = serde_json::from_str::<ContentOf<'_>>(m.get())
        else {
            continue;
        };
        let Ok(parts) = serde_json::from_str::<Vec<&RawValue>>(c.get()) else {
            continue;
        };
        for part in parts.into_iter().filter(|p| mentions_media(p.get())) {
            let Ok(part) = serde_json::from_str::<Value>(part.get()) else {
                continue;
            };
            let Some(kind) = part
                .get("type")
                .and_then(Value::as_str)
                .and_then(MediaKind::of_part_type)
            else {
                continue;
            };
            out.push(MediaItem {
                index: out.len(),
                kind,
                hash: content_hash(&part),
                part,
            });
        }
    }
    out
}

/// True when `raw` may hold a media part: it spells one of [`MEDIA_PART_TYPES`], or has a
/// `\u` escape (which could spell one). A cheap test before any decoding.
fn mentions_media(raw: &str) -> bool {
    static SPELLS: std::sync::OnceLock<crate::spells::Spells> = std::sync::OnceLock::new();
    SPELLS
        .get_or_init(|| crate::spells::Spells::new(MEDIA_PART_TYPES))
        .anywhere(raw.as_bytes())
}

/// A message as media listing reads it: only the JSON text of `content`.
#[derive(Deserialize)]
struct ContentOf<'a> {
    #[serde(borrow, default)]
    content: Option<&'a RawValue>,
}

/// The content hash of a media part: the key the encoder and the prefill agree on (like
/// vLLM's `mm_hash`). 16 lowercase hex digits of xxh3-64 over the part's canonical bytes:
///
/// - `image_url`, `video_url`, `audio_url`: the `url` string (`{"image_url": {"url": …}}`, or
///   `{"image_url": "…"}` when the field is the URL itself); `detail` and other fields do not
///   count, so the same picture hashes the same whatever the request asks of it;
/// - `input_audio`: the `data` string immediately followed by the `format` string (no
///   separator; a missing format counts as empty).
///
/// A part with none of these (another type, or no `url` / `data`) hashes its JSON text.
pub fn content_hash(part: &Value) -> String {
    let h = match canonical_bytes(part) {
        Some(bytes) => xxhash_rust::xxh3::xxh3_64(&bytes),
        None => xxhash_rust::xxh3::xxh3_64(part.to_string().as_bytes()),
    };
    format!("{h:016x}")
}

fn canonical_bytes(part: &Value) -> Option<Vec<u8>> {
    let t = part.get("type").and_then(Value::as_str)?;
    match t {
        "image_url" | "video_url" | "audio_url" => {
            let field = part.get(t)?;
            let url = match field {
                Value::String(s) => s.as_str(),
                _ => field.get("url")?.as_str()?,
            };
            Some(url.as_bytes().to_vec())
        }
        "input_audio" => {
            let audio = part.get("input_audio")?;
            let data = audio.get("data")?.as_str()?;
            let format = audio.get("format").and_then(Value::as_str).unwrap_or("");
            Some([data.as_bytes(), format.as_bytes()].concat())
        }
        _ => None,
    }
}

/// The body of the encode request for `item`:
/// `{"model", "messages": [{"role": "user", "content": [<part>]}], "max_tokens": 1,
/// "stream": false}`.
pub fn encode_leg_body(model: &str, item: &MediaItem) -> Map<String, Value> {
    let mut body = Map::new();
    body.insert("model".into(), json!(model));
    body.insert(
        "messages".into(),
        json!([{"role": "user", "content": [item.part]}]),
    );
    body.insert("max_tokens".into(), json!(1));
    body.insert("stream".into(), json!(false));
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(v: Value) -> RawObject {
        RawObject::parse(v.to_string().into()).unwrap()
    }

    #[test]
    fn hashes_are_xxh3_of_the_canonical_bytes() {
        let img = json!({"type": "image_url", "image_url": {"url": "https://x/cat.png", "detail": "low"}});
        assert_eq!(content_hash(&img), "e9474f8744905287");
        assert_eq!(
            content_hash(&img),
            format!("{:016x}", xxhash_rust::xxh3::xxh3_64(b"https://x/cat.png"))
        );
        // `detail` does not count; the bare-string form hashes the same URL.
        let same = json!({"type": "image_url", "image_url": "https://x/cat.png"});
        assert_eq!(content_hash(&same), "e9474f8744905287");
        let audio =
            json!({"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}});
        assert_eq!(content_hash(&audio), "413157f8405f583f");
        assert_eq!(
            content_hash(&audio),
            format!("{:016x}", xxhash_rust::xxh3::xxh3_64(b"UklGRg==wav"))
        );
        let video = json!({"type": "video_url", "video_url": {"url": "https://x/v.mp4"}});
        assert_eq!(
            content_hash(&video),
            format!("{:016x}", xxhash_rust::xxh3::xxh3_64(b"https://x/v.mp4"))
        );
        let odd = json!({"type": "image_url"});
        assert_eq!(
            content_hash(&odd),
            format!(
                "{:016x}",
                xxhash_rust::xxh3::xxh3_64(br#"{"type":"image_url"}"#)
            )
        );
        // XXH3-64 of no bytes is the reference vector 2D06800538D394C2.
        let empty = json!({"type": "image_url", "image_url": {"url": ""}});
        assert_eq!(content_hash(&empty), "2d06800538d394c2");
    }

    #[test]
    fn media_items_in_request_order() {
        let b = body(json!({"model": "m", "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": [
                {"type": "text", "text": "compare"},
                {"type": "image_url", "image_url": {"url": "https://x/a.png"}},
                {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "mp3"}},
            ]},
            {"role": "assistant", "content": null},
            {"role": "user", "content": [
                {"type": "video_url", "video_url": {"url": "https://x/v.mp4"}},
                "not a part",
                {"type": "audio_url", "audio_url": {"url": "https://x/s.wav"}},
            ]},
        ]}));
        let items = media_items(&b);
        // An escaped type spells the same part type.
        let escaped = RawObject::parse(
            r#"{"messages":[{"role":"user","content":[{"type":"image\u005furl","image_url":"u"}]}]}"#.into(),
        )
        .unwrap();
        assert_eq!(media_items(&escaped)[0].kind, MediaKind::Image);
        let got: Vec<(usize, MediaKind, &str)> = items
            .iter()
            .map(|i| (i.index, i.kind, i.part["type"].as_str().unwrap()))
            .collect();
        assert_eq!(
            got,
            vec![
                (0, MediaKind::Image, "image_url"),
                (1, MediaKind::Audio, "input_audio"),
                (2, MediaKind::Video, "video_url"),
                (3, MediaKind::Audio, "audio_url"),
            ]
        );
        assert_eq!(items[0].hash, content_hash(&items[0].part));
        assert_eq!(
            items[0].key(),
            xxhash_rust::xxh3::xxh3_64(b"https://x/a.png"),
            "the key is the number the hash spells"
        );
        assert_eq!(
            media_keys(&b),
            items.iter().map(MediaItem::key).collect::<Vec<_>>()
        );
        assert_eq!(
            items[1].part,
            json!({"type": "input_audio", "input_audio": {"data": "AAAA", "format": "mp3"}})
        );
        assert_eq!(serde_json::to_value(MediaKind::Video).unwrap(), "video");
    }

    #[test]
    fn text_only_and_completions_bodies_have_no_media() {
        for b in [
            json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]}),
            json!({"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}),
            json!({"model": "m", "prompt": "hi"}),
            json!({"model": "m", "messages": "nope"}),
            json!({"model": "m", "messages": [{"role": "user", "content": "an image_url"}]}),
        ] {
            assert_eq!(media_items(&body(b.clone())), vec![], "{b}");
        }
    }

    #[test]
    fn ec_transfer_entry_roundtrips() {
        let v = json!({"mm_hash": "e9474f8744905287", "encoder_engine_id": "encode-0-1f2e3d4c",
                       "lease_id": "encode-0-1f2e3d4c-ec-1", "remote_host": "127.0.0.1",
                       "remote_port": 8000, "x_custom": 7});
        let e: EcTransferEntry = serde_json::from_value(v.clone()).unwrap();
        assert_eq!(
            (e.remote_port, e.extra["x_custom"].as_i64()),
            (8000, Some(7))
        );
        assert_eq!(serde_json::to_value(&e).unwrap(), v);
    }

    #[test]
    fn encode_leg_body_carries_one_item() {
        let b = body(
            json!({"model": "m", "messages": [{"role": "user", "content": [
            {"type": "text", "text": "what is this"},
            {"type": "image_url", "image_url": {"url": "https://x/a.png"}},
        ]}], "max_tokens": 50, "stream": true}),
        );
        let item = &media_items(&b)[0];
        assert_eq!(
            Value::Object(encode_leg_body("m", item)),
            json!({"model": "m",
                   "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x/a.png"}}]}],
                   "max_tokens": 1, "stream": false})
        );
    }
}
