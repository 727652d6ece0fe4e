//! The encoder-cache connector: how an encode leg's output reaches the prefill leg
//! (llm-d coordinator `pipeline.ec_connector`; `pdgate serve --ec-connector`), and how many
//! encode legs of one request run at once.
//!
//! | connector | encode answer | prefill leg |
//! |---|---|---|
//! | `pdgate` (default of `serve`) | `ec_transfer_params`: an array, one entry per media item (the pdgate simulator's handoff, pulled by the prefill engine) | carries the entries of every item, in item order |
//! | `ec-shared-storage` (vLLM `ECExampleConnector`; llm-d's default) | nothing needed: the encoder writes each item's embedding under its mm_hash in a directory both engines mount | carries nothing; the prefill engine loads each item by its mm_hash |
//!
//! llm-d's `ec-nixl` (a map keyed by mm_hash of NIXL descriptors) is not spoken. Source of the
//! shared-storage contract: llm-d-router `pkg/coordinator/connectors/ec/shared_storage.go`,
//! vLLM `ec_transfer/ec_connector/example_connector.py`.

/// Which contract encode legs speak.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum EcConnector {
    /// The pdgate simulator's handoff: encoders answer `ec_transfer_params` entries.
    #[default]
    Pdgate,
    /// vLLM `ECExampleConnector`: engines share an encoder cache keyed by mm_hash.
    SharedStorage,
}

/// Default encode legs in flight at once for one request (`--encode-max-parallel`).
pub const DEFAULT_ENCODE_PARALLELISM: usize = 4;

/// The encode step's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EncodeSettings {
    /// The contract.
    pub connector: EcConnector,
    /// Encode legs in flight at once per request (≥ 1).
    pub parallelism: usize,
}

impl Default for EncodeSettings {
    fn default() -> Self {
        EncodeSettings {
            connector: EcConnector::default(),
            parallelism: DEFAULT_ENCODE_PARALLELISM,
        }
    }
}

impl EcConnector {
    /// The name: `pdgate` or `ec-shared-storage`.
    pub fn as_str(self) -> &'static str {
        match self {
            EcConnector::Pdgate => "pdgate",
            EcConnector::SharedStorage => "ec-shared-storage",
        }
    }

    /// True when encode answers must carry `ec_transfer_params` for the prefill leg.
    pub fn carries_params(self) -> bool {
        self == EcConnector::Pdgate
    }
}

impl std::fmt::Display for EcConnector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for EcConnector {
    type Err = String;
    /// Parses a connector name. Errors: `ec-nixl` (llm-d's NIXL descriptor map, not spoken)
    /// and unknown names.
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "pdgate" => Ok(EcConnector::Pdgate),
            "ec-shared-storage" => Ok(EcConnector::SharedStorage),
            "ec-nixl" => Err(
                "`ec-nixl` (llm-d's map of NIXL descriptors by mm_hash) is not supported: use \
                 `ec-shared-storage`, or `pdgate` for the pdgate simulator's handoff"
                    .into(),
            ),
            other => Err(format!(
                "unknown ec_connector `{other}`: use `ec-shared-storage` or `pdgate`"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_and_nixl_is_refused() {
        assert_eq!("ec-shared-storage".parse(), Ok(EcConnector::SharedStorage));
        assert_eq!(
            "pdgate".parse::<EcConnector>().map(|c| c.as_str()),
            Ok("pdgate")
        );
        assert!("ec-nixl"
            .parse::<EcConnector>()
            .unwrap_err()
            .contains("not supported"));
        assert!(!EcConnector::SharedStorage.carries_params());
        assert!(EcConnector::Pdgate.carries_params());
    }
}
