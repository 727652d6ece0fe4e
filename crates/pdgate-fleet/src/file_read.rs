//! Reading the files an operator points pdgate at — the endpoints file (watched while it
//! runs), the config files (`serve --config`, `epp --config-file`, `serve
//! --coordinator-config`, `check-config`), `--coordinator-token-file`, the `token-producer`'s
//! tokenizer files — so that a wrong path cannot eat memory or hang the process: only a
//! regular file (after following links) is opened — a FIFO would block the reader for good,
//! `/dev/zero` would never end — and at most a stated number of bytes is read. The type and
//! size are checked on the opened handle (opened non-blocking), so a file swapped for a FIFO
//! between a check and the open cannot block the reader. YAML texts are checked for nesting
//! ([`check_nesting`]) before they are parsed.

use std::io::Read;
use std::path::Path;

/// Largest endpoints file read, bytes (10,000 endpoints take about 2 MB).
pub const MAX_ENDPOINTS_FILE_BYTES: u64 = 16 << 20;

/// Largest config file read (EndpointPickerConfig, coordinator file), bytes.
pub const MAX_CONFIG_FILE_BYTES: u64 = 16 << 20;

/// The text of `path` when it is a regular file of at most `max` bytes of UTF-8.
///
/// Errors (a message naming the problem): not found or unreadable, not a regular file
/// (directory, FIFO, device), larger than `max` (also when it grew while being read), not
/// UTF-8.
pub fn read_regular_file(path: &Path, max: u64) -> Result<String, String> {
    use std::os::unix::fs::OpenOptionsExt;
    // Opened without blocking (a FIFO put in place between a check and the open would wait
    // for a writer forever), then checked on the open handle itself.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| e.to_string())?;
    let meta = file.metadata().map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    if meta.len() > max {
        return Err(format!("{} bytes, over the limit of {max}", meta.len()));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    if bytes.len() as u64 > max {
        return Err(format!("over the limit of {max} bytes"));
    }
    String::from_utf8(bytes).map_err(|_| "not UTF-8 text".into())
}

/// Deepest nesting accepted in a YAML text an operator gives (the endpoints file, the
/// EndpointPickerConfig, the coordinator file): flow brackets, or block indentation in
/// columns / 2. The YAML reader's time grows with the square of the depth: a 400 KB file of
/// 200,000 nested `[` took minutes, 100,000 nested `{a: ` over 20 s; a real endpoints file
/// nests 4 levels, a config file under 10.
pub const MAX_NESTING: usize = 64;

/// Refuses text nested deeper than [`MAX_NESTING`] before it is parsed: `[`/`{` outside
/// quoted strings and comments, and lines indented more than `2 × MAX_NESTING` columns.
///
/// Errors: a message naming the line (`line N: …`); [`nesting_error`] gives the line apart.
pub fn check_nesting(text: &str) -> Result<(), String> {
    match nesting_error(text) {
        Some((line, message)) => Err(format!("line {line}: {message}")),
        None => Ok(()),
    }
}

/// [`check_nesting`]'s finding: the 1-based line where `text` first nests deeper than
/// [`MAX_NESTING`], and what is wrong; `None` when it does not. Linear in the text's length.
pub fn nesting_error(text: &str) -> Option<(usize, String)> {
    let mut depth = 0usize;
    for (n, line) in text.lines().enumerate() {
        let indent = line.len() - line.trim_start_matches([' ', '\t']).len();
        if indent > 2 * MAX_NESTING {
            return Some((n + 1, format!("indented deeper than {MAX_NESTING} levels")));
        }
        let mut quote: Option<char> = None;
        for c in line.chars() {
            match (quote, c) {
                (Some(q), c) if c == q => quote = None,
                (Some(_), _) => {}
                (None, '"' | '\'') => quote = Some(c),
                (None, '#') => break,
                (None, '[' | '{') => {
                    depth += 1;
                    if depth > MAX_NESTING {
                        return Some((n + 1, format!("nested deeper than {MAX_NESTING} levels")));
                    }
                }
                (None, ']' | '}') => depth = depth.saturating_sub(1),
                _ => {}
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_small_regular_files_are_read() {
        let dir = std::env::temp_dir().join(format!("pdgate-file-read-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ok = dir.join("endpoints.yaml");
        std::fs::write(&ok, "endpoints: []\n").unwrap();
        assert_eq!(read_regular_file(&ok, 100).unwrap(), "endpoints: []\n");
        assert_eq!(
            read_regular_file(&ok, 5).unwrap_err(),
            "14 bytes, over the limit of 5"
        );
        let zero = dir.join("zero.yaml");
        let _ = std::fs::remove_file(&zero);
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        assert_eq!(
            read_regular_file(&zero, 100).unwrap_err(),
            "not a regular file"
        );
        let fifo = dir.join("fifo.yaml");
        let _ = std::fs::remove_file(&fifo);
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        // Refused at once: opened without waiting for a writer, then seen to be a FIFO.
        assert_eq!(
            read_regular_file(&fifo, 100).unwrap_err(),
            "not a regular file"
        );
        assert_eq!(
            read_regular_file(&dir, 100).unwrap_err(),
            "not a regular file"
        );
        std::fs::write(&ok, [0xff, 0xfe]).unwrap();
        assert_eq!(read_regular_file(&ok, 100).unwrap_err(), "not UTF-8 text");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn nesting_is_refused_at_its_line_before_parsing() {
        let deep = format!("a: 1\nb: {}\n", "{a: ".repeat(100_000));
        let t = std::time::Instant::now();
        assert_eq!(
            nesting_error(&deep),
            Some((2, format!("nested deeper than {MAX_NESTING} levels")))
        );
        assert_eq!(
            check_nesting(&deep).unwrap_err(),
            format!("line 2: nested deeper than {MAX_NESTING} levels")
        );
        assert!(t.elapsed() < std::time::Duration::from_secs(1));
        let indented = format!("a:\n{}b: 1\n", " ".repeat(2 * MAX_NESTING + 1));
        assert_eq!(nesting_error(&indented).unwrap().0, 2);
        // Brackets in quotes and comments do not count; closed ones give their level back.
        let fine = format!(
            "a: '{}'\nb: \"{}\" # {}\nc: {}\n",
            "[".repeat(100),
            "{".repeat(100),
            "[".repeat(100),
            "[1] ".repeat(100)
        );
        assert_eq!(nesting_error(&fine), None);
    }
}
