//! `--web-config FILE`: the endpoint's protection, in the format Prometheus' exporters share
//! (the exporter-toolkit's web configuration), so that one file and one Prometheus scrape
//! configuration (`scheme: https`, `tls_config`, `basic_auth`) serve skillprof as they serve
//! node_exporter:
//!
//! ```yaml
//! tls_server_config:
//!   cert_file: server.crt        # relative paths are read from the file's own directory
//!   key_file: server.key
//!   client_ca_file: ca.crt       # optional: clients must then present a certificate it signed
//!   client_auth_type: RequireAndVerifyClientCert
//!   min_version: TLS12
//! basic_auth_users:
//!   prometheus: $2y$10$...       # bcrypt, as `htpasswd -nBC 10 prometheus` prints it
//! ```
//!
//! What the toolkit offers that rustls does not (TLS 1.0 and 1.1, client certificates taken
//! without verifying them, Go's cipher-suite names) is refused by name rather than ignored.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result, bail};
use base64::Engine;
use serde::Deserialize;
use sha1::{Digest, Sha1};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct WebConfigFile {
    tls_server_config: Option<TlsServerConfig>,
    #[serde(default)]
    basic_auth_users: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TlsServerConfig {
    cert_file: PathBuf,
    key_file: PathBuf,
    client_ca_file: Option<PathBuf>,
    client_auth_type: Option<ClientAuth>,
    min_version: Option<TlsVersion>,
    max_version: Option<TlsVersion>,
}

/// The toolkit's names, which are Go's `tls.ClientAuthType`s.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
enum ClientAuth {
    NoClientCert,
    RequestClientCert,
    RequireAnyClientCert,
    VerifyClientCertIfGiven,
    RequireAndVerifyClientCert,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
enum TlsVersion {
    TLS10,
    TLS11,
    TLS12,
    TLS13,
}

/// The endpoint's protection, ready to serve: TLS if configured, basic auth if any user is.
#[derive(Clone)]
pub struct Protection {
    pub tls: Option<TlsAcceptor>,
    pub auth: Option<Arc<BasicAuth>>,
    /// What the protection is, in words, for the watch's start line.
    pub summary: String,
}

impl Protection {
    /// Reads and checks `path`: every certificate and key is loaded now, so that a bad file
    /// fails the watch before anything is attached.
    pub fn load(path: &Path) -> Result<Protection> {
        let text = fs::read_to_string(path)
            .with_context(|| format!("--web-config {}: cannot read it", path.display()))?;
        let file: WebConfigFile = serde_saphyr::from_str(&text).with_context(|| {
            format!(
                "--web-config {}: not a web configuration (the exporter-toolkit format: \
                 tls_server_config, basic_auth_users)",
                path.display()
            )
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        let tls = file
            .tls_server_config
            .as_ref()
            .map(|tls| tls.acceptor(base))
            .transpose()
            .with_context(|| format!("--web-config {}", path.display()))?;
        let auth = (!file.basic_auth_users.is_empty())
            .then(|| BasicAuth::new(file.basic_auth_users.clone()))
            .transpose()
            .with_context(|| format!("--web-config {}", path.display()))?;
        let summary = match (&file.tls_server_config, &auth) {
            (None, None) => "no TLS, no authentication (the file configures neither)".to_owned(),
            (tls, auth) => [
                tls.as_ref().map(TlsServerConfig::describe),
                auth.as_ref()
                    .map(|auth| format!("basic auth ({} user(s), bcrypt)", auth.users.len())),
            ]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join(", "),
        };
        Ok(Protection {
            tls: tls.map(|config| TlsAcceptor::from(Arc::new(config))),
            auth: auth.map(Arc::new),
            summary,
        })
    }
}

impl TlsServerConfig {
    fn client_auth(&self) -> Result<ClientAuth> {
        // As the toolkit: a client CA without a type means its certificates are required.
        let default = match self.client_ca_file {
            Some(_) => ClientAuth::RequireAndVerifyClientCert,
            None => ClientAuth::NoClientCert,
        };
        let kind = self.client_auth_type.unwrap_or(default);
        match (kind, &self.client_ca_file) {
            (ClientAuth::RequestClientCert | ClientAuth::RequireAnyClientCert, _) => bail!(
                "client_auth_type {kind:?} takes a client's certificate without verifying it, \
                 which protects nothing; use RequireAndVerifyClientCert with client_ca_file"
            ),
            (
                ClientAuth::VerifyClientCertIfGiven | ClientAuth::RequireAndVerifyClientCert,
                None,
            ) => {
                bail!(
                    "client_auth_type {kind:?} needs client_ca_file, the CA clients' certificates are checked against"
                )
            }
            (ClientAuth::NoClientCert, Some(_)) => bail!(
                "client_ca_file is set but client_auth_type is NoClientCert: say which you mean"
            ),
            _ => Ok(kind),
        }
    }

    fn versions(&self) -> Result<Vec<&'static rustls::SupportedProtocolVersion>> {
        let (min, max) = (
            self.min_version.unwrap_or(TlsVersion::TLS12),
            self.max_version.unwrap_or(TlsVersion::TLS13),
        );
        if min < TlsVersion::TLS12 {
            bail!(
                "min_version {min:?}: TLS 1.0 and 1.1 are broken; skillprof serves TLS12 and TLS13"
            )
        }
        if max < min {
            bail!("max_version {max:?} is below min_version {min:?}")
        }
        Ok([
            (TlsVersion::TLS12, &rustls::version::TLS12),
            (TlsVersion::TLS13, &rustls::version::TLS13),
        ]
        .into_iter()
        .filter(|(version, _)| (min..=max).contains(version))
        .map(|(_, supported)| supported)
        .collect())
    }

    fn acceptor(&self, base: &Path) -> Result<rustls::ServerConfig> {
        // The settings first: a weak or contradictory one is named before any file is read.
        let (versions, client_auth) = (self.versions()?, self.client_auth()?);
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let cert_file = base.join(&self.cert_file);
        let certs = CertificateDer::pem_file_iter(&cert_file)
            .and_then(Iterator::collect::<Result<Vec<_>, _>>)
            .with_context(|| format!("cert_file {}: no PEM certificate", cert_file.display()))?;
        if certs.is_empty() {
            bail!("cert_file {}: no certificate in it", cert_file.display());
        }
        let key_file = base.join(&self.key_file);
        let key = PrivateKeyDer::from_pem_file(&key_file)
            .with_context(|| format!("key_file {}: no PEM private key", key_file.display()))?;
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&versions)
            .context("the TLS versions")?;
        let builder = match client_auth {
            ClientAuth::NoClientCert => builder.with_no_client_auth(),
            kind => {
                let ca_file = base.join(self.client_ca_file.as_ref().expect("checked above"));
                let mut roots = rustls::RootCertStore::empty();
                for cert in CertificateDer::pem_file_iter(&ca_file)
                    .with_context(|| format!("client_ca_file {}", ca_file.display()))?
                {
                    roots
                        .add(cert.with_context(|| format!("client_ca_file {}", ca_file.display()))?)
                        .with_context(|| format!("client_ca_file {}", ca_file.display()))?;
                }
                let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                    Arc::new(roots),
                    provider,
                );
                let verifier = if kind == ClientAuth::VerifyClientCertIfGiven {
                    verifier.allow_unauthenticated()
                } else {
                    verifier
                };
                builder.with_client_cert_verifier(
                    verifier
                        .build()
                        .with_context(|| format!("client_ca_file {}", ca_file.display()))?,
                )
            }
        };
        let mut config = builder
            .with_single_cert(certs, key)
            .context("cert_file and key_file do not make a pair")?;
        // Prometheus speaks HTTP/1.1 to its targets; hyper here serves only that.
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(config)
    }

    fn describe(&self) -> String {
        let clients = match self.client_auth() {
            Ok(ClientAuth::RequireAndVerifyClientCert) => "client certificates required",
            Ok(ClientAuth::VerifyClientCertIfGiven) => "client certificates verified if given",
            _ => "no client certificates",
        };
        format!("TLS ({clients})")
    }
}

/// Basic auth against bcrypt hashes. bcrypt is slow on purpose (tens of ms at cost 10), so a
/// pair that verified once is remembered, by a digest rather than the password itself, and
/// a scrape every second costs one hash, not one bcrypt.
pub struct BasicAuth {
    users: BTreeMap<String, String>,
    verified: Mutex<Vec<[u8; 20]>>,
    /// bcrypt of a password nobody has, at the users' cost: an unknown user takes as long to
    /// refuse as a known one with a wrong password, so the time does not tell who exists.
    decoy: String,
}

/// Remembered pairs: a Prometheus or two, not every guess an attacker makes.
const REMEMBERED: usize = 64;

impl BasicAuth {
    fn new(users: BTreeMap<String, String>) -> Result<BasicAuth> {
        let mut cost = bcrypt::DEFAULT_COST;
        for (user, hash) in &users {
            match hash.parse::<bcrypt::HashParts>() {
                Ok(parts) => cost = parts.get_cost(),
                Err(_) => bail!(
                    "basic_auth_users.{user}: not a bcrypt hash (make one with `htpasswd -nBC 10 \
                     {user}`; plain passwords are not accepted)"
                ),
            }
        }
        Ok(BasicAuth {
            users,
            verified: Mutex::new(Vec::new()),
            decoy: bcrypt::hash("no one's password", cost).context("a decoy bcrypt hash")?,
        })
    }

    /// Whether an `Authorization` header's value names a user with the right password.
    pub fn allows(&self, header: Option<&str>) -> bool {
        let Some((user, password)) = header.and_then(credentials) else {
            return false;
        };
        let hash = self.users.get(&user);
        let digest: [u8; 20] = Sha1::new()
            .chain_update(user.as_bytes())
            .chain_update([0])
            .chain_update(password.as_bytes())
            .chain_update([0])
            .chain_update(hash.map_or("", String::as_str).as_bytes())
            .finalize()
            .into();
        if hash.is_some() && self.verified.lock().unwrap().contains(&digest) {
            return true;
        }
        let ok = bcrypt::verify(&password, hash.unwrap_or(&self.decoy)).unwrap_or(false)
            && hash.is_some();
        if ok {
            let mut verified = self.verified.lock().unwrap();
            if verified.len() == REMEMBERED {
                verified.remove(0);
            }
            verified.push(digest);
        }
        ok
    }
}

/// `Basic base64(user:password)` taken apart.
fn credentials(header: &str) -> Option<(String, String)> {
    let (scheme, encoded) = header.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let (user, password) = std::str::from_utf8(&decoded).ok()?.split_once(':')?;
    Some((user.to_owned(), password.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(user: &str, password: &str) -> String {
        let encoded =
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        format!("Basic {encoded}")
    }

    fn config(text: &str) -> Result<Protection> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("web.yml");
        fs::write(&path, text).unwrap();
        Protection::load(&path)
    }

    #[test]
    fn basic_auth_takes_the_right_password_only_and_remembers_it() {
        let hash = bcrypt::hash("s3cret", 4).unwrap();
        let protection = config(&format!("basic_auth_users:\n  prometheus: '{hash}'\n")).unwrap();
        let auth = protection.auth.unwrap();
        assert!(protection.tls.is_none());
        assert!(auth.allows(Some(&header("prometheus", "s3cret"))));
        assert!(
            auth.allows(Some(&header("prometheus", "s3cret"))),
            "remembered"
        );
        assert_eq!(auth.verified.lock().unwrap().len(), 1);
        for wrong in [
            Some(header("prometheus", "wrong")),
            Some(header("nobody", "s3cret")),
            Some("Bearer abc".to_owned()),
            Some("Basic not-base64!".to_owned()),
            None,
        ] {
            assert!(!auth.allows(wrong.as_deref()), "{wrong:?}");
        }
        assert_eq!(protection.summary, "basic auth (1 user(s), bcrypt)");
    }

    #[test]
    fn a_plain_password_an_unknown_key_or_a_weak_tls_setting_is_refused_by_name() {
        let said = |text: &str| format!("{:#}", config(text).err().unwrap());
        assert!(said("basic_auth_users:\n  a: hunter2\n").contains("not a bcrypt hash"));
        assert!(said("http_server_config:\n  http2: true\n").contains("http_server_config"));
        let tls = "tls_server_config:\n  cert_file: c.pem\n  key_file: k.pem\n";
        assert!(said(&format!("{tls}  min_version: TLS10\n")).contains("TLS 1.0 and 1.1"));
        assert!(
            said(&format!("{tls}  client_auth_type: RequireAnyClientCert\n"))
                .contains("without verifying it")
        );
        assert!(
            said(&format!(
                "{tls}  client_auth_type: RequireAndVerifyClientCert\n"
            ))
            .contains("needs client_ca_file")
        );
        assert!(said(tls).contains("cert_file"), "{}", said(tls));
    }
}
