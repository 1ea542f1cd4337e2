//! The kernel's walls around a tool, with Landlock (Linux 5.13+; TCP rules 6.7+): the
//! ruleset is made in berth, before the fork (making it allocates and opens paths), and
//! the child only enters it ([`Walls::enter`]: two system calls, safe between fork and
//! exec). Where the kernel has no Landlock, the tool runs without these walls and berth
//! says so once ([`support`]).

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use landlock::{
    Access, AccessFs, AccessNet, PathBeneath, PathFd, RestrictionStatus, Ruleset, RulesetAttr,
    RulesetCreated, RulesetCreatedAttr, RulesetError, RulesetStatus, Scope, ABI,
};

/// The Landlock version berth asks for (filesystem rights through ABI 5, TCP rules from
/// ABI 4, scopes from ABI 6); an older kernel enforces what it knows.
const TARGET: ABI = ABI::V7;

/// What any tool reads and runs: the system's programs and libraries, and the public parts
/// of `/etc` a Go program or git asks for (certificates, name resolution, time zones).
/// Never all of `/etc`: `/etc/berth/credentials` is there.
const SYSTEM_READ: &[&str] = &[
    "/usr",
    "/lib",
    "/lib64",
    "/bin",
    "/sbin",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/pki",
    "/etc/hosts",
    "/etc/resolv.conf",
    "/etc/nsswitch.conf",
    "/etc/localtime",
    "/etc/gitconfig",
    "/dev/urandom",
];

/// What a tool may touch: read (and run) `read`, and change only `write`; connect over
/// TCP only when `network`.
#[derive(Debug, Clone, Default)]
pub struct Reach {
    /// Folders and files it reads and runs (the checkout, its own binaries).
    pub read: Vec<PathBuf>,
    /// Folders it may write (its private folder).
    pub write: Vec<PathBuf>,
    /// It may connect anywhere over TCP (remote bases, chart downloads).
    pub network: bool,
}

impl Reach {
    /// Lets the tool run `program` (a path): its folder is read, so that a binary outside
    /// `/usr` runs, with what lies beside it.
    pub fn run(&mut self, program: &Path) {
        if let Some(dir) = program
            .canonicalize()
            .ok()
            .as_deref()
            .and_then(Path::parent)
        {
            self.read.push(dir.to_path_buf());
        }
    }
}

/// A ruleset ready for a child to enter, or nothing where the kernel has no Landlock.
pub struct Walls(Option<OwnedFd>);

impl Walls {
    /// The ruleset for `reach`.
    ///
    /// # Errors
    /// The kernel refused the ruleset (not: it has no Landlock, which gives no walls).
    pub fn new(reach: &Reach) -> Result<Self, RulesetError> {
        let created = ruleset(reach)?;
        Ok(Walls(created.into()))
    }

    /// Enters the ruleset: to be called in the child, between fork and exec (no
    /// allocation, two system calls); nothing where there is none.
    ///
    /// # Errors
    /// The kernel's error.
    pub fn enter(&self) -> std::io::Result<()> {
        let Some(fd) = &self.0 else {
            return Ok(());
        };
        // SAFETY: prctl(2) and landlock_restrict_self(2) on a ruleset descriptor this
        // value owns; both only change the calling process, and allocate nothing.
        unsafe {
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                || libc::syscall(libc::SYS_landlock_restrict_self, fd.as_raw_fd(), 0u32) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(())
    }
}

fn ruleset(reach: &Reach) -> Result<RulesetCreated, RulesetError> {
    let mut rules = Ruleset::default().handle_access(AccessFs::from_all(TARGET))?;
    if !reach.network {
        // Handled, and no port allowed: every TCP connect and bind is refused.
        rules = rules.handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp)?;
    }
    let mut created = rules
        .scope(Scope::AbstractUnixSocket | Scope::Signal)?
        .create()?;
    let read = AccessFs::from_read(TARGET);
    let paths = SYSTEM_READ.iter().map(Path::new).map(|p| (p, read));
    let paths = paths.chain(reach.read.iter().map(|p| (p.as_path(), read)));
    let write = AccessFs::from_all(TARGET);
    let paths = paths.chain(reach.write.iter().map(|p| (p.as_path(), write)));
    let null = AccessFs::ReadFile | AccessFs::WriteFile;
    for (path, access) in paths.chain([(Path::new("/dev/null"), null)]) {
        // A path this system lacks (`/lib64`, `/etc/pki`) is passed over.
        let Ok(fd) = PathFd::new(path) else {
            continue;
        };
        // Rights that only folders have are refused on a file.
        let access = if path.is_dir() {
            access
        } else {
            access & AccessFs::from_file(TARGET)
        };
        created = created.add_rule(PathBeneath::new(fd, access))?;
    }
    Ok(created)
}

/// How much of the walls this kernel enforces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Support {
    /// Every rule berth asks for.
    Full,
    /// The filesystem rules, not all of them, or not the TCP ones (a kernel before 6.7).
    Partial,
    /// None: the kernel has no Landlock (or it is turned off).
    None,
}

/// What this kernel enforces, found once by entering a ruleset on a thread of its own
/// (Landlock binds a thread, and the thread ends).
pub fn support() -> Support {
    static SUPPORT: OnceLock<Support> = OnceLock::new();
    *SUPPORT.get_or_init(|| {
        let probe = || -> Result<RestrictionStatus, RulesetError> {
            ruleset(&Reach::default())?.restrict_self()
        };
        match std::thread::spawn(probe).join() {
            Ok(Ok(status)) => match status.ruleset {
                RulesetStatus::FullyEnforced => Support::Full,
                RulesetStatus::PartiallyEnforced => Support::Partial,
                RulesetStatus::NotEnforced => Support::None,
            },
            _ => Support::None,
        }
    })
}

/// What to say at start when the kernel does not enforce every wall, for the log.
pub fn warning() -> Option<&'static str> {
    match support() {
        Support::Full => None,
        Support::Partial => Some("this kernel enforces Landlock only in part (TCP rules need Linux 6.7): kustomize and helm may connect out; see docs/security.md"),
        Support::None => Some("this kernel has no Landlock: kustomize and helm run without the kernel's walls (they could read any file berth's user can, and connect anywhere); see docs/security.md"),
    }
}
