//! A connection's SQL session, kept in its pgwire session extensions: a session of its own
//! at the server's front door.

/// A connection's session.
pub(super) struct ConnSession(pub ebb_query::front::Session);
