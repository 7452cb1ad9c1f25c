//! TLS for the HTTP side: a certificate from the configuration, or a development
//! certificate signed by a CA the broker generates into its data directory.
//!
//! The development CA (`dev-ca.pem`, key `dev-ca-key.pem`) is made once and kept, so a
//! client that trusts it (Python `connection_verify`, Node `NODE_EXTRA_CA_CERTS`, an OS
//! trust store) keeps trusting the broker across restarts; the server certificate it signs
//! is made anew at each start for `localhost`, the loopback addresses and the host name.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// File name of the development CA certificate in the data directory.
pub const DEV_CA_FILE: &str = "dev-ca.pem";
/// File name of the development CA's private key in the data directory.
pub const DEV_CA_KEY_FILE: &str = "dev-ca-key.pem";

/// Where the TLS identity comes from.
#[derive(Debug, Clone)]
pub enum Identity {
    /// PEM files from the configuration.
    Files {
        /// Certificate chain.
        cert: PathBuf,
        /// Private key.
        key: PathBuf,
        /// The configuration keys that named them (`tls.cert` and `tls.key`, or
        /// `http.tls_cert` and `http.tls_key`): errors name them.
        keys: (&'static str, &'static str),
    },
    /// A development certificate signed by the CA in this directory (made if missing).
    Development {
        /// The directory holding `dev-ca.pem`.
        directory: PathBuf,
    },
}

/// A ready TLS server configuration and, for a development identity, the CA's path.
pub struct Tls {
    /// For the acceptor.
    pub config: Arc<rustls::ServerConfig>,
    /// The development CA clients must trust, when one is used.
    pub dev_ca: Option<PathBuf>,
}

/// Loads or makes the identity and builds the server configuration (ALPN `http/1.1`).
pub fn load(identity: &Identity) -> Result<Tls, String> {
    let (chain, key, dev_ca) = match identity {
        Identity::Files {
            cert,
            key,
            keys: (cert_name, key_name),
        } => {
            let chain = read_chain(cert, cert_name)?;
            let key = read_key(key, key_name)?;
            (chain, key, None)
        }
        Identity::Development { directory } => {
            let (chain, key) = development(directory)?;
            (chain, key, Some(directory.join(DEV_CA_FILE)))
        }
    };
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|error| format!("TLS: {error}"))?
    .with_no_client_auth()
    .with_single_cert(chain, key)
    .map_err(|error| format!("TLS: the certificate and key do not make an identity: {error}"))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec(), b"amqp".to_vec()];
    Ok(Tls {
        config: Arc::new(config),
        dev_ca,
    })
}

/// The certificate chain in `path`, named `name` in the configuration.
fn read_chain(path: &Path, name: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let text =
        std::fs::read(path).map_err(|error| format!("{name} {}: {error}", path.display()))?;
    let chain: Vec<_> = rustls_pemfile::certs(&mut text.as_slice())
        .collect::<Result<_, _>>()
        .map_err(|error| format!("{name} {}: {error}", path.display()))?;
    if chain.is_empty() {
        return Err(format!(
            "{name} {}: no PEM certificate in the file",
            path.display()
        ));
    }
    Ok(chain)
}

/// The private key in `path`, named `name` in the configuration.
fn read_key(path: &Path, name: &str) -> Result<PrivateKeyDer<'static>, String> {
    let text =
        std::fs::read(path).map_err(|error| format!("{name} {}: {error}", path.display()))?;
    rustls_pemfile::private_key(&mut text.as_slice())
        .map_err(|error| format!("{name} {}: {error}", path.display()))?
        .ok_or_else(|| format!("{name} {}: no PEM private key in the file", path.display()))
}

/// The CA's parameters: the same every time, so the CA rebuilt from its stored key signs
/// certificates that chain to the `dev-ca.pem` clients already trust.
fn ca_params() -> CertificateParams {
    let mut params = CertificateParams::default();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(DnType::CommonName, "ferrobus development CA");
    params
        .distinguished_name
        .push(DnType::OrganizationName, "ferrobus");
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
    ];
    params
}

/// Loads the development CA from `directory` (making it when missing) and signs a fresh
/// server certificate with it.
fn development(
    directory: &Path,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), String> {
    let ca_path = directory.join(DEV_CA_FILE);
    let key_path = directory.join(DEV_CA_KEY_FILE);
    let failure = |what: &str, error: &dyn std::fmt::Display| {
        format!(
            "development certificate in {}: {what}: {error}",
            directory.display()
        )
    };
    let ca_key = if ca_path.exists() && key_path.exists() {
        let pem = std::fs::read_to_string(&key_path)
            .map_err(|error| failure("cannot read the CA key", &error))?;
        KeyPair::from_pem(&pem).map_err(|error| failure("the CA key does not parse", &error))?
    } else {
        std::fs::create_dir_all(directory)
            .map_err(|error| failure("cannot create the directory", &error))?;
        let key = KeyPair::generate().map_err(|error| failure("cannot make a key", &error))?;
        let ca = ca_params()
            .self_signed(&key)
            .map_err(|error| failure("cannot sign the CA", &error))?;
        write_private(&key_path, key.serialize_pem().as_bytes())
            .map_err(|error| failure("cannot write the CA key", &error))?;
        std::fs::write(&ca_path, ca.pem())
            .map_err(|error| failure("cannot write the CA certificate", &error))?;
        key
    };
    let issuer = Issuer::new(ca_params(), ca_key);
    let mut names = vec![
        "localhost".to_string(),
        "127.0.0.1".to_string(),
        "::1".to_string(),
    ];
    if let Some(host) = host_name()
        && !names.contains(&host)
    {
        names.push(host);
    }
    let mut params = CertificateParams::new(names)
        .map_err(|error| failure("bad host name for the certificate", &error))?;
    params
        .distinguished_name
        .push(DnType::CommonName, "ferrobus development server");
    params.use_authority_key_identifier_extension = true;
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let server_key = KeyPair::generate().map_err(|error| failure("cannot make a key", &error))?;
    let server = params
        .signed_by(&server_key, &issuer)
        .map_err(|error| failure("cannot sign the server certificate", &error))?;
    let ca_pem = std::fs::read(&ca_path)
        .map_err(|error| failure("cannot read the CA certificate", &error))?;
    let mut chain = vec![server.der().clone()];
    chain.extend(rustls_pemfile::certs(&mut ca_pem.as_slice()).filter_map(Result::ok));
    let key = PrivateKeyDer::try_from(server_key.serialize_der())
        .map_err(|error| failure("cannot encode the server key", &error))?;
    Ok((chain, key))
}

/// Writes a file readable by its owner only.
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

/// This machine's host name, when it has one.
pub fn host_name() -> Option<String> {
    let mut buffer = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname writes at most that much.
    let result = unsafe { libc::gethostname(buffer.as_mut_ptr().cast(), buffer.len()) };
    if result != 0 {
        return None;
    }
    let end = buffer.iter().position(|byte| *byte == 0)?;
    let name = std::str::from_utf8(&buffer[..end]).ok()?.trim().to_string();
    (!name.is_empty()).then_some(name)
}
