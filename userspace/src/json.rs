//! JSON lines written straight into a byte buffer.
//!
//! The printed records are flat objects with a few small nested maps, and their keys are
//! fixed ASCII names, so they are written as they are; only values are escaped. This is
//! what lets the pipeline keep up with the kernel: through serde_json, escaping the ~60
//! keys of each connection line was a fifth of all userspace time.

/// An object being written; `end` closes it.
pub struct Object<'a> {
    out: &'a mut Vec<u8>,
    empty: bool,
}

impl<'a> Object<'a> {
    pub fn begin(out: &'a mut Vec<u8>) -> Object<'a> {
        out.push(b'{');
        Object { out, empty: true }
    }

    #[inline]
    fn key(&mut self, k: &str) -> &mut Vec<u8> {
        debug_assert!(
            k.bytes()
                .all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\\'),
            "JSON key {k:?} must not need escaping"
        );
        if !self.empty {
            self.out.push(b',');
        }
        self.empty = false;
        self.out.push(b'"');
        self.out.extend_from_slice(k.as_bytes());
        self.out.extend_from_slice(b"\":");
        self.out
    }

    #[inline]
    pub fn str(&mut self, k: &str, v: &str) -> &mut Self {
        string(self.key(k), v);
        self
    }

    /// A string, or `null`.
    #[inline]
    pub fn opt_str(&mut self, k: &str, v: Option<&str>) -> &mut Self {
        match v {
            Some(v) => self.str(k, v),
            None => {
                self.key(k).extend_from_slice(b"null");
                self
            }
        }
    }

    #[inline]
    pub fn u64(&mut self, k: &str, v: u64) -> &mut Self {
        let mut digits = itoa::Buffer::new();
        self.key(k).extend_from_slice(digits.format(v).as_bytes());
        self
    }

    #[inline]
    pub fn bool(&mut self, k: &str, v: bool) -> &mut Self {
        self.key(k)
            .extend_from_slice(if v { b"true" } else { b"false" });
        self
    }

    /// An array of strings.
    pub fn strs<S: AsRef<str>>(&mut self, k: &str, v: impl IntoIterator<Item = S>) -> &mut Self {
        let out = self.key(k);
        out.push(b'[');
        for (i, s) in v.into_iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            string(out, s.as_ref());
        }
        out.push(b']');
        self
    }

    /// A number; `null` when it is not finite (JSON has no NaN or infinity).
    pub fn f64(&mut self, k: &str, v: f64) -> &mut Self {
        let out = self.key(k);
        if v.is_finite() {
            // Display is the shortest text that reads back as the same f64
            out.extend_from_slice(v.to_string().as_bytes());
        } else {
            out.extend_from_slice(b"null");
        }
        self
    }

    /// A number, or `null`.
    pub fn opt_f64(&mut self, k: &str, v: Option<f64>) -> &mut Self {
        self.f64(k, v.unwrap_or(f64::NAN))
    }

    /// An array of objects, filled by `fill`.
    pub fn array(&mut self, k: &str, fill: impl FnOnce(&mut Array)) -> &mut Self {
        let out = self.key(k);
        out.push(b'[');
        let mut a = Array { out, empty: true };
        fill(&mut a);
        a.out.push(b']');
        self
    }

    /// A nested object, filled by `fill`.
    pub fn object(&mut self, k: &str, fill: impl FnOnce(&mut Object)) -> &mut Self {
        let mut inner = Object::begin(self.key(k));
        fill(&mut inner);
        inner.end();
        self
    }

    pub fn end(self) {
        self.out.push(b'}');
    }
}

/// An array being written (its elements are objects).
pub struct Array<'a> {
    out: &'a mut Vec<u8>,
    empty: bool,
}

impl Array<'_> {
    pub fn object(&mut self, fill: impl FnOnce(&mut Object)) {
        if !self.empty {
            self.out.push(b',');
        }
        self.empty = false;
        let mut o = Object::begin(self.out);
        fill(&mut o);
        o.end();
    }
}

/// A JSON string (RFC 8259): quotes, backslashes and control characters escaped.
fn string(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    let bytes = s.as_bytes();
    // nearly every value needs no escaping: one pass the compiler vectorizes says so
    if !bytes.iter().fold(false, |any, &b| {
        any | (b < 0x20) | (b == b'"') | (b == b'\\')
    }) {
        out.extend_from_slice(bytes);
        out.push(b'"');
        return;
    }
    let mut plain_from = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let escaped: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x08 => b"\\b",
            0x0c => b"\\f",
            0x00..=0x1f => &[b'\\', b'u', b'0', b'0', hex(b >> 4), hex(b & 0xf)],
            _ => continue,
        };
        out.extend_from_slice(&bytes[plain_from..i]);
        out.extend_from_slice(escaped);
        plain_from = i + 1;
    }
    out.extend_from_slice(&bytes[plain_from..]);
    out.push(b'"');
}

fn hex(nibble: u8) -> u8 {
    b"0123456789abcdef"[nibble as usize]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(fill: impl FnOnce(&mut Object)) -> String {
        let mut out = Vec::new();
        let mut o = Object::begin(&mut out);
        fill(&mut o);
        o.end();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn strings_are_escaped_as_rfc_8259_says() {
        let nasty = "a\"b\\c\nd\te\u{1}f\u{1f}g\u{7f}h\u{e9}i\u{8}\u{c}\r";
        let line = one(|o| {
            o.str("s", nasty);
        });
        assert_eq!(
            line,
            "{\"s\":\"a\\\"b\\\\c\\nd\\te\\u0001f\\u001fg\u{7f}h\u{e9}i\\b\\f\\r\"}"
        );
        let back: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(back["s"], nasty);
    }

    #[test]
    fn every_value_kind_round_trips() {
        let line = one(|o| {
            o.str("a", "x")
                .opt_str("b", None)
                .opt_str("c", Some(""))
                .u64("d", u64::MAX)
                .u64("e", 0)
                .bool("f", true)
                .bool("g", false)
                .strs("h", ["h2", "http/1.1"])
                .strs("i", [""; 0])
                .object("j", |j| {
                    j.u64("k", 7).object("l", |_| {});
                });
        });
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(
            v,
            serde_json::json!({
                "a": "x", "b": null, "c": "", "d": u64::MAX, "e": 0, "f": true, "g": false,
                "h": ["h2", "http/1.1"], "i": [], "j": {"k": 7, "l": {}}
            })
        );
        assert_eq!(one(|_| {}), "{}");
    }
}
