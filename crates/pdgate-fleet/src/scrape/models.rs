//! An engine's `/v1/models` answer, read within stated bounds, and the router's own
//! `/v1/models` list merged from them.
//!
//! What is kept of an answer is what the router uses: the model ids (requests are scheduled
//! only on endpoints that serve their model), and, for the router's `/v1/models` (which
//! echoes the engines' objects) and the LoRA scorer (a non-null `parent` marks an adapter),
//! the OpenAI model-object fields of [`MODEL_FIELDS`] with scalar values. Everything else
//! (vLLM's `permission` list, unknown fields, nested values) is skipped while parsing, never
//! stored. An answer over a bound ([`MAX_MODELS_BYTES`], [`MAX_MODELS_PER_ENDPOINT`],
//! [`MAX_MODEL_FIELD_BYTES`]) is refused whole ([`ModelsError`]): a list cut at the bound
//! would make the router answer 404 for models the engine does serve.

use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};
use std::fmt;

/// Largest `/v1/models` answer read from an engine, bytes (256 KiB). A real vLLM answer is
/// one object of about 450 bytes per model (the base model and each LoRA adapter: `id`,
/// `object`, `created`, `owned_by`, `root`, `parent`, `max_model_len` and a `permission`
/// list), a few hundred bytes for the usual single model; 256 KiB holds
/// [`MAX_MODELS_PER_ENDPOINT`] such objects twice over. The scrape used to read up to 8 MiB
/// per endpoint and keep it parsed: 4 engines listing 466k models held 2 GB.
pub const MAX_MODELS_BYTES: usize = 256 << 10;

/// Most models one endpoint's answer may list (entries of its `data` array): the base model
/// and its LoRA adapters. vLLM lists every adapter it has registered (`--lora-modules`, or
/// loaded at runtime), tens in LoRA-heavy deployments; 256 leaves room and bounds what one
/// endpoint keeps at 256 objects of at most [`MODEL_FIELDS`] scalar fields of at most
/// [`MAX_MODEL_FIELD_BYTES`] (about 0.6 KB each as usually filled, 3 KB at most).
pub const MAX_MODELS_PER_ENDPOINT: usize = 256;

/// Longest string kept in a model object (`id`, `object`, `owned_by`, `root`, `parent`),
/// bytes. Model ids are Hugging Face names (at most 96 characters) or adapter names; `root`
/// is a model name or a local path (about 150 bytes for a Hugging Face cache snapshot).
pub const MAX_MODEL_FIELD_BYTES: usize = 512;

/// The fields kept of an engine's model object: OpenAI's `id`, `object`, `created`,
/// `owned_by`, and vLLM's `root`, `parent` (non-null: a LoRA adapter of that model) and
/// `max_model_len` (tokens). Kept only with a scalar value (string, number, bool, null).
pub const MODEL_FIELDS: [&str; 7] = [
    "id",
    "object",
    "created",
    "owned_by",
    "root",
    "parent",
    "max_model_len",
];

/// Why a `/v1/models` answer was not used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelsError {
    /// Not an OpenAI model list (`{"data": [ … ]}`): not JSON, no `data` array.
    #[error("not an OpenAI model list")]
    NotAList,
    /// The answer is over [`MAX_MODELS_BYTES`].
    #[error(
        "answer {}over the limit of {MAX_MODELS_BYTES} bytes",
        bytes.map(|b| format!("of {b} bytes, ")).unwrap_or_default()
    )]
    TooLarge {
        /// Its size, bytes; `None` when the read stopped at the limit.
        bytes: Option<usize>,
    },
    /// It lists more than [`MAX_MODELS_PER_ENDPOINT`] models.
    #[error("{count} models, over the limit of {MAX_MODELS_PER_ENDPOINT}")]
    TooMany {
        /// Entries of its `data` array.
        count: usize,
    },
    /// A kept field is longer than [`MAX_MODEL_FIELD_BYTES`].
    #[error("data[{index}].{field} is {len} bytes, over the limit of {MAX_MODEL_FIELD_BYTES}")]
    FieldTooLong {
        /// Position of the model in `data`.
        index: usize,
        /// The field ([`MODEL_FIELDS`]).
        field: &'static str,
        /// Its length, bytes.
        len: usize,
    },
}

impl ModelsError {
    /// True when the answer is a model list over a bound (counted and logged by the
    /// scraper), false when it is no model list at all.
    pub fn over_limit(&self) -> bool {
        !matches!(self, ModelsError::NotAList)
    }
}

/// The model objects of an OpenAI `/v1/models` answer (`{"data": [{"id": …, …}]}`), each
/// reduced to the [`MODEL_FIELDS`] it has with a scalar value; entries without a string `id`
/// are dropped.
///
/// Errors: [`ModelsError`] — not a model list, or over one of the bounds (the whole answer is
/// refused then, never cut).
pub fn parse_models(body: &[u8]) -> Result<Vec<Value>, ModelsError> {
    if body.len() > MAX_MODELS_BYTES {
        return Err(ModelsError::TooLarge {
            bytes: Some(body.len()),
        });
    }
    let answer: Answer = serde_json::from_slice(body).map_err(|_| ModelsError::NotAList)?;
    let data = answer.data.ok_or(ModelsError::NotAList)?;
    if data.count > MAX_MODELS_PER_ENDPOINT {
        return Err(ModelsError::TooMany { count: data.count });
    }
    for (index, card) in data.cards.iter() {
        for (field, value) in card {
            if let Value::String(s) = value {
                if s.len() > MAX_MODEL_FIELD_BYTES {
                    let field = (MODEL_FIELDS.iter())
                        .find(|f| **f == field.as_str())
                        .unwrap_or(&"id");
                    return Err(ModelsError::FieldTooLong {
                        index: *index,
                        field,
                        len: s.len(),
                    });
                }
            }
        }
    }
    Ok((data.cards.into_iter())
        .filter(|(_, c)| c.get("id").is_some_and(Value::is_string))
        .map(|(_, c)| Value::Object(c))
        .collect())
}

/// [`parse_models`] without the reason: `None` when the answer is no model list or over a
/// bound.
pub fn parse_model_cards(body: &[u8]) -> Option<Vec<Value>> {
    parse_models(body).ok()
}

/// The router's `/v1/models` list: the engines' model objects (as kept, [`MODEL_FIELDS`])
/// merged over the endpoints of `snapshot` by `id` — the first endpoint (in discovery order)
/// listing an id gives its object — sorted by id. An endpoint known only by model ids gets
/// `{"id", "object": "model", "owned_by": "pdgate"}`. Only the objects answered are copied.
pub fn merge_model_cards(snapshot: &pdgate_scheduler::Snapshot) -> Vec<Value> {
    enum Listed {
        Cards(std::sync::Arc<Vec<Value>>),
        Ids(std::sync::Arc<Vec<String>>),
    }
    let lists: Vec<Listed> = (snapshot.endpoints.iter())
        .filter_map(|e| match (e.load.model_cards(), e.load.models()) {
            (Some(cards), _) => Some(Listed::Cards(cards)),
            (None, Some(ids)) => Some(Listed::Ids(ids)),
            (None, None) => None,
        })
        .collect();
    let mut out: std::collections::BTreeMap<&str, Value> = Default::default();
    for list in &lists {
        match list {
            Listed::Cards(cards) => {
                for card in cards.iter() {
                    if let Some(id) = card.get("id").and_then(Value::as_str) {
                        out.entry(id).or_insert_with(|| card.clone());
                    }
                }
            }
            Listed::Ids(ids) => {
                for id in ids.iter() {
                    out.entry(id.as_str()).or_insert_with(
                        || serde_json::json!({"id": id, "object": "model", "owned_by": "pdgate"}),
                    );
                }
            }
        }
    }
    out.into_values().collect()
}

/// The top level of an answer: only `data` is read.
struct Answer {
    data: Option<Data>,
}

/// The `data` array: its kept objects (with their positions) and how many entries it has.
struct Data {
    cards: Vec<(usize, Map<String, Value>)>,
    count: usize,
}

impl<'de> Deserialize<'de> for Answer {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Answer;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a model list")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Answer, A::Error> {
                let mut data = None;
                while let Some(key) = map.next_key::<String>()? {
                    if key == "data" {
                        data = Some(map.next_value::<Data>()?);
                    } else {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
                Ok(Answer { data })
            }
        }
        d.deserialize_map(V)
    }
}

impl<'de> Deserialize<'de> for Data {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Data;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an array of model objects")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Data, A::Error> {
                let mut data = Data {
                    cards: Vec::new(),
                    count: 0,
                };
                loop {
                    // Past the bound, entries are only counted (skipped, not built).
                    let more = if data.count < MAX_MODELS_PER_ENDPOINT {
                        match seq.next_element::<Entry>()? {
                            Some(Entry(Some(card))) => {
                                data.cards.push((data.count, card));
                                true
                            }
                            Some(Entry(None)) => true,
                            None => false,
                        }
                    } else {
                        seq.next_element::<IgnoredAny>()?.is_some()
                    };
                    if !more {
                        return Ok(data);
                    }
                    data.count += 1;
                }
            }
        }
        d.deserialize_seq(V)
    }
}

/// One entry of `data`: its [`MODEL_FIELDS`] with scalar values when it is an object.
struct Entry(Option<Map<String, Value>>);

impl<'de> Deserialize<'de> for Entry {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Entry;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a model object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Entry, A::Error> {
                let mut card = Map::new();
                while let Some(key) = map.next_key::<String>()? {
                    match MODEL_FIELDS.iter().find(|f| **f == key.as_str()) {
                        Some(field) => {
                            if let Scalar(Some(v)) = map.next_value()? {
                                card.insert(field.to_string(), v);
                            }
                        }
                        None => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(Entry(Some(card)))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Entry, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Entry(None))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Entry, E> {
                Ok(Entry(None))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Entry, E> {
                Ok(Entry(None))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Entry, E> {
                Ok(Entry(None))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Entry, E> {
                Ok(Entry(None))
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Entry, E> {
                Ok(Entry(None))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Entry, E> {
                Ok(Entry(None))
            }
        }
        d.deserialize_any(V)
    }
}

/// A field value kept when scalar (string, number, bool, null); arrays and objects are
/// skipped (`None`).
struct Scalar(Option<Value>);

impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Scalar;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a value")
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Scalar, E> {
                Ok(Scalar(Some(Value::Bool(v))))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Scalar, E> {
                Ok(Scalar(Some(v.into())))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Scalar, E> {
                Ok(Scalar(Some(v.into())))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Scalar, E> {
                Ok(Scalar(serde_json::Number::from_f64(v).map(Value::Number)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Scalar, E> {
                Ok(Scalar(Some(Value::String(v.to_string()))))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Scalar, E> {
                Ok(Scalar(Some(Value::Null)))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Scalar, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Scalar(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Scalar, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Scalar(None))
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
#[path = "models_tests.rs"]
mod tests;
