//! The backend behind every proxy: a tiny HTTP/1.1 keep-alive server that answers every
//! request with 200 and a fixed body, so that its cost stays far below the proxy's.
//!
//! `GET /bytes/<n>` answers with `n` bytes (at most [`MAX_BODY`]); any other path with
//! the default size given on the command line.
//!
//! It is one thread around a level-triggered `epoll`: per request one `recv` and one
//! `send` (more only for a body larger than the socket buffer), the head parsed with
//! `httparse` into a buffer kept per connection. The backend it replaced (hyper on a
//! tokio runtime) made the same system calls but spent 1.1–1.2 µs of user time per
//! request against this one's 0.3 µs (7.1–7.6 µs in all against 6.1–6.5 µs, under wrk
//! alone: session 51 in BENCHMARKS.md); on the CPU it shares with the load generator or
//! the proxy, that was work no proxy should be measured by.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;

use anyhow::{Context, Result};
use rustix::event::epoll;

/// The largest body `/bytes/<n>` serves.
pub(crate) const MAX_BODY: usize = 1 << 20;

/// A connection's read buffer; a request head that does not fit is refused (400).
const READ_BUF: usize = 16 * 1024;

/// The body size for `path`: `/bytes/<n>` → n (capped), otherwise `default`.
pub(crate) fn body_size(path: &str, default: usize) -> usize {
    path.strip_prefix("/bytes/")
        .and_then(|n| n.parse::<usize>().ok())
        .map_or(default, |n| n.min(MAX_BODY))
}

/// The listener's token in `epoll`; connections use their slot index.
const LISTENER: u64 = u64::MAX;

/// One client connection (a proxy's upstream connection).
struct Conn {
    stream: TcpStream,
    /// Read buffer: bytes `lo..hi` are read and not yet consumed.
    buf: Box<[u8]>,
    lo: usize,
    hi: usize,
    /// Request body bytes still to skip (`Content-Length` of the current request).
    skip: u64,
    /// Responses not yet written, from `out_pos`.
    out: Vec<u8>,
    out_pos: usize,
    /// Close once `out` is written (`Connection: close`, HTTP/1.0, a bad request).
    close_after: bool,
    /// Whether `epoll` currently waits for writability instead of readability.
    want_write: bool,
}

impl Conn {
    fn new(stream: TcpStream) -> Self {
        Self {
            stream,
            buf: vec![0; READ_BUF].into_boxed_slice(),
            lo: 0,
            hi: 0,
            skip: 0,
            out: Vec::with_capacity(4096),
            out_pos: 0,
            close_after: false,
            want_write: false,
        }
    }

    /// Consumes one request (or body bytes to skip) and queues its answer. `false`:
    /// nothing more can be done until more bytes arrive or the connection closes.
    fn step(&mut self, default_size: usize, body: &[u8], date: &[u8]) -> bool {
        if self.skip > 0 {
            let n = self.skip.min((self.hi - self.lo) as u64);
            self.lo += n as usize;
            self.skip -= n;
            return self.skip == 0 && self.lo < self.hi;
        }
        if self.lo == self.hi {
            return false;
        }
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut req = httparse::Request::new(&mut headers);
        let parsed = match req.parse(&self.buf[self.lo..self.hi]) {
            Ok(httparse::Status::Complete(n)) => n,
            Ok(httparse::Status::Partial) if self.hi - self.lo < READ_BUF => return false,
            _ => {
                self.out
                    .extend_from_slice(b"HTTP/1.1 400 Bad Request\r\ndate: ");
                self.out.extend_from_slice(date);
                self.out
                    .extend_from_slice(b"\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
                self.close_after = true;
                return false;
            }
        };
        let mut close = req.version == Some(0);
        let mut length = 0u64;
        for h in req.headers.iter() {
            if h.name.eq_ignore_ascii_case("content-length") {
                length = std::str::from_utf8(h.value)
                    .ok()
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(0);
            } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
                // No scenario sends a chunked body: answer, then close rather than misframe.
                close = true;
            } else if h.name.eq_ignore_ascii_case("connection") {
                let v = h.value.to_ascii_lowercase();
                if v.windows(5).any(|w| w == b"close") {
                    close = true;
                } else if v.windows(10).any(|w| w == b"keep-alive") {
                    close = false;
                }
            }
        }
        let n = body_size(req.path.unwrap_or("/"), default_size);
        self.out.extend_from_slice(b"HTTP/1.1 200 OK\r\ndate: ");
        self.out.extend_from_slice(date);
        let _ = write!(
            self.out,
            "\r\ncontent-type: application/octet-stream\r\ncontent-length: {n}\r\n{}\r\n",
            if close { "connection: close\r\n" } else { "" }
        );
        self.out.extend_from_slice(&body[..n]);
        self.lo += parsed;
        self.skip = length;
        self.close_after = close;
        !close
    }

    /// Writes what is queued. `Ok(true)`: all of it.
    fn flush(&mut self) -> io::Result<bool> {
        while self.out_pos < self.out.len() {
            match self.stream.write(&self.out[self.out_pos..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.out_pos += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        self.out.clear();
        self.out_pos = 0;
        Ok(true)
    }

    /// Handles readiness: one read (when not waiting to write), every whole request
    /// answered, one write. `Ok(false)`: close the connection.
    fn ready(&mut self, default_size: usize, body: &[u8], date: &[u8]) -> io::Result<bool> {
        if !self.want_write {
            if self.lo == self.hi {
                (self.lo, self.hi) = (0, 0);
            } else if self.hi == READ_BUF {
                self.buf.copy_within(self.lo..self.hi, 0);
                (self.lo, self.hi) = (0, self.hi - self.lo);
            }
            match self.stream.read(&mut self.buf[self.hi..]) {
                Ok(0) => return Ok(false),
                Ok(n) => self.hi += n,
                Err(e)
                    if e.kind() == io::ErrorKind::WouldBlock
                        || e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        // Every whole request is answered before the write, and nothing is read while an
        // answer waits for room, so one pass answers all there is.
        while !self.close_after && self.step(default_size, body, date) {}
        self.want_write = !self.flush()?;
        Ok(self.want_write || !self.close_after)
    }
}

/// Binds `listen` and serves until the process is killed.
pub(crate) fn serve(listen: SocketAddr, default_size: usize) -> Result<()> {
    let listener = TcpListener::bind(listen).with_context(|| format!("binding {listen}"))?;
    eprintln!(
        "weir-bench backend listening on {}, {}-byte bodies",
        listener.local_addr()?,
        default_size.min(MAX_BODY)
    );
    serve_on(listener, default_size)
}

/// Serves on a bound listener until the process is killed (or `epoll` fails).
pub(crate) fn serve_on(listener: TcpListener, default_size: usize) -> Result<()> {
    let body = vec![b'x'; MAX_BODY];
    let default_size = default_size.min(MAX_BODY);
    listener.set_nonblocking(true)?;
    let ep = epoll::create(epoll::CreateFlags::CLOEXEC).context("epoll_create")?;
    epoll::add(
        &ep,
        &listener,
        epoll::EventData::new_u64(LISTENER),
        epoll::EventFlags::IN,
    )
    .context("epoll_ctl")?;
    let mut conns: Vec<Option<Conn>> = Vec::new();
    let mut free: Vec<usize> = Vec::new();
    let mut events: Vec<epoll::Event> = Vec::with_capacity(256);
    // The `Date` field every answer carries, as an origin server's does (formatted when
    // the second changes, read once per wake-up).
    let mut date = (u64::MAX, String::new());
    loop {
        events.clear();
        match epoll::wait(&ep, rustix::buffer::spare_capacity(&mut events), None) {
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e).context("epoll_wait"),
        }
        let now = std::time::SystemTime::now();
        let secs = now
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        if secs != date.0 {
            date = (secs, httpdate::fmt_http_date(now));
        }
        for ev in &events {
            let token = ev.data.u64();
            if token == LISTENER {
                loop {
                    match listener.accept() {
                        Ok((stream, _)) => {
                            if stream.set_nonblocking(true).is_err() {
                                continue;
                            }
                            let _ = stream.set_nodelay(true);
                            let slot = free.pop().unwrap_or_else(|| {
                                conns.push(None);
                                conns.len() - 1
                            });
                            if epoll::add(
                                &ep,
                                &stream,
                                epoll::EventData::new_u64(slot as u64),
                                epoll::EventFlags::IN,
                            )
                            .is_err()
                            {
                                free.push(slot);
                                continue;
                            }
                            conns[slot] = Some(Conn::new(stream));
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => {
                            // Out of file descriptors and the like: the listener stays
                            // readable, so the next wait retries.
                            eprintln!("weir-bench backend: accept: {e}");
                            std::thread::sleep(std::time::Duration::from_millis(10));
                            break;
                        }
                    }
                }
                continue;
            }
            let slot = token as usize;
            let Some(conn) = conns.get_mut(slot).and_then(Option::as_mut) else {
                continue;
            };
            let was_writing = conn.want_write;
            let keep = conn
                .ready(default_size, &body, date.1.as_bytes())
                .unwrap_or(false);
            if !keep {
                if let Some(c) = conns[slot].take() {
                    let _ = epoll::delete(&ep, c.stream.as_fd());
                }
                free.push(slot);
            } else if conn.want_write != was_writing {
                let flags = if conn.want_write {
                    epoll::EventFlags::OUT
                } else {
                    epoll::EventFlags::IN
                };
                let _ = epoll::modify(
                    &ep,
                    &conn.stream,
                    epoll::EventData::new_u64(slot as u64),
                    flags,
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_by_path() {
        assert_eq!(body_size("/", 0), 0);
        assert_eq!(body_size("/bytes/4096", 0), 4096);
        assert_eq!(body_size("/bytes/x", 7), 7);
        assert_eq!(body_size("/bytes/999999999", 0), MAX_BODY);
    }

    /// A backend on an ephemeral port, in a thread of its own (left running).
    fn start(default_size: usize) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || serve_on(listener, default_size));
        addr
    }

    /// Reads until `n` responses are whole (heads with `content-length`), or EOF.
    fn read_responses(s: &mut TcpStream, n: usize) -> Vec<(String, usize)> {
        let mut data = Vec::new();
        let mut out = Vec::new();
        let mut buf = [0u8; 65536];
        loop {
            // Parse what is there.
            out.clear();
            let mut at = 0;
            loop {
                let mut h = [httparse::EMPTY_HEADER; 16];
                let mut r = httparse::Response::new(&mut h);
                let Ok(httparse::Status::Complete(k)) = r.parse(&data[at..]) else {
                    break;
                };
                let len: usize = r
                    .headers
                    .iter()
                    .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                    .map(|h| std::str::from_utf8(h.value).unwrap().parse().unwrap())
                    .unwrap();
                if data.len() < at + k + len {
                    break;
                }
                assert!(data[at + k..at + k + len].iter().all(|&b| b == b'x'));
                let date = r.headers.iter().find(|h| h.name == "date").unwrap();
                assert!(
                    httpdate::parse_http_date(std::str::from_utf8(date.value).unwrap()).is_ok()
                );
                out.push((format!("{}", r.code.unwrap()), len));
                at += k + len;
            }
            if out.len() >= n {
                return out;
            }
            let got = s.read(&mut buf).unwrap();
            if got == 0 {
                return out;
            }
            data.extend_from_slice(&buf[..got]);
        }
    }

    #[test]
    fn answers_with_the_requested_size_through_hyper() {
        use bytes::Bytes;
        use http_body_util::{BodyExt, Empty};
        use hyper_util::rt::TokioIo;
        let addr = start(3);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let conn = tokio::net::TcpStream::connect(addr).await.unwrap();
            let (mut tx, c) = hyper::client::conn::http1::handshake(TokioIo::new(conn))
                .await
                .unwrap();
            tokio::spawn(c);
            for (path, want) in [
                ("/", 3),
                ("/bytes/4096", 4096),
                ("/bytes/1048576", MAX_BODY),
                ("/", 3),
            ] {
                let req = http::Request::get(path)
                    .header("host", "x")
                    .body(Empty::<Bytes>::new())
                    .unwrap();
                let resp = tx.send_request(req).await.unwrap();
                assert_eq!(resp.status(), 200);
                let body = resp.into_body().collect().await.unwrap().to_bytes();
                assert_eq!(body.len(), want);
            }
        });
    }

    #[test]
    fn pipelined_requests_bodies_and_close() {
        let addr = start(0);
        let mut s = TcpStream::connect(addr).unwrap();
        // Two pipelined GETs, a POST whose body must be skipped (split across writes),
        // then a request that asks to close.
        s.write_all(b"GET /bytes/5 HTTP/1.1\r\nhost: a\r\n\r\nGET / HTTP/1.1\r\nhost: a\r\n\r\nPOST /bytes/2 HTTP/1.1\r\nhost: a\r\ncontent-length: 10\r\n\r\n01234").unwrap();
        let got = read_responses(&mut s, 3);
        assert_eq!(
            got,
            vec![("200".into(), 5), ("200".into(), 0), ("200".into(), 2)]
        );
        s.write_all(b"56789GET /bytes/7 HTTP/1.1\r\nhost: a\r\nconnection: close\r\n\r\n")
            .unwrap();
        let got = read_responses(&mut s, 2);
        assert_eq!(got, vec![("200".into(), 7)]);
        // The backend closed after answering.
        let mut b = [0u8; 1];
        assert_eq!(s.read(&mut b).unwrap(), 0);
    }

    #[test]
    fn a_bad_request_gets_400_and_a_close() {
        let addr = start(0);
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(b"GET / HTTP/1.1\r\nbad header line\r\n\r\n")
            .unwrap();
        assert_eq!(read_responses(&mut s, 2), vec![("400".into(), 0)]);
        // A head that fills the read buffer without ending (exactly, so that the close
        // leaves nothing unread, which would reset the connection instead).
        let mut s = TcpStream::connect(addr).unwrap();
        let prefix = "GET / HTTP/1.1\r\nx: ";
        let long = format!("{prefix}{}", "a".repeat(READ_BUF - prefix.len()));
        let _ = s.write_all(long.as_bytes());
        assert_eq!(read_responses(&mut s, 2), vec![("400".into(), 0)]);
    }

    #[test]
    fn large_answers_to_many_pipelined_requests() {
        // More than the socket buffers hold: the backend waits for writability, then
        // answers the requests that were buffered meanwhile.
        let addr = start(0);
        let mut s = TcpStream::connect(addr).unwrap();
        let req = b"GET /bytes/1048576 HTTP/1.1\r\nhost: a\r\n\r\n".repeat(8);
        s.write_all(&req).unwrap();
        let got = read_responses(&mut s, 8);
        assert_eq!(got, vec![("200".into(), MAX_BODY); 8]);
    }
}
