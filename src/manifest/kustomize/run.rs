//! Running the tool in the checkout: a clean environment, the timeout and memory cap,
//! helm inside the same walls when charts are inflated, and no way out to the network
//! when remote resources are not allowed.

use std::ffi::OsString;
use std::path::Path;

use super::Kustomize;
use crate::manifest::error::ManifestError;
use crate::manifest::helm::{self, Sandbox};
use crate::manifest::tool::{Tool, ToolError};

/// Where kustomize's HTTP requests go when remote resources are not allowed: the discard
/// port on loopback, where nothing listens.
const CLOSED_PROXY: &str = "http://127.0.0.1:9";

impl Kustomize {
    /// Runs the tool in the checkout, with a clean environment and the timeout; with
    /// helm to inflate charts when `inflates`.
    pub(super) fn run(
        &self,
        root: &Path,
        dir: &Path,
        shown: &str,
        max_bytes: u64,
        inflates: bool,
    ) -> Result<Vec<u8>, ManifestError> {
        let fail = |message: String| ManifestError::Kustomization {
            path: shown.to_string(),
            message,
        };
        let mut command: Vec<OsString> = self.command().into_iter().map(OsString::from).collect();
        let shown_command = command.join(" ".as_ref()).to_string_lossy().into_owned();
        let mut env = vec![("PATH", std::env::var_os("PATH").unwrap_or_default())];
        // kustomize's helm may download the charts it is allowed to: on a disk then.
        let sandbox = Sandbox::new(inflates)
            .map_err(ManifestError::scratch(shown, "cannot make its folder"))?;
        let mut reach = sandbox.reach(root, self.allow_remote);
        if inflates {
            let helm = helm::program(self.helm.as_deref()).map_err(|e| fail(e.to_string()))?;
            // kustomize runs helm in its own walls.
            reach.run(&helm);
            command.extend(["--enable-helm".into(), "--helm-command".into(), helm.into()]);
            command.extend(self.capabilities.args("helm-"));
        }
        env.extend(sandbox.env(None));
        if !self.allow_remote {
            // The second wall, behind the reference check: git may use no transport at all
            // (an empty allow-list refuses every protocol, file and ssh included), and
            // kustomize's own HTTP requests for remote files go to a closed port.
            env.extend([
                ("GIT_ALLOW_PROTOCOL", "".into()),
                ("GIT_TERMINAL_PROMPT", "0".into()),
                ("HTTPS_PROXY", CLOSED_PROXY.into()),
                ("HTTP_PROXY", CLOSED_PROXY.into()),
            ]);
        }
        command.push(dir.as_os_str().to_owned());
        let tool = Tool {
            command,
            dir: root,
            env,
            timeout: self.timeout,
            max_bytes,
            memory: self.memory,
            reach,
        };
        let output = tool.render(&shown_command, shown).map_err(|e| match e {
            ManifestError::Tool {
                path,
                tool,
                cause: cause @ ToolError::Failed(..),
                hint: None,
            } if cause.to_string().contains("version -c --short") => ManifestError::Tool {
                path,
                tool,
                cause,
                hint: Some("kustomize before 5.8.1 inflates charts with helm 3 only: set [agent] kustomize to a newer kustomize, or [agent] helm to a helm 3"),
            },
            e => e,
        });
        drop(sandbox);
        output
    }
}
