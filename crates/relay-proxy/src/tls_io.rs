//! Reads under and over TLS in large pieces, for the pinned daemon-to-worker hop and the
//! daemon's HTTPS listener.
//!
//! rustls asks its transport for at most 4 KiB per read and hands out one record (at most
//! 16 KiB) per plaintext read. Left alone, a 2 MiB request body through the worker costs
//! some 500 `recv` calls and 128 body chunks, each chunk a task hand-off and a separate
//! write toward the provider. [`ReadAhead`] reads the socket in up to 64 KiB at a time and
//! serves rustls from memory; [`Gather`] returns every record already read in one plaintext
//! read. Neither waits for data: each only takes what has already arrived, so a stream's
//! events pass as soon as they did before.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Writes go straight to the wrapped stream: these types only change how it is read.
macro_rules! write_through {
    ($wrapper:ident) => {
        impl<T: AsyncWrite + Unpin> AsyncWrite for $wrapper<T> {
            fn poll_write(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                buf: &[u8],
            ) -> Poll<io::Result<usize>> {
                Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
            }

            fn poll_write_vectored(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                bufs: &[io::IoSlice<'_>],
            ) -> Poll<io::Result<usize>> {
                Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
            }

            fn is_write_vectored(&self) -> bool {
                self.inner.is_write_vectored()
            }

            fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                Pin::new(&mut self.get_mut().inner).poll_flush(cx)
            }

            fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
            }
        }
    };
}

/// The most a [`ReadAhead`] reads from its socket at once.
pub const READ_AHEAD_BYTES: usize = 64 * 1024;

/// A transport read ahead into a buffer of its own. The buffer is allocated at the first
/// read and kept with the connection: giving 64 KiB back to the allocator after every read
/// made glibc trim and refault it each time, which cost more than the reads it saved. Only
/// the pages a read has filled are resident, so a connection that carried small messages
/// holds a page or two.
#[derive(Debug)]
pub struct ReadAhead<T> {
    inner: T,
    buf: BytesMut,
}

impl<T> ReadAhead<T> {
    pub fn new(inner: T) -> ReadAhead<T> {
        ReadAhead {
            inner,
            buf: BytesMut::new(),
        }
    }

    /// Bytes read from the transport and not yet handed out.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    pub fn get_ref(&self) -> &T {
        &self.inner
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for ReadAhead<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if out.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        if this.buf.is_empty() {
            if out.remaining() >= READ_AHEAD_BYTES {
                return Pin::new(&mut this.inner).poll_read(cx, out);
            }
            // Empty and not shared, so this takes back the whole allocation.
            this.buf.reserve(READ_AHEAD_BYTES);
            ready!(tokio_util::io::poll_read_buf(
                Pin::new(&mut this.inner),
                cx,
                &mut this.buf
            ))?;
        }
        let n = out.remaining().min(this.buf.len());
        out.put_slice(&this.buf[..n]);
        this.buf.advance(n);
        Poll::Ready(Ok(()))
    }
}

write_through!(ReadAhead);

/// A TLS stream over a [`ReadAhead`], whose reads return every record already received.
#[derive(Debug)]
pub struct Gather<S> {
    inner: S,
    /// An error met after some bytes were gathered, returned by the next read.
    failed: Option<io::Error>,
}

/// How much of what a TLS stream's transport read is still waiting for rustls.
pub trait ReadAheadTls {
    fn read_ahead(&self) -> usize;
}

impl<T> ReadAheadTls for tokio_rustls::server::TlsStream<ReadAhead<T>> {
    fn read_ahead(&self) -> usize {
        self.get_ref().0.buffered()
    }
}

impl<T> ReadAheadTls for tokio_rustls::client::TlsStream<ReadAhead<T>> {
    fn read_ahead(&self) -> usize {
        self.get_ref().0.buffered()
    }
}

impl<S> Gather<S> {
    pub fn new(inner: S) -> Gather<S> {
        Gather {
            inner,
            failed: None,
        }
    }

    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S: AsyncRead + ReadAheadTls + Unpin> AsyncRead for Gather<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(error) = this.failed.take() {
            return Poll::Ready(Err(error));
        }
        let start = out.filled().len();
        ready!(Pin::new(&mut this.inner).poll_read(cx, out))?;
        // More only from bytes already read ahead: asking the socket again would mostly
        // cost a `recv` that finds nothing.
        while out.remaining() > 0 && out.filled().len() > start && this.inner.read_ahead() > 0 {
            let before = out.filled().len();
            match Pin::new(&mut this.inner).poll_read(cx, out) {
                Poll::Ready(Ok(())) if out.filled().len() > before => {}
                Poll::Ready(Ok(())) | Poll::Pending => break,
                Poll::Ready(Err(error)) => {
                    this.failed = Some(error);
                    break;
                }
            }
        }
        Poll::Ready(Ok(()))
    }
}

write_through!(Gather);

#[cfg(test)]
mod tests;
