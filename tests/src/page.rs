//! A page or a picture as a browser sees it, and the checks every drawing of hstrace's
//! passes there (`hstrace report`'s page, `hstrace model --plot`'s SVG): the file asks
//! for nothing outside itself, read as text and as Chromium loads it from a server that
//! records every request (and is its proxy, so that a request to any host is seen); its
//! DOM holds SVG with marks; a screenshot of it is a picture, not a blank. And a reading
//! of the DOM Chromium serializes: tags, attributes, text.

use std::{collections::HashMap, fs, io::BufReader, path::Path};

use crate::chromium::{dump_dom_with, screenshot_with, PageServer};

/// What an SVG draws with: one of these makes it non-empty.
pub const MARKS: &[&str] = &["rect", "path", "polyline", "polygon", "line", "circle"];

/// `file` as Chromium loads it, served at `at` (e.g. "/report.html"): checked to be under
/// `max_bytes`, to name nothing a browser would fetch, and to ask for nothing but itself
/// once loaded. Its DOM, serialized.
pub fn load_offline(file: &Path, at: &str, max_bytes: u64) -> String {
    let size = fs::metadata(file).unwrap().len();
    assert!(size < max_bytes, "{}: {size} bytes", file.display());
    let text = fs::read_to_string(file).unwrap();
    let found = external_references(&text);
    assert!(
        found.is_empty(),
        "{} would fetch: {found:#?}",
        file.display()
    );
    let server = PageServer::start(at, file);
    let dom = dump_dom_with(&server.url(), &server.proxy_flags());
    assert_eq!(
        asked(&server, file),
        [at],
        "{} asked for more than itself (every request: {:?})",
        file.display(),
        server.requests()
    );
    dom
}

/// What loading `file` asked for: the page's requests, less the `/favicon.ico` Chromium
/// asks for itself when a document that is not HTML (an SVG file) cannot name an icon.
fn asked(server: &PageServer, file: &Path) -> Vec<String> {
    let html = file.extension().is_some_and(|e| e == "html");
    server
        .page_requests()
        .into_iter()
        .filter(|r| html || r != "/favicon.ico")
        .collect()
}

/// Does `tags` (an element's inside, or a whole DOM) hold an `<svg>` with a mark in it?
pub fn has_drawing(tags: &[Tag]) -> bool {
    tags.iter().enumerate().any(|(k, t)| {
        t.name == "svg"
            && !t.closing
            && tags[k + 1..]
                .iter()
                .take_while(|u| !(u.name == "svg" && u.closing))
                .any(|u| MARKS.contains(&u.name.as_str()))
    })
}

/// A `width`×`height` screenshot of `file` (served at `at`, asking for nothing else) is a
/// picture: more than 50 colours, and no one colour (the background) covering 97 % of it
/// or more. The PNG is left at `png` for whoever looks.
pub fn assert_not_blank(file: &Path, at: &str, png: &Path, (width, height): (u32, u32)) {
    let server = PageServer::start(at, file);
    screenshot_with(&server.url(), png, width, height, &server.proxy_flags());
    assert_eq!(asked(&server, file), [at], "{:?}", server.requests());
    let mut decoder = png::Decoder::new(BufReader::new(fs::File::open(png).unwrap()));
    decoder.set_transformations(png::Transformations::EXPAND);
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    assert_eq!((info.width, info.height), (width, height));
    assert_eq!(info.bit_depth, png::BitDepth::Eight);
    let mut colours: HashMap<&[u8], u64> = HashMap::new();
    for px in buf[..info.buffer_size()].chunks_exact(info.color_type.samples()) {
        *colours.entry(px).or_default() += 1;
    }
    let background = *colours.values().max().unwrap() as f64 / (width * height) as f64;
    assert!(
        colours.len() > 50 && background < 0.97,
        "{}: {} colours, the commonest covers {:.1} %",
        png.display(),
        colours.len(),
        background * 100.0
    );
}

/// What the page would fetch: a URL (not `data:` nor `#…`) where a browser loads one (an
/// element's src, a link's or an SVG image's href, CSS's url() and @import). Links to
/// follow (`<a href>`) are not fetched.
pub fn external_references(html: &str) -> Vec<String> {
    let local = |v: &str| {
        let v = v.trim().trim_matches(['"', '\'']).trim();
        v.is_empty() || v.starts_with('#') || v.to_ascii_lowercase().starts_with("data:")
    };
    let mut found = Vec::new();
    for t in tags(html).iter().filter(|t| !t.closing) {
        for (k, v) in &t.attrs {
            let loads = match k.as_str() {
                "src" | "srcset" | "poster" | "data" | "background" | "action" | "formaction"
                | "xlink:href" => true,
                "href" => t.name != "a",
                _ => false,
            };
            if loads && !local(v) {
                found.push(format!("<{} {k}={v:?}>", t.name));
            }
        }
    }
    let lower = html.to_ascii_lowercase();
    for (at, _) in lower.match_indices("url(") {
        let arg = &html[at + 4..];
        let arg = &arg[..arg.find(')').unwrap_or(arg.len())];
        if !local(arg) {
            found.push(format!("url({arg})"));
        }
    }
    if lower.contains("@import") {
        found.push("@import".to_owned());
    }
    found
}

/// One tag of an HTML text: its name (lower case), attributes (values unescaped), whether
/// it closes an element or closes itself, and where it is.
pub struct Tag {
    pub name: String,
    pub attrs: Vec<(String, String)>,
    pub closing: bool,
    pub self_closing: bool,
    pub start: usize,
    pub end: usize,
}

impl Tag {
    pub fn attr(&self, name: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// The tags of `html`, in order: comments, doctypes and the text of scripts and styles
/// passed over. Enough for Chromium's serialized DOM and a page written by a program.
pub fn tags(html: &str) -> Vec<Tag> {
    let b = html.as_bytes();
    let skip_space = |mut j: usize| {
        while j < b.len() && b[j].is_ascii_whitespace() {
            j += 1;
        }
        j
    };
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(off) = html[i..].find('<') {
        let start = i + off;
        let rest = &html[start..];
        if rest.starts_with("<!--") {
            i = start + rest.find("-->").map_or(rest.len(), |e| e + 3);
            continue;
        }
        if rest.starts_with("<!") || rest.starts_with("<?") {
            i = start + rest.find('>').map_or(rest.len(), |e| e + 1);
            continue;
        }
        let closing = rest.starts_with("</");
        let name_at = start + if closing { 2 } else { 1 };
        let mut j = name_at;
        while j < b.len() && !b[j].is_ascii_whitespace() && b[j] != b'>' && b[j] != b'/' {
            j += 1;
        }
        let name = html[name_at..j].to_ascii_lowercase();
        if !name.starts_with(|c: char| c.is_ascii_alphabetic()) {
            // a '<' in text
            i = start + 1;
            continue;
        }
        let (mut attrs, mut self_closing) = (Vec::new(), false);
        loop {
            j = skip_space(j);
            if j >= b.len() {
                break;
            }
            if b[j] == b'>' {
                j += 1;
                break;
            }
            if b[j] == b'/' {
                self_closing = true;
                j += 1;
                continue;
            }
            self_closing = false;
            let at = j;
            while j < b.len() && !b[j].is_ascii_whitespace() && !b"=>/".contains(&b[j]) {
                j += 1;
            }
            if j == at {
                // a stray '=': pass over it
                j += 1;
                continue;
            }
            let key = html[at..j].to_ascii_lowercase();
            j = skip_space(j);
            let mut value = String::new();
            if j < b.len() && b[j] == b'=' {
                j = skip_space(j + 1);
                if j < b.len() && (b[j] == b'"' || b[j] == b'\'') {
                    let q = b[j] as char;
                    let end = html[j + 1..].find(q).map_or(b.len(), |e| j + 1 + e);
                    value = unescape(&html[j + 1..end]);
                    j = (end + 1).min(b.len());
                } else {
                    let v = j;
                    while j < b.len() && !b[j].is_ascii_whitespace() && b[j] != b'>' {
                        j += 1;
                    }
                    value = unescape(&html[v..j]);
                }
            }
            attrs.push((key, value));
        }
        let raw_text = !closing && !self_closing && (name == "script" || name == "style");
        let close = format!("</{name}");
        out.push(Tag {
            name,
            attrs,
            closing,
            self_closing,
            start,
            end: j,
        });
        i = j;
        if raw_text {
            let lower = html[i..].to_ascii_lowercase();
            i += lower.find(&close).unwrap_or(lower.len());
        }
    }
    out
}

/// The index of the first tag with `id`.
pub fn by_id(tags: &[Tag], id: &str) -> Option<usize> {
    tags.iter()
        .position(|t| !t.closing && t.attr("id") == Some(id))
}

/// The index of the tag that closes the element opened at `i` (the end if none does).
pub fn close_of(tags: &[Tag], i: usize) -> usize {
    let name = &tags[i].name;
    let mut depth = 0;
    for (k, t) in tags.iter().enumerate().skip(i + 1) {
        if &t.name != name || t.self_closing {
            continue;
        }
        if !t.closing {
            depth += 1;
        } else if depth == 0 {
            return k;
        } else {
            depth -= 1;
        }
    }
    tags.len()
}

/// The text of the element opened at `i` (its DOM textContent): tags inside dropped,
/// character references unescaped.
pub fn text_of(html: &str, tags: &[Tag], i: usize) -> String {
    let close = close_of(tags, i);
    let end = tags.get(close).map_or(html.len(), |t| t.start);
    let mut text = String::new();
    let mut at = tags[i].end;
    for t in &tags[i + 1..close] {
        text.push_str(&html[at..t.start]);
        at = t.end;
    }
    text.push_str(&html[at..end]);
    unescape(&text)
}

/// `s` with HTML character references replaced (&amp; &lt; &gt; &quot; &#39; &nbsp; and
/// numeric ones); anything else left as it is.
pub fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(p) = rest.find('&') {
        out.push_str(&rest[..p]);
        rest = &rest[p..];
        let semi = rest.bytes().take(12).position(|c| c == b';');
        let ch = semi.and_then(|semi| {
            let name = &rest[1..semi];
            let c = match name {
                "amp" => Some('&'),
                "lt" => Some('<'),
                "gt" => Some('>'),
                "quot" => Some('"'),
                "apos" => Some('\''),
                "nbsp" => Some('\u{a0}'),
                _ => match name.strip_prefix('#') {
                    Some(hex) if hex.starts_with(['x', 'X']) => u32::from_str_radix(&hex[1..], 16)
                        .ok()
                        .and_then(char::from_u32),
                    Some(dec) => dec.parse().ok().and_then(char::from_u32),
                    None => None,
                },
            };
            Some((c?, semi))
        });
        match ch {
            Some((c, semi)) => {
                out.push(c);
                rest = &rest[semi + 1..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reading_reads_chromiums_dom() {
        let dom = "<!DOCTYPE html><html><head><style>a>b{x:url(#g)}</style></head><body>\
                   <section id=\"s\"><svg><rect x=\"1\"></rect></svg></section>\
                   <pre id=\"p\">{\"a\":\"x &amp; &lt;y&gt;\"}<span>!</span></pre></body></html>";
        let t = tags(dom);
        let s = by_id(&t, "s").unwrap();
        assert!(has_drawing(&t[s + 1..close_of(&t, s)]));
        let pre = by_id(&t, "p").unwrap();
        assert!(!has_drawing(&t[pre + 1..close_of(&t, pre)]));
        assert_eq!(text_of(dom, &t, pre), "{\"a\":\"x & <y>\"}!");
        assert_eq!(unescape("&#39;&#x41;&bogus; &"), "'A&bogus; &");
        assert!(external_references(dom).is_empty());
        let fetching = "<img src=x.png><a href=\"https://example.com\">ok</a>\
                        <link rel=stylesheet href=\"s.css\"><div style=\"background:url('b.png')\">";
        assert_eq!(
            external_references(fetching).len(),
            3,
            "{:?}",
            external_references(fetching)
        );
        let svg =
            "<svg xmlns=\"http://www.w3.org/2000/svg\"><image href=\"http://x/y.png\"/></svg>";
        assert_eq!(external_references(svg).len(), 1);
    }
}
