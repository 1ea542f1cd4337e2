//! Charts' case: `berth render` of a chart of 50 templates beside `helm template` of the
//! same chart alone, with the same release, namespace and Kubernetes version. What berth
//! adds (the sandbox, the checks before helm runs, decoding and decorating helm's output)
//! shows as the ratio; the goal is at most +10 %.

use std::path::Path;
use std::process::Command;

use anyhow::{bail, Result};

use super::{run, timed, Bench, Samples};

/// Templates in the chart: each a Deployment and a ConfigMap in helm's idiom.
const TEMPLATES: usize = 50;
/// Runs of each tool, interleaved: a render takes a twentieth of a second, and helm's own
/// time varies by a few milliseconds from run to run.
fn runs() -> usize {
    super::sized(60, 3)
}

/// Template `i`: a Deployment and a ConfigMap named from the release, with the chart's
/// labels and values.
fn template(i: usize) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{{{ include "bench.fullname" . }}}}-part{i}
  labels:
    {{{{- include "bench.labels" . | nindent 4 }}}}
spec:
  replicas: {{{{ .Values.replicaCount }}}}
  selector:
    matchLabels:
      {{{{- include "bench.selectorLabels" . | nindent 6 }}}}
      part: "{i}"
  template:
    metadata:
      labels:
        {{{{- include "bench.selectorLabels" . | nindent 8 }}}}
        part: "{i}"
    spec:
      containers:
        - name: part{i}
          image: "{{{{ .Values.image.repository }}}}:{{{{ .Values.image.tag | default .Chart.AppVersion }}}}"
          {{{{- with .Values.resources }}}}
          resources:
            {{{{- toYaml . | nindent 12 }}}}
          {{{{- end }}}}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{{{ include "bench.fullname" . }}}}-part{i}
data:
  {{{{- range $k, $v := .Values.settings }}}}
  {{{{ $k }}}}: {{{{ $v | quote }}}}
  {{{{- end }}}}
"#
    )
}

/// `helm create bench` in `dir`, its templates replaced by [`TEMPLATES`] of ours.
pub(crate) fn write_chart(dir: &Path) -> Result<()> {
    let home = dir.join("helm-home");
    run(Command::new("helm")
        .args(["create", "bench"])
        .current_dir(dir)
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_DATA_HOME", home.join("data")))?;
    let templates = dir.join("bench/templates");
    for entry in std::fs::read_dir(&templates)? {
        let path = entry?.path();
        if path.file_name().is_some_and(|n| n != "_helpers.tpl") {
            if path.is_dir() {
                std::fs::remove_dir_all(&path)?;
            } else {
                std::fs::remove_file(&path)?;
            }
        }
    }
    for i in 0..TEMPLATES {
        std::fs::write(templates.join(format!("part{i}.yaml")), template(i))?;
    }
    let values = dir.join("bench/values.yaml");
    let mut text = std::fs::read_to_string(&values)?;
    text.push_str("settings:\n  mode: production\n  region: eu-west-1\n  retries: \"3\"\n");
    text = text.replace(
        "resources: {}",
        "resources:\n  limits:\n    cpu: 100m\n    memory: 128Mi",
    );
    std::fs::write(values, text)?;
    Ok(())
}

impl Bench {
    /// `berth render` of the chart beside `helm template` of it.
    pub(crate) fn chart(&mut self) -> Result<()> {
        let dir = self.work.join("chart");
        std::fs::create_dir_all(&dir)?;
        write_chart(&dir)?;
        let common = ["-n", "shop", "--kube-version", "1.20.2"];
        let mut helm = Command::new("helm");
        helm.args(["template", "web", "bench", "--include-crds", "--skip-tests"])
            .args(common)
            .env("HELM_CONFIG_HOME", dir.join("helm-home/config"))
            .current_dir(&dir);
        let mut berth = Command::new(&self.berth);
        berth
            .args(["render", "bench", "--release", "web", "--root", "."])
            .args(common)
            .current_dir(&dir);
        let objects = run(Command::new(&self.berth)
            .args([
                "render",
                "bench",
                "--release",
                "web",
                "--root",
                ".",
                "-o",
                "json",
            ])
            .args(common)
            .current_dir(&dir))?
        .lines()
        .count();
        if objects != 2 * TEMPLATES {
            bail!("berth render gave {objects} objects, not {}", 2 * TEMPLATES);
        }
        let (mut ours, mut theirs) = (Vec::new(), Vec::new());
        for _ in 0..runs() {
            theirs.push(timed(&mut helm)?);
            ours.push(timed(&mut berth)?);
        }
        let (ours, theirs) = (Samples(ours), Samples(theirs));
        eprintln!(
            "chart: berth render {:.3}s, helm template {:.3}s",
            ours.median(),
            theirs.median()
        );
        let case = format!("9. render a chart of {TEMPLATES} templates ({objects} objects)");
        self.table(&case, &[("berth render", &ours)], "s", Some(&theirs));
        self.table(&case, &[("helm template", &theirs)], "s", None);
        self.notes.push(format!(
            "Charts: berth render of a chart of {TEMPLATES} templates ({objects} objects) took {:.0} ms, helm template alone {:.0} ms: berth adds {:+.1} % (goal ≤ +10 %).",
            ours.median() * 1e3,
            theirs.median() * 1e3,
            (ours.median() / theirs.median() - 1.0) * 100.0
        ));
        Ok(())
    }
}
