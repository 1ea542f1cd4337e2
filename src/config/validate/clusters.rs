//! `[cluster]` and `[[cluster]]`, and the cluster each app names.

use std::collections::HashSet;

use super::{is_dns_label, is_kube_version, Problems};
use crate::config::{AppConfig, Clusters};

/// `[cluster]` or each `[[cluster]]`: named by a unique DNS label (`[[cluster]]`).
pub(super) fn clusters(clusters: &Clusters, problems: &mut Problems) {
    let mut names = HashSet::new();
    for (i, cluster) in clusters.list().iter().enumerate() {
        let key = |k: &str| clusters.key(i, k);
        match (&cluster.name, clusters) {
            (None, Clusters::Many(_)) => problems.add(key("name"), "give each [[cluster]] a name"),
            (Some(name), _) if !is_dns_label(name) => problems.add(
                key("name"),
                format!("{name:?} is not a DNS label (lower-case letters, digits and '-')"),
            ),
            (Some(name), _) if !names.insert(name.as_str()) => problems.add(
                key("name"),
                format!("duplicate cluster name {name:?}: cluster names must be unique"),
            ),
            _ => {}
        }
        if let Some(v) = &cluster.kube_version {
            if !is_kube_version(v) {
                problems.add(
                    key("kube_version"),
                    format!("{v:?} is not a Kubernetes version such as \"1.31\" or \"v1.31.2\""),
                );
            }
        }
        if cluster.max_requests_in_flight == 0 {
            problems.add(key("max_requests_in_flight"), "must be at least 1");
        }
    }
}

/// The app's `cluster`: one that is configured; needed when there are several.
pub(super) fn app_cluster(
    app: &AppConfig,
    clusters: &Clusters,
    key: &dyn Fn(&str) -> String,
    problems: &mut Problems,
) {
    let names = || {
        let names: Vec<&str> = clusters.list().iter().map(|c| c.name()).collect();
        names.join(", ")
    };
    match &app.cluster {
        Some(name) if clusters.named(name).is_none() => problems.add(
            key("cluster"),
            format!("no cluster is named {name:?} (the clusters: {})", names()),
        ),
        None if clusters.list().len() > 1 => problems.add(
            key("cluster"),
            format!(
                "give the app's cluster: {} clusters are configured ({})",
                clusters.list().len(),
                names()
            ),
        ),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{parse, Clusters, ConfigError};

    const APP: &str = "[[app]]\nname = \"web\"\nrepo = \"https://example.com/web.git\"\n";

    fn checked(text: &str) -> Result<crate::config::Config, ConfigError> {
        let config = parse(text)?;
        config.validate()?;
        Ok(config)
    }

    #[test]
    fn a_lone_cluster_table_is_the_cluster_named_default() {
        let config = checked(&format!("[cluster]\ncontext = \"kind\"\n{APP}")).unwrap();
        assert!(matches!(config.cluster, Clusters::One(_)));
        let cluster = config.cluster_of(&config.apps[0]);
        assert_eq!(
            (cluster.name(), cluster.context.as_deref()),
            ("default", Some("kind"))
        );
        let none = checked(APP).unwrap();
        assert_eq!(none.cluster_of(&none.apps[0]).name(), "default");
    }

    #[test]
    fn apps_name_one_of_several_clusters() {
        let text = format!(
            "[[cluster]]\nname = \"east\"\nlabels = {{ env = \"prod\" }}\nrequest_timeout = \"5s\"\n[[cluster]]\nname = \"west\"\n{APP}cluster = \"west\"\n"
        );
        let config = checked(&text).unwrap();
        let names: Vec<&str> = config.cluster.list().iter().map(|c| c.name()).collect();
        assert_eq!(names, ["east", "west"]);
        assert_eq!(config.cluster.list()[0].labels["env"], "prod");
        assert_eq!(config.cluster_of(&config.apps[0]).name(), "west");
    }

    #[test]
    fn clusters_and_the_apps_naming_them_are_checked_with_their_key() {
        let two = "[[cluster]]\nname = \"east\"\n[[cluster]]\nname = \"west\"\n";
        let unnamed = checked(&format!("{two}[[cluster]]\ncontext = \"x\"\n")).unwrap_err();
        assert!(
            unnamed
                .to_string()
                .contains("cluster[2].name: give each [[cluster]] a name"),
            "{unnamed}"
        );
        let twice = checked("[[cluster]]\nname = \"east\"\n[[cluster]]\nname = \"east\"\n");
        let twice = twice.unwrap_err().to_string();
        assert!(
            twice.contains("cluster[1].name: duplicate cluster name \"east\""),
            "{twice}"
        );
        let bad = checked("[[cluster]]\nname = \"East_1\"\nmax_requests_in_flight = 0\n");
        let bad = bad.unwrap_err().to_string();
        assert!(
            bad.contains("cluster[0].name: \"East_1\" is not a DNS label"),
            "{bad}"
        );
        assert!(
            bad.contains("cluster[0].max_requests_in_flight: must be at least 1"),
            "{bad}"
        );
        let which = checked(&format!("{two}{APP}")).unwrap_err().to_string();
        assert!(
            which.contains(
                "app[0].cluster: give the app's cluster: 2 clusters are configured (east, west)"
            ),
            "{which}"
        );
        let missing = checked(&format!("{two}{APP}cluster = \"north\"\n")).unwrap_err();
        assert!(
            missing.to_string().contains(
                "app[0].cluster: no cluster is named \"north\" (the clusters: east, west)"
            ),
            "{missing}"
        );
        let unknown = parse("[[cluster]]\nname = \"east\"\nserver = \"x\"\n").unwrap_err();
        assert!(
            unknown.to_string().contains("cluster[0].server"),
            "{unknown}"
        );
        let old = checked("[cluster]\nmax_requests_in_flight = 0\n").unwrap_err();
        assert!(
            old.to_string().contains("cluster.max_requests_in_flight"),
            "{old}"
        );
    }
}
