//! Finds YAML lines for error messages by scanning the text (block-style YAML; flow-style
//! documents just get no line).

use std::ops::Range;

/// Line ranges (0-based, end exclusive) of the items of the top-level sequence `key:`.
pub fn seq_items(text: &str, key: &str) -> Vec<Range<usize>> {
    let lines: Vec<&str> = text.lines().collect();
    let head = format!("{key}:");
    let Some(start) = lines.iter().position(|l| l.starts_with(&head)) else {
        return Vec::new();
    };
    let mut items: Vec<Range<usize>> = Vec::new();
    let mut indent = None;
    for (i, line) in lines.iter().enumerate().skip(start + 1) {
        let t = line.trim_start();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        let d = line.len() - t.len();
        let is_item = t.starts_with("- ") || t == "-";
        match indent {
            None if is_item => indent = Some(d),
            None => break,
            Some(di) if d < di || (d == di && !is_item) => break,
            Some(_) => {}
        }
        if Some(d) == indent && is_item {
            items.push(i..i + 1);
        } else if let Some(last) = items.last_mut() {
            last.end = i + 1;
        }
    }
    items
}

/// 1-based line of the dotted `path` (e.g. `parameters.deciders.prefill`) inside `range`,
/// matching each segment as a `key:` after the previous one; the deepest segment found.
pub fn find_path(text: &str, range: &Range<usize>, path: &str) -> Option<usize> {
    let mut from = range.start;
    let mut found = None;
    for seg in path.split('.') {
        let (key, index) = match seg.strip_suffix(']').and_then(|s| s.split_once('[')) {
            Some((k, i)) => (k, i.parse::<usize>().ok()),
            None => (seg, None),
        };
        let head = format!("{key}:");
        let hit = text
            .lines()
            .enumerate()
            .skip(from)
            .take(range.end.saturating_sub(from))
            .find(|(_, l)| l.trim_start().trim_start_matches("- ").starts_with(&head));
        match hit {
            Some((i, _)) => {
                found = Some(i + 1);
                from = i + 1;
            }
            None => break,
        }
        if let Some(n) = index {
            match seq_item(text, from, range.end, n) {
                // The item's first line may hold its first key (`- key: v`): search from it.
                Some(i) => {
                    found = Some(i + 1);
                    from = i;
                }
                None => break,
            }
        }
    }
    found
}

/// 0-based line of the `n`-th item (`- `) of the block sequence starting at line `from`.
fn seq_item(text: &str, from: usize, end: usize, n: usize) -> Option<usize> {
    let mut indent = None;
    let mut count = 0;
    for (i, line) in text
        .lines()
        .enumerate()
        .skip(from)
        .take(end.saturating_sub(from))
    {
        let t = line.trim_start();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        let d = line.len() - t.len();
        let is_item = t.starts_with("- ") || t == "-";
        let di = *indent.get_or_insert(d);
        if d < di || (d == di && !is_item) {
            return None;
        }
        if d == di && is_item {
            if count == n {
                return Some(i);
            }
            count += 1;
        }
    }
    None
}

/// 1-based line inside `range` of the `nth` (0-based) `key: value` (value possibly quoted).
pub fn find_key_value_nth(
    text: &str,
    range: &Range<usize>,
    key: &str,
    value: &str,
    nth: usize,
) -> Option<usize> {
    let head = format!("{key}:");
    text.lines()
        .enumerate()
        .skip(range.start)
        .take(range.len())
        .filter_map(|(i, l)| {
            let rest = l
                .trim_start()
                .trim_start_matches("- ")
                .strip_prefix(&head)?;
            let v = rest
                .split('#')
                .next()
                .unwrap_or("")
                .trim()
                .trim_matches(|c| c == '"' || c == '\'');
            (v == value).then_some(i + 1)
        })
        .nth(nth)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = "kind: X\nplugins:\n- type: a\n  parameters:\n    deciders:\n      prefill: p\n# c\n- type: b\nschedulingProfiles:\n  - name: x\n    plugins:\n    - pluginRef: a\n";

    #[test]
    fn finds_items_paths_and_refs() {
        let items = seq_items(DOC, "plugins");
        assert_eq!(items, vec![2..6, 7..8]);
        assert_eq!(
            find_path(DOC, &items[0], "parameters.deciders.prefill"),
            Some(6)
        );
        assert_eq!(find_path(DOC, &items[0], "parameters.nope"), Some(4));
        let seq = "- type: f\n  parameters:\n    matchExpressions:\n    - key: a\n      operator: In\n    \
                   - operator: Bad\n      key: b\n";
        let r = 0..7;
        assert_eq!(
            find_path(seq, &r, "parameters.matchExpressions[1].key"),
            Some(7)
        );
        assert_eq!(
            find_path(seq, &r, "parameters.matchExpressions[1].operator"),
            Some(6)
        );
        assert_eq!(
            find_path(seq, &r, "parameters.matchExpressions[0].operator"),
            Some(5)
        );
        let profiles = seq_items(DOC, "schedulingProfiles");
        assert_eq!(profiles, vec![9..12]);
        assert_eq!(
            find_key_value_nth(DOC, &profiles[0], "pluginRef", "a", 0),
            Some(12)
        );
    }
}
