use super::*;
use IntOrPercent::{Int, Percent};

fn rs(name: &str, replicas: i32, available: i32, created: i64) -> ReplicaSetView {
    ReplicaSetView {
        available,
        ..ReplicaSetView::steady(name, replicas, created)
    }
}

fn sc(name: &str, from: i32, to: i32) -> Scale {
    Scale {
        name: name.into(),
        from,
        to,
    }
}

#[test]
fn fenceposts_round_surge_up_and_unavailable_down() {
    assert_eq!(resolve_fenceposts(Percent(39), Percent(39), 10), (4, 3));
    assert_eq!(resolve_fenceposts(Percent(25), Percent(25), 4), (1, 1));
    assert_eq!(resolve_fenceposts(Percent(25), Percent(25), 1), (1, 0));
    assert_eq!(resolve_fenceposts(Percent(0), Percent(0), 0), (0, 1));
    assert_eq!(resolve_fenceposts(Int(0), Int(0), 5), (0, 1));
    let zero = DeploymentView::rolling(0, Percent(0), Percent(0));
    assert_eq!(max_unavailable(&zero), 0, "replicas 0: MaxUnavailable is 0");
    let capped = DeploymentView::rolling(2, Int(1), Int(5));
    assert_eq!(max_unavailable(&capped), 2, "capped at replicas");
    assert_eq!(
        IntOrPercent::parse(&serde_json::json!("25%")),
        Ok(Percent(25))
    );
    assert_eq!(IntOrPercent::parse(&serde_json::json!(3)), Ok(Int(3)));
    assert!(IntOrPercent::parse(&serde_json::json!("25")).is_err());
}

/// Reference §5.7, trace 1, pass by pass.
#[test]
fn worked_example_trace_1_pass_by_pass() {
    let d = DeploymentView::rolling(4, Percent(25), Percent(25));
    let p = rolling_pass(&d, None, &[rs("A", 4, 4, 1)], "B");
    assert_eq!((p.create, p.scales), (Some(1), vec![sc("A", 4, 3)]));
    let p = rolling_pass(&d, Some(&rs("B", 1, 1, 2)), &[rs("A", 3, 3, 1)], "B");
    assert_eq!(p.scales, vec![sc("B", 1, 2)]);
    let p = rolling_pass(&d, Some(&rs("B", 2, 2, 2)), &[rs("A", 3, 3, 1)], "B");
    assert_eq!(p.scales, vec![sc("A", 3, 1)]);
    let p = rolling_pass(&d, Some(&rs("B", 2, 2, 2)), &[rs("A", 1, 1, 1)], "B");
    assert_eq!(p.scales, vec![sc("B", 2, 4)]);
    let p = rolling_pass(&d, Some(&rs("B", 4, 4, 2)), &[rs("A", 1, 1, 1)], "B");
    assert_eq!(p.scales, vec![sc("A", 1, 0)]);
    let p = rolling_pass(&d, Some(&rs("B", 4, 4, 2)), &[rs("A", 0, 0, 1)], "B");
    assert!(p.is_empty());
}

#[test]
fn predict_reproduces_trace_1() {
    let d = DeploymentView::rolling(4, Percent(25), Percent(25));
    let steps = predict(&d, None, vec![rs("A", 4, 4, 1)], "B");
    let pairs: Vec<(i32, i32)> = steps.iter().map(|s| (s.new, s.old)).collect();
    assert_eq!(pairs, [(1, 4), (1, 3), (2, 3), (2, 1), (4, 1), (4, 0)]);
}

/// Reference §5.7, trace 2: new pods take longer than a pass to become available.
#[test]
fn worked_example_trace_2_rows() {
    let d = DeploymentView::rolling(4, Percent(25), Percent(25));
    let rows = [
        ((3, 3), (1, 0), sc("B", 1, 2)),
        ((3, 3), (2, 1), sc("A", 3, 2)),
        ((2, 2), (2, 1), sc("B", 2, 3)),
        ((2, 2), (3, 2), sc("A", 2, 1)),
        ((1, 1), (3, 2), sc("B", 3, 4)),
        ((1, 1), (4, 3), sc("A", 1, 0)),
    ];
    for ((a, aa), (b, ba), want) in rows {
        let p = rolling_pass(&d, Some(&rs("B", b, ba, 2)), &[rs("A", a, aa, 1)], "B");
        assert_eq!(p.scales, vec![want], "A {a}/{aa} B {b}/{ba}");
    }
    let p = rolling_pass(&d, Some(&rs("B", 4, 3, 2)), &[rs("A", 0, 0, 1)], "B");
    assert!(p.is_empty(), "wait for the last pod");
}

/// Reference §5.7, trace 3: the new pods never become ready; the rollout holds.
#[test]
fn worked_example_trace_3_holds() {
    let d = DeploymentView::rolling(4, Percent(25), Percent(25));
    let p = rolling_pass(&d, None, &[rs("A", 4, 4, 1)], "B");
    assert_eq!((p.create, p.scales), (Some(1), vec![sc("A", 4, 3)]));
    let p = rolling_pass(&d, Some(&rs("B", 1, 0, 2)), &[rs("A", 3, 3, 1)], "B");
    assert_eq!(p.scales, vec![sc("B", 1, 2)]);
    let p = rolling_pass(&d, Some(&rs("B", 2, 0, 2)), &[rs("A", 3, 3, 1)], "B");
    assert!(p.is_empty(), "maxScaledDown = 5 - 3 - 2 = 0: nothing moves");
}

#[test]
fn unhealthy_old_pods_go_first() {
    let d = DeploymentView::rolling(4, Percent(25), Percent(25));
    // Old A has 2 unavailable pods: maxScaledDown = 5 - 3 - 0 = 2 goes to them, and
    // then available 2 + 1 = 3 is not above minAvailable 3: no healthy pod is touched.
    let p = rolling_pass(&d, Some(&rs("B", 1, 1, 2)), &[rs("A", 4, 2, 1)], "B");
    assert_eq!(p.scales, vec![sc("A", 4, 2)]);
}

#[test]
fn an_old_replica_set_with_more_available_than_wanted_is_left_alone() {
    // Found by the fidelity test: A was scaled to 3 but its 4th pod is not gone yet.
    let d = DeploymentView::rolling(4, Int(1), Int(0));
    let p = rolling_pass(&d, Some(&rs("B", 2, 2, 2)), &[rs("A", 3, 4, 1)], "B");
    assert!(p.is_empty(), "{p:?}");
}

#[test]
fn surge_one_unavailable_zero_goes_one_pod_at_a_time() {
    let d = DeploymentView::rolling(3, Int(1), Int(0));
    let steps = predict(&d, None, vec![rs("A", 3, 3, 1)], "B");
    let pairs: Vec<(i32, i32)> = steps.iter().map(|s| (s.new, s.old)).collect();
    assert_eq!(pairs, [(1, 3), (1, 2), (2, 2), (2, 1), (3, 1), (3, 0)]);
}

#[test]
fn recreate_scales_old_to_zero_then_waits_then_creates_full() {
    let d = DeploymentView {
        replicas: 3,
        strategy: Strategy::Recreate,
    };
    let p = recreate_pass(&d, None, &[rs("A", 3, 3, 1)], true);
    assert_eq!(p.scales, vec![sc("A", 3, 0)]);
    let p = recreate_pass(&d, None, &[rs("A", 0, 0, 1)], true);
    assert!(p.waiting_for_old_pods && p.is_empty());
    let p = recreate_pass(&d, None, &[rs("A", 0, 0, 1)], false);
    assert_eq!(p.create, Some(3));
    let steps = predict(&d, None, vec![rs("A", 3, 3, 1)], "B");
    assert_eq!(
        steps.iter().map(|s| (s.new, s.old)).collect::<Vec<_>>(),
        [(0, 0), (3, 0)]
    );
}

/// Reference §5.6: A=3 (older), B=2, both annotated max-replicas=5.
#[test]
fn proportional_scaling_examples() {
    let a = ReplicaSetView {
        max_replicas: Some(5),
        ..rs("A", 3, 3, 1)
    };
    let b = ReplicaSetView {
        max_replicas: Some(5),
        ..rs("B", 2, 0, 2)
    };
    let go = |replicas| {
        let d = DeploymentView::rolling(replicas, Percent(25), Percent(25));
        let mut scales = proportional_scale(&d, Some(&b), std::slice::from_ref(&a), false, 5);
        scales.sort_by(|x, y| x.name.cmp(&y.name));
        scales
            .into_iter()
            .map(|s| (s.name, s.to))
            .collect::<Vec<_>>()
    };
    assert_eq!(go(8), [("A".into(), 6), ("B".into(), 4)]);
    assert_eq!(go(5), [("A".into(), 4), ("B".into(), 3)]);
    assert_eq!(go(2), [("A".into(), 2), ("B".into(), 1)]);
    assert_eq!(go(0), [("A".into(), 0), ("B".into(), 0)]);
}

#[test]
fn proportional_scaling_single_active_and_saturated() {
    let d = DeploymentView::rolling(5, Percent(25), Percent(25));
    let only = rs("B", 3, 3, 2);
    assert_eq!(
        proportional_scale(&d, Some(&only), &[rs("A", 0, 0, 1)], false, 3),
        vec![sc("B", 3, 5)]
    );
    let saturated = rs("B", 5, 5, 2);
    assert_eq!(
        proportional_scale(&d, Some(&saturated), &[rs("A", 2, 2, 1)], true, 7),
        vec![sc("A", 2, 0)]
    );
}
