//! What the status page shows of a certificate: its leaf's names and validity, read from
//! the chain only (never the key), once per certificate content.

use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;

/// A certificate's leaf, as far as the status page is concerned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct CertInfo {
    /// The leaf's subject (RFC 4514 form).
    pub(crate) subject: String,
    /// DNS names of the subjectAltName extension (IP addresses as text).
    pub(crate) names: Vec<String>,
    /// Validity start and end, seconds since the Unix epoch.
    pub(crate) not_before: i64,
    pub(crate) not_after: i64,
}

/// Reads the first certificate of a chain; `Err` says why it could not be read.
pub(crate) fn read(cert: &weir_model::Certificate) -> Result<CertInfo, String> {
    let der = match cert.as_packed() {
        Some(p) => CertificateDer::from(p.chain_der().next().ok_or("no certificate in the chain")?),
        None => CertificateDer::pem_slice_iter(&cert.chain_pem())
            .next()
            .ok_or("no certificate in the chain")?
            .map_err(|e| format!("invalid certificate PEM: {e}"))?,
    };
    let (_, cert) = x509_parser::parse_x509_certificate(der.as_ref())
        .map_err(|e| format!("invalid certificate: {e}"))?;
    let mut names = Vec::new();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for n in &san.value.general_names {
            match n {
                x509_parser::extensions::GeneralName::DNSName(d) => names.push((*d).to_string()),
                x509_parser::extensions::GeneralName::IPAddress(b) => {
                    if let Ok(a) = <[u8; 4]>::try_from(*b) {
                        names.push(std::net::Ipv4Addr::from(a).to_string());
                    } else if let Ok(a) = <[u8; 16]>::try_from(*b) {
                        names.push(std::net::Ipv6Addr::from(a).to_string());
                    }
                }
                _ => {}
            }
        }
    }
    let validity = cert.validity();
    Ok(CertInfo {
        subject: cert.subject().to_string(),
        names,
        not_before: validity.not_before.timestamp(),
        not_after: validity.not_after.timestamp(),
    })
}

/// `YYYY-MM-DDTHH:MM:SSZ` for seconds since the Unix epoch (proleptic Gregorian, UTC).
pub(crate) fn rfc3339(unix: i64) -> String {
    let days = unix.div_euclid(86_400);
    let secs = unix.rem_euclid(86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_798_761_599), "2026-12-31T23:59:59Z");
        assert_eq!(rfc3339(4_102_444_800), "2100-01-01T00:00:00Z");
        assert_eq!(rfc3339(-1), "1969-12-31T23:59:59Z");
    }

    #[test]
    fn a_leaf_is_read_and_the_key_is_not_needed() {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params =
            rcgen::CertificateParams::new(vec!["a.example".into(), "*.b.example".into()]).unwrap();
        params.not_before = rcgen::date_time_ymd(2026, 1, 2);
        params.not_after = rcgen::date_time_ymd(2027, 3, 4);
        let cert = params.self_signed(&key).unwrap();
        let chain = |pem: &[u8]| {
            weir_model::Certificate::new(std::sync::Arc::from(pem), std::sync::Arc::from(&b""[..]))
        };
        let text = chain(cert.pem().as_bytes());
        let packed =
            weir_model::Certificate::pack(cert.pem().as_bytes(), key.serialize_pem().as_bytes())
                .unwrap();
        for c in [text, packed] {
            let info = read(&c).unwrap();
            assert_eq!(info.names, ["a.example", "*.b.example"]);
            assert_eq!(rfc3339(info.not_before), "2026-01-02T00:00:00Z");
            assert_eq!(rfc3339(info.not_after), "2027-03-04T00:00:00Z");
        }
        assert!(read(&chain(b"not pem")).is_err());
        assert!(
            read(&chain(
                b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"
            ))
            .is_err()
        );
    }
}
