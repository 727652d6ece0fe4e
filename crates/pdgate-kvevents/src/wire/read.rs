//! A msgpack cursor over one payload: typed reads through `rmp`, a peek at the next marker,
//! and a bounded skip for values we do not model (unknown keys, trailing fields, unknown
//! events). Errors are short problem strings; the caller names the field.

use rmp::Marker;

/// Nesting deeper than this in a skipped value is rejected (a malformed or hostile payload
/// must not recurse without bound). vLLM's deepest value is `extra_keys`: 3 levels.
const MAX_SKIP_DEPTH: u32 = 32;

/// What is wrong at the current position, without the field's name (the caller adds it).
#[derive(Debug)]
pub(crate) struct Bad(pub(crate) String);

pub(crate) type Res<T> = Result<T, Bad>;

fn bad(problem: impl Into<String>) -> Bad {
    Bad(problem.into())
}

fn found(what: &str, m: Marker) -> Bad {
    Bad(format!("expected {what}, found {}", marker_name(m)))
}

/// A human name for a msgpack marker, for error messages.
fn marker_name(m: Marker) -> &'static str {
    match m {
        Marker::Null => "nil",
        Marker::True | Marker::False => "a bool",
        Marker::F32 | Marker::F64 => "a float",
        Marker::FixStr(_) | Marker::Str8 | Marker::Str16 | Marker::Str32 => "a string",
        Marker::Bin8 | Marker::Bin16 | Marker::Bin32 => "bytes",
        Marker::FixArray(_) | Marker::Array16 | Marker::Array32 => "an array",
        Marker::FixMap(_) | Marker::Map16 | Marker::Map32 => "a map",
        Marker::FixExt1
        | Marker::FixExt2
        | Marker::FixExt4
        | Marker::FixExt8
        | Marker::FixExt16
        | Marker::Ext8
        | Marker::Ext16
        | Marker::Ext32 => "an ext value",
        Marker::Reserved => "the reserved marker 0xc1",
        // Every integer marker (see `is_int`).
        _ => "an integer",
    }
}

/// A forward-only reader over a msgpack buffer.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Self { buf }
    }

    /// Bytes not read yet.
    pub(crate) fn remaining(&self) -> usize {
        self.buf.len()
    }

    /// The next value's marker, not consumed.
    pub(crate) fn peek(&self) -> Res<Marker> {
        self.buf
            .first()
            .map(|b| Marker::from_u8(*b))
            .ok_or_else(|| bad("truncated: the payload ends here"))
    }

    fn advance(&mut self, n: usize) -> Res<()> {
        if n > self.buf.len() {
            return Err(bad(format!(
                "truncated: {n} bytes announced, {} left",
                self.buf.len()
            )));
        }
        self.buf = &self.buf[n..];
        Ok(())
    }

    fn take(&mut self, n: usize) -> Res<&'a [u8]> {
        let head = self.buf.get(..n).ok_or_else(|| {
            bad(format!(
                "truncated: {n} bytes announced, {} left",
                self.buf.len()
            ))
        })?;
        self.buf = &self.buf[n..];
        Ok(head)
    }

    /// Consumes a nil if one is next; whether it did.
    pub(crate) fn nil(&mut self) -> Res<bool> {
        if self.peek()? == Marker::Null {
            self.buf = &self.buf[1..];
            return Ok(true);
        }
        Ok(false)
    }

    pub(crate) fn is_array(&self) -> Res<bool> {
        Ok(matches!(
            self.peek()?,
            Marker::FixArray(_) | Marker::Array16 | Marker::Array32
        ))
    }

    pub(crate) fn is_map(&self) -> Res<bool> {
        Ok(matches!(
            self.peek()?,
            Marker::FixMap(_) | Marker::Map16 | Marker::Map32
        ))
    }

    /// An array header; its element count.
    pub(crate) fn array_len(&mut self) -> Res<usize> {
        let m = self.peek()?;
        rmp::decode::read_array_len(&mut self.buf)
            .map(|n| n as usize)
            .map_err(|_| found("an array", m))
    }

    /// A map header; its entry count.
    pub(crate) fn map_len(&mut self) -> Res<usize> {
        let m = self.peek()?;
        rmp::decode::read_map_len(&mut self.buf)
            .map(|n| n as usize)
            .map_err(|_| found("a map", m))
    }

    /// A UTF-8 string, borrowed from the buffer.
    pub(crate) fn str(&mut self) -> Res<&'a str> {
        let m = self.peek()?;
        let len = rmp::decode::read_str_len(&mut self.buf).map_err(|_| found("a string", m))?;
        let raw = self.take(len as usize)?;
        std::str::from_utf8(raw).map_err(|_| bad("string is not valid UTF-8"))
    }

    /// A string or nil.
    pub(crate) fn opt_str(&mut self) -> Res<Option<String>> {
        if self.nil()? {
            return Ok(None);
        }
        self.str().map(|s| Some(s.to_owned()))
    }

    /// A non-negative integer of any msgpack width.
    pub(crate) fn u64(&mut self) -> Res<u64> {
        let m = self.peek()?;
        if !is_int(m) {
            return Err(found("an integer", m));
        }
        rmp::decode::read_int::<u64, _>(&mut self.buf)
            .map_err(|_| bad("expected a non-negative integer, found a negative one"))
    }

    /// A non-negative integer that fits 32 bits.
    pub(crate) fn u32(&mut self) -> Res<u32> {
        let v = self.u64()?;
        u32::try_from(v).map_err(|_| bad(format!("integer {v} does not fit 32 bits")))
    }

    /// A signed integer of any msgpack width that fits i64.
    fn i64(&mut self) -> Res<i64> {
        let m = self.peek()?;
        if !is_int(m) {
            return Err(found("an integer", m));
        }
        rmp::decode::read_int::<i64, _>(&mut self.buf)
            .map_err(|_| bad("integer out of range for i64"))
    }

    /// A non-negative integer or nil.
    pub(crate) fn opt_u64(&mut self) -> Res<Option<u64>> {
        if self.nil()? {
            return Ok(None);
        }
        self.u64().map(Some)
    }

    /// A 32-bit non-negative integer or nil.
    pub(crate) fn opt_u32(&mut self) -> Res<Option<u32>> {
        if self.nil()? {
            return Ok(None);
        }
        self.u32().map(Some)
    }

    /// A float (f64 or f32) or an integer, as f64 (timestamps).
    pub(crate) fn f64(&mut self) -> Res<f64> {
        match self.peek()? {
            Marker::F64 => rmp::decode::read_f64(&mut self.buf).map_err(|e| bad(e.to_string())),
            Marker::F32 => rmp::decode::read_f32(&mut self.buf)
                .map(f64::from)
                .map_err(|e| bad(e.to_string())),
            m if is_int(m) => {
                if matches!(m, Marker::U64) {
                    return self.u64().map(|v| v as f64);
                }
                self.i64().map(|v| v as f64)
            }
            m => Err(found("a number", m)),
        }
    }

    /// An engine block hash: an integer (u64, or i64 from older vLLM's Python `hash()`,
    /// kept as its two's-complement bits) or bytes folded by [`super::fold_hash_bytes`].
    pub(crate) fn hash(&mut self) -> Res<u64> {
        match self.peek()? {
            Marker::Bin8 | Marker::Bin16 | Marker::Bin32 => {
                let len =
                    rmp::decode::read_bin_len(&mut self.buf).map_err(|e| bad(e.to_string()))?;
                let raw = self.take(len as usize)?;
                Ok(super::fold_hash_bytes(raw))
            }
            Marker::FixNeg(_) | Marker::I8 | Marker::I16 | Marker::I32 | Marker::I64 => {
                self.i64().map(|v| v as u64)
            }
            m if is_int(m) => self.u64(),
            m => Err(found("a block hash (integer or bytes)", m)),
        }
    }

    /// A hash or nil.
    pub(crate) fn opt_hash(&mut self) -> Res<Option<u64>> {
        if self.nil()? {
            return Ok(None);
        }
        self.hash().map(Some)
    }

    /// Skips one value of any kind, nested at most [`MAX_SKIP_DEPTH`] deep.
    pub(crate) fn skip(&mut self) -> Res<()> {
        self.skip_at(0)
    }

    fn skip_at(&mut self, depth: u32) -> Res<()> {
        if depth > MAX_SKIP_DEPTH {
            return Err(bad(format!("nested deeper than {MAX_SKIP_DEPTH} levels")));
        }
        let m = self.peek()?;
        let fixed = match m {
            Marker::Null | Marker::True | Marker::False | Marker::FixPos(_) | Marker::FixNeg(_) => {
                Some(1)
            }
            Marker::U8 | Marker::I8 => Some(2),
            Marker::U16 | Marker::I16 => Some(3),
            Marker::U32 | Marker::I32 | Marker::F32 => Some(5),
            Marker::U64 | Marker::I64 | Marker::F64 => Some(9),
            Marker::FixExt1 => Some(3),
            Marker::FixExt2 => Some(4),
            Marker::FixExt4 => Some(6),
            Marker::FixExt8 => Some(10),
            Marker::FixExt16 => Some(18),
            Marker::Reserved => return Err(found("a msgpack value", m)),
            _ => None,
        };
        if let Some(n) = fixed {
            return self.advance(n);
        }
        match m {
            Marker::FixStr(_) | Marker::Str8 | Marker::Str16 | Marker::Str32 => {
                let len =
                    rmp::decode::read_str_len(&mut self.buf).map_err(|e| bad(e.to_string()))?;
                self.advance(len as usize)
            }
            Marker::Bin8 | Marker::Bin16 | Marker::Bin32 => {
                let len =
                    rmp::decode::read_bin_len(&mut self.buf).map_err(|e| bad(e.to_string()))?;
                self.advance(len as usize)
            }
            Marker::Ext8 | Marker::Ext16 | Marker::Ext32 => {
                let meta =
                    rmp::decode::read_ext_meta(&mut self.buf).map_err(|e| bad(e.to_string()))?;
                self.advance(meta.size as usize)
            }
            Marker::FixArray(_) | Marker::Array16 | Marker::Array32 => {
                let n = self.array_len()?;
                (0..n).try_for_each(|_| self.skip_at(depth + 1))
            }
            _ => {
                let n = self.map_len()?;
                (0..2 * n).try_for_each(|_| self.skip_at(depth + 1))
            }
        }
    }
}

fn is_int(m: Marker) -> bool {
    matches!(
        m,
        Marker::FixPos(_)
            | Marker::U8
            | Marker::U16
            | Marker::U32
            | Marker::U64
            | Marker::FixNeg(_)
            | Marker::I8
            | Marker::I16
            | Marker::I32
            | Marker::I64
    )
}
