//! A cheap test of whether JSON bytes may spell one of a few names, run before any decoding
//! (router-owned fields in an answer, media part types in a message): each name's searcher is
//! built once, as building one costs more than running it over a short body.

use memchr::memmem::Finder;

/// The searchers for a fixed list of names plus the `\u` escape (which could spell any of
/// them).
pub struct Spells {
    escape: Finder<'static>,
    names: Vec<Finder<'static>>,
}

impl Spells {
    /// Searchers for `names` (each as it appears in JSON text, without quotes).
    pub fn new(names: &[&'static str]) -> Self {
        Spells {
            escape: Finder::new(br"\u"),
            names: names.iter().map(|n| Finder::new(n.as_bytes())).collect(),
        }
    }

    /// True when `bytes` has a `\u` escape or spells one of the names anywhere.
    pub fn anywhere(&self, bytes: &[u8]) -> bool {
        self.escape.find(bytes).is_some() || self.names.iter().any(|n| n.find(bytes).is_some())
    }

    /// True when `bytes` has a `\u` escape or spells one of the names right after a `"` (as
    /// a key or a string starts), at any of its occurrences.
    pub fn after_quote(&self, bytes: &[u8]) -> bool {
        self.escape.find(bytes).is_some()
            || self
                .names
                .iter()
                .any(|n| n.find_iter(bytes).any(|i| i > 0 && bytes[i - 1] == b'"'))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_escapes_and_quotes() {
        let s = Spells::new(&["image_url", "input_audio"]);
        assert!(s.anywhere(br#"{"type":"image_url"}"#));
        assert!(s.anywhere(br#"{"t":"xinput_audio"}"#));
        assert!(s.anywhere(br#"{"t":"\u0069"}"#));
        assert!(!s.anywhere(br#"{"type":"text","text":"image url"}"#));
        assert!(s.after_quote(br#"{"image_url":1}"#));
        assert!(!s.after_quote(br#"{"t":"ximage_url"}"#));
        // A later occurrence after a quote counts although the first one is not.
        assert!(s.after_quote(br#"{"t":"ximage_url","image_url":1}"#));
        assert!(!s.after_quote(b"image_url"));
    }
}
