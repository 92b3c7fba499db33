//! The canonical form that `idem_request_hash` hashes, so that the same JSON value always gives
//! the same bytes whatever its key order, whitespace or number spelling:
//!
//! - no whitespace outside strings;
//! - object members sorted by key, comparing the keys' UTF-8 bytes (that is, code point order);
//!   keys are unique (jsonb keeps the last of repeated keys);
//! - numbers in plain decimal notation, without exponent, without trailing fractional zeros and
//!   without a trailing decimal point; `-0` is `0` (`1.50` and `1.5` are the same, `1E2` is `100`);
//! - strings with `"`, `\` and the control characters below U+0020 escaped (`\b \f \n \r \t`,
//!   others as `\u00XX` in lowercase hex), every other character as raw UTF-8;
//! - `true`, `false` and `null` as such.
//!
//! Numbers are never converted to floating point: two amounts that differ in their 30th digit
//! hash differently.
//!
//! This module only writes: the caller walks the value (in canonical member order) and calls
//! the writer token by token, so the canonical text is never held in memory: it streams into a
//! [`Sink`], usually a SHA-256 hasher. Nothing here allocates.

/// Where canonical bytes go.
pub trait Sink {
    fn put(&mut self, bytes: &[u8]);
}

/// Writes one JSON value in canonical form, token by token.
pub struct Writer<S: Sink> {
    sink: S,
    /// whether the next value or key of the current container needs a ',' before it
    after_value: bool,
}

impl<S: Sink> Writer<S> {
    pub fn new(sink: S) -> Self {
        Writer {
            sink,
            after_value: false,
        }
    }

    pub fn into_sink(self) -> S {
        self.sink
    }

    fn separate(&mut self) {
        if self.after_value {
            self.sink.put(b",");
        }
    }

    pub fn null(&mut self) {
        self.separate();
        self.sink.put(b"null");
        self.after_value = true;
    }

    pub fn bool(&mut self, value: bool) {
        self.separate();
        self.sink.put(if value { b"true" } else { b"false" });
        self.after_value = true;
    }

    /// A number given as PostgreSQL's `numeric_out` prints it: `-?digits(.digits)?`. Any other
    /// text (NaN, exponents) is refused: jsonb cannot hold it.
    pub fn number(&mut self, text: &[u8]) -> Result<(), NotANumber> {
        let number = PlainDecimal::parse(text)?;
        self.separate();
        number.write(&mut self.sink);
        self.after_value = true;
        Ok(())
    }

    /// A string value, from its UTF-8 bytes.
    pub fn string(&mut self, utf8: &[u8]) {
        self.separate();
        write_string(&mut self.sink, utf8.iter().copied());
        self.after_value = true;
    }

    /// A string value whose ASCII letters are written in upper case (HTTP methods).
    pub fn string_ascii_uppercase(&mut self, utf8: &[u8]) {
        self.separate();
        write_string(&mut self.sink, utf8.iter().map(u8::to_ascii_uppercase));
        self.after_value = true;
    }

    pub fn begin_array(&mut self) {
        self.separate();
        self.sink.put(b"[");
        self.after_value = false;
    }

    pub fn end_array(&mut self) {
        self.sink.put(b"]");
        self.after_value = true;
    }

    pub fn begin_object(&mut self) {
        self.separate();
        self.sink.put(b"{");
        self.after_value = false;
    }

    /// The key of the next member; its value follows with the next call.
    pub fn key(&mut self, utf8: &[u8]) {
        self.separate();
        write_string(&mut self.sink, utf8.iter().copied());
        self.sink.put(b":");
        self.after_value = false;
    }

    pub fn end_object(&mut self) {
        self.sink.put(b"}");
        self.after_value = true;
    }
}

/// A number text that is not plain decimal notation.
#[derive(Debug, PartialEq, Eq)]
pub struct NotANumber;

/// A decimal number split into its parts, borrowed from the text it was read from.
struct PlainDecimal<'a> {
    negative: bool,
    /// integer digits without leading zeros (empty for 0)
    int: &'a [u8],
    /// fractional digits without trailing zeros (empty for none)
    frac: &'a [u8],
}

impl<'a> PlainDecimal<'a> {
    fn parse(text: &'a [u8]) -> Result<Self, NotANumber> {
        let (negative, digits) = match text.split_first() {
            Some((b'-', rest)) => (true, rest),
            _ => (false, text),
        };
        let (int, frac) = match digits.iter().position(|&b| b == b'.') {
            Some(point) => (&digits[..point], &digits[point + 1..]),
            None => (digits, &digits[digits.len()..]),
        };
        let all_digits = |s: &[u8]| s.iter().all(u8::is_ascii_digit);
        if int.is_empty() || !all_digits(int) || !all_digits(frac) {
            return Err(NotANumber);
        }
        if digits.len() > int.len() && frac.is_empty() {
            return Err(NotANumber); // "1." is not a number
        }
        let int_start = int.iter().position(|&b| b != b'0').unwrap_or(int.len());
        let frac_end = frac.iter().rposition(|&b| b != b'0').map_or(0, |i| i + 1);
        Ok(PlainDecimal {
            negative,
            int: &int[int_start..],
            frac: &frac[..frac_end],
        })
    }

    fn write(&self, sink: &mut impl Sink) {
        let is_zero = self.int.is_empty() && self.frac.is_empty();
        if self.negative && !is_zero {
            sink.put(b"-");
        }
        sink.put(if self.int.is_empty() { b"0" } else { self.int });
        if !self.frac.is_empty() {
            sink.put(b".");
            sink.put(self.frac);
        }
    }
}

fn write_string(sink: &mut impl Sink, bytes: impl Iterator<Item = u8>) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    sink.put(b"\"");
    // runs of plain bytes go out in chunks: one put per byte would dominate the cost
    let mut chunk = [0u8; 256];
    let mut len = 0;
    let mut unicode = *b"\\u0000";
    for b in bytes {
        let escape: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            0x08 => b"\\b",
            0x0c => b"\\f",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x00..=0x1f => {
                unicode[4] = HEX[(b >> 4) as usize];
                unicode[5] = HEX[(b & 0x0f) as usize];
                &unicode
            }
            _ => {
                chunk[len] = b;
                len += 1;
                if len == chunk.len() {
                    sink.put(&chunk);
                    len = 0;
                }
                continue;
            }
        };
        sink.put(&chunk[..len]);
        len = 0;
        sink.put(escape);
    }
    sink.put(&chunk[..len]);
    sink.put(b"\"");
}

impl Sink for Vec<u8> {
    fn put(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}

#[cfg(test)]
mod unit {
    use super::*;

    fn text(f: impl FnOnce(&mut Writer<Vec<u8>>)) -> String {
        let mut w = Writer::new(Vec::new());
        f(&mut w);
        String::from_utf8(w.into_sink()).unwrap()
    }

    fn number(n: &str) -> String {
        text(|w| w.number(n.as_bytes()).unwrap())
    }

    #[test]
    fn separators_follow_the_tokens() {
        let out = text(|w| {
            w.begin_object();
            w.key(b"a");
            w.begin_array();
            w.bool(true);
            w.null();
            w.string(b"x");
            w.begin_object();
            w.end_object();
            w.end_array();
            w.key(b"b");
            w.number(b"1").unwrap();
            w.end_object();
        });
        assert_eq!(out, r#"{"a":[true,null,"x",{}],"b":1}"#);
    }

    #[test]
    fn numbers_are_normalised_not_rounded() {
        assert_eq!(number("1.50"), "1.5");
        assert_eq!(number("100"), "100");
        assert_eq!(number("0.000100"), "0.0001");
        assert_eq!(number("-0"), "0");
        assert_eq!(number("-0.000"), "0");
        assert_eq!(number("007.0"), "7");
        assert_eq!(number("-12.340"), "-12.34");
        assert_eq!(
            number("12345678901234567890.123456789012345678901"),
            "12345678901234567890.123456789012345678901"
        );
    }

    #[test]
    fn only_plain_decimals_are_numbers() {
        let mut w = Writer::new(Vec::new());
        for bad in [
            "", "-", "1.", ".5", "1e5", "NaN", "Infinity", "1.2.3", "--1", "0x10",
        ] {
            assert_eq!(w.number(bad.as_bytes()), Err(NotANumber), "{bad:?}");
        }
    }

    #[test]
    fn strings_use_minimal_escapes() {
        let s = text(|w| w.string("a\"b\\c\u{8}\u{c}\n\r\t\u{1}\u{1f}/é😀".as_bytes()));
        assert_eq!(s, "\"a\\\"b\\\\c\\b\\f\\n\\r\\t\\u0001\\u001f/é😀\"");
        let long = "x".repeat(1000) + "\n" + &"y".repeat(300);
        let expected = format!("\"{}\\n{}\"", "x".repeat(1000), "y".repeat(300));
        assert_eq!(text(|w| w.string(long.as_bytes())), expected);
    }

    #[test]
    fn methods_are_upper_cased_ascii_only() {
        assert_eq!(
            text(|w| w.string_ascii_uppercase("pOst-é".as_bytes())),
            "\"POST-é\""
        );
    }
}
