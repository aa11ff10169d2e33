//! The one HTTP client of the tests and xtask's jobs: a GET over HTTP/1.0 to a server on
//! this machine (hstrace's daemon, Prometheus, a test server). Hand-rolled on purpose: with
//! HTTP/1.0 the server closes the connection after the body and never sends it chunked, so
//! reading to the end is the whole parser, and xtask (which uses it) must build before
//! `cargo xtask setup` has installed anything.

use std::{
    io::{Read, Write},
    net::TcpStream,
    time::Duration,
};

/// GET `path` from `addr` (host:port): (status, body). Panics when nobody answers.
pub fn get(addr: &str, path: &str) -> (u16, String) {
    try_get(addr, path).unwrap_or_else(|| panic!("nothing answers GET {path} at {addr}"))
}

/// The same, None when nobody answers (a server still starting) or the answer is not HTTP.
pub fn try_get(addr: &str, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(30))).ok()?;
    let request = format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n");
    s.write_all(request.as_bytes()).ok()?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).ok()?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, body.to_owned()))
}

/// Percent-encode everything but RFC 3986's unreserved characters (a query's value).
pub fn url_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_encode_keeps_unreserved_characters_only() {
        assert_eq!(url_encode("a b{c=\"d\"}"), "a%20b%7Bc%3D%22d%22%7D");
    }

    #[test]
    fn get_reads_status_and_body_and_says_when_nobody_answers() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let server = std::thread::spawn(move || {
            let (mut c, _) = listener.accept().unwrap();
            let mut req = Vec::new();
            let mut byte = [0u8; 1];
            while !req.ends_with(b"\r\n\r\n") && c.read(&mut byte).unwrap() == 1 {
                req.push(byte[0]);
            }
            c.write_all(b"HTTP/1.0 404 Not Found\r\nX: y\r\n\r\nno such page\n")
                .unwrap();
            String::from_utf8_lossy(&req).into_owned()
        });
        assert_eq!(get(&addr, "/x?q=1"), (404, "no such page\n".to_owned()));
        let req = server.join().unwrap();
        assert!(req.starts_with("GET /x?q=1 HTTP/1.0\r\nHost: "), "{req}");
        assert_eq!(try_get(&addr, "/"), None);
    }
}
