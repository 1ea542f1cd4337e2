//! Relative file settings made relative to the configuration file's folder, in written
//! apps and in app sets' templates alike.

use std::path::Path;

use super::Config;

/// The file settings of an `[[app]]`, as key paths: an app set's templates of them are
/// anchored as a written app's are.
const FILE_KEYS: [&[&str]; 8] = [
    &["webhook_secret_file"],
    &["verify", "ssh_allowed_signers"],
    &["auth", "password_file"],
    &["auth", "ssh_key_file"],
    &["auth", "known_hosts"],
    &["decrypt", "age_key_files"],
    &["decrypt", "openpgp_key_files"],
    &["decrypt", "openpgp_passphrase_file"],
];

/// Makes the relative file paths at `key` of `table` (one path or a list) relative to
/// `folder`; `credential:NAME` is left as it is.
fn anchor_template(table: &mut toml::Table, key: &[&str], folder: &Path) {
    let Some((last, tables)) = key.split_last() else {
        return;
    };
    let mut at = table;
    for part in tables {
        match at.get_mut(*part) {
            Some(toml::Value::Table(inner)) => at = inner,
            _ => return,
        }
    }
    let anchor = |value: &mut toml::Value| {
        if let toml::Value::String(path) = value {
            if Path::new(path.as_str()).is_relative() && !path.starts_with("credential:") {
                *path = folder.join(&*path).display().to_string();
            }
        }
    };
    match at.get_mut(*last) {
        Some(toml::Value::Array(paths)) => paths.iter_mut().for_each(anchor),
        Some(value) => anchor(value),
        None => {}
    }
}

impl Config {
    /// Makes every relative file setting (`state_dir`, key and secret files, the
    /// kubeconfig) relative to `folder`, the configuration file's own, as a unit's files
    /// are read the same wherever berth is started from.
    pub(super) fn anchor(&mut self, folder: &Path) {
        let at = |p: &mut std::path::PathBuf| {
            if p.is_relative() {
                *p = folder.join(&*p);
            }
        };
        at(&mut self.agent.state_dir);
        self.agent.status_page_credentials.iter_mut().for_each(at);
        for cluster in self.cluster.list_mut() {
            cluster.kubeconfig.iter_mut().for_each(at);
        }
        for app in &mut self.apps {
            let app = std::sync::Arc::make_mut(app);
            app.webhook_secret_file.iter_mut().for_each(at);
            app.verify.ssh_allowed_signers.iter_mut().for_each(at);
            app.verify.cosign_keys.iter_mut().for_each(at);
            app.registry.credentials.iter_mut().for_each(at);
            app.registry.ca_file.iter_mut().for_each(at);
            let auth = &mut app.auth;
            for file in [
                &mut auth.password_file,
                &mut auth.ssh_key_file,
                &mut auth.known_hosts,
            ] {
                file.iter_mut().for_each(at);
            }
            if let Some(keys) = &mut app.decrypt {
                keys.age_key_files.iter_mut().for_each(at);
                keys.openpgp_key_files.iter_mut().for_each(at);
                keys.openpgp_passphrase_file.iter_mut().for_each(at);
            }
        }
        for set in &mut self.app_sets {
            for key in FILE_KEYS {
                anchor_template(&mut set.template, key, folder);
            }
        }
        for notify in &mut self.notify {
            for file in [
                &mut notify.url_file,
                &mut notify.secret_file,
                &mut notify.token_file,
            ] {
                file.iter_mut().for_each(at);
            }
        }
    }
}
