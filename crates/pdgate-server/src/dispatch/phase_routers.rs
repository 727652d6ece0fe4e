//! The per-role routers a coordinator of routers sends each phase to (layout (b), design.md §2).

/// The per-role routers a coordinator dispatches phases to over HTTP, each selecting its
/// profile from `x-llm-d-epp-profile` (design.md §2, "one router per role").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PhaseRouters {
    /// Router of the prefill phase.
    pub prefill: pdgate_coordinator::Target,
    /// Router of the decode phase.
    pub decode: pdgate_coordinator::Target,
    /// Router of the encode phase (requests with media get an encode leg per item).
    pub encode: Option<pdgate_coordinator::Target>,
    /// Send the decode leg first with `Prefer: if-available` (conditional decode).
    pub conditional_decode: bool,
}

impl PhaseRouters {
    /// Routers at `prefill` and `decode` (`host:port`), named `prefill-router` and
    /// `decode-router` in errors and metrics.
    pub fn new(prefill: &str, decode: &str, conditional_decode: bool) -> Self {
        let t = |name: &str, address: &str| pdgate_coordinator::Target {
            name: name.into(),
            address: address.into(),
            revision: None,
            dp_rank: None,
        };
        PhaseRouters {
            prefill: t("prefill-router", prefill),
            decode: t("decode-router", decode),
            encode: None,
            conditional_decode,
        }
    }

    /// The same routers plus an encode router at `encode` (`host:port`), named
    /// `encode-router`.
    pub fn with_encode(mut self, encode: &str) -> Self {
        self.encode = Some(pdgate_coordinator::Target {
            name: "encode-router".into(),
            address: encode.into(),
            revision: None,
            dp_rank: None,
        });
        self
    }
}
