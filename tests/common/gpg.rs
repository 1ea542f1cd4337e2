//! GnuPG keys made at test time, for signed commits and tags; `gpg` is run only by the
//! tests, never by berth.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A GnuPG home with keys made now; `gpg` is run only by the test, never by berth.
pub struct Gpg {
    /// `GNUPGHOME`.
    pub home: tempfile::TempDir,
}

impl Gpg {
    pub fn new() -> Gpg {
        Gpg {
            home: tempfile::tempdir().unwrap(),
        }
    }

    pub fn run(&self, args: &[&str]) -> String {
        let out = Command::new("gpg")
            .env("GNUPGHOME", self.home.path())
            .args(["--batch", "--pinentry-mode", "loopback", "--passphrase", ""])
            .args(args)
            .output()
            .expect("run gpg (apt install gnupg)");
        assert!(
            out.status.success(),
            "gpg {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// A new signing key for `uid`, made at `faked_time` when given (for an expired key);
    /// returns its fingerprint.
    pub fn key(&self, uid: &str, expiry: &str, faked_time: Option<&str>) -> String {
        let mut args = Vec::new();
        if let Some(t) = faked_time {
            args.extend(["--faked-system-time", t]);
        }
        args.extend(["--quick-gen-key", uid, "ed25519", "sign", expiry]);
        self.run(&args);
        let listing = self.run(&["--with-colons", "--list-keys", uid]);
        listing
            .lines()
            .find_map(|l| l.strip_prefix("fpr:"))
            .map(|l| l.trim_matches(':').to_string())
            .expect("a fingerprint")
    }

    /// Revokes the key with the revocation certificate gpg made with it.
    pub fn revoke(&self, fingerprint: &str) {
        let cert = self
            .home
            .path()
            .join(format!("openpgp-revocs.d/{fingerprint}.rev"));
        // gpg neutralises the stored certificate with a leading ':' on its armor line.
        let text = std::fs::read_to_string(&cert).unwrap().replace(
            ":-----BEGIN PGP PUBLIC KEY BLOCK",
            "-----BEGIN PGP PUBLIC KEY BLOCK",
        );
        std::fs::write(&cert, text).unwrap();
        self.run(&["--import", cert.to_str().unwrap()]);
    }

    pub fn export(&self, fingerprint: &str, to: &Path) {
        std::fs::write(to, self.run(&["--armor", "--export", fingerprint])).unwrap();
    }

    /// A `gpg.program` for git that signs as if at `faked_time`.
    pub fn program(&self, faked_time: Option<&str>) -> PathBuf {
        let path = self
            .home
            .path()
            .join(format!("gpg-{}", faked_time.unwrap_or("now")));
        let faked = faked_time
            .map(|t| format!("--faked-system-time {t} "))
            .unwrap_or_default();
        std::fs::write(
            &path,
            format!(
                "#!/bin/sh\nGNUPGHOME={} exec gpg --batch --pinentry-mode loopback --passphrase '' {faked}\"$@\"\n",
                self.home.path().display()
            ),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }
}
