//! Who a Flight SQL call comes from: `Authorization: Basic` (checked at the front door, and
//! answered from `Handshake` with a session token), `Authorization: Bearer` with that session
//! token or an API token, or nothing on a server without users.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use base64::Engine;
use ebb_query::access::AccessState;
use ebb_query::front::{Credentials, FrontDoor, Principal, Protocol};
use parking_lot::Mutex;
use tonic::metadata::MetadataMap;
use tonic::Status;

use super::access_status;

/// Session tokens live this long unused.
const IDLE: Duration = Duration::from_secs(3600);
/// ... and this long at most, used or not.
const LIFETIME: Duration = Duration::from_secs(24 * 3600);
/// Most sessions one user holds at once: past it, their least recently used is dropped.
const SESSIONS_PER_USER: usize = 64;
/// Most sessions held at once, over all users.
const MAX_SESSIONS: usize = 10_000;
/// Session tokens start with this, so they are not taken for API tokens.
const PREFIX: &str = "ebbflight_";

/// What a session was opened with, checked again at every use: a session ends when its
/// user's password changes, its API token is revoked, its user is dropped, or (opened on a
/// server without users) once users exist.
#[derive(Clone)]
enum Proof {
    /// No users existed.
    Trusted,
    /// The user's password, as its hash stood.
    Password(String),
    /// An API token.
    Token(String),
}

impl Proof {
    fn holds(&self, who: &Principal, state: &AccessState) -> bool {
        let user = who.user.as_deref().unwrap_or("");
        match self {
            Proof::Trusted => !state.has_users(),
            Proof::Password(hash) => state
                .user(user)
                .and_then(|u| u.password.as_ref())
                .is_some_and(|p| p.argon2 == *hash),
            Proof::Token(secret) => state.token_user(secret) == Some(user),
        }
    }
}

struct Session {
    who: Principal,
    proof: Proof,
    opened: Instant,
    used: Instant,
}

/// Sessions a `Handshake` opened, by token.
#[derive(Default)]
pub struct Sessions {
    map: Mutex<HashMap<String, Session>>,
}

impl Sessions {
    /// Opens a session for `who`: its token.
    fn open(&self, who: Principal, proof: Proof) -> String {
        let mut bytes = [0u8; 24];
        rand::RngCore::fill_bytes(&mut rand::thread_rng(), &mut bytes);
        let token: String = std::iter::once(PREFIX.to_string())
            .chain(bytes.iter().map(|b| format!("{b:02x}")))
            .collect();
        let mut map = self.map.lock();
        let now = Instant::now();
        map.retain(|_, s| {
            now.duration_since(s.used) < IDLE && now.duration_since(s.opened) < LIFETIME
        });
        let evict = |map: &mut HashMap<String, Session>, mine: bool| {
            let oldest = map
                .iter()
                .filter(|(_, s)| !mine || s.who.user == who.user)
                .min_by_key(|(_, s)| s.used)
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                map.remove(&k);
            }
        };
        if map.values().filter(|s| s.who.user == who.user).count() >= SESSIONS_PER_USER {
            evict(&mut map, true);
        }
        if map.len() >= MAX_SESSIONS {
            evict(&mut map, false);
        }
        map.insert(token.clone(), Session { who, proof, opened: now, used: now });
        token
    }

    /// The principal of a session token, if it is open and what opened it still holds.
    fn get(&self, token: &str, state: &AccessState) -> Option<Principal> {
        let mut map = self.map.lock();
        let now = Instant::now();
        let live = map.get(token).is_some_and(|s| {
            now.duration_since(s.used) < IDLE
                && now.duration_since(s.opened) < LIFETIME
                && s.proof.holds(&s.who, state)
        });
        if !live {
            map.remove(token);
            return None;
        }
        let s = map.get_mut(token)?;
        s.used = now;
        Some(s.who.clone())
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

/// The principal a call authenticates as: a session token of this server, or credentials
/// checked at the front door.
pub async fn principal(
    door: &FrontDoor,
    sessions: &Sessions,
    metadata: &MetadataMap,
    client: Option<std::net::SocketAddr>,
) -> Result<Principal, Status> {
    let creds = credentials(metadata)?;
    if let Credentials::Token(t) = &creds {
        if t.starts_with(PREFIX) {
            return sessions.get(t, &door.access().access()).ok_or_else(|| {
                Status::unauthenticated("the session ended or is unknown: authenticate again")
            });
        }
    }
    door.authenticate(creds, Protocol::Flight, client).await.map_err(|e| access_status(&e))
}

/// `Handshake`: checks the call's credentials (not a session token) at the front door and
/// opens a session: its token.
pub async fn handshake(
    door: &FrontDoor,
    sessions: &Sessions,
    metadata: &MetadataMap,
    client: Option<std::net::SocketAddr>,
) -> Result<String, Status> {
    let creds = credentials(metadata)?;
    let proof = match &creds {
        Credentials::Token(t) if t.starts_with(PREFIX) => {
            return Err(Status::invalid_argument(
                "a handshake takes a password or an API token, not a session token",
            ))
        }
        Credentials::Token(t) => Proof::Token(t.clone()),
        Credentials::Password { .. } => Proof::Password(String::new()),
        _ => Proof::Trusted,
    };
    let who =
        door.authenticate(creds, Protocol::Flight, client).await.map_err(|e| access_status(&e))?;
    let state = door.access().access();
    let proof = match (proof, &who.user) {
        // The hash the password was checked against, so a change of password ends the session.
        (Proof::Password(_), Some(user)) => Proof::Password(
            state
                .user(user)
                .and_then(|u| u.password.as_ref())
                .map(|p| p.argon2.clone())
                .unwrap_or_default(),
        ),
        (_, None) => Proof::Trusted,
        (p, _) => p,
    };
    Ok(sessions.open(who, proof))
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
    fn sessions_open_expire_and_end_with_their_proof() {
        let s = Sessions::default();
        let state = AccessState::default();
        let who = Principal::trusted(Protocol::Flight, None);
        let t = s.open(who.clone(), Proof::Trusted);
        assert!(t.starts_with(PREFIX) && t.len() > 40);
        assert_eq!(s.get(&t, &state), Some(who.clone()));
        assert_eq!(s.get("ebbflight_unknown", &state), None);
        s.map.lock().get_mut(&t).unwrap().used = Instant::now() - IDLE;
        assert_eq!(s.get(&t, &state), None, "idle too long");
        let t = s.open(who.clone(), Proof::Trusted);
        s.map.lock().get_mut(&t).unwrap().opened = Instant::now() - LIFETIME;
        assert_eq!(s.get(&t, &state), None, "open too long");
        // A session of a user whose token is unknown now (revoked) ends.
        let alice = Principal { user: Some("alice".into()), ..who.clone() };
        let t = s.open(alice, Proof::Token("ebb_gone".into()));
        assert_eq!(s.get(&t, &state), None);
        // One user's sessions are capped; others' are untouched.
        let bob = Principal { user: Some("bob".into()), ..who.clone() };
        let kept = s.open(who.clone(), Proof::Trusted);
        for _ in 0..SESSIONS_PER_USER + 5 {
            s.open(bob.clone(), Proof::Trusted);
        }
        let bobs = s.map.lock().values().filter(|x| x.who.user == bob.user).count();
        assert_eq!(bobs, SESSIONS_PER_USER);
        assert_eq!(s.get(&kept, &state), Some(who));
    }
}
