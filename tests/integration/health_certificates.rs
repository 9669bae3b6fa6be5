//! Reading the certificates a cluster presents, with real ones: `openssl` makes them (see
//! [`crate::common::tls`]), a TLS endpoint on 127.0.0.1 presents them, and the end date kok reads is the
//! one openssl wrote.

use crate::common::tls::{self, Certificates};

use jiff::Timestamp;
use kok::api::CertificateSource;
use kok::health::certificates::{
    condition, days_left, read, validity, Endpoint, Sources, DEFAULT_WINDOW_DAYS,
};
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::CertificateDer;

/// The DER certificates of a PEM file.
fn ders(pem: &[u8]) -> Vec<Vec<u8>> {
    CertificateDer::pem_slice_iter(pem)
        .map(|c| c.expect("a PEM certificate").to_vec())
        .collect()
}

#[test]
fn a_certificate_made_by_openssl_reads_as_its_end_date_and_common_name() {
    let certificates = Certificates::api_server(10);
    let chain = ders(&certificates.read("server.crt"));
    assert_eq!(chain.len(), 1);
    let (not_after, subject) = validity(&chain[0]).unwrap();
    assert_eq!(subject, "kube-apiserver");
    let left = days_left(not_after, Timestamp::now());
    assert!((9..=10).contains(&left), "{not_after} is {left} days away");
    let said = certificates.end_date();
    let year = not_after.strftime("%Y").to_string();
    assert!(
        said.contains(&year) && said.contains(&not_after.strftime("%H:%M:%S").to_string()),
        "{said}"
    );
}

#[tokio::test]
async fn of_a_client_chain_the_certificate_that_expires_first_counts() {
    let certificates = Certificates::api_server(10);
    let mut both = certificates.read("ca.crt");
    both.extend(certificates.read("server.crt"));
    let sources = Sources {
        server: None,
        client: Some(both),
    };
    let first = read(&sources, std::time::Duration::from_secs(5))
        .await
        .client
        .unwrap()
        .unwrap();
    assert_eq!(
        (first.source, first.subject.as_str()),
        (CertificateSource::Client, "kube-apiserver")
    );
}

#[tokio::test]
async fn the_chain_a_tls_server_presents_is_read_even_from_an_untrusted_server() {
    let certificates = Certificates::api_server(10);
    // Nothing listens behind the proxy: kok only shakes hands.
    let port = tls::proxy(&certificates, "127.0.0.1:1".to_string()).await;
    let sources = Sources {
        server: Some(Endpoint {
            host: "127.0.0.1".into(),
            port,
            server_name: "127.0.0.1".into(),
            proxied: false,
        }),
        client: Some(certificates.read("ca.crt")),
    };
    let got = read(&sources, std::time::Duration::from_secs(10)).await;
    let server = got.server.clone().unwrap().unwrap();
    assert_eq!(
        (server.source, server.subject.as_str()),
        (CertificateSource::ApiServer, "kube-apiserver")
    );
    let client = got.client.clone().unwrap().unwrap();
    assert_eq!(client.subject, "kubernetes");
    assert_eq!(got.expiries()[0], server);
    let valid = condition(&got, &got.known(&[]), DEFAULT_WINDOW_DAYS, None, Timestamp::now()).unwrap();
    assert_eq!(
        (valid.status.as_str(), valid.reason.as_str()),
        ("False", "CertificateExpiresSoon")
    );
    assert!(
        valid
            .message
            .starts_with("the API server's certificate \"kube-apiserver\" expires on "),
        "{}",
        valid.message
    );
    assert!(
        valid.message.contains("inside the 30-day window"),
        "{}",
        valid.message
    );
    let valid = condition(&got, &got.known(&[]), 7, None, Timestamp::now()).unwrap();
    assert_eq!(valid.status, "True", "{}", valid.message);
}
