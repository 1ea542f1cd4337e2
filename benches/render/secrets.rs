//! Secrets' case: `berth render` of 1000 Secrets encrypted with sops (each file its own
//! data key, wrapped for an age recipient; `data` and `stringData` encrypted, as the
//! usual `encrypted_regex` has it) beside the same 1000 Secrets in clear. What
//! decryption adds (opening each data key with age, AES-GCM per value, the MAC) shows
//! as the ratio; the goal is at most 2×. The files are written by
//! `scripts/sops-fixtures.py` (Python's cryptography and Debian's age), not by berth.

use std::process::Command;

use anyhow::{bail, Result};

use super::{run, timed, Bench, Samples};

/// Secrets rendered.
fn secrets() -> usize {
    super::sized(1000, 50)
}
/// Runs of each render.
fn runs() -> usize {
    super::sized(30, 3)
}

impl Bench {
    /// `berth render` of the encrypted Secrets beside the plain ones.
    pub(crate) fn secrets(&mut self) -> Result<()> {
        let secrets = secrets();
        let dir = self.work.join("secrets");
        std::fs::create_dir_all(&dir)?;
        let key = dir.join("age.key");
        run(Command::new("age-keygen").arg("-o").arg(&key))?;
        let recipient = run(Command::new("age-keygen").arg("-y").arg(&key))?;
        let python = std::env::var("BERTH_SOPS_PYTHON").unwrap_or_else(|_| "python3".into());
        run(Command::new(python)
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/scripts/sops-fixtures.py"
            ))
            .arg("secrets")
            .arg(&dir)
            .arg(secrets.to_string())
            .arg(recipient.trim()))?;
        let mut plain = Command::new(&self.berth);
        plain.args(["render", "plain"]).current_dir(&dir);
        let mut encrypted = Command::new(&self.berth);
        encrypted
            .args(["render", "encrypted", "--age-key-file"])
            .arg(&key)
            .current_dir(&dir);
        for cmd in [&mut plain, &mut encrypted] {
            let objects = run(cmd)?.matches("\nkind: Secret\n").count();
            if objects != secrets {
                bail!("berth render gave {objects} Secrets, not {secrets}");
            }
        }
        let (mut ours, mut clear) = (Vec::new(), Vec::new());
        for _ in 0..runs() {
            clear.push(timed(&mut plain)?);
            ours.push(timed(&mut encrypted)?);
        }
        let (ours, clear) = (Samples(ours), Samples(clear));
        eprintln!(
            "secrets: encrypted {:.3}s, in clear {:.3}s",
            ours.median(),
            clear.median()
        );
        let case = format!("10. render {secrets} Secrets");
        self.table(
            &case,
            &[("berth render, encrypted with sops (age)", &ours)],
            "s",
            Some(&clear),
        );
        self.table(&case, &[("berth render, in clear", &clear)], "s", None);
        self.notes.push(format!(
            "Secrets: berth render of {secrets} Secrets encrypted with sops took {:.0} ms, the same in clear {:.0} ms: {:.2}× (goal ≤ 2×).",
            ours.median() * 1e3,
            clear.median() * 1e3,
            ours.median() / clear.median()
        ));
        Ok(())
    }
}
