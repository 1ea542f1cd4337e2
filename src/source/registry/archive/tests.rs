use super::*;
use flate2::write::GzEncoder;
use std::io::Write;

const LIMITS: ArchiveLimits = ArchiveLimits {
    bytes: 1 << 20,
    file: 64 << 10,
    entries: 100,
};

/// An entry: its name, type and body (a link's target).
type Entry<'a> = (&'a str, tar::EntryType, &'a [u8]);

/// A tar+gzip of `(name, type, body)` entries, the names written raw (a builder refuses
/// `..`; an attacker's does not).
fn archive(entries: &[Entry<'_>]) -> Vec<u8> {
    let mut tar = tar::Builder::new(Vec::new());
    for (name, kind, body) in entries {
        let mut header = tar::Header::new_gnu();
        header.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
        header.set_entry_type(*kind);
        header.set_mode(0o644);
        if *kind == tar::EntryType::Symlink {
            header
                .set_link_name(std::str::from_utf8(body).unwrap())
                .unwrap();
            header.set_size(0);
            header.set_cksum();
            tar.append(&header, std::io::empty()).unwrap();
        } else {
            header.set_size(body.len() as u64);
            header.set_cksum();
            tar.append(&header, *body).unwrap();
        }
    }
    gzip(&tar.into_inner().unwrap())
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut gz = GzEncoder::new(Vec::new(), flate2::Compression::best());
    gz.write_all(bytes).unwrap();
    gz.finish().unwrap()
}

fn files_under(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            found.extend(files_under(&path));
        } else {
            found.push(path.display().to_string());
        }
    }
    found.sort();
    found
}

#[test]
fn a_chart_archive_is_written_out_with_its_folders() {
    use tar::EntryType as T;
    let bytes = archive(&[
        ("web/", T::Directory, b""),
        ("web/Chart.yaml", T::Regular, b"name: web\nversion: 1.0.0\n"),
        ("./web/templates/cm.yaml", T::Regular, b"kind: ConfigMap\n"),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let unpacked = unpack(&bytes[..], dir.path(), None, LIMITS).unwrap();
    assert_eq!(unpacked.bytes, 25 + 16);
    let chart = std::fs::read_to_string(dir.path().join("web/Chart.yaml")).unwrap();
    assert_eq!(chart, "name: web\nversion: 1.0.0\n");
    assert!(dir.path().join("web/templates/cm.yaml").is_file());
    // A chart's folder left out: its files at the root.
    let root = tempfile::tempdir().unwrap();
    unpack(&bytes[..], root.path(), Some("web"), LIMITS).unwrap();
    assert!(root.path().join("Chart.yaml").is_file());
    assert!(root.path().join("templates/cm.yaml").is_file());
    let elsewhere = archive(&[("db/Chart.yaml", T::Regular, b"name: db\n")]);
    let e = unpack(
        &elsewhere[..],
        tempfile::tempdir().unwrap().path(),
        Some("web"),
        LIMITS,
    );
    assert!(e
        .unwrap_err()
        .to_string()
        .contains("outside the chart's folder"));
}

#[test]
fn entries_that_reach_outside_are_refused_and_nothing_outside_is_written() {
    use tar::EntryType as T;
    let cases: [(&[Entry<'_>], &str); 5] = [
        (&[("a/../../evil", T::Regular, b"x")], "'..'"),
        (&[("/tmp/evil", T::Regular, b"x")], "absolute"),
        (&[("link", T::Symlink, b"../../etc")], "a link"),
        (&[("hard", T::Link, b"/etc/passwd")], "a link"),
        (&[("fifo", T::Fifo, b"")], "FIFO"),
    ];
    for (entries, why) in cases {
        let parent = tempfile::tempdir().unwrap();
        let into = parent.path().join("tree");
        std::fs::create_dir(&into).unwrap();
        let e = unpack(&archive(entries)[..], &into, None, LIMITS).unwrap_err();
        assert!(matches!(e, ArchiveError::Refused { .. }), "{e}");
        assert!(e.to_string().contains(why), "{e}");
        assert_eq!(files_under(parent.path()), Vec::<String>::new(), "{e}");
    }
}

#[test]
fn a_gzip_bomb_stops_at_the_bound() {
    // One entry of 64 MiB of zeros, max_file_size above it: the inflated stream is what the
    // bound cuts.
    let mut tar = Vec::new();
    let mut header = tar::Header::new_gnu();
    header.set_path("bomb").unwrap();
    header.set_size(64 << 20);
    header.set_cksum();
    tar.extend_from_slice(header.as_bytes());
    tar.resize(512 + (64 << 20), 0);
    let bomb = gzip(&tar);
    assert!(bomb.len() < 128 << 10, "{} bytes compressed", bomb.len());
    let limits = ArchiveLimits {
        file: 1 << 30,
        ..LIMITS
    };
    let dir = tempfile::tempdir().unwrap();
    let e = unpack(&bomb[..], dir.path(), None, limits).unwrap_err();
    assert!(e.to_string().contains("inflating stopped"), "{e}");
    let written = std::fs::metadata(dir.path().join("bomb")).map_or(0, |m| m.len());
    assert!(written <= LIMITS.bytes, "{written} bytes written");
}

#[test]
fn a_file_past_max_file_size_is_refused_by_its_header() {
    let body = vec![b'a'; (LIMITS.file + 1) as usize];
    let bytes = archive(&[("big.yaml", tar::EntryType::Regular, &body)]);
    let dir = tempfile::tempdir().unwrap();
    let e = unpack(&bytes[..], dir.path(), None, LIMITS).unwrap_err();
    assert!(e.to_string().contains("max_file_size"), "{e}");
    assert!(!dir.path().join("big.yaml").exists());
}

#[test]
fn too_many_entries_are_refused() {
    let names: Vec<String> = (0..=LIMITS.entries).map(|i| format!("f{i}")).collect();
    let entries: Vec<_> = names
        .iter()
        .map(|n| (n.as_str(), tar::EntryType::Regular, &b"x"[..]))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let e = unpack(&archive(&entries)[..], dir.path(), None, LIMITS).unwrap_err();
    assert!(e.to_string().contains("max_objects"), "{e}");
}

#[test]
fn what_is_no_archive_is_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let e = unpack(&b"<html>not found</html>"[..], dir.path(), None, LIMITS).unwrap_err();
    assert!(matches!(e, ArchiveError::Corrupt(_)), "{e}");
}
