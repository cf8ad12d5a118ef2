//! Certificates for the RPC-with-TLS tests, made here with rcgen: a CA, a server certificate
//! for 127.0.0.1 and a client certificate from that CA, and a client certificate from another
//! CA, as PEM files in a temporary directory (removed on drop).

use super::TempDir;

/// The PEM files: `ca.pem`, `server.pem`/`server.key`, `client.pem`/`client.key` (signed by
/// `ca.pem`), `stranger.pem`/`stranger.key` (signed by `other-ca.pem`).
pub struct Pki {
    dir: TempDir,
}

impl Pki {
    pub fn new() -> Pki {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
        let dir = TempDir::new("sluice-pki");
        let ca = |tag: &str| {
            let key = KeyPair::generate().unwrap();
            let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
            p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            let cert = p.self_signed(&key).unwrap();
            std::fs::write(dir.path().join(format!("{tag}.pem")), cert.pem()).unwrap();
            (cert, key)
        };
        let (ca_cert, ca_key) = ca("ca");
        let (other_cert, other_key) = ca("other-ca");
        let leaf = |names: Vec<String>, file: &str, by: (&rcgen::Certificate, &KeyPair)| {
            let key = KeyPair::generate().unwrap();
            let cert = CertificateParams::new(names)
                .unwrap()
                .signed_by(&key, by.0, by.1)
                .unwrap();
            std::fs::write(dir.path().join(format!("{file}.pem")), cert.pem()).unwrap();
            std::fs::write(dir.path().join(format!("{file}.key")), key.serialize_pem()).unwrap();
        };
        leaf(vec!["127.0.0.1".into()], "server", (&ca_cert, &ca_key));
        leaf(vec!["client".into()], "client", (&ca_cert, &ca_key));
        leaf(vec!["client".into()], "stranger", (&other_cert, &other_key));
        Pki { dir }
    }

    /// The path of one of the files, as a string for command lines.
    pub fn p(&self, f: &str) -> String {
        self.dir.path().join(f).display().to_string()
    }

    /// `sluice serve`'s TLS flags: the server's certificate and key, and with `client_ca` the
    /// CA client certificates must chain to.
    pub fn serve_flags(&self, client_ca: bool) -> Vec<String> {
        let mut v = vec![
            "--tls-cert".to_string(),
            self.p("server.pem"),
            "--tls-key".into(),
            self.p("server.key"),
        ];
        if client_ca {
            v.extend(["--tls-client-ca".into(), self.p("ca.pem")]);
        }
        v
    }
}
