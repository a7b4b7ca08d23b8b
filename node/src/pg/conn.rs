//! One PostgreSQL connection: pgwire's message loop (`pgwire::tokio::process_socket`) over a
//! socket wrapped in a [`Guarded`] stream, which bounds what the client may make the server
//! read before and after it authenticates (see [`super::guard`]).

use std::io;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use pgwire::api::{ClientInfo, ErrorHandler, PgWireConnectionState, PgWireServerHandlers};
use pgwire::messages::PgWireFrontendMessage;
use pgwire::tokio::server::{negotiate_tls, process_error, process_message};
use tokio::net::TcpStream;
use tokio_util::codec::{Framed, FramedParts};

use super::extended::Prepared;
use super::guard::Guarded;
use super::Handlers;

/// How long a client has to complete its startup and authentication.
pub const STARTUP_WINDOW: Duration = Duration::from_secs(20);

/// Serves `socket` until the client leaves, its startup takes longer than [`STARTUP_WINDOW`],
/// or it sends more than it may.
pub async fn serve(
    socket: TcpStream,
    tls: Option<pgwire::tokio::TlsAcceptor>,
    handlers: Arc<Handlers>,
    max_message: usize,
) -> io::Result<()> {
    let startup = tokio::time::sleep(STARTUP_WINDOW);
    tokio::pin!(startup);
    let negotiated = tokio::select! {
        () = &mut startup => return Ok(()),
        s = negotiate_tls::<Prepared>(socket, tls) => s?,
    };
    // A client that asked for direct TLS on a server without it.
    let Some(framed) = negotiated else { return Ok(()) };
    let old = framed.into_parts();
    let guarded = Guarded::new(old.io, old.read_buf, max_message);
    let mut parts = FramedParts::new(guarded, old.codec);
    parts.write_buf = old.write_buf;
    let mut socket = Framed::from_parts(parts);

    let startup_handler = handlers.startup.clone();
    let (simple, extended) = (handlers.backend.clone(), handlers.backend.clone());
    let copy = handlers.copy_handler();
    let cancel = handlers.cancel.clone();
    let errors = handlers.error_handler();
    loop {
        let authenticating = matches!(
            socket.state(),
            PgWireConnectionState::AwaitingStartup
                | PgWireConnectionState::AuthenticationInProgress
        );
        let msg = if authenticating {
            tokio::select! {
                () = &mut startup => None,
                msg = socket.next() => msg,
            }
        } else {
            socket.get_mut().authenticated();
            socket.next().await
        };
        let msg = match msg {
            Some(Ok(msg)) => msg,
            // Gone, too slow to start, or refused by the guard or the codec.
            Some(Err(e)) => {
                tracing::debug!(error = %e, "PostgreSQL connection refused");
                return Ok(());
            }
            None => return Ok(()),
        };
        // The client is disconnecting: close (some clients wait for the server to).
        if matches!(msg, PgWireFrontendMessage::Terminate(_)) {
            return Ok(());
        }
        let in_extended = match socket.state() {
            PgWireConnectionState::CopyInProgress(extended) => extended,
            _ => msg.is_extended_query(),
        };
        let cancel_request = matches!(msg, PgWireFrontendMessage::CancelRequest(_));
        let processed = process_message(
            msg,
            &mut socket,
            startup_handler.clone(),
            simple.clone(),
            extended.clone(),
            copy.clone(),
            cancel.clone(),
        )
        .await;
        if let Err(mut e) = processed {
            errors.on_error(&socket, &mut e);
            // A FATAL error ends the session, as in PostgreSQL.
            let fatal = e.is_fatal();
            process_error(&mut socket, e, in_extended).await?;
            if fatal {
                return Ok(());
            }
        }
        if cancel_request {
            return Ok(());
        }
    }
}
