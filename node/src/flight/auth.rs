//! Who a Flight SQL call comes from: `Authorization: Basic` (checked at the front door, and
//! answered from `Handshake` with a session token), `Authorization: Bearer` with that session
//! token or an API token, or nothing on a server without users.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use base64::Engine;
use ebb_query::front::{Credentials, FrontDoor, Principal, Protocol};
use parking_lot::Mutex;
use tonic::metadata::MetadataMap;
use tonic::Status;

use super::access_status;

/// Session tokens live this long unused.
const IDLE: Duration = Duration::from_secs(3600);
/// Most sessions held at once: past it, the least recently used is dropped (its client
/// authenticates again).
const MAX_SESSIONS: usize = 10_000;
/// Session tokens start with this, so they are not taken for API tokens.
const PREFIX: &str = "ebbflight_";

/// Sessions a `Handshake` opened: token to principal.
#[derive(Debug, Default)]
pub struct Sessions {
    map: Mutex<HashMap<String, (Principal, Instant)>>,
}

impl Sessions {
    /// Opens a session for `who`: its token.
    pub fn open(&self, who: Principal) -> String {
        let mut bytes = [0u8; 24];
        rand::RngCore::fill_bytes(&mut rand::thread_rng(), &mut bytes);
        let token: String = std::iter::once(PREFIX.to_string())
            .chain(bytes.iter().map(|b| format!("{b:02x}")))
            .collect();
        let mut map = self.map.lock();
        let now = Instant::now();
        map.retain(|_, (_, used)| now.duration_since(*used) < IDLE);
        if map.len() >= MAX_SESSIONS {
            if let Some(oldest) =
                map.iter().min_by_key(|(_, (_, used))| *used).map(|(k, _)| k.clone())
            {
                map.remove(&oldest);
            }
        }
        map.insert(token.clone(), (who, now));
        token
    }

    /// The principal of a session token, if it is open.
    fn get(&self, token: &str) -> Option<Principal> {
        let mut map = self.map.lock();
        let now = Instant::now();
        match map.get_mut(token) {
            Some((who, used)) if now.duration_since(*used) < IDLE => {
                *used = now;
                Some(who.clone())
            }
            Some(_) => {
                map.remove(token);
                None
            }
            None => None,
        }
    }
}

/// The credentials in a call's `authorization` header.
fn credentials(metadata: &MetadataMap) -> Result<Credentials, Status> {
    let Some(value) = metadata.get("authorization") else { return Ok(Credentials::None) };
    let value =
        value.to_str().map_err(|_| Status::invalid_argument("authorization is not text"))?;
    if let Some(token) = value.strip_prefix("Bearer ") {
        return Ok(Credentials::Token(token.trim().to_string()));
    }
    if let Some(basic) = value.strip_prefix("Basic ") {
        // Padding optional: Go's Flight SQL client (ADBC) sends none.
        let engine = base64::engine::GeneralPurpose::new(
            &base64::alphabet::STANDARD,
            base64::engine::GeneralPurposeConfig::new()
                .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
        );
        let raw = engine
            .decode(basic.trim())
            .map_err(|_| Status::invalid_argument("authorization: bad base64"))?;
        let text = String::from_utf8(raw)
            .map_err(|_| Status::invalid_argument("authorization: not UTF-8"))?;
        let (user, password) = text
            .split_once(':')
            .ok_or_else(|| Status::invalid_argument("authorization: expected user:password"))?;
        return Ok(Credentials::Password {
            user: user.to_string(),
            password: password.to_string(),
        });
    }
    Err(Status::invalid_argument("authorization: use Basic or Bearer"))
}

/// The principal a call authenticates as.
pub async fn principal(
    door: &FrontDoor,
    sessions: &Sessions,
    metadata: &MetadataMap,
    client: Option<std::net::SocketAddr>,
) -> Result<Principal, Status> {
    let creds = credentials(metadata)?;
    if let Credentials::Token(t) = &creds {
        if t.starts_with(PREFIX) {
            return sessions.get(t).ok_or_else(|| {
                Status::unauthenticated("the session expired or is unknown: authenticate again")
            });
        }
    }
    door.authenticate(creds, Protocol::Flight, client).await.map_err(|e| access_status(&e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(auth: &str) -> MetadataMap {
        let mut m = MetadataMap::new();
        m.insert("authorization", auth.parse().unwrap());
        m
    }

    #[test]
    fn credentials_are_parsed_and_bad_ones_refused() {
        assert_eq!(credentials(&MetadataMap::new()).unwrap(), Credentials::None);
        assert_eq!(credentials(&meta("Bearer abc")).unwrap(), Credentials::Token("abc".into()));
        assert_eq!(
            credentials(&meta("Basic YWxpY2U6cHc6eA==")).unwrap(),
            Credentials::Password { user: "alice".into(), password: "pw:x".into() }
        );
        assert_eq!(
            credentials(&meta("Basic YWxpY2U6cHc6eA")).unwrap(),
            Credentials::Password { user: "alice".into(), password: "pw:x".into() }
        );
        for bad in ["Basic !!!", "Basic YWxpY2U=", "Digest x"] {
            assert!(credentials(&meta(bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn sessions_open_and_expire() {
        let s = Sessions::default();
        let who = Principal::trusted(Protocol::Flight, None);
        let t = s.open(who.clone());
        assert!(t.starts_with(PREFIX) && t.len() > 40);
        assert_eq!(s.get(&t), Some(who));
        assert_eq!(s.get("ebbflight_unknown"), None);
        s.map.lock().get_mut(&t).unwrap().1 = Instant::now() - IDLE;
        assert_eq!(s.get(&t), None);
    }
}
