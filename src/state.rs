//! The state folder (`[agent] state_dir`) is private: it holds the written-out commit
//! trees (Secret manifests among them), the inventories' local copies and the history.
//! Everything berth creates there is 0700 (folders) or 0600 (files) whatever the umask
//! it was started with: [`restrict_umask`] at start covers what libraries write (git2's
//! cache and checkouts), [`secure_state_dir`] tightens a folder made earlier, and berth's
//! own writes go through [`private_dir`], [`private_file`] and [`write_private`].

use std::fs::{DirBuilder, File, OpenOptions};
use std::io::{BufWriter, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The mode of every folder berth creates.
pub const DIR_MODE: u32 = 0o700;
/// The mode of every file berth creates.
pub const FILE_MODE: u32 = 0o600;

/// Sets the process's umask to 0077, so files that libraries create (git2 honours the
/// umask, not a mode berth could pass) are readable by berth's user only. Call it before
/// any thread starts: the umask is process-wide.
pub fn restrict_umask() {
    // SAFETY: umask(2) cannot fail; it only swaps the process's file-creation mask.
    unsafe { libc::umask(0o077) };
}

/// `state_dir` belongs to another user than the one berth runs as: what this run would
/// write there (git's cache, trees, inventory copies) would be this user's, and the
/// owner — the service — could no longer write it.
#[derive(Debug, thiserror::Error)]
#[error("{dir} belongs to {owner}, not to {me} that runs this command: files it writes there would lock {owner} (the service) out. Run it as that user: sudo -u {as_user} berth {command} (berth status and berth history only read it, as any user)")]
pub struct NotOwner {
    /// The state folder.
    pub dir: String,
    /// Its owner's name (or `uid N`).
    pub owner: String,
    /// The owner as `sudo -u` takes it (a name, or `'#N'`).
    pub as_user: String,
    /// This process's user.
    pub me: String,
    /// The command, as the hint writes it.
    pub command: String,
}

/// Refuses to write into a `state_dir` that another user owns (a one-off `sudo berth
/// sync` on the service's folder would leave root's files there). A folder that does not
/// exist yet is this run's to make.
///
/// # Errors
/// [`NotOwner`], naming the owner and the command to run as it.
pub fn owned_by_me(dir: &Path, command: &str) -> Result<(), NotOwner> {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::metadata(dir) else {
        return Ok(());
    };
    // SAFETY: geteuid(2) cannot fail.
    let me = unsafe { libc::geteuid() };
    if meta.uid() == me {
        return Ok(());
    }
    let owner = user_name(meta.uid());
    Err(NotOwner {
        dir: dir.display().to_string(),
        owner: owner
            .clone()
            .unwrap_or_else(|| format!("uid {}", meta.uid())),
        as_user: owner.unwrap_or_else(|| format!("'#{}'", meta.uid())),
        me: user_name(me).unwrap_or_else(|| format!("uid {me}")),
        command: command.to_string(),
    })
}

/// The name `/etc/passwd` gives `uid` (a service's dynamic user has none there).
fn user_name(uid: u32) -> Option<String> {
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    passwd.lines().find_map(|l| {
        let mut fields = l.split(':');
        let name = fields.next()?;
        (fields.nth(1)?.parse::<u32>().ok()? == uid).then(|| name.to_string())
    })
}

/// Creates `dir` (and its missing parents) 0700, and makes it 0700 if it exists: a state
/// folder made by an older berth or by hand (0755 under the usual umask) is tightened, so
/// nothing below it is reachable by other users.
///
/// # Errors
/// The folder cannot be created or its mode changed.
pub fn secure_state_dir(dir: &Path) -> std::io::Result<()> {
    private_dir(dir)?;
    tighten(dir)
}

/// Makes `dir` and every folder below it 0700 (a folder made 0777 by hand or by an older
/// berth stays no more open than the rest); links are neither followed nor changed.
fn tighten(dir: &Path) -> std::io::Result<()> {
    let mut folders = vec![dir.to_path_buf()];
    while let Some(folder) = folders.pop() {
        let meta = std::fs::symlink_metadata(&folder)?;
        if meta.permissions().mode() & 0o7777 != DIR_MODE {
            std::fs::set_permissions(&folder, std::fs::Permissions::from_mode(DIR_MODE))?;
        }
        for entry in std::fs::read_dir(&folder)? {
            let entry = entry?;
            if entry.file_type()?.is_dir() {
                folders.push(entry.path());
            }
        }
    }
    Ok(())
}

/// Creates `dir` and its missing parents 0700 (an existing folder is left as it is).
///
/// # Errors
/// The folder cannot be created.
pub fn private_dir(dir: &Path) -> std::io::Result<()> {
    DirBuilder::new().recursive(true).mode(DIR_MODE).create(dir)
}

/// A tmpfs (memory, never a disk) for a render's private folders: `$RUNTIME_DIRECTORY`
/// (the unit's `RuntimeDirectory=`, `/run/berth`) when it is one, else `/dev/shm`.
pub fn memory_dir() -> Option<PathBuf> {
    let runtime = std::env::var_os("RUNTIME_DIRECTORY").map(PathBuf::from);
    runtime
        .into_iter()
        .chain([PathBuf::from("/dev/shm")])
        .find(|p| is_tmpfs(p))
}

/// Whether `path` is on a tmpfs (memory).
pub fn is_tmpfs(path: &Path) -> bool {
    rustix::fs::statfs(path).is_ok_and(|fs| fs.f_type == libc::TMPFS_MAGIC)
}

/// A new folder in `base`, 0700, named `<prefix><pid>-<n>`, made by this call and no
/// other: a name that exists already (made by another user in a shared folder such as
/// `/tmp` or `/dev/shm`, to read what berth would put there) is passed over, never used.
///
/// # Errors
/// The folder cannot be created (or 100 names in a row are taken).
pub fn fresh_private_dir(base: &Path, prefix: &str) -> std::io::Result<std::path::PathBuf> {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut taken = None;
    for _ in 0..100 {
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = base.join(format!("{prefix}{}-{n}", std::process::id()));
        match DirBuilder::new().mode(DIR_MODE).create(&path) {
            Ok(()) => return Ok(path),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => taken = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(taken.unwrap_or_else(|| std::io::Error::other("no free name")))
}

/// Removes the folders `<prefix><pid>-<n>` in `base` ([`fresh_private_dir`]'s) of berth
/// processes that no longer run (killed mid-render): only this user's, only folders; once
/// a process for each `base` and `prefix` (what a killed berth left is there at start, and
/// a render's path reads no folder for it again).
pub fn remove_stale_dirs(base: &Path, prefix: &str) {
    use std::os::unix::fs::MetadataExt;
    static SWEPT: std::sync::Mutex<Vec<(PathBuf, String)>> = std::sync::Mutex::new(Vec::new());
    let key = (base.to_path_buf(), prefix.to_string());
    if let Ok(mut swept) = SWEPT.lock() {
        if swept.contains(&key) {
            return;
        }
        swept.push(key);
    }
    let me = rustix::process::geteuid().as_raw();
    for entry in std::fs::read_dir(base).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix(prefix)
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<libc::pid_t>().ok())
            .filter(|pid| *pid > 1)
        else {
            continue;
        };
        let ours = entry
            .path()
            .symlink_metadata()
            .is_ok_and(|m| m.is_dir() && m.uid() == me);
        // SAFETY: signal 0 sends nothing; it asks whether the process exists.
        let gone = unsafe { libc::kill(pid, 0) } != 0
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        if ours && gone {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// Options that create a file 0600 and never follow a link in its place (a link planted
/// at `state_dir/history/<app>.jsonl` would have berth write where it points); the caller
/// adds how it opens it.
pub fn private_file() -> OpenOptions {
    let mut options = OpenOptions::new();
    options.mode(FILE_MODE).custom_flags(libc::O_NOFOLLOW);
    options
}

/// An exclusive `flock` on the file `path` (made 0600 when missing), held until the file
/// is dropped.
///
/// # Errors
/// The file cannot be opened or locked.
pub fn lock(path: &Path) -> std::io::Result<File> {
    let file = private_file()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)?;
    flock(&file, Lock::Exclusive)?;
    Ok(file)
}

/// Opens a state file to read it, never through a link in its place.
///
/// # Errors
/// It cannot be opened (a link: `ELOOP`).
pub fn open_state(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

/// Replaces `path` with `bytes` atomically: written 0600 to a temporary file beside it,
/// flushed to disk, renamed over it, and the rename flushed (a crash leaves the old
/// content or the new, never half of it, nor an empty file).
///
/// # Errors
/// The folder cannot be written.
pub fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_private_with(path, |out| out.write_all(bytes))
}

/// [`write_private`] for content streamed by `write` (a file too large to hold in memory
/// at once): the same temporary file, fsync, rename and fsync of the folder. When
/// `write` fails, `path` is left as it was.
///
/// # Errors
/// `write` fails, or the folder cannot be written.
pub fn write_private_with<F>(path: &Path, write: F) -> std::io::Result<()>
where
    F: FnOnce(&mut dyn Write) -> std::io::Result<()>,
{
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let written = (|| {
        let file = private_file()
            .create(true)
            .truncate(true)
            .write(true)
            .open(&tmp)?;
        let mut out = BufWriter::new(file);
        write(&mut out)?;
        let file = out.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written?;
    // The rename lives in the folder: flush it too. Not every file system lets a folder
    // be synced; the file's content is already safe then.
    let _ = File::open(dir).and_then(|d| d.sync_all());
    Ok(())
}

/// How [`flock`] takes a file's lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lock {
    /// Exclusive, waiting while another process holds it.
    Exclusive,
    /// Exclusive, or nothing when another process holds it.
    TryExclusive,
    /// Shared, or nothing when another process holds it exclusively.
    TryShared,
    /// Gives the lock back.
    Unlock,
}

/// flock(2) on `file` (std's file locks are flock(2) on Linux): whether the lock was taken
/// (`false` only when a `Try` mode found it held). The kernel drops the lock when the
/// process dies, however it dies.
///
/// # Errors
/// The lock failed for another reason than a held lock.
pub fn flock(file: &File, mode: Lock) -> std::io::Result<bool> {
    use std::fs::TryLockError;
    let tried = match mode {
        Lock::Exclusive => return file.lock().map(|()| true),
        Lock::Unlock => return file.unlock().map(|()| true),
        Lock::TryExclusive => file.try_lock(),
        Lock::TryShared => file.try_lock_shared(),
    };
    match tried {
        Ok(()) => Ok(true),
        Err(TryLockError::WouldBlock) => Ok(false),
        Err(TryLockError::Error(e)) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn a_fresh_private_folder_never_takes_one_made_before() {
        let base = tempfile::tempdir().unwrap();
        // Another user's folders under every name this process could try next but one.
        let first = fresh_private_dir(base.path(), "x-").unwrap();
        let n: u64 = first
            .to_string_lossy()
            .rsplit('-')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        let planted: Vec<_> = (n + 1..n + 4)
            .map(|i| base.path().join(format!("x-{}-{i}", std::process::id())))
            .collect();
        for p in &planted {
            std::fs::create_dir(p).unwrap();
        }
        let fresh = fresh_private_dir(base.path(), "x-").unwrap();
        assert!(!planted.contains(&fresh) && fresh != first, "{fresh:?}");
        assert_eq!(mode(&fresh), 0o700);
    }

    #[test]
    fn what_berth_creates_is_private_and_an_open_state_dir_is_tightened() {
        let d = tempfile::tempdir().unwrap();
        let state = d.path().join("state");
        std::fs::create_dir(&state).unwrap();
        std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o755)).unwrap();
        secure_state_dir(&state).unwrap();
        assert_eq!(mode(&state), DIR_MODE);

        private_dir(&state.join("a/b")).unwrap();
        assert_eq!(mode(&state.join("a")), DIR_MODE);
        assert_eq!(mode(&state.join("a/b")), DIR_MODE);

        let file = state.join("a/b/c.json");
        write_private(&file, b"one").unwrap();
        write_private(&file, b"two").unwrap();
        assert_eq!(std::fs::read(&file).unwrap(), b"two");
        assert_eq!(mode(&file), FILE_MODE);
        let left: Vec<_> = std::fs::read_dir(state.join("a/b")).unwrap().collect();
        assert_eq!(left.len(), 1, "no temporary file is left behind");

        let failed = write_private_with(&file, |out| {
            out.write_all(b"half")?;
            Err(std::io::Error::other("cut short"))
        });
        assert!(failed.is_err());
        assert_eq!(
            std::fs::read(&file).unwrap(),
            b"two",
            "a failed write keeps the old"
        );
        let left: Vec<_> = std::fs::read_dir(state.join("a/b")).unwrap().collect();
        assert_eq!(left.len(), 1, "nor a temporary file");
    }

    #[test]
    fn links_in_state_dir_are_not_followed_and_open_folders_are_tightened() {
        let d = tempfile::tempdir().unwrap();
        let state = d.path().join("state");
        let outside = d.path().join("outside.jsonl");
        std::fs::write(&outside, "").unwrap();
        std::fs::create_dir_all(state.join("history")).unwrap();
        std::fs::create_dir_all(state.join("trees/abc")).unwrap();
        for folder in ["history", "trees", "trees/abc"] {
            std::fs::set_permissions(state.join(folder), std::fs::Permissions::from_mode(0o777))
                .unwrap();
        }
        let planted = state.join("history/app.jsonl");
        std::os::unix::fs::symlink(&outside, &planted).unwrap();
        secure_state_dir(&state).unwrap();
        for folder in ["history", "trees", "trees/abc"] {
            assert_eq!(mode(&state.join(folder)), DIR_MODE, "{folder}");
        }
        let appended = private_file().append(true).create(true).open(&planted);
        assert!(
            appended.is_err(),
            "a link in a state file's place is refused"
        );
        assert!(open_state(&planted).is_err());
        assert_eq!(std::fs::read(&outside).unwrap(), b"");
    }

    #[test]
    fn a_folder_of_a_berth_that_no_longer_runs_is_removed() {
        let base = tempfile::tempdir().unwrap();
        // pid_max is at most 2^22: this pid never runs.
        let stale = base.path().join("berth-x-99999999-0");
        let mine = base
            .path()
            .join(format!("berth-x-{}-0", std::process::id()));
        let other = base.path().join("berth-y-99999999-0");
        for dir in [&stale, &mine, &other] {
            std::fs::create_dir_all(dir).unwrap();
        }
        remove_stale_dirs(base.path(), "berth-x-");
        assert!(!stale.exists() && mine.exists() && other.exists());
    }
}
