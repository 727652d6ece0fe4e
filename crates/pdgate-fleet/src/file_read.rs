//! Reading the files an operator points pdgate at (the endpoints file, watched while it runs)
//! so that a wrong path cannot eat memory or stop discovery: only a regular file (after
//! following links) is opened — a FIFO would block the reader for good, `/dev/zero` would
//! never end — and at most a stated number of bytes is read. The type and size are checked
//! on the opened handle (opened non-blocking), so a file swapped for a FIFO between a check
//! and the open cannot block the reader.

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

/// Deepest nesting accepted in an endpoints file (YAML) (flow brackets, or block indentation in
/// columns / 2). The YAML reader's time grows with the square of the depth: a 400 KB file of
/// 200,000 nested `[` took minutes; a real endpoints file nests 4 levels.
pub const MAX_NESTING: usize = 64;

/// Refuses text nested deeper than [`MAX_NESTING`] before it is parsed: `[`/`{` outside
/// quoted strings and comments, and lines indented more than `2 × MAX_NESTING` columns.
///
/// Errors: a message naming the line.
pub fn check_nesting(text: &str) -> Result<(), String> {
    let mut depth = 0usize;
    for (n, line) in text.lines().enumerate() {
        let indent = line.len() - line.trim_start_matches([' ', '\t']).len();
        if indent > 2 * MAX_NESTING {
            return Err(format!(
                "line {}: indented deeper than {MAX_NESTING} levels",
                n + 1
            ));
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
                        return Err(format!(
                            "line {}: nested deeper than {MAX_NESTING} levels",
                            n + 1
                        ));
                    }
                }
                (None, ']' | '}') => depth = depth.saturating_sub(1),
                _ => {}
            }
        }
    }
    Ok(())
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
}
