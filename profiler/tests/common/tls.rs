//! Certificates for the tests that protect an endpoint with TLS, made by `openssl` as a
//! user would make them.

use std::fs;
use std::path::Path;
use std::process::Command;

/// `openssl` with `args` in `dir`, which must succeed.
fn openssl(dir: &Path, args: &[&str]) {
    let output = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("openssl");
    assert!(
        output.status.success(),
        "openssl {args:?}: {}",
        super::cli::describe(&output)
    );
}

/// A request for a new P-256 key, unencrypted: the start of every `openssl req` here.
const NEW_KEY: [&str; 6] = [
    "req",
    "-newkey",
    "ec",
    "-pkeyopt",
    "ec_paramgen_curve:P-256",
    "-nodes",
];

/// A CA, a server certificate for 127.0.0.1 and a client certificate, both signed by it.
pub fn certificates(dir: &Path) {
    let ca = ["-x509", "-keyout", "ca.key", "-out", "ca.crt", "-days", "2"];
    openssl(
        dir,
        &[&NEW_KEY[..], &ca, &["-subj", "/CN=skillprof test CA"]].concat(),
    );
    for (name, extension) in [
        (
            "server",
            "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth",
        ),
        ("client", "extendedKeyUsage=clientAuth"),
    ] {
        fs::write(dir.join(format!("{name}.ext")), format!("{extension}\n")).unwrap();
        let (key, csr, subject) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("/CN={name}"),
        );
        let request = ["-keyout", &key, "-out", &csr, "-subj", &subject];
        openssl(dir, &[&NEW_KEY[..], &request].concat());
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                &format!("{name}.csr"),
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "2",
                "-out",
                &format!("{name}.crt"),
                "-extfile",
                &format!("{name}.ext"),
            ],
        );
    }
}
