use super::*;

#[test]
fn a_document_comes_from_the_template_named_before_it() {
    let output = b"---\n# Source: web/templates/a.yaml\nkind: A\n---\n# Source: web/charts/db/templates/b.yaml\nkind: B\nnote: \"# Source: not/a/line\"\n";
    let found = sources(output);
    assert_eq!(found.len(), 2);
    assert_eq!(found[1].0, 5);
    assert_eq!(source_of(&found, 3), Some("web/templates/a.yaml"));
    assert_eq!(source_of(&found, 6), Some("web/charts/db/templates/b.yaml"));
    assert_eq!(source_of(&found, 1), None);
}

#[test]
fn a_chart_whose_link_leads_out_of_the_checkout_is_refused_before_helm_runs() {
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("kubeconfig"), "token: secret\n").unwrap();
    let repo = tempfile::tempdir().unwrap();
    let root = repo.path().canonicalize().unwrap();
    let chart = root.join("web");
    std::fs::create_dir_all(chart.join("files")).unwrap();
    std::fs::create_dir_all(root.join("shared")).unwrap();
    std::fs::write(chart.join(CHART_FILE), "name: web\nversion: 0.1.0\n").unwrap();
    // A link inside the checkout is followed; the folder it points at is walked too.
    std::os::unix::fs::symlink(root.join("shared"), chart.join("files/shared")).unwrap();
    std::os::unix::fs::symlink(outside.path().join("kubeconfig"), root.join("shared/kc")).unwrap();
    let helm = Helm {
        command: Some("/nonexistent/helm".into()),
        ..Helm::new("web", "shop", &AgentConfig::default())
    };
    let e = helm
        .template(&root, &chart, "web/Chart.yaml", 1 << 20)
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "web/Chart.yaml: shared/kc resolves outside the repository; refused unread"
    );
    std::fs::remove_file(root.join("shared/kc")).unwrap();
    let e = helm
        .template(&root, &chart, "web/Chart.yaml", 1 << 20)
        .unwrap_err()
        .to_string();
    assert!(e.contains("helm template could not be started"), "{e}");
}
