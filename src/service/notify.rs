//! The systemd notify protocol, without a C library: one datagram per message to
//! `$NOTIFY_SOCKET` (a path, or `@name` in the abstract namespace). Outside systemd it
//! does nothing.

use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::time::Duration;

/// Where notifications go.
pub struct Notifier {
    target: Option<(UnixDatagram, SocketAddr)>,
}

impl Notifier {
    /// From `$NOTIFY_SOCKET`; a no-op notifier when it is unset or unusable.
    pub fn from_env() -> Self {
        let target = std::env::var("NOTIFY_SOCKET").ok().and_then(|path| {
            let addr = match path.strip_prefix('@') {
                Some(name) => SocketAddr::from_abstract_name(name.as_bytes()).ok()?,
                None => SocketAddr::from_pathname(&path).ok()?,
            };
            Some((UnixDatagram::unbound().ok()?, addr))
        });
        Notifier { target }
    }

    /// Whether there is a systemd to tell.
    pub fn is_on(&self) -> bool {
        self.target.is_some()
    }

    /// Sends `READY=1`, `STATUS=…`, `WATCHDOG=1`, … (failures are logged, never fatal).
    pub fn send(&self, message: &str) {
        if let Some((socket, addr)) = &self.target {
            if let Err(e) = socket.send_to_addr(message.as_bytes(), addr) {
                tracing::warn!(error = %e, "cannot notify systemd");
            }
        }
    }
}

/// The watchdog period from `$WATCHDOG_USEC` (when `$WATCHDOG_PID` is unset or ours).
pub fn watchdog_period() -> Option<Duration> {
    let pid_ok =
        std::env::var("WATCHDOG_PID").map_or(true, |p| p == std::process::id().to_string());
    let usec: u64 = std::env::var("WATCHDOG_USEC").ok()?.parse().ok()?;
    (pid_ok && usec > 0).then(|| Duration::from_micros(usec))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_reach_the_socket() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify.sock");
        let server = UnixDatagram::bind(&path).unwrap();
        let notifier = Notifier {
            target: Some((
                UnixDatagram::unbound().unwrap(),
                SocketAddr::from_pathname(&path).unwrap(),
            )),
        };
        notifier.send("READY=1");
        let mut buf = [0u8; 64];
        let n = server.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1");
        Notifier { target: None }.send("ignored");
    }
}
