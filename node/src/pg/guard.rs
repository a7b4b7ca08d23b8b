//! What a PostgreSQL client may make the server read: the connection's bytes pass through a
//! [`Guarded`] stream that follows the protocol's framing and refuses, before it is read, any
//! message longer than the client may send.
//!
//! PostgreSQL caps a startup packet at 10,000 bytes and reads nothing else before
//! authentication; the wire protocol's own limit on a message is 1 GiB, which pgwire accepts at
//! any time, so a client that announced a 1 GiB `Query` before logging in would be buffered
//! whole. Here, until the connection has authenticated, every message is at most
//! [`PRE_AUTH_MESSAGE`] bytes and all of them together at most [`PRE_AUTH_BYTES`]; once it
//! has, a message is at most the server's `max_body_bytes` (the limit of an HTTP request).
//!
//! The stream hands the codec above it one message at a time (it never releases bytes past the
//! end of the message the codec is reading), so a message's length is judged with the limits
//! in force once the messages before it have been processed.
//!
//! It also holds each message but copied data whole, and checks its structure against the
//! protocol before releasing it ([`check_message`]): pgwire's decoders read messages with
//! `Buf::get_*` and `split_to`, which panic on a message shorter than its counts claim, size
//! buffers by counts the client chose, and leave what they did not read of a message to be
//! decoded as the next one (a `Query` whose string ends before the message does). A malformed
//! message closes the connection, as PostgreSQL does with a protocol violation; an `Execute`
//! asking for a negative row count is sent on asking for all rows (0, as PostgreSQL reads it),
//! and one asking for more than [`MAX_EXECUTE_ROWS`] for that many (a portal is resumed by the
//! client's next `Execute`).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Longest message before authentication (PostgreSQL's `MAX_STARTUP_PACKET_LENGTH`).
pub const PRE_AUTH_MESSAGE: usize = 10_000;

/// Most bytes read from a connection before it authenticates.
pub const PRE_AUTH_BYTES: usize = 64 << 10;

/// Most rows an `Execute` message is sent on asking for (a larger count, or none, is
/// sent on as this many; a negative count as zero, all rows).
pub const MAX_EXECUTE_ROWS: i32 = 1 << 16;

/// Bytes read from the socket at a time.
const READ_AHEAD: usize = 8 << 10;

/// Request codes of the untyped messages a client may send before its startup packet.
const SSL_REQUEST: u32 = 80_877_103;
const GSSENC_REQUEST: u32 = 80_877_104;
const CANCEL_REQUEST: u32 = 80_877_102;

/// Why a client's bytes are refused before they are read (the connection is closed, as
/// PostgreSQL closes it on a protocol violation). Every refusal is of bounded size: it names
/// lengths and counts, never the client's bytes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GuardError {
    /// A startup packet (or an untyped request) longer than [`PRE_AUTH_MESSAGE`], or shorter
    /// than its header.
    #[error("a startup packet of {len} bytes (at most {PRE_AUTH_MESSAGE} are read)")]
    StartupLength {
        /// Its length as announced.
        len: usize,
    },
    /// An SSL or GSSAPI encryption request of another length than 8.
    #[error("an encryption request of {len} bytes (it has 8)")]
    EncryptionRequest {
        /// Its length as announced.
        len: usize,
    },
    /// A typed message before authentication longer than [`PRE_AUTH_MESSAGE`] (or of a
    /// negative length).
    #[error("a message of {len} bytes before authentication (at most {PRE_AUTH_MESSAGE})")]
    TooLongBeforeAuth {
        /// Its length as announced.
        len: i32,
    },
    /// A typed message after authentication longer than the server's `max_body_bytes` (or of
    /// a negative length).
    #[error("a message of {len} bytes (at most {limit}: max_body_bytes)")]
    TooLong {
        /// Its length as announced.
        len: i32,
        /// The limit.
        limit: usize,
    },
    /// More than [`PRE_AUTH_BYTES`] bytes before authentication.
    #[error("more than {PRE_AUTH_BYTES} bytes before authentication")]
    TooMuchBeforeAuth,
    /// A message shorter than its counts and lengths claim.
    #[error("a message shorter than its contents")]
    Truncated {
        /// Bytes the next item needs.
        want: usize,
        /// Bytes left in the message.
        have: usize,
    },
    /// A string that runs to the end of the message.
    #[error("a string without its terminating zero byte")]
    NotTerminated,
    /// A negative count of items.
    #[error("a negative count")]
    NegativeCount(i16),
    /// A format code other than 0 and 1.
    #[error("a format code other than text (0) or binary (1)")]
    FormatCode(i16),
    /// A message longer than its contents.
    #[error("a message longer than its contents")]
    TrailingBytes {
        /// Bytes left after the contents.
        extra: usize,
    },
    /// A startup packet shorter than its length and protocol version.
    #[error("a startup packet shorter than its header")]
    StartupHeader {
        /// Its length.
        len: usize,
    },
    /// Startup parameters that run to the end of the packet.
    #[error("startup parameters without the empty name that ends them")]
    UnendedParameters,
    /// Bytes after the empty name that ends the startup parameters.
    #[error("bytes after the startup packet's parameters")]
    AfterStartup {
        /// How many.
        extra: usize,
    },
    /// A Bind with several parameter formats, but not one per parameter.
    #[error("{formats} parameter formats for {params} parameters")]
    FormatsForParameters {
        /// Parameter formats.
        formats: usize,
        /// Parameters.
        params: usize,
    },
    /// A Bind parameter of a negative length other than -1 (NULL).
    #[error("a parameter of length {0}")]
    ParameterLength(i32),
    /// A Describe or Close whose kind byte is neither `S` nor `P`.
    #[error("Describe or Close of something neither a statement nor a portal")]
    DescribeTarget(u8),
    /// A SASLInitialResponse whose data length is not what is left of it.
    #[error("SASL data of {len} bytes in {left} left")]
    SaslLength {
        /// The data length it announces.
        len: i32,
        /// Bytes left in the message.
        left: usize,
    },
    /// A message type a client does not send (or the server does not serve).
    #[error("an unknown message type {:?}", char::from(*.0))]
    UnknownType(u8),
}

impl From<GuardError> for io::Error {
    fn from(e: GuardError) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidData, e)
    }
}

/// A connection's bytes, released one protocol message at a time within the limits.
pub struct Guarded<S> {
    inner: S,
    /// Read from the socket, not yet released.
    buf: BytesMut,
    /// Bytes of the current message still to release (0: the next message's header is due).
    remaining: usize,
    /// True until the startup packet has passed (its messages have no type byte).
    startup: bool,
    /// True once the client has authenticated.
    authenticated: bool,
    /// Bytes read before authentication.
    read_before_auth: usize,
    /// Longest message once authenticated.
    max_message: usize,
    /// The socket ended.
    eof: bool,
    /// Password-family messages (`p`) seen before authentication: the first is SCRAM's
    /// SASLInitialResponse.
    passwords: usize,
}

impl<S> Guarded<S> {
    /// `inner`, whose first `prefix` bytes were read already, limiting messages after
    /// authentication to `max_message` bytes.
    pub fn new(inner: S, prefix: BytesMut, max_message: usize) -> Guarded<S> {
        Guarded {
            read_before_auth: prefix.len(),
            inner,
            buf: prefix,
            remaining: 0,
            startup: true,
            authenticated: false,
            max_message,
            eof: false,
            passwords: 0,
        }
    }

    /// Notes that the client has authenticated: from its next message on, the longer limit.
    pub fn authenticated(&mut self) {
        self.authenticated = true;
    }

    /// The length of the message whose header starts `buf`, once the header is whole, and how
    /// it is checked whole before it is released; an error if the message may not be read.
    fn next_message(&mut self) -> io::Result<Option<(usize, Check)>> {
        if self.startup {
            if self.buf.len() < 8 {
                return Ok(None);
            }
            let len = u32::from_be_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]);
            let code = u32::from_be_bytes([self.buf[4], self.buf[5], self.buf[6], self.buf[7]]);
            let len = len as usize;
            if !(8..=PRE_AUTH_MESSAGE).contains(&len) {
                return Err(GuardError::StartupLength { len }.into());
            }
            match code {
                // pgwire takes these as their 8 bytes whatever the length says, and would
                // decode the rest of a longer one as messages never checked here.
                SSL_REQUEST | GSSENC_REQUEST if len != 8 => {
                    return Err(GuardError::EncryptionRequest { len }.into());
                }
                // pgwire reads a cancel request by its length.
                SSL_REQUEST | GSSENC_REQUEST | CANCEL_REQUEST => {}
                _ => {
                    self.startup = false;
                    return Ok(Some((len, Check::Startup)));
                }
            }
            return Ok(Some((len, Check::Unchecked)));
        }
        if self.buf.len() < 5 {
            return Ok(None);
        }
        let len = i32::from_be_bytes([self.buf[1], self.buf[2], self.buf[3], self.buf[4]]);
        let limit = if self.authenticated { self.max_message } else { PRE_AUTH_MESSAGE };
        match usize::try_from(len) {
            Ok(len) if (4..=limit).contains(&len) => {
                // Copied data is bytes pgwire takes by the message's length.
                let check = if self.buf[0] == b'd' { Check::Unchecked } else { Check::Typed };
                Ok(Some((len + 1, check)))
            }
            _ if !self.authenticated => Err(GuardError::TooLongBeforeAuth { len }.into()),
            _ => Err(GuardError::TooLong { len, limit }.into()),
        }
    }
}

/// Reads a protocol message's body.
struct Body<'a>(&'a [u8]);

impl<'a> Body<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], GuardError> {
        if self.0.len() < n {
            return Err(GuardError::Truncated { want: n, have: self.0.len() });
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn i16(&mut self) -> Result<i16, GuardError> {
        let b = self.take(2)?;
        Ok(i16::from_be_bytes([b[0], b[1]]))
    }

    fn i32(&mut self) -> Result<i32, GuardError> {
        let b = self.take(4)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn cstring(&mut self) -> Result<(), GuardError> {
        match self.0.iter().position(|&c| c == 0) {
            Some(n) => self.take(n + 1).map(|_| ()),
            None => Err(GuardError::NotTerminated),
        }
    }

    /// A count of items (never negative).
    fn count(&mut self) -> Result<usize, GuardError> {
        let n = self.i16()?;
        usize::try_from(n).map_err(|_| GuardError::NegativeCount(n))
    }

    fn format_codes(&mut self) -> Result<usize, GuardError> {
        let n = self.count()?;
        for _ in 0..n {
            match self.i16()? {
                0 | 1 => {}
                code => return Err(GuardError::FormatCode(code)),
            }
        }
        Ok(n)
    }

    fn end(&self) -> Result<(), GuardError> {
        match self.0.len() {
            0 => Ok(()),
            extra => Err(GuardError::TrailingBytes { extra }),
        }
    }
}

/// How a message is checked before it is released.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Check {
    /// Released as it arrives: pgwire takes it by its length (copied data, the 8-byte
    /// encryption requests, a cancel request).
    Unchecked,
    /// The startup packet, whole ([`check_startup`]).
    Startup,
    /// A typed message, whole ([`check_message`]).
    Typed,
}

/// Checks the startup packet `msg` (length, protocol version, parameters) as pgwire reads it:
/// its parameters up to the empty name that ends them, which must end the packet. pgwire stops
/// at the first empty name (or a name without its zero byte) and would decode what follows as
/// messages never checked here.
pub fn check_startup(msg: &[u8]) -> Result<(), GuardError> {
    let params = msg.get(8..).ok_or(GuardError::StartupHeader { len: msg.len() })?;
    let mut b = Body(params);
    loop {
        let name = b.0.iter().position(|&c| c == 0);
        let Some(n) = name else {
            return Err(GuardError::UnendedParameters);
        };
        b.take(n + 1)?;
        if n == 0 {
            break;
        }
        b.cstring()?;
    }
    match b.0.len() {
        0 => Ok(()),
        extra => Err(GuardError::AfterStartup { extra }),
    }
}

/// Checks the structure of the whole typed message `msg` (its type byte, length and body)
/// against the protocol; may rewrite an `Execute`'s row count (see the module documentation).
/// `first_password`: a `p` message is the first before authentication (SASLInitialResponse).
pub fn check_message(msg: &mut [u8], first_password: bool) -> Result<(), GuardError> {
    let tag = msg[0];
    let mut b = Body(&msg[5..]);
    match tag {
        // Parse: name, query, parameter types.
        b'P' => {
            b.cstring()?;
            b.cstring()?;
            // pgwire reads this count unsigned.
            let n = b.take(2)?;
            let n = u16::from_be_bytes([n[0], n[1]]);
            b.take(usize::from(n) * 4)?;
        }
        // Bind: portal, statement, parameter formats, parameters, result formats.
        b'B' => {
            b.cstring()?;
            b.cstring()?;
            let formats = b.format_codes()?;
            let params = b.count()?;
            if formats > 1 && formats != params {
                return Err(GuardError::FormatsForParameters { formats, params });
            }
            for _ in 0..params {
                match b.i32()? {
                    -1 => {}
                    n if n >= 0 => {
                        b.take(n as usize)?;
                    }
                    n => return Err(GuardError::ParameterLength(n)),
                }
            }
            b.format_codes()?;
        }
        // Execute: portal, row count.
        b'E' => {
            b.cstring()?;
            let at = msg.len() - b.0.len();
            let rows = b.i32()?;
            b.end()?;
            let sent = match rows {
                r if r < 0 => 0,
                r => r.min(MAX_EXECUTE_ROWS),
            };
            msg[at..at + 4].copy_from_slice(&sent.to_be_bytes());
            return Ok(());
        }
        // Describe, Close: what ('S' or 'P'), its name.
        b'D' | b'C' => {
            match b.take(1)?[0] {
                b'S' | b'P' => {}
                what => return Err(GuardError::DescribeTarget(what)),
            }
            b.cstring()?;
        }
        // Flush, Sync, CopyDone, Terminate.
        b'H' | b'S' | b'c' | b'X' => {}
        // CopyFail.
        b'f' => b.cstring()?,
        // SASLInitialResponse: mechanism, then its data (or -1).
        b'p' if first_password => {
            b.cstring()?;
            match b.i32()? {
                -1 => {}
                n if n >= 0 && n as usize == b.0.len() => {
                    b.take(n as usize)?;
                }
                len => return Err(GuardError::SaslLength { len, left: b.0.len() }),
            }
        }
        // A later password message (SCRAM's SASLResponse) is its bytes.
        b'p' => return Ok(()),
        // Query: one string, ending the message. pgwire reads up to the first zero byte and
        // leaves the rest, or all of a string without one, to be read as the next message.
        b'Q' => b.cstring()?,
        other => return Err(GuardError::UnknownType(other)),
    }
    b.end()
}

impl<S: AsyncRead + Unpin> Guarded<S> {
    /// Reads more of the socket into `buf`.
    fn fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if !self.authenticated && self.read_before_auth >= PRE_AUTH_BYTES {
            return Poll::Ready(Err(GuardError::TooMuchBeforeAuth.into()));
        }
        let mut chunk = [0u8; READ_AHEAD];
        let mut rb = ReadBuf::new(&mut chunk);
        match Pin::new(&mut self.inner).poll_read(cx, &mut rb) {
            Poll::Ready(Ok(())) => {
                let n = rb.filled().len();
                if n == 0 {
                    self.eof = true;
                }
                if !self.authenticated {
                    self.read_before_auth += n;
                }
                self.buf.extend_from_slice(rb.filled());
                Poll::Ready(Ok(()))
            }
            other => other,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Guarded<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if this.remaining == 0 {
                match this.next_message()? {
                    // A message checked whole: all of it first.
                    Some((len, check))
                        if check != Check::Unchecked && this.buf.len() < len && !this.eof =>
                    {
                        std::task::ready!(this.fill(cx))?;
                        continue;
                    }
                    Some((len, check)) => {
                        let whole = this.buf.len() >= len;
                        let checked = match check {
                            Check::Typed if whole => {
                                let first_password = !this.authenticated && this.passwords == 0;
                                if this.buf[0] == b'p' && !this.authenticated {
                                    this.passwords += 1;
                                }
                                check_message(&mut this.buf[..len], first_password)
                            }
                            Check::Startup if whole => check_startup(&this.buf[..len]),
                            _ => Ok(()),
                        };
                        checked?;
                        this.remaining = len;
                    }
                    None if this.eof => {
                        // A partial header at the end: the codec sees it and the end.
                        let n = this.buf.len().min(out.remaining());
                        out.put_slice(&this.buf[..n]);
                        this.buf.advance(n);
                        return Poll::Ready(Ok(()));
                    }
                    None => {
                        std::task::ready!(this.fill(cx))?;
                        continue;
                    }
                }
            }
            if this.buf.is_empty() {
                if this.eof {
                    return Poll::Ready(Ok(()));
                }
                std::task::ready!(this.fill(cx))?;
                continue;
            }
            let n = this.remaining.min(this.buf.len()).min(out.remaining());
            out.put_slice(&this.buf[..n]);
            this.buf.advance(n);
            this.remaining -= n;
            return Poll::Ready(Ok(()));
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Guarded<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    fn startup() -> Vec<u8> {
        let body = b"\x00\x03\x00\x00user\x00ebb\x00\x00";
        let mut m = ((body.len() + 4) as u32).to_be_bytes().to_vec();
        m.extend_from_slice(body);
        m
    }

    /// A startup packet of `params` (after the protocol version).
    fn startup_of(params: &[u8]) -> Vec<u8> {
        let mut m = ((params.len() + 8) as u32).to_be_bytes().to_vec();
        m.extend_from_slice(b"\x00\x03\x00\x00");
        m.extend_from_slice(params);
        m
    }

    #[test]
    fn a_startup_packet_ends_with_its_parameters() {
        assert!(check_startup(&startup()).is_ok());
        assert!(check_startup(&startup_of(b"\x00")).is_ok(), "no parameters");
        assert!(check_startup(&startup_of(b"user\x00\x00\x00")).is_ok(), "an empty value");
        // pgwire stops at the first empty name: what follows would be read as messages (the
        // fuzzer's Bind of a 926 MB parameter in a 139-byte message).
        let early = startup_of(b"user\x00ebb\x00\x00B\x00\x00\x00\x09\x00\x00\x00\x00\x00");
        assert!(check_startup(&early).is_err());
        assert!(check_startup(&startup_of(b"user\x00ebb\x00")).is_err(), "no empty name");
        assert!(check_startup(&startup_of(b"user\x00ebb")).is_err(), "a value without its zero");
        assert!(check_startup(&startup_of(b"")).is_err());
    }

    #[tokio::test]
    async fn a_startup_packet_with_bytes_after_its_parameters_closes_the_connection() {
        let mut wire = startup_of(b"user\x00ebb\x00\x00Q\x00\x00\x00\x05\x00");
        wire.extend(typed(b'S', b""));
        let mut g = Guarded::new(&wire[..], BytesMut::new(), 1 << 20);
        let mut out = Vec::new();
        let err = g.read_to_end(&mut out).await.expect_err("refused");
        assert!(err.to_string().contains("after the startup packet"), "{err}");
        assert!(out.is_empty(), "nothing released: {out:?}");
    }

    fn typed(tag: u8, body: &[u8]) -> Vec<u8> {
        let mut m = vec![tag];
        m.extend_from_slice(&((body.len() + 4) as i32).to_be_bytes());
        m.extend_from_slice(body);
        m
    }

    async fn read_all(g: &mut Guarded<&[u8]>) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        g.read_to_end(&mut out).await?;
        Ok(out)
    }

    #[tokio::test]
    async fn passes_messages_within_the_limits_and_refuses_longer_ones() {
        let mut wire = startup();
        let mut sasl = b"SCRAM-SHA-256\0".to_vec();
        sasl.extend_from_slice(&11i32.to_be_bytes());
        sasl.extend_from_slice(b"n,,n=,r=abc");
        wire.extend(typed(b'p', &sasl));
        wire.extend(typed(b'p', b"c=biws,r=abc,p=xyz"));
        let mut g = Guarded::new(&wire[..], BytesMut::new(), 1 << 20);
        assert_eq!(read_all(&mut g).await.expect("small messages"), wire);
        // A SASL response whose data length overruns its message is refused whole.
        let mut bad = b"SCRAM-SHA-256\0".to_vec();
        bad.extend_from_slice(&0x7fff_ffffi32.to_be_bytes());
        bad.extend_from_slice(b"n,,n=,r=abc");
        let mut wire = startup();
        wire.extend(typed(b'p', &bad));
        let e = read_all(&mut Guarded::new(&wire[..], BytesMut::new(), 1 << 20)).await;
        assert!(e.expect_err("refused").to_string().contains("SASL data"));

        // A Query announcing ~1 GiB before authentication: refused on its header.
        let mut wire = startup();
        wire.extend_from_slice(&[b'Q', 0x3f, 0xff, 0xff, 0xfd, b'S']);
        let mut g = Guarded::new(&wire[..], BytesMut::new(), 1 << 20);
        let e = read_all(&mut g).await.expect_err("refused");
        assert!(e.to_string().contains("before authentication"), "{e}");

        // After authentication the longer limit applies, and still bounds a message.
        let mut query = vec![b'x'; 50_000];
        query.push(0);
        let big = typed(b'Q', &query);
        let mut g = Guarded::new(&big[..], BytesMut::new(), 1 << 20);
        g.startup = false;
        g.authenticated();
        assert_eq!(read_all(&mut g).await.expect("within max_body_bytes").len(), big.len());
        let mut g = Guarded::new(&big[..], BytesMut::new(), 10_000);
        g.startup = false;
        g.authenticated();
        assert!(read_all(&mut g).await.is_err(), "past max_body_bytes");

        // A negative length, a startup packet too long, and a stream of small messages past
        // the budget before authentication.
        let mut g = Guarded::new(&[b'Q', 0xff, 0xff, 0xff, 0xff][..], BytesMut::new(), 1 << 20);
        g.startup = false;
        assert!(read_all(&mut g).await.is_err());
        let long = [0u8, 1, 0, 0, 0, 3, 0, 0];
        assert!(read_all(&mut Guarded::new(&long[..], BytesMut::new(), 1 << 20)).await.is_err());
        let mut wire = startup();
        for _ in 0..PRE_AUTH_BYTES / 5 + 1 {
            wire.extend(typed(b'H', b""));
        }
        let e = read_all(&mut Guarded::new(&wire[..], BytesMut::new(), 1 << 20))
            .await
            .expect_err("budget");
        assert!(e.to_string().contains("before authentication"), "{e}");
    }

    #[test]
    fn extended_protocol_messages_are_checked_against_their_counts() {
        let ok = |tag: u8, body: &[u8]| check_message(&mut typed(tag, body), false);
        assert!(ok(b'P', b"\0SELECT $1\0\x00\x01\x00\x00\x00\x17").is_ok());
        assert!(ok(b'P', b"\0SELECT 1\0\xff\xff").is_err(), "65535 types, none given");
        assert!(ok(b'P', b"\0SELECT 1").is_err(), "an unterminated query");
        // Bind: no formats, one parameter of 1 byte, no result formats.
        assert!(ok(b'B', b"\0\0\x00\x00\x00\x01\x00\x00\x00\x01a\x00\x00").is_ok());
        assert!(ok(b'B', b"\0\0\x00\x00\x00\x01\x7f\xff\xff\xf0a\x00\x00").is_err());
        assert!(ok(b'B', b"\0\0\x00\x00\x00\x01\xff\xff\xff\xfb\x00\x00").is_err(), "length -5");
        assert!(ok(b'B', b"\0\0\x00\x01\x00\x07\x00\x00\x00\x00").is_err(), "format 7");
        assert!(ok(b'B', b"\0\0\x00\x00\xff\xff\x00\x00").is_err(), "a negative count");
        assert!(ok(b'D', b"S\0").is_ok() && ok(b'D', b"X\0").is_err());
        assert!(ok(b'S', b"").is_ok() && ok(b'S', b"x").is_err());
        assert!(ok(b'F', b"").is_err(), "function calls are not served");
        // Query: one string that ends the message; what pgwire would leave after its first
        // zero byte would be read as a message of the client's making, never checked.
        assert!(ok(b'Q', b"SELECT 1\0").is_ok());
        assert!(ok(b'Q', b"SELECT 1").is_err(), "an unterminated query");
        assert!(ok(b'Q', b"SELECT 1\0P\x00\x00\x00\x07\x00\x00\xff").is_err(), "a Parse inside");
        // Execute: a negative count asks for every row, a huge one for at most the cap.
        for (asked, sent) in [(-1i32, 0i32), (5, 5), (i32::MAX, MAX_EXECUTE_ROWS)] {
            let mut body = b"\0".to_vec();
            body.extend_from_slice(&asked.to_be_bytes());
            let mut msg = typed(b'E', &body);
            check_message(&mut msg, false).expect("valid");
            assert_eq!(&msg[6..10], &sent.to_be_bytes());
        }
    }

    /// Found by the fuzzer: an SSLRequest whose length claims more than its 8 bytes carried a
    /// Bind that pgwire decoded unchecked (and panicked on).
    #[tokio::test]
    async fn an_encryption_request_is_its_eight_bytes() {
        for code in [SSL_REQUEST, GSSENC_REQUEST] {
            let mut wire = 75u32.to_be_bytes().to_vec();
            wire.extend_from_slice(&code.to_be_bytes());
            wire.extend(std::iter::repeat_n(b'B', 67));
            let e = read_all(&mut Guarded::new(&wire[..], BytesMut::new(), 1 << 20)).await;
            assert!(e.expect_err("refused").to_string().contains("encryption request"));
            let mut ok = 8u32.to_be_bytes().to_vec();
            ok.extend_from_slice(&code.to_be_bytes());
            ok.extend(startup());
            let all = read_all(&mut Guarded::new(&ok[..], BytesMut::new(), 1 << 20)).await;
            assert_eq!(all.expect("an 8-byte request and a startup").len(), ok.len());
        }
    }

    #[tokio::test]
    async fn releases_one_message_at_a_time() {
        let mut wire = startup();
        wire.extend(typed(b'Q', b"SELECT 1\0"));
        let mut g = Guarded::new(&wire[..], BytesMut::new(), 1 << 20);
        let mut buf = vec![0u8; 4096];
        let n = g.read(&mut buf).await.expect("read");
        assert_eq!(n, startup().len(), "the startup packet alone");
        let n = g.read(&mut buf).await.expect("read");
        assert_eq!(&buf[..n], &typed(b'Q', b"SELECT 1\0")[..]);
    }
}
