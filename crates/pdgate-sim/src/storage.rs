//! The shared-storage connectors (vLLM `ExampleConnector` for KV, `ECExampleConnector` for
//! encoder output): records in a directory every worker of a fleet can read, keyed by content,
//! so nothing on the wire says where the data is.
//!
//! KV (facts from vLLM `example_connector.py`, not its code): a request whose prompt KV is not
//! stored saves `prompt[:align(len)]` under `<root>/<kv_key>/`; a request loads when the folder
//! for `prompt[:align(len − 1)]` exists, `align(n) = ((n − 1) / block_size) · block_size`
//! ([`align_to_block_size`]). Store and load are exclusive per request. The simulator has no
//! real KV: it writes one small JSON [`KvRecord`] (model, revision, block size, token count,
//! writer) instead of one safetensors file per layer, and keys folders by xxh3-128 (vLLM:
//! `safe_hash`) of the same bytes: each token id as a little-endian i64, then the request's
//! `mm_hashes` joined by `-` ([`kv_key`]).
//!
//! EC: an encoder writes `<root>/<mm_hash>/` ([`EcRecord`]), a prefill loads by the same
//! `mm_hash`.
//!
//! A record of another model or revision is reported ([`LookupResult`]) and not loaded.

use pdgate_api::media::MediaKind;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use xxhash_rust::xxh3::xxh3_128;

/// File of a KV record inside its `<root>/<kv_key>/` folder.
pub const KV_RECORD_FILE: &str = "pdgate-sim-kv.json";
/// File of an encoder-output record inside its `<root>/<mm_hash>/` folder.
pub const EC_RECORD_FILE: &str = "pdgate-sim-ec.json";
/// Response header of a request on a worker with a KV shared storage: the lookup's
/// [`LookupResult::label`].
pub const KV_LOAD_HEADER: &str = "x-sim-kv-load";
/// Response header: prompt tokens loaded from the storage (0 unless `hit`).
pub const KV_LOADED_TOKENS_HEADER: &str = "x-sim-kv-loaded-tokens";
/// Response header, when a record was found (hit or mismatch): its writer's engine id.
pub const KV_WRITER_HEADER: &str = "x-sim-kv-writer";
/// Response header, when a record was found: its writer's revision (`none` without one).
pub const KV_WRITER_REVISION_HEADER: &str = "x-sim-kv-writer-revision";
/// `format` of a [`KvRecord`].
pub const KV_FORMAT: &str = "pdgate-sim-kv/1";
/// `format` of an [`EcRecord`].
pub const EC_FORMAT: &str = "pdgate-sim-ec/1";

/// vLLM's `align_to_block_size`: `((n − 1) / block_size) · block_size` tokens, 0 when `n` is 0.
/// (A prompt of whole blocks leaves its last block out: the last token is always computed.)
pub fn align_to_block_size(n: usize, block_size: usize) -> usize {
    if n == 0 {
        return 0;
    }
    (n - 1) / block_size * block_size
}

/// Prompt tokens a request of `prompt_len` tokens stores: `align(prompt_len)`.
pub fn store_tokens(prompt_len: usize, block_size: usize) -> usize {
    align_to_block_size(prompt_len, block_size)
}

/// Prompt tokens a request of `prompt_len` tokens loads when found: `align(prompt_len − 1)`.
/// Equal to [`store_tokens`] except for prompts of `k · block_size + 1` tokens, whose own
/// record is never found (as in vLLM).
pub fn load_tokens(prompt_len: usize, block_size: usize) -> usize {
    align_to_block_size(prompt_len.saturating_sub(1), block_size)
}

/// Folder name of the KV of `tokens` (already cut to the aligned length) with `mm_hashes`:
/// 32 hex digits of xxh3-128 over each token id as a little-endian i64, then the `mm_hashes`
/// joined by `-` (nothing when there are none).
pub fn kv_key(tokens: &[u32], mm_hashes: &[String]) -> String {
    let mut bytes = Vec::with_capacity(tokens.len() * 8 + mm_hashes.len() * 17);
    for t in tokens {
        bytes.extend_from_slice(&i64::from(*t).to_le_bytes());
    }
    bytes.extend_from_slice(mm_hashes.join("-").as_bytes());
    format!("{:032x}", xxh3_128(&bytes))
}

/// Who wrote a record; a reader loads only records of its own model and revision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Writer {
    /// Served model name.
    pub model: String,
    /// Revision label (`null` when the worker has none).
    pub revision: Option<String>,
    /// Engine id of the writer.
    pub engine_id: String,
    /// Worker name of the writer.
    pub worker: String,
}

/// What a KV folder holds in the simulator (no tensors).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvRecord {
    /// [`KV_FORMAT`].
    pub format: String,
    /// The writer.
    #[serde(flatten)]
    pub writer: Writer,
    /// The writer's block size, tokens.
    pub block_size: usize,
    /// Prompt tokens whose KV is stored (block aligned).
    pub num_tokens: usize,
    /// `mm_hashes` that entered the key.
    pub mm_hashes: Vec<String>,
    /// When it was written, Unix milliseconds.
    pub written_unix_ms: u64,
}

/// What an encoder-output folder holds in the simulator (no tensors).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EcRecord {
    /// [`EC_FORMAT`].
    pub format: String,
    /// The writer.
    #[serde(flatten)]
    pub writer: Writer,
    /// Content hash of the media item (the folder name).
    pub mm_hash: String,
    /// Image, audio or video.
    pub kind: MediaKind,
    /// When it was written, Unix milliseconds.
    pub written_unix_ms: u64,
}

/// Result of one lookup; [`LookupResult::label`] is the metric label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LookupResult {
    /// A record of this model and revision: loaded.
    Hit,
    /// No record (or a prompt too short to have one): computed here.
    Miss,
    /// A record of another revision: not loaded, computed here.
    RevisionMismatch,
    /// A record of another model: not loaded, computed here.
    ModelMismatch,
    /// A file that is not a record of this key: not loaded, computed here.
    Unreadable,
}

impl LookupResult {
    /// `hit`, `miss`, `revision_mismatch`, `model_mismatch` or `unreadable`.
    pub fn label(self) -> &'static str {
        match self {
            LookupResult::Hit => "hit",
            LookupResult::Miss => "miss",
            LookupResult::RevisionMismatch => "revision_mismatch",
            LookupResult::ModelMismatch => "model_mismatch",
            LookupResult::Unreadable => "unreadable",
        }
    }
}

/// A lookup's result and the record found, if one could be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lookup<R> {
    /// What the reader makes of it.
    pub result: LookupResult,
    /// The record read (also on a mismatch).
    pub record: Option<R>,
}

impl<R> Lookup<R> {
    fn miss(result: LookupResult) -> Self {
        Lookup {
            result,
            record: None,
        }
    }
}

/// A record type: its format tag and writer.
pub trait Record: Serialize + DeserializeOwned {
    /// File name inside the record's folder.
    const FILE: &'static str;
    /// Expected `format`.
    const FORMAT: &'static str;
    /// The record's `format`.
    fn format(&self) -> &str;
    /// The record's writer.
    fn writer(&self) -> &Writer;
}

impl Record for KvRecord {
    const FILE: &'static str = KV_RECORD_FILE;
    const FORMAT: &'static str = KV_FORMAT;
    fn format(&self) -> &str {
        &self.format
    }
    fn writer(&self) -> &Writer {
        &self.writer
    }
}

impl Record for EcRecord {
    const FILE: &'static str = EC_RECORD_FILE;
    const FORMAT: &'static str = EC_FORMAT;
    fn format(&self) -> &str {
        &self.format
    }
    fn writer(&self) -> &Writer {
        &self.writer
    }
}

/// A `shared_storage_path` directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedStorage {
    root: PathBuf,
}

impl SharedStorage {
    /// The directory `root`, created when missing.
    pub fn open(root: &Path) -> anyhow::Result<Self> {
        std::fs::create_dir_all(root).map_err(|e| {
            anyhow::anyhow!("shared_storage_path {}: cannot create: {e}", root.display())
        })?;
        Ok(SharedStorage {
            root: root.to_path_buf(),
        })
    }

    /// The directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Path of the record `R` in folder `key`; `None` when `key` is not a plain file name
    /// (letters, digits, `-`, `_`, `.`; not `.` or `..`).
    pub fn path_of<R: Record>(&self, key: &str) -> Option<PathBuf> {
        let plain = !key.is_empty()
            && key != "."
            && key != ".."
            && key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        plain.then(|| self.root.join(key).join(R::FILE))
    }

    /// Reads the record of folder `key` as `reader` sees it; `fits` checks that the record is
    /// the one the key names (e.g. its token count).
    pub async fn read<R: Record>(
        &self,
        key: &str,
        reader: &Writer,
        fits: impl FnOnce(&R) -> bool,
    ) -> Lookup<R> {
        let Some(path) = self.path_of::<R>(key) else {
            return Lookup::miss(LookupResult::Miss);
        };
        let bytes = match tokio::fs::read(&path).await {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Lookup::miss(LookupResult::Miss)
            }
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "shared storage record unreadable");
                return Lookup::miss(LookupResult::Unreadable);
            }
        };
        let record = match serde_json::from_slice::<R>(&bytes) {
            Ok(r) if r.format() == R::FORMAT && fits(&r) => r,
            _ => {
                tracing::warn!(path = %path.display(), "shared storage record is not one of this key");
                return Lookup::miss(LookupResult::Unreadable);
            }
        };
        let w = record.writer();
        let result = if w.model != reader.model {
            LookupResult::ModelMismatch
        } else if w.revision != reader.revision {
            LookupResult::RevisionMismatch
        } else {
            LookupResult::Hit
        };
        Lookup {
            result,
            record: Some(record),
        }
    }

    /// Writes `record` in folder `key` (replacing any), atomically: readers see the old file
    /// or the new one, never a part.
    pub async fn write<R: Record>(&self, key: &str, record: &R) -> std::io::Result<PathBuf> {
        let path = self.path_of::<R>(key).ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("{key:?} is not a plain folder name"),
            )
        })?;
        let dir = path.parent().expect("record path has a folder");
        tokio::fs::create_dir_all(dir).await?;
        let tmp = dir.join(format!(".{}.{:016x}.tmp", R::FILE, rand::random::<u64>()));
        let bytes = serde_json::to_vec(record).expect("record serializes");
        tokio::fs::write(&tmp, bytes).await?;
        if let Err(e) = tokio::fs::rename(&tmp, &path).await {
            let _ = tokio::fs::remove_file(&tmp).await;
            return Err(e);
        }
        Ok(path)
    }
}

/// Now, Unix milliseconds.
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alignment_follows_vllm() {
        // align(n) = ((n − 1) / 16) · 16, hand-computed.
        let cases = [
            (0, 0),
            (1, 0),
            (15, 0),
            (16, 0),
            (17, 16),
            (32, 16),
            (33, 32),
            (99, 96),
            (100, 96),
        ];
        for (n, want) in cases {
            assert_eq!(align_to_block_size(n, 16), want, "align({n})");
        }
        // (prompt length, stored, loaded): k·16 + 1 tokens store one block more than they load.
        let legs = [
            (1, 0, 0),
            (16, 0, 0),
            (17, 16, 0),
            (18, 16, 16),
            (32, 16, 16),
            (33, 32, 16),
            (34, 32, 32),
            (100, 96, 96),
            (97, 96, 80),
        ];
        for (len, stored, loaded) in legs {
            assert_eq!(
                (store_tokens(len, 16), load_tokens(len, 16)),
                (stored, loaded),
                "prompt of {len}"
            );
        }
        assert_eq!((store_tokens(100, 32), load_tokens(100, 32)), (96, 96));
        assert_eq!((store_tokens(65, 32), load_tokens(65, 32)), (64, 32));
    }

    #[test]
    fn keys_hash_i64_token_bytes_then_mm_hashes() {
        let le = |t: i64| t.to_le_bytes();
        let bytes = [le(1), le(2), le(70000)].concat();
        assert_eq!(
            kv_key(&[1, 2, 70000], &[]),
            format!("{:032x}", xxh3_128(&bytes))
        );
        let mm = vec!["aa".to_string(), "bb".to_string()];
        let with_mm = [bytes.as_slice(), b"aa-bb"].concat();
        assert_eq!(
            kv_key(&[1, 2, 70000], &mm),
            format!("{:032x}", xxh3_128(&with_mm))
        );
        // Stable across builds: a key written by one version is found by the next.
        assert_eq!(kv_key(&[], &[]), format!("{:032x}", xxh3_128(b"")));
        assert_eq!(kv_key(&[1, 2, 70000], &[]).len(), 32);
        assert_ne!(kv_key(&[1, 2], &[]), kv_key(&[2, 1], &[]));
        assert_ne!(kv_key(&[1, 2], &mm), kv_key(&[1, 2], &mm[..1]));
    }

    #[test]
    fn only_plain_folder_names() {
        let s = SharedStorage {
            root: PathBuf::from("/r"),
        };
        assert_eq!(
            s.path_of::<EcRecord>("00ff").unwrap(),
            Path::new("/r/00ff/pdgate-sim-ec.json")
        );
        for bad in ["", ".", "..", "a/b", "../x", "a b"] {
            assert!(s.path_of::<KvRecord>(bad).is_none(), "{bad:?}");
        }
    }

    #[tokio::test]
    async fn a_record_is_read_back_and_checked() {
        let dir =
            std::env::temp_dir().join(format!("pdgate-sim-storage-{:016x}", rand::random::<u64>()));
        let s = SharedStorage::open(&dir).unwrap();
        let writer = Writer {
            model: "m".into(),
            revision: Some("a".into()),
            engine_id: "e".into(),
            worker: "p".into(),
        };
        let rec = KvRecord {
            format: KV_FORMAT.into(),
            writer: writer.clone(),
            block_size: 16,
            num_tokens: 96,
            mm_hashes: vec![],
            written_unix_ms: 1,
        };
        let key = kv_key(&[1; 96], &[]);
        s.write(&key, &rec).await.unwrap();
        let read = |reader: Writer, n: usize| {
            let (s, key) = (s.clone(), key.clone());
            async move {
                s.read::<KvRecord>(&key, &reader, |r| r.num_tokens == n)
                    .await
            }
        };
        let hit = read(writer.clone(), 96).await;
        assert_eq!((hit.result, hit.record), (LookupResult::Hit, Some(rec)));
        let other_rev = Writer {
            revision: Some("b".into()),
            ..writer.clone()
        };
        assert_eq!(
            read(other_rev, 96).await.result,
            LookupResult::RevisionMismatch
        );
        let other_model = Writer {
            model: "n".into(),
            ..writer.clone()
        };
        assert_eq!(
            read(other_model, 96).await.result,
            LookupResult::ModelMismatch
        );
        assert_eq!(
            read(writer.clone(), 80).await.result,
            LookupResult::Unreadable
        );
        let none = s
            .read::<KvRecord>(&kv_key(&[2; 96], &[]), &writer, |_| true)
            .await;
        assert_eq!(none, Lookup::miss(LookupResult::Miss));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
