//! Where a replay sends its requests: one base URL, or several taken in turn (request *i*
//! of the workload goes to URL *i* mod *n*), as a client behind a Kubernetes Service without
//! session affinity spreads its requests over the router replicas.

/// The base URLs of a replay, without trailing `/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Targets {
    bases: Vec<String>,
}

impl Targets {
    /// The targets `urls`, in order; trailing `/` are dropped and blank entries skipped.
    ///
    /// Errors: no URL left.
    pub fn new<S: AsRef<str>>(urls: &[S]) -> anyhow::Result<Self> {
        let bases: Vec<String> = urls
            .iter()
            .map(|u| u.as_ref().trim().trim_end_matches('/').to_string())
            .filter(|u| !u.is_empty())
            .collect();
        anyhow::ensure!(!bases.is_empty(), "no URL to send requests to");
        Ok(Targets { bases })
    }

    /// The base URL of the workload's request number `index`: round-robin in workload order.
    pub fn for_request(&self, index: usize) -> &str {
        &self.bases[index % self.bases.len()]
    }

    /// True when there are several URLs (the report then counts requests per URL).
    pub fn several(&self) -> bool {
        self.bases.len() > 1
    }

    /// Every base URL, in order.
    pub fn all(&self) -> &[String] {
        &self.bases
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_alternate_in_workload_order() {
        let t = Targets::new(&["http://a:1/", " http://b:2 "]).unwrap();
        assert!(t.several());
        let picked: Vec<&str> = (0..5).map(|i| t.for_request(i)).collect();
        assert_eq!(
            picked,
            [
                "http://a:1",
                "http://b:2",
                "http://a:1",
                "http://b:2",
                "http://a:1"
            ]
        );
        let t = Targets::new(&["a", "b", "c"]).unwrap();
        let counts = (0..10).fold([0; 3], |mut n, i| {
            n[["a", "b", "c"]
                .iter()
                .position(|u| *u == t.for_request(i))
                .unwrap()] += 1;
            n
        });
        assert_eq!(counts, [4, 3, 3]);
    }

    #[test]
    fn one_url_gets_everything_and_none_is_an_error() {
        let t = Targets::new(&["http://a:1//"]).unwrap();
        assert!(!t.several());
        assert_eq!(
            (t.for_request(0), t.for_request(7)),
            ("http://a:1", "http://a:1")
        );
        assert_eq!(t.all(), ["http://a:1".to_string()]);
        let none: [&str; 2] = ["", " / "];
        assert_eq!(
            Targets::new(&none).unwrap_err().to_string(),
            "no URL to send requests to"
        );
    }
}
