//! [`WriteStall`]: a connection whose client stops reading is dropped. hyper holds one
//! frame of an answer and its write buffer for a client that reads nothing, until the
//! connection's lifetime ends; with this, a write that makes no progress for
//! [`WRITE_STALL`] fails, and the connection and what it holds go at once.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// How long a write may wait for the client to read.
pub const WRITE_STALL: Duration = Duration::from_secs(10);

/// A stream whose writes fail once one has waited [`WRITE_STALL`] for the client.
pub struct WriteStall<S> {
    inner: S,
    /// How long a write may wait.
    stall: Duration,
    /// Set while a write waits.
    waiting: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<S> WriteStall<S> {
    /// `inner`, each write waiting for the client no longer than `stall`.
    pub fn new(inner: S, stall: Duration) -> Self {
        WriteStall {
            inner,
            stall,
            waiting: None,
        }
    }

    /// `ready` as it is, the wait over; `Pending` until the stall has passed since the
    /// first `Pending`, then an error.
    fn bounded<T>(
        &mut self,
        cx: &mut Context<'_>,
        ready: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        if ready.is_ready() {
            self.waiting = None;
            return ready;
        }
        let waiting = self
            .waiting
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(self.stall)));
        match waiting.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client read nothing for the write stall",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for WriteStall<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for WriteStall<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let ready = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.bounded(cx, ready)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let ready = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.bounded(cx, ready)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let ready = Pin::new(&mut self.inner).poll_flush(cx);
        self.bounded(cx, ready)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let ready = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.bounded(cx, ready)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    const STALL: Duration = Duration::from_millis(300);

    #[tokio::test]
    async fn a_client_that_reads_nothing_fails_the_write_after_the_stall() {
        let (ours, _theirs) = tokio::io::duplex(1024);
        let mut stream = WriteStall::new(ours, STALL);
        let started = tokio::time::Instant::now();
        let written = stream.write_all(&vec![0u8; 1 << 20]).await;
        let e = written.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert!(started.elapsed() >= STALL);
    }

    #[tokio::test]
    async fn a_client_that_reads_keeps_the_connection() {
        use tokio::io::AsyncReadExt;
        let (ours, mut theirs) = tokio::io::duplex(1024);
        let reader = tokio::spawn(async move {
            let mut all = Vec::new();
            let mut chunk = [0u8; 512];
            while let Ok(n) = theirs.read(&mut chunk).await {
                if n == 0 {
                    break;
                }
                all.extend_from_slice(&chunk[..n]);
                // Slowly, but never for the whole stall.
                tokio::time::sleep(STALL / 3).await;
            }
            all.len()
        });
        let mut stream = WriteStall::new(ours, STALL);
        stream.write_all(&vec![0u8; 8 << 10]).await.unwrap();
        stream.shutdown().await.unwrap();
        drop(stream);
        assert_eq!(reader.await.unwrap(), 8 << 10);
    }
}
