//! What xtask writes from a template (the Markdown of docs/benchmarks.md and
//! docs/model-validation.md under xtask/templates/, the Debian control files under
//! deploy/debian/): each `@NAME@` placeholder filled in, none left.

use anyhow::{bail, Context, Result};

/// `text` with each `@NAME@` of `fields` (NAME, value) filled in; an error names any
/// placeholder left without a value.
pub fn fill(text: &str, fields: &[(&str, String)]) -> Result<String> {
    let mut text = text.to_string();
    for (name, value) in fields {
        text = text.replace(&format!("@{name}@"), value);
    }
    if let Some(name) = placeholders(&text).first() {
        bail!("no value for the placeholder @{name}@");
    }
    Ok(text)
}

/// `page` (the file `doc`) with the text between the markers `begin` and `end` replaced
/// by `body` (which ends its own last line): a generated part of a hand-written page.
pub fn replace_part(page: &str, doc: &str, begin: &str, end: &str, body: &str) -> Result<String> {
    let b = page
        .find(begin)
        .with_context(|| format!("{doc} has no marker {begin}"))?;
    let e = page[b..]
        .find(end)
        .map(|i| b + i)
        .with_context(|| format!("{doc} has no marker {end} after its begin"))?;
    Ok(format!(
        "{}{begin}\n{body}{end}{}",
        &page[..b],
        &page[e + end.len()..]
    ))
}

/// The `@NAME@` placeholders in `text` (NAME: capitals, digits and underscores), in order.
pub fn placeholders(text: &str) -> Vec<&str> {
    let name_char = |c: u8| c.is_ascii_uppercase() || c.is_ascii_digit() || c == b'_';
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'@' {
            let len = b[i + 1..].iter().take_while(|c| name_char(**c)).count();
            if len > 0 && b.get(i + 1 + len) == Some(&b'@') {
                out.push(&text[i + 1..i + 1 + len]);
                i += len + 2;
                continue;
            }
        }
        i += 1;
    }
    out
}

#[cfg(test)]
pub mod tests {
    use super::*;

    /// Fill `template` with a distinct value per placeholder ("<NAME>"), check every
    /// placeholder was filled and every value landed: the filled text.
    pub fn fill_all(template: &str) -> String {
        let names = placeholders(template);
        assert!(!names.is_empty(), "a template without placeholders");
        let fields: Vec<(&str, String)> = names.iter().map(|n| (*n, format!("<{n}>"))).collect();
        let out = fill(template, &fields).unwrap();
        assert!(placeholders(&out).is_empty(), "{out}");
        for n in names {
            assert!(out.contains(&format!("<{n}>")), "{n} not filled: {out}");
        }
        out
    }

    #[test]
    fn fill_fills_and_names_what_is_left() {
        let t = "c@d.e @ a @X@ b @LONG_NAME2@ @X@ f@";
        let out = fill(t, &[("X", "1".into()), ("LONG_NAME2", "2".into())]).unwrap();
        assert_eq!(out, "c@d.e @ a 1 b 2 1 f@");
        let err = fill(t, &[("X", "1".into())]).unwrap_err().to_string();
        assert!(err.contains("@LONG_NAME2@"), "{err}");
    }
}
