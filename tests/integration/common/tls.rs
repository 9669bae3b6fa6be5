//! Real certificates and a real TLS endpoint on loopback for one test: `openssl` makes a CA (ten years) and
//! an API server certificate it signs for 127.0.0.1, valid for as many days as the test asks; a TLS proxy
//! on 127.0.0.1 presents that chain and passes the bytes on to a plain-HTTP server (the testkit API server),
//! so kok's clients and its certificate reads meet the same handshake as a real API server's.

use std::path::PathBuf;
use std::sync::Arc;

use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// A CA and an API server certificate made by `openssl`, in a temp directory.
pub struct Certificates {
    dir: tempfile::TempDir,
}

impl Certificates {
    /// A CA `CN=kubernetes` and `CN=kube-apiserver` for IP 127.0.0.1, valid `days` days from now.
    pub fn api_server(days: u32) -> Certificates {
        let dir = tempfile::tempdir().expect("temp dir");
        let run = |args: &[&str]| {
            let out = std::process::Command::new("openssl")
                .args(args)
                .current_dir(dir.path())
                .output()
                .expect("openssl runs");
            assert!(
                out.status.success(),
                "openssl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        let key = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        let ca = [
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-days",
            "3650",
            "-subj",
            "/CN=kubernetes",
        ];
        run(&[&["req", "-x509"][..], &key, &ca].concat());
        let csr = [
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=kube-apiserver",
        ];
        run(&[&["req"][..], &key, &csr].concat());
        std::fs::write(dir.path().join("san.ext"), "subjectAltName=IP:127.0.0.1\n").unwrap();
        let days = days.to_string();
        run(&[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            &days,
            "-extfile",
            "san.ext",
            "-out",
            "server.crt",
        ]);
        Certificates { dir }
    }

    /// The path of `file` (`ca.crt`, `server.crt`, `server.key`).
    pub fn path(&self, file: &str) -> PathBuf {
        self.dir.path().join(file)
    }

    /// The content of `file`.
    pub fn read(&self, file: &str) -> Vec<u8> {
        std::fs::read(self.path(file)).expect("certificate file")
    }

    /// The API server certificate's `notAfter` as `openssl x509 -enddate` says it (`Mar 11 12:00:00 2026 GMT`).
    pub fn end_date(&self) -> String {
        let out = std::process::Command::new("openssl")
            .args(["x509", "-noout", "-enddate", "-in", "server.crt"])
            .current_dir(self.dir.path())
            .output()
            .expect("openssl runs");
        let text = String::from_utf8_lossy(&out.stdout);
        text.trim().trim_start_matches("notAfter=").to_string()
    }
}

/// Serves TLS on 127.0.0.1 with the API server certificate of `certificates`, passing each connection on to
/// `backend` (`127.0.0.1:<port>`); returns the port. The proxy lives as long as the test's runtime.
pub async fn proxy(certificates: &Certificates, backend: String) -> u16 {
    let chain: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(&certificates.read("server.crt"))
            .map(|c| c.expect("a PEM certificate"))
            .collect();
    let key = PrivateKeyDer::from_pem_slice(&certificates.read("server.key")).expect("a PEM key");
    let config =
        rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .expect("the certificate and its key");
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("local address").port();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            let backend = backend.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let Ok(mut plain) = tokio::net::TcpStream::connect(&backend).await else {
                    return;
                };
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
            });
        }
    });
    port
}

/// The testkit kubeconfig `plain` pointed at `https://127.0.0.1:<port>`, trusting the CA of `certificates`.
pub fn kubeconfig(plain: &str, port: u16, certificates: &Certificates) -> String {
    use base64::Engine as _;
    let ca = base64::engine::general_purpose::STANDARD.encode(certificates.read("ca.crt"));
    let mut out = String::new();
    for line in plain.lines() {
        if let Some(indent) = line
            .strip_suffix(line.trim_start())
            .filter(|_| line.trim_start().starts_with("server:"))
        {
            out.push_str(&format!("{indent}server: https://127.0.0.1:{port}\n"));
            out.push_str(&format!("{indent}certificate-authority-data: {ca}\n"));
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}
