//! https-style credentials over plain HTTP on loopback: a server that refuses every request records the
//! Authorization headers libgit2 sent, so the test sees exactly which credentials went out, and once.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kok::source::{Credentials, Source, SourceConfig, SourceError};

/// An HTTP server on 127.0.0.1 answering 401 to everything; stops when dropped (or after 60 s).
struct Refuser {
    port: u16,
    seen: Arc<Mutex<Vec<Option<String>>>>,
    stop: Arc<AtomicBool>,
}

impl Refuser {
    fn start() -> Refuser {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (seen2, stop2) = (seen.clone(), stop.clone());
        std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(60);
            while !stop2.load(Ordering::Relaxed) && Instant::now() < deadline {
                let Ok((stream, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                };
                stream.set_nonblocking(false).unwrap();
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut auth = None;
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                        break;
                    }
                    if let Some(v) = line.strip_prefix("Authorization: ") {
                        auth = Some(v.trim().to_string());
                    }
                }
                seen2.lock().unwrap().push(auth);
                let mut stream = stream;
                let _ = stream.write_all(
                    b"HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm=\"kok\"\r\n\
                      Content-Length: 0\r\nConnection: close\r\n\r\n",
                );
            }
        });
        Refuser { port, seen, stop }
    }
}

impl Drop for Refuser {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn poll_with(credentials: Credentials, server: &Refuser) -> SourceError {
    let cache = tempfile::tempdir().unwrap();
    let mut config = SourceConfig::new(
        format!("http://127.0.0.1:{}/repo.git", server.port),
        "main",
        cache.path(),
    );
    config.credentials = credentials;
    config.timeout = Duration::from_secs(20);
    let mut src = Source::open(config).unwrap();
    let err = src.poll(None).unwrap_err();
    eprintln!("{err}");
    err
}

#[test]
fn token_is_sent_once_as_the_password_of_x_access_token_and_never_shown() {
    let server = Refuser::start();
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "s3cr3t-t0ken\n").unwrap();
    let err = poll_with(
        Credentials {
            token_file: Some(token_file),
            ..Credentials::default()
        },
        &server,
    );
    assert!(matches!(err, SourceError::AuthFailed { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains("token from") && text.contains("x-access-token"),
        "{text}"
    );
    assert!(!text.contains("s3cr3t"), "{text}");
    assert!(!format!("{err:?}").contains("s3cr3t"));
    let sent: Vec<String> = server.seen.lock().unwrap().iter().flatten().cloned().collect();
    assert_eq!(
        sent,
        vec![format!("Basic {}", base64(b"x-access-token:s3cr3t-t0ken"))]
    );
}

#[test]
fn username_and_password_files_are_sent_as_basic_auth() {
    let server = Refuser::start();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("user"), "bob\n").unwrap();
    std::fs::write(dir.path().join("pass"), "hunter2").unwrap();
    let err = poll_with(
        Credentials {
            username_file: Some(dir.path().join("user")),
            password_file: Some(dir.path().join("pass")),
            ..Credentials::default()
        },
        &server,
    );
    assert!(matches!(err, SourceError::AuthFailed { .. }), "{err:?}");
    assert!(!err.to_string().contains("hunter2"));
    let sent: Vec<String> = server.seen.lock().unwrap().iter().flatten().cloned().collect();
    assert_eq!(sent, vec![format!("Basic {}", base64(b"bob:hunter2"))]);
}

#[test]
fn missing_credentials_are_reported_as_nothing_configured() {
    let server = Refuser::start();
    let err = poll_with(Credentials::default(), &server);
    assert!(matches!(err, SourceError::AuthFailed { .. }), "{err:?}");
    assert!(err.to_string().contains("no credential configured"), "{err}");
}

#[test]
fn unreadable_token_file_is_named() {
    let server = Refuser::start();
    let missing = std::path::PathBuf::from("/nonexistent/kok/token");
    let err = poll_with(
        Credentials {
            token_file: Some(missing),
            ..Credentials::default()
        },
        &server,
    );
    assert!(
        matches!(err, SourceError::ReadCredential { what: "token", .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("/nonexistent/kok/token"), "{err}");
}
