//! The canonical form that `idem_request_hash` hashes, so that the same JSON value always gives
//! the same bytes whatever its key order, whitespace or number spelling:
//!
//! - no whitespace outside strings;
//! - object members sorted by key, comparing the keys' UTF-8 bytes (that is, code point order);
//!   a repeated key keeps its last value (as `jsonb` does);
//! - numbers in plain decimal notation, without exponent, without trailing fractional zeros and
//!   without a trailing decimal point; `-0` is `0` (`1.50` and `1.5` are the same, `1E2` is `100`);
//! - strings with `"`, `\` and the control characters below U+0020 escaped (`\b \f \n \r \t`,
//!   others as `\u00XX` in lowercase hex), every other character as raw UTF-8;
//! - `true`, `false` and `null` as such.
//!
//! Numbers are never converted to floating point: two amounts that differ in their 30th digit
//! hash differently. The input is the text `jsonb` prints, which is always valid JSON.

use std::fmt::Write;

const MAX_EXPONENT: i64 = 200_000;

#[derive(Debug, PartialEq)]
enum Value {
    Null,
    Bool(bool),
    Number(String),
    String(String),
    Array(Vec<Value>),
    Object(Vec<(String, Value)>),
}

/// Why a text is not JSON. Only reachable with input that did not come from `jsonb`.
#[derive(Debug, PartialEq, Eq)]
pub struct SyntaxError {
    pub offset: usize,
    pub expected: &'static str,
}

impl std::fmt::Display for SyntaxError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "invalid JSON at byte {}: expected {}",
            self.offset, self.expected
        )
    }
}

/// Canonical text of a JSON document.
pub fn canonicalize(json: &str) -> Result<String, SyntaxError> {
    let mut parser = Parser {
        bytes: json.as_bytes(),
        pos: 0,
    };
    let value = parser.value()?;
    parser.skip_whitespace();
    if parser.pos != parser.bytes.len() {
        return Err(parser.error("end of input"));
    }
    let mut out = String::with_capacity(json.len());
    write_value(&value, &mut out);
    Ok(out)
}

/// Canonical text of a JSON array of the given canonical elements, e.g. `["POST","/x",{...}]`.
pub fn array_of(elements: &[String]) -> String {
    let mut out = String::from("[");
    for (i, element) in elements.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(element);
    }
    out.push(']');
    out
}

/// Canonical text of a JSON string holding `s`.
pub fn string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    write_string(s, &mut out);
    out
}

struct Parser<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Parser<'a> {
    fn error(&self, expected: &'static str) -> SyntaxError {
        SyntaxError {
            offset: self.pos,
            expected,
        }
    }

    fn skip_whitespace(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.bytes.get(self.pos) {
            self.pos += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn expect_literal(&mut self, literal: &'static str) -> Result<(), SyntaxError> {
        if self.bytes[self.pos..].starts_with(literal.as_bytes()) {
            self.pos += literal.len();
            Ok(())
        } else {
            Err(self.error(literal))
        }
    }

    fn value(&mut self) -> Result<Value, SyntaxError> {
        self.skip_whitespace();
        match self.peek() {
            Some(b'{') => self.object(),
            Some(b'[') => self.array(),
            Some(b'"') => Ok(Value::String(self.string()?)),
            Some(b't') => self.expect_literal("true").map(|_| Value::Bool(true)),
            Some(b'f') => self.expect_literal("false").map(|_| Value::Bool(false)),
            Some(b'n') => self.expect_literal("null").map(|_| Value::Null),
            Some(b'-' | b'0'..=b'9') => self.number(),
            _ => Err(self.error("a JSON value")),
        }
    }

    fn object(&mut self) -> Result<Value, SyntaxError> {
        self.pos += 1; // '{'
        let mut members: Vec<(String, Value)> = Vec::new();
        self.skip_whitespace();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            return Ok(Value::Object(members));
        }
        loop {
            self.skip_whitespace();
            if self.peek() != Some(b'"') {
                return Err(self.error("an object key"));
            }
            let key = self.string()?;
            self.skip_whitespace();
            if self.peek() != Some(b':') {
                return Err(self.error("':'"));
            }
            self.pos += 1;
            let value = self.value()?;
            // a repeated key keeps its last value, as jsonb does
            members.retain(|(k, _)| *k != key);
            members.push((key, value));
            self.skip_whitespace();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    break;
                }
                _ => return Err(self.error("',' or '}'")),
            }
        }
        members.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
        Ok(Value::Object(members))
    }

    fn array(&mut self) -> Result<Value, SyntaxError> {
        self.pos += 1; // '['
        let mut elements = Vec::new();
        self.skip_whitespace();
        if self.peek() == Some(b']') {
            self.pos += 1;
            return Ok(Value::Array(elements));
        }
        loop {
            elements.push(self.value()?);
            self.skip_whitespace();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b']') => {
                    self.pos += 1;
                    break;
                }
                _ => return Err(self.error("',' or ']'")),
            }
        }
        Ok(Value::Array(elements))
    }

    fn hex4(&mut self) -> Result<u32, SyntaxError> {
        let digits = self
            .bytes
            .get(self.pos..self.pos + 4)
            .ok_or_else(|| self.error("4 hex digits"))?;
        let text = std::str::from_utf8(digits).map_err(|_| self.error("4 hex digits"))?;
        let code = u32::from_str_radix(text, 16).map_err(|_| self.error("4 hex digits"))?;
        self.pos += 4;
        Ok(code)
    }

    fn string(&mut self) -> Result<String, SyntaxError> {
        self.pos += 1; // opening quote
        let mut out = String::new();
        loop {
            let start = self.pos;
            while let Some(b) = self.peek() {
                if b == b'"' || b == b'\\' || b < 0x20 {
                    break;
                }
                self.pos += 1;
            }
            let chunk = std::str::from_utf8(&self.bytes[start..self.pos])
                .map_err(|_| self.error("UTF-8 text"))?;
            out.push_str(chunk);
            match self.peek() {
                Some(b'"') => {
                    self.pos += 1;
                    return Ok(out);
                }
                Some(b'\\') => {
                    self.pos += 1;
                    let escape = self.peek().ok_or_else(|| self.error("an escape"))?;
                    self.pos += 1;
                    match escape {
                        b'"' => out.push('"'),
                        b'\\' => out.push('\\'),
                        b'/' => out.push('/'),
                        b'b' => out.push('\u{8}'),
                        b'f' => out.push('\u{c}'),
                        b'n' => out.push('\n'),
                        b'r' => out.push('\r'),
                        b't' => out.push('\t'),
                        b'u' => {
                            let first = self.hex4()?;
                            let code = if (0xD800..0xDC00).contains(&first) {
                                self.expect_literal("\\u")?;
                                let second = self.hex4()?;
                                if !(0xDC00..0xE000).contains(&second) {
                                    return Err(self.error("a low surrogate"));
                                }
                                0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00)
                            } else {
                                first
                            };
                            out.push(
                                char::from_u32(code)
                                    .ok_or_else(|| self.error("a valid code point"))?,
                            );
                        }
                        _ => return Err(self.error("a valid escape")),
                    }
                }
                _ => return Err(self.error("'\"'")),
            }
        }
    }

    fn number(&mut self) -> Result<Value, SyntaxError> {
        let start = self.pos;
        if self.peek() == Some(b'-') {
            self.pos += 1;
        }
        let int_start = self.pos;
        while let Some(b'0'..=b'9') = self.peek() {
            self.pos += 1;
        }
        if self.pos == int_start {
            return Err(self.error("a digit"));
        }
        let mut frac = "";
        if self.peek() == Some(b'.') {
            self.pos += 1;
            let frac_start = self.pos;
            while let Some(b'0'..=b'9') = self.peek() {
                self.pos += 1;
            }
            if self.pos == frac_start {
                return Err(self.error("a digit"));
            }
            frac = std::str::from_utf8(&self.bytes[frac_start..self.pos]).unwrap_or("");
        }
        let int_end = if frac.is_empty() {
            self.pos
        } else {
            self.pos - frac.len() - 1
        };
        let mut exponent: i64 = 0;
        if let Some(b'e' | b'E') = self.peek() {
            self.pos += 1;
            let negative = match self.peek() {
                Some(b'-') => {
                    self.pos += 1;
                    true
                }
                Some(b'+') => {
                    self.pos += 1;
                    false
                }
                _ => false,
            };
            let exp_start = self.pos;
            while let Some(b'0'..=b'9') = self.peek() {
                self.pos += 1;
            }
            let digits = std::str::from_utf8(&self.bytes[exp_start..self.pos]).unwrap_or("");
            let magnitude: i64 = digits.parse().map_err(|_| self.error("an exponent"))?;
            // numeric holds at most 131072 digits before and 16383 after the point
            if magnitude > MAX_EXPONENT {
                return Err(self.error("an exponent PostgreSQL numeric can hold"));
            }
            exponent = if negative { -magnitude } else { magnitude };
        }
        let negative = self.bytes[start] == b'-';
        let int = std::str::from_utf8(&self.bytes[int_start..int_end]).unwrap_or("");
        Ok(Value::Number(normalize_number(
            negative, int, frac, exponent,
        )))
    }
}

/// Plain decimal text of `(-)int.frac × 10^exponent`, without insignificant zeros.
fn normalize_number(negative: bool, int: &str, frac: &str, exponent: i64) -> String {
    let digits: String = [int, frac].concat();
    // position of the decimal point inside `digits`
    let point = int.len() as i64 + exponent;
    let (int_part, frac_part): (String, String) = if point <= 0 {
        let zeros = "0".repeat(point.unsigned_abs() as usize);
        ("0".to_string(), zeros + &digits)
    } else if point as usize >= digits.len() {
        let zeros = "0".repeat(point as usize - digits.len());
        (digits + &zeros, String::new())
    } else {
        let (i, f) = digits.split_at(point as usize);
        (i.to_string(), f.to_string())
    };
    let int_trimmed = int_part.trim_start_matches('0');
    let frac_trimmed = frac_part.trim_end_matches('0');
    let int_final = if int_trimmed.is_empty() {
        "0"
    } else {
        int_trimmed
    };
    let is_zero = int_final == "0" && frac_trimmed.is_empty();
    let mut out = String::new();
    if negative && !is_zero {
        out.push('-');
    }
    out.push_str(int_final);
    if !frac_trimmed.is_empty() {
        out.push('.');
        out.push_str(frac_trimmed);
    }
    out
}

fn write_value(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(n) => out.push_str(n),
        Value::String(s) => write_string(s, out),
        Value::Array(elements) => {
            out.push('[');
            for (i, element) in elements.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(element, out);
            }
            out.push(']');
        }
        Value::Object(members) => {
            out.push('{');
            for (i, (key, value)) in members.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(key, out);
                out.push(':');
                write_value(value, out);
            }
            out.push('}');
        }
    }
}

fn write_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod unit {
    use super::*;

    fn canon(s: &str) -> String {
        canonicalize(s).expect("valid JSON")
    }

    #[test]
    fn sorts_keys_and_drops_whitespace() {
        assert_eq!(
            canon(r#"{ "b": 1, "a": [true, null, "x"] }"#),
            r#"{"a":[true,null,"x"],"b":1}"#
        );
        assert_eq!(
            canon(r#"{"b":{"d":1,"c":2},"a":0}"#),
            r#"{"a":0,"b":{"c":2,"d":1}}"#
        );
    }

    #[test]
    fn keys_sort_by_code_point_not_by_length() {
        // jsonb itself orders keys by length first; the canonical form does not
        assert_eq!(
            canon(r#"{"bb":1,"a":2,"ab":3}"#),
            r#"{"a":2,"ab":3,"bb":1}"#
        );
        assert_eq!(canon(r#"{"é":1,"z":2,"Z":3}"#), r#"{"Z":3,"z":2,"é":1}"#);
    }

    #[test]
    fn repeated_key_keeps_last_value() {
        assert_eq!(canon(r#"{"a":1,"a":2}"#), r#"{"a":2}"#);
    }

    #[test]
    fn numbers_are_normalised_not_rounded() {
        assert_eq!(canon("1.50"), "1.5");
        assert_eq!(canon("1.0"), "1");
        assert_eq!(canon("-0"), "0");
        assert_eq!(canon("-0.000"), "0");
        assert_eq!(canon("100"), "100");
        assert_eq!(canon("1E2"), "100");
        assert_eq!(canon("1.25e-3"), "0.00125");
        assert_eq!(canon("-12.5e1"), "-125");
        assert_eq!(canon("0.1"), "0.1");
        assert_eq!(
            canon("123456789012345678901234567890.123"),
            "123456789012345678901234567890.123"
        );
        assert_ne!(
            canon("123456789012345678901234567890"),
            canon("123456789012345678901234567891")
        );
    }

    #[test]
    fn strings_use_minimal_escapes() {
        assert_eq!(
            canon(r#""a\u0041\/\n\u001f\"\\é""#),
            "\"aA/\\n\\u001f\\\"\\\\é\""
        );
        assert_eq!(canon(r#""\ud83d\ude00""#), "\"😀\"");
    }

    #[test]
    fn rejects_what_is_not_json() {
        assert!(canonicalize("{").is_err());
        assert!(canonicalize("[1,]").is_err());
        assert!(canonicalize("tru").is_err());
        assert!(canonicalize("1 2").is_err());
        assert!(canonicalize(r#""\ud83d""#).is_err());
    }

    #[test]
    fn array_of_builds_a_canonical_array() {
        let parts = vec![string("POST"), string("/v1/x"), canon(r#"{"b":1,"a":2}"#)];
        assert_eq!(array_of(&parts), r#"["POST","/v1/x",{"a":2,"b":1}]"#);
    }
}
