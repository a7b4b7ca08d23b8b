//! The accept loop of the HTTP and gRPC ports: accepts TCP connections, runs each TLS
//! handshake in its own task (a slow or silent client cannot stall the others), and hands
//! finished connections to the server. A connection holds a permit of the port's limit while
//! it is open; beyond the limit new connections wait in the kernel's backlog.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio_rustls::server::TlsStream;

use super::TlsSource;

/// How long a client has to finish the TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// An accepted connection: plain TCP or TLS over it.
pub struct Conn {
    io: Io,
    remote: SocketAddr,
    local: SocketAddr,
    _permit: OwnedSemaphorePermit,
}

enum Io {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl Conn {
    /// The client's address.
    pub fn remote_addr(&self) -> SocketAddr {
        self.remote
    }
}

macro_rules! delegate {
    ($self:ident, $method:ident($($arg:expr),*)) => {
        match &mut $self.get_mut().io {
            Io::Plain(s) => Pin::new(s).$method($($arg),*),
            Io::Tls(s) => Pin::new(s.as_mut()).$method($($arg),*),
        }
    };
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        delegate!(self, poll_read(cx, buf))
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        delegate!(self, poll_write(cx, buf))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        delegate!(self, poll_flush(cx))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        delegate!(self, poll_shutdown(cx))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        delegate!(self, poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        match &self.io {
            Io::Plain(s) => s.is_write_vectored(),
            Io::Tls(s) => s.is_write_vectored(),
        }
    }
}

impl tonic::transport::server::Connected for Conn {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        tonic::transport::server::TcpConnectInfo {
            local_addr: Some(self.local),
            remote_addr: Some(self.remote),
        }
    }
}

/// Connections of one port, ready to serve.
pub struct Incoming {
    rx: mpsc::Receiver<Conn>,
    local: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Incoming {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Accepts on `listener` (TLS with `tls` when given), at most `limit` connections open at once.
pub fn incoming(
    listener: TcpListener,
    tls: Option<Arc<TlsSource>>,
    limit: usize,
) -> io::Result<Incoming> {
    let local = listener.local_addr()?;
    let (tx, rx) = mpsc::channel(64);
    let task = tokio::spawn(accept_loop(listener, tls, Arc::new(Semaphore::new(limit.max(1))), tx));
    Ok(Incoming { rx, local, task })
}

async fn accept_loop(
    listener: TcpListener,
    tls: Option<Arc<TlsSource>>,
    limit: Arc<Semaphore>,
    tx: mpsc::Sender<Conn>,
) {
    let local = match listener.local_addr() {
        Ok(a) => a,
        Err(_) => return,
    };
    loop {
        let Ok(permit) = limit.clone().acquire_owned().await else { return };
        let (tcp, remote) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                // Out of file descriptors and the like: wait instead of spinning.
                tracing::warn!(error = %e, addr = %local, "accepting a connection failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        let tx = tx.clone();
        match &tls {
            None => {
                let conn = Conn { io: Io::Plain(tcp), remote, local, _permit: permit };
                if tx.send(conn).await.is_err() {
                    return;
                }
            }
            Some(source) => {
                let acceptor = source.acceptor();
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                        Ok(Ok(s)) => {
                            let io = Io::Tls(Box::new(s));
                            let _ = tx.send(Conn { io, remote, local, _permit: permit }).await;
                        }
                        Ok(Err(e)) => {
                            tracing::debug!(%remote, addr = %local, error = %e, "TLS handshake failed")
                        }
                        Err(_) => {
                            tracing::debug!(%remote, addr = %local, "TLS handshake timed out")
                        }
                    }
                });
            }
        }
    }
}

impl axum::serve::Listener for Incoming {
    type Io = Conn;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Conn, SocketAddr) {
        match self.rx.recv().await {
            Some(c) => {
                let addr = c.remote;
                (c, addr)
            }
            // The accept loop ended (only when the server is dropped): accept nothing more.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.local)
    }
}

impl futures::Stream for Incoming {
    type Item = io::Result<Conn>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.get_mut().rx.poll_recv(cx).map(|c| c.map(Ok))
    }
}
