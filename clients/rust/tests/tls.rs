//! The `tls-rustls` feature against a real server with TLS on and a certificate of its own CA:
//!
//!     PG_IDEM_HTTP_TEST_DSN=... PG_IDEM_HTTP_TLS_CA=ca.pem cargo test -p pg-idem-http --features tls-rustls
//!
//! test.sh makes the CA and the server's certificate and turns `ssl` on for its throwaway server.
#![cfg(feature = "tls-rustls")]

use pg_idem_http::{IdemLayer, Pool};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;

fn client_config(ca: &str) -> rustls::ClientConfig {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).expect("the CA file") {
        roots.add(cert.unwrap()).unwrap();
    }
    rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth()
}

#[tokio::test]
async fn a_pool_over_tls_builds_a_layer_and_its_sessions_are_encrypted() {
    let dsn = std::env::var("PG_IDEM_HTTP_TEST_DSN").expect("PG_IDEM_HTTP_TEST_DSN");
    let ca = std::env::var("PG_IDEM_HTTP_TLS_CA")
        .expect("PG_IDEM_HTTP_TLS_CA: the CA of the test server's certificate (test.sh makes one)");
    let dsn = format!("{dsn}?sslmode=require");
    let pool = Pool::from_dsn_rustls(&dsn, client_config(&ca)).unwrap();
    IdemLayer::builder(pool.clone())
        .single_tenant("tls")
        .build()
        .await
        .unwrap();
    let client = pool.deadpool().get().await.unwrap();
    let row = client
        .query_typed_one(
            "SELECT ssl FROM pg_catalog.pg_stat_ssl WHERE pid = pg_catalog.pg_backend_pid()",
            &[],
        )
        .await
        .unwrap();
    assert!(row.get::<_, bool>(0));

    // the Web PKI's roots do not trust a private CA: the connection is refused, not downgraded
    let untrusted = Pool::from_dsn_rustls(&dsn, Pool::webpki_roots()).unwrap();
    let err = untrusted.statements().await.unwrap_err();
    assert!(err.to_string().contains("cannot connect"), "{err}");
}
