//! Certificates that expire: the `notAfter` of the chain a cluster's API server presents and of the client
//! certificate in its kubeconfig, read at each health round, and the `CertificatesValid` condition they give.
//!
//! The chain is read in a TLS handshake of its own with the address the kubeconfig names (the name it asks
//! for, `tls-server-name` where set), which sends nothing and closes: an expired or otherwise untrusted chain
//! is read all the same (the checks' client, which trusts what the kubeconfig says, is what fails on it).
//! A certificate is read from its DER: the validity and the subject's common name, nothing else. A failure
//! to read says why and never stops the other checks.

use std::sync::Arc;

use der::asn1::{AnyRef, GeneralizedTime, ObjectIdentifier, UtcTime};
use der::{Decode, Reader, SliceReader, Tag, TagNumber};
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};

use crate::api::{CertificateExpiry, CertificateSource};

/// The condition certificates give a Cluster.
pub const CERTIFICATES_VALID: &str = "CertificatesValid";
/// Days before the first of a cluster's certificates expires that `CertificatesValid` turns False, unless
/// `certificateWindowDays` says otherwise.
pub const DEFAULT_WINDOW_DAYS: u32 = 30;
/// Where the renewal is written, for the condition's message.
pub const RENEWAL_RECIPE: &str = "docs/day-two.md#renew-certificates";
/// The OID of an X.520 common name (`CN`).
const COMMON_NAME: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.5.4.3");
const SECONDS_PER_DAY: i64 = 86_400;

/// Where a cluster's certificates are read, from its kubeconfig.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sources {
    /// The API server: host, port and the name the handshake asks for; `None` on plain HTTP.
    pub server: Option<Endpoint>,
    /// The kubeconfig's `client-certificate-data`, decoded (PEM, or DER); `None` without one.
    pub client: Option<Vec<u8>>,
}

/// An API server's address for the handshake.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// Host name or IP address, without brackets.
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// The name the handshake asks for (SNI, and what the certificate is for).
    pub server_name: String,
    /// The kubeconfig reaches the API server through a proxy: kok does not dial around it.
    pub proxied: bool,
}

impl Sources {
    /// Where `config`'s certificates are: its server over HTTPS, and its client certificate.
    pub fn of(config: &kube::Config) -> Sources {
        let url = &config.cluster_url;
        let server = (url.scheme_str() == Some("https"))
            .then(|| url.host())
            .flatten()
            .map(|host| {
                let host = host.trim_start_matches('[').trim_end_matches(']').to_string();
                Endpoint {
                    server_name: config.tls_server_name.clone().unwrap_or_else(|| host.clone()),
                    port: url.port_u16().unwrap_or(443),
                    host,
                    proxied: config.proxy_url.is_some(),
                }
            });
        let client = config.auth_info.client_certificate_data.as_deref().map(|data| {
            use base64::Engine as _;
            base64::engine::general_purpose::STANDARD
                .decode(data.trim())
                .unwrap_or_else(|_| data.as_bytes().to_vec())
        });
        Sources { server, client }
    }
}

/// What a round read of a cluster's certificates: each source's result, `None` for a source it lacks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Read {
    /// Of the API server's chain, the certificate that expires first; or why it was not read.
    pub server: Option<Result<CertificateExpiry, String>>,
    /// The kubeconfig's client certificate (the first to expire, if it holds several); or why not read.
    pub client: Option<Result<CertificateExpiry, String>>,
}

impl Read {
    /// Nothing read, for `why` (a kubeconfig kok cannot use).
    pub fn unread(why: String) -> Read {
        Read {
            server: Some(Err(why)),
            client: None,
        }
    }

    /// The certificates read, the first to expire first.
    pub fn expiries(&self) -> Vec<CertificateExpiry> {
        self.known(&[])
    }

    /// The certificates read, with those of `previous` (the last round's) whose source this round could not
    /// read: a certificate does not stop expiring while its API server does not answer. The first to expire
    /// first.
    pub fn known(&self, previous: &[CertificateExpiry]) -> Vec<CertificateExpiry> {
        let mut all = Vec::new();
        for (read, source) in [
            (&self.server, CertificateSource::ApiServer),
            (&self.client, CertificateSource::Client),
        ] {
            match read {
                Some(Ok(expiry)) => all.push(expiry.clone()),
                Some(Err(_)) => all.extend(previous.iter().filter(|p| p.source == source).cloned()),
                None => {}
            }
        }
        all.sort_by_key(|c| c.not_after.0);
        all
    }
}

/// Reads the certificates of `sources`, the handshake bounded by `timeout`.
pub async fn read(sources: &Sources, timeout: std::time::Duration) -> Read {
    let server = match &sources.server {
        None => None,
        Some(endpoint) => Some(
            tokio::time::timeout(timeout, server_chain(endpoint))
                .await
                .unwrap_or_else(|_| Err("the TLS handshake timed out".to_string()))
                .and_then(|chain| earliest(CertificateSource::ApiServer, &chain)),
        ),
    };
    let client = sources.client.as_deref().map(|data| {
        let chain = pem_or_der(data);
        earliest(CertificateSource::Client, &chain)
            .map_err(|why| format!("the kubeconfig's client-certificate-data: {why}"))
    });
    Read { server, client }
}

/// The DER certificates of `data`: its PEM `CERTIFICATE` blocks, else `data` itself as one DER certificate.
fn pem_or_der(data: &[u8]) -> Vec<Vec<u8>> {
    let blocks: Vec<Vec<u8>> = CertificateDer::pem_slice_iter(data)
        .filter_map(Result::ok)
        .map(|c| c.as_ref().to_vec())
        .collect();
    if blocks.is_empty() {
        vec![data.to_vec()]
    } else {
        blocks
    }
}

/// Of `chain` (DER certificates), the one that expires first, as read from `source`.
fn earliest(source: CertificateSource, chain: &[Vec<u8>]) -> Result<CertificateExpiry, String> {
    let mut first: Option<CertificateExpiry> = None;
    for der in chain {
        let (not_after, subject) = validity(der)?;
        if first.as_ref().is_none_or(|f| not_after < f.not_after.0) {
            first = Some(CertificateExpiry {
                source,
                subject,
                not_after: Time(not_after),
            });
        }
    }
    first.ok_or_else(|| "no certificate was presented".to_string())
}

/// The `notAfter` and the subject's common name of the DER certificate `der`.
pub fn validity(der: &[u8]) -> Result<(Timestamp, String), String> {
    let read = || -> der::Result<(Timestamp, String)> {
        let mut certificate = SliceReader::new(der)?;
        let found = certificate.sequence(|certificate| {
            let found = certificate.sequence(|tbs| {
                let version = Tag::ContextSpecific {
                    constructed: true,
                    number: TagNumber::N0,
                };
                if tbs.peek_tag()? == version {
                    AnyRef::decode(tbs)?;
                }
                for _serial_signature_issuer in 0..3 {
                    AnyRef::decode(tbs)?;
                }
                let not_after = tbs.sequence(|validity| {
                    time(validity)?;
                    time(validity)
                })?;
                let subject = AnyRef::decode(tbs)?;
                let rest = tbs.remaining_len();
                tbs.read_slice(rest)?;
                Ok((not_after, common_name(subject.value())?))
            })?;
            let rest = certificate.remaining_len();
            certificate.read_slice(rest)?;
            Ok(found)
        })?;
        certificate.finish(found)
    };
    read().map_err(|e| format!("not an X.509 certificate ({e})"))
}

/// A `Time` of X.509 (UTCTime or GeneralizedTime).
fn time<'a>(reader: &mut impl Reader<'a>) -> der::Result<Timestamp> {
    let unix = match reader.peek_tag()? {
        Tag::UtcTime => UtcTime::decode(reader)?.to_unix_duration(),
        _ => GeneralizedTime::decode(reader)?.to_unix_duration(),
    };
    let seconds = i64::try_from(unix.as_secs()).map_err(|_| der::Error::from(der::ErrorKind::DateTime))?;
    Timestamp::from_second(seconds).map_err(|_| der::ErrorKind::DateTime.into())
}

/// The first common name of the Name whose content is `name` (a sequence of sets of type and value).
fn common_name(name: &[u8]) -> der::Result<String> {
    let mut names = SliceReader::new(name)?;
    while !names.is_finished() {
        let set = AnyRef::decode(&mut names)?;
        let mut attributes = SliceReader::new(set.value())?;
        while !attributes.is_finished() {
            let found = attributes.sequence(|attribute| {
                let kind = ObjectIdentifier::decode(attribute)?;
                let value = AnyRef::decode(attribute)?;
                Ok((kind == COMMON_NAME).then(|| String::from_utf8_lossy(value.value()).into_owned()))
            })?;
            if let Some(name) = found {
                return Ok(name);
            }
        }
    }
    Ok(String::new())
}

/// The chain `endpoint` presents in a TLS handshake, as DER certificates.
async fn server_chain(endpoint: &Endpoint) -> Result<Vec<Vec<u8>>, String> {
    if endpoint.proxied {
        return Err(
            "the kubeconfig reaches the API server through a proxy (proxy-url): kok reads the \
                    certificates of an API server it reaches directly only"
                .to_string(),
        );
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS set-up: {e}"))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(ReadOnly(provider)))
        .with_no_client_auth();
    let name = ServerName::try_from(endpoint.server_name.clone()).map_err(|_| {
        format!(
            "{} is not a name a TLS handshake can ask for",
            endpoint.server_name
        )
    })?;
    let tcp = tokio::net::TcpStream::connect((endpoint.host.as_str(), endpoint.port))
        .await
        .map_err(|e| format!("connecting to {}:{}: {}", endpoint.host, endpoint.port, e.kind()))?;
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .map_err(|e| {
            format!(
                "the TLS handshake with {}:{} failed: {e}",
                endpoint.host, endpoint.port
            )
        })?;
    let chain = tls
        .get_ref()
        .1
        .peer_certificates()
        .unwrap_or_default()
        .iter()
        .map(|c| c.as_ref().to_vec())
        .collect();
    Ok(chain)
}

/// A verifier that takes any chain: the handshake only reads it, and sends nothing over the connection.
/// The handshake's signatures are still checked, so the chain is the one of the server that answered.
#[derive(Debug)]
struct ReadOnly(Arc<CryptoProvider>);

impl ServerCertVerifier for ReadOnly {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// `the API server's certificate "kube-apiserver"`, for messages.
pub fn describe(c: &CertificateExpiry) -> String {
    let whose = match c.source {
        CertificateSource::ApiServer => "the API server's certificate",
        CertificateSource::Client => "the kubeconfig's client certificate",
    };
    if c.subject.is_empty() {
        whose.to_string()
    } else {
        format!("{whose} \"{}\"", c.subject)
    }
}

/// Whole days from `now` until `not_after`, rounded down (negative once it has passed).
pub fn days_left(not_after: Timestamp, now: Timestamp) -> i64 {
    (not_after.as_second() - now.as_second()).div_euclid(SECONDS_PER_DAY)
}

/// The `CertificatesValid` condition of what was `read` and of the certificates `known` from it
/// ([`Read::known`]), with a window of `window_days`, at `now`; `None` when the cluster shows no
/// certificate (plain HTTP and no client certificate).
pub fn condition(
    read: &Read,
    known: &[CertificateExpiry],
    window_days: u32,
    generation: Option<i64>,
    now: Timestamp,
) -> Option<Condition> {
    if read.server.is_none() && read.client.is_none() {
        return None;
    }
    let make = |status: &str, reason: &str, message: String| Condition {
        type_: CERTIFICATES_VALID.to_string(),
        status: status.to_string(),
        reason: reason.to_string(),
        message,
        last_transition_time: Time(now),
        observed_generation: generation,
    };
    let unread: Vec<String> = [
        (&read.server, "the API server's certificates were"),
        (&read.client, "the client certificate was"),
    ]
    .into_iter()
    .filter_map(|(r, what)| match r {
        Some(Err(why)) => Some(format!("{what} not read: {why}")),
        _ => None,
    })
    .collect();
    let Some(first) = known.first() else {
        return Some(make("Unknown", "CertificatesNotRead", unread.join("; ")));
    };
    let date = first.not_after.0.strftime("%Y-%m-%d %H:%M UTC");
    let left = days_left(first.not_after.0, now);
    let which = describe(first);
    if first.not_after.0 <= now {
        let ago = -left - 1;
        let message = format!(
            "{which} expired on {date} ({}): renew the cluster's certificates ({RENEWAL_RECIPE})",
            match ago {
                0 => "less than a day ago".to_string(),
                1 => "1 day ago".to_string(),
                n => format!("{n} days ago"),
            }
        );
        return Some(make("False", "CertificateExpired", message));
    }
    let within = first.not_after.0.as_second() - now.as_second() < i64::from(window_days) * SECONDS_PER_DAY;
    let message = format!("{which} expires on {date} ({})", in_days(left));
    if within {
        return Some(make(
            "False",
            "CertificateExpiresSoon",
            format!(
                "{message}, inside the {window_days}-day window: renew the cluster's certificates \
                 ({RENEWAL_RECIPE})"
            ),
        ));
    }
    if !unread.is_empty() {
        return Some(make(
            "Unknown",
            "CertificatesNotRead",
            format!("{}; {message}", unread.join("; ")),
        ));
    }
    Some(make(
        "True",
        "CertificatesValid",
        format!("{message}, the first of the cluster's certificates to expire"),
    ))
}

/// `in 10 days`, `in 1 day`, `in less than a day`.
fn in_days(days: i64) -> String {
    match days {
        0 => "in less than a day".to_string(),
        1 => "in 1 day".to_string(),
        n => format!("in {n} days"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    fn expiry(source: CertificateSource, subject: &str, not_after: &str) -> CertificateExpiry {
        CertificateExpiry {
            source,
            subject: subject.into(),
            not_after: Time(at(not_after)),
        }
    }

    #[test]
    fn what_is_not_a_certificate_is_said_so() {
        let err = earliest(CertificateSource::Client, &pem_or_der(b"not a certificate")).unwrap_err();
        assert!(err.starts_with("not an X.509 certificate"), "{err}");
        assert!(earliest(CertificateSource::ApiServer, &[]).is_err());
    }

    #[tokio::test]
    async fn a_server_that_does_not_answer_leaves_the_condition_unknown_and_says_why() {
        let port = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            listener.local_addr().unwrap().port()
        };
        let sources = Sources {
            server: Some(Endpoint {
                host: "127.0.0.1".into(),
                port,
                server_name: "127.0.0.1".into(),
                proxied: false,
            }),
            client: None,
        };
        let got = read(&sources, std::time::Duration::from_secs(5)).await;
        let c = condition(&got, &got.known(&[]), 30, None, Timestamp::now()).unwrap();
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("Unknown", "CertificatesNotRead")
        );
        assert_eq!(
            c.message,
            format!("the API server's certificates were not read: connecting to 127.0.0.1:{port}: connection refused")
        );
    }

    #[test]
    fn the_first_certificate_to_expire_decides_against_the_window() {
        let now = at("2026-03-01T00:00:00Z");
        let read = |server: &str, client: &str| Read {
            server: Some(Ok(expiry(CertificateSource::ApiServer, "kube-apiserver", server))),
            client: Some(Ok(expiry(CertificateSource::Client, "kubernetes-admin", client))),
        };
        let soon = read("2027-01-01T00:00:00Z", "2026-03-11T12:00:00Z");
        let c = condition(&soon, &soon.known(&[]), 30, Some(4), now).unwrap();
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", "CertificateExpiresSoon")
        );
        assert_eq!(
            c.message,
            "the kubeconfig's client certificate \"kubernetes-admin\" expires on 2026-03-11 12:00 UTC (in 10 days), \
             inside the 30-day window: renew the cluster's certificates (docs/day-two.md#renew-certificates)"
        );
        assert_eq!(c.observed_generation, Some(4));
        let c = condition(&soon, &soon.known(&[]), 7, None, now).unwrap();
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("True", "CertificatesValid")
        );
        assert_eq!(
            c.message,
            "the kubeconfig's client certificate \"kubernetes-admin\" expires on 2026-03-11 12:00 UTC (in 10 days), \
             the first of the cluster's certificates to expire"
        );
        let expired = read("2026-02-26T08:00:00Z", "2027-01-01T00:00:00Z");
        let c = condition(&expired, &expired.known(&[]), 30, None, now).unwrap();
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", "CertificateExpired")
        );
        assert_eq!(
            c.message,
            "the API server's certificate \"kube-apiserver\" expired on 2026-02-26 08:00 UTC (2 days ago): renew \
             the cluster's certificates (docs/day-two.md#renew-certificates)"
        );
    }

    #[test]
    fn a_certificate_not_read_is_said_and_never_hides_one_that_expires() {
        let now = at("2026-03-01T00:00:00Z");
        let unread = Read {
            server: Some(Err("connecting to 10.0.0.1:6443: connection refused".into())),
            client: Some(Ok(expiry(CertificateSource::Client, "", "2027-01-01T00:00:00Z"))),
        };
        let c = condition(&unread, &unread.known(&[]), 30, None, now).unwrap();
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("Unknown", "CertificatesNotRead")
        );
        assert_eq!(
            c.message,
            "the API server's certificates were not read: connecting to 10.0.0.1:6443: connection refused; the \
             kubeconfig's client certificate expires on 2027-01-01 00:00 UTC (in 306 days)"
        );
        let soon = Read {
            client: Some(Ok(expiry(CertificateSource::Client, "", "2026-03-05T00:00:00Z"))),
            ..unread
        };
        assert_eq!(
            condition(&soon, &soon.known(&[]), 30, None, now).unwrap().status,
            "False"
        );
        let client_only = Read {
            server: None,
            client: Some(Err(
                "the kubeconfig's client-certificate-data: not an X.509 certificate".into(),
            )),
        };
        let c = condition(&client_only, &client_only.known(&[]), 30, None, now).unwrap();
        assert_eq!(
            c.message,
            "the client certificate was not read: the kubeconfig's client-certificate-data: not an X.509 \
             certificate"
        );
        assert_eq!(condition(&Read::default(), &[], 30, None, now), None);
    }

    #[test]
    fn a_certificate_read_last_round_still_counts_while_its_server_does_not_answer() {
        let now = at("2026-03-01T00:00:00Z");
        let last = vec![expiry(
            CertificateSource::ApiServer,
            "kube-apiserver",
            "2026-03-11T00:00:00Z",
        )];
        let unreachable = Read::unread("connecting to 10.0.0.1:6443: connection refused".into());
        let known = unreachable.known(&last);
        assert_eq!(known, last);
        let c = condition(&unreachable, &known, 30, None, now).unwrap();
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", "CertificateExpiresSoon")
        );
        // A source read afresh replaces what the last round read of it.
        let renewed = Read {
            server: Some(Ok(expiry(
                CertificateSource::ApiServer,
                "kube-apiserver",
                "2027-03-01T00:00:00Z",
            ))),
            client: None,
        };
        assert_eq!(renewed.known(&last)[0].not_after.0, at("2027-03-01T00:00:00Z"));
    }

    #[test]
    fn sources_are_the_https_server_and_the_client_certificate_of_the_kubeconfig() {
        let mut config = kube::Config::new("https://[::1]:6443".parse().unwrap());
        config.auth_info.client_certificate_data = Some("LS0tLS1CRUdJTg==".into());
        let s = Sources::of(&config);
        let server = s.server.unwrap();
        assert_eq!(
            (server.host.as_str(), server.port, server.server_name.as_str()),
            ("::1", 6443, "::1")
        );
        assert_eq!(s.client.as_deref(), Some(&b"-----BEGIN"[..]));
        config.tls_server_name = Some("kubernetes.default".into());
        assert_eq!(
            Sources::of(&config).server.unwrap().server_name,
            "kubernetes.default"
        );
        let plain = kube::Config::new("http://127.0.0.1:8080".parse().unwrap());
        assert_eq!(Sources::of(&plain), Sources::default());
    }
}
