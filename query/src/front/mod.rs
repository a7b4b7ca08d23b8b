//! The front door: the one way every protocol (HTTP, the PostgreSQL wire protocol, the CLI
//! through HTTP) reaches the data, and the one place where clients are authenticated and
//! statements authorized. A [`FrontDoor`] serves [`Shards`]: a single node's [`Database`] (one
//! local shard) or a whole cluster, the same way; protocols turn what a client presented into
//! [`Credentials`], get a [`Principal`] for them, open [`Session`]s as that principal and write
//! line protocol through the door, and never see which of the two it serves.
//!
//! A server without users trusts every client (see [`crate::access`]); once a user exists,
//! every request must authenticate, and every statement is checked against the user's grants
//! before it runs ([`authorize`]).
//!
//! What a client may ask is bounded here too, before the work it would cost: the size and depth
//! of its SQL ([`crate::sql::bounds`], checked before anything is parsed or planned), the memory
//! and time of each statement ([`limits`], [`crate::sql::sized`], [`crate::sql::coop`]), how
//! many statements run at once. A request's statements are planned one at a time
//! ([`Session::statements`]) and run on threads of their own ([`runtime`]), apart from those
//! that serve connections, writes, logins and `/health`.

mod admin;
pub mod authorize;
pub use crate::sql::limits;
mod prepared;
mod principal;
pub mod runtime;
pub mod settings;
pub mod throttle;

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use datafusion::prelude::SessionContext;
use datafusion::sql::parser::Statement as DfStatement;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::access::statement::{is_access_statement, parse_access};
use crate::access::{AccessError, AccessStore, PasswordCheck, Privilege, ScramVerifier};
use crate::db::Database;
use crate::error::{QueryError, Result};
use crate::lp::Precision;
use crate::sql::shard::{LocalShards, Points, Shards, WriteRequest};
use crate::sql::statement::{Class, Classified, Request};
use crate::sql::{QueryOutput, SqlSession};
use crate::statements::{Running, StatementLog};
use crate::WriteSummary;

pub use limits::Limits;
use prepared::PlanCache;
pub use prepared::PreparedQuery;
pub use principal::{Credentials, Principal, Protocol};
use settings::SessionSettings;

/// What a front door serves: the shards, and where users are kept.
#[derive(Clone)]
pub struct Target {
    /// The shards.
    pub shards: Arc<dyn Shards>,
    /// Where users are kept.
    pub access: Arc<dyn AccessStore>,
}

impl Target {
    /// A single node's database (which also keeps its users), as its one shard.
    pub fn local(db: Arc<Database>) -> Target {
        Target { shards: Arc::new(LocalShards::new(db.clone())), access: db }
    }
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target").field("shards", &self.shards).finish_non_exhaustive()
    }
}

/// What stateless requests on one database share: a SQL session and the plans of its queries.
type Shared = (Arc<SqlSession>, Arc<PlanCache>);

/// The front door of one server.
pub struct FrontDoor {
    target: Target,
    access: Arc<dyn AccessStore>,
    passwords: Arc<PasswordCheck>,
    /// Sessions shared by stateless requests, by database: building a DataFusion context
    /// registers every built-in function, which costs more than planning a simple query.
    shared: Mutex<HashMap<(String, Option<String>), Shared>>,
    /// Failed logins, and statements or writes refused for lack of a privilege.
    counters: Counters,
    /// What statements may use.
    limits: Limits,
    /// The memory pool, temporary files and caches every statement draws on.
    runtime: Arc<datafusion::execution::runtime_env::RuntimeEnv>,
    /// Requests running statements (`Limits::max_statements`).
    running: Arc<tokio::sync::Semaphore>,
    /// Failed logins by client address.
    throttle: throttle::Throttle,
    /// Password verifications running (`throttle::HASHING`).
    hashing: Arc<tokio::sync::Semaphore>,
    /// The statements run lately (`system.queries`).
    statements: Arc<StatementLog>,
    /// The threads statements run on.
    queries: runtime::QueryRuntime,
}

/// What the front door counts for `/metrics`.
#[derive(Debug, Default)]
pub struct Counters {
    /// Failed authentications.
    pub auth_failures: AtomicU64,
    /// Requests refused for lack of a privilege.
    pub refused: AtomicU64,
}

impl std::fmt::Debug for FrontDoor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrontDoor").field("target", &self.target).finish_non_exhaustive()
    }
}

/// Most databases whose shared sessions are kept.
const MAX_SHARED_SESSIONS: usize = 256;

fn forbidden(who: &Principal, need: &(Option<String>, Privilege)) -> QueryError {
    let on = match &need.0 {
        Some(db) => format!("database {db:?}"),
        None => "all databases".to_string(),
    };
    let reason = format!("user {:?} lacks {} on {on}", who.user_name(), need.1);
    tracing::warn!(principal = %who, need = %need.1, on = %on, "statement refused");
    QueryError::Access(AccessError::Forbidden(reason))
}

impl FrontDoor {
    /// A front door on `target` with the default [`Limits`].
    pub fn new(target: Target) -> Result<Arc<FrontDoor>> {
        FrontDoor::with_limits(target, Limits::default())
    }

    /// A front door on `target` whose statements stay within `limits`.
    pub fn with_limits(target: Target, limits: Limits) -> Result<Arc<FrontDoor>> {
        let (access, statements) = (target.access.clone(), target.shards.statement_log());
        Ok(Arc::new(FrontDoor {
            target,
            access,
            passwords: Arc::default(),
            shared: Mutex::new(HashMap::new()),
            counters: Counters::default(),
            runtime: limits::server_runtime(&limits)?,
            running: Arc::new(tokio::sync::Semaphore::new(limits.max_statements.max(1))),
            throttle: throttle::Throttle::default(),
            hashing: Arc::new(tokio::sync::Semaphore::new(throttle::HASHING)),
            statements,
            limits,
            queries: runtime::QueryRuntime::new()?,
        }))
    }

    /// A slot among the requests running statements, waited for at most
    /// [`limits::SLOT_WAIT`].
    async fn slot(&self) -> Result<tokio::sync::OwnedSemaphorePermit> {
        let wait = self.running.clone().acquire_owned();
        match tokio::time::timeout(limits::SLOT_WAIT, wait).await {
            Ok(Ok(p)) => Ok(p),
            _ => Err(limits::too_busy(self.limits.max_statements).into()),
        }
    }

    /// Requests holding a statement slot now (at most `Limits::max_statements`).
    pub fn statements_running(&self) -> usize {
        self.limits.max_statements.max(1).saturating_sub(self.running.available_permits())
    }

    /// Counts and logs a failed login of `user` that a protocol checked itself (a SCRAM
    /// exchange).
    pub fn note_auth_failure(
        &self,
        protocol: Protocol,
        user: &str,
        client: Option<SocketAddr>,
        why: &str,
    ) {
        self.counters.auth_failures.fetch_add(1, Ordering::Relaxed);
        self.throttle.failed(user, client.map(|c| c.ip()), std::time::Instant::now());
        tracing::info!(protocol = protocol.name(), client = ?client, why, "authentication failed");
    }

    /// The statements this front door ran lately.
    pub fn statement_log(&self) -> &Arc<StatementLog> {
        &self.statements
    }

    /// Failed logins and refused requests so far.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// What it serves.
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// Where users are kept.
    pub fn access(&self) -> &Arc<dyn AccessStore> {
        &self.access
    }

    /// True once any user exists: then every client must authenticate.
    pub fn auth_required(&self) -> bool {
        self.access.access().has_users()
    }

    /// The principal `credentials` authenticate, for a client of `protocol` at `client`.
    pub async fn authenticate(
        &self,
        credentials: Credentials,
        protocol: Protocol,
        client: Option<SocketAddr>,
    ) -> std::result::Result<Principal, AccessError> {
        let state = self.access.access();
        if !state.has_users() {
            return Ok(Principal::trusted(protocol, client));
        }
        let ip = client.map(|c| c.ip());
        let note = |why: &str| {
            self.counters.auth_failures.fetch_add(1, Ordering::Relaxed);
            tracing::info!(protocol = protocol.name(), client = ?client, why, "authentication failed");
            AccessError::Unauthenticated(why.to_string())
        };
        // Failures count by the user named (a token names none) and the address.
        let named = match &credentials {
            Credentials::Password { user, .. } => user.clone(),
            _ => String::new(),
        };
        if let Some(wait) = self.throttle.blocked(&named, ip, std::time::Instant::now()) {
            return Err(note(&throttle::too_many(wait)));
        }
        // Wrong credentials count; missing ones cost nothing to check.
        let fail = |why: &str| {
            self.throttle.failed(&named, ip, std::time::Instant::now());
            Err(note(why))
        };
        let user = match credentials {
            Credentials::None => {
                return Err(note("this server requires a user name and password or a token"))
            }
            Credentials::Token(secret) => match state.token_user(&secret) {
                Some(u) => u.to_string(),
                None => return fail("unknown token"),
            },
            Credentials::Password { user, password } => {
                let Some(hash) = state.user(&user).and_then(|u| u.password.clone()) else {
                    return fail("wrong user name or password");
                };
                // Argon2 is slow and memory-hard by design: off the async threads, and only a
                // few at a time.
                let Ok(_hashing) = self.hashing.clone().acquire_owned().await else {
                    return Err(note("the server is shutting down"));
                };
                let check = self.passwords.clone();
                let verify = tokio::task::spawn_blocking(move || {
                    let ok = check.verify(&user, &hash, &password);
                    (user, ok)
                });
                match verify.await {
                    Ok((user, true)) => user,
                    _ => return fail("wrong user name or password"),
                }
            }
        };
        self.throttle.succeeded(&named, ip);
        Ok(Principal { user: Some(user), protocol, client })
    }

    /// Why logins of `user` from `client` are refused for now, if they are (too many failed).
    pub fn login_blocked(&self, user: &str, client: Option<std::net::IpAddr>) -> Option<String> {
        self.throttle.blocked(user, client, std::time::Instant::now()).map(throttle::too_many)
    }

    /// The SCRAM-SHA-256 verifier of `user`, for the PostgreSQL wire protocol's login.
    pub fn scram_verifier(&self, user: &str) -> Option<ScramVerifier> {
        self.access.access().user(user)?.password.as_ref().map(|p| p.scram.clone())
    }

    /// Runs a user management statement as `who` (needs `ADMIN` on all databases, but on a
    /// server without users).
    pub async fn run_access(
        &self,
        who: &Principal,
        stmt: crate::access::statement::AccessStatement,
    ) -> Result<QueryOutput> {
        self.authorize(who, None, Privilege::Admin)?;
        admin::run(&self.access, stmt).await
    }

    /// Checks that `who` may do `privilege` on `database` (`None`: on all databases).
    pub fn authorize(
        &self,
        who: &Principal,
        database: Option<&str>,
        privilege: Privilege,
    ) -> Result<()> {
        let state = self.access.access();
        if !state.has_users() {
            return Ok(());
        }
        match &who.user {
            Some(u) if state.allows(u, database, privilege) => Ok(()),
            _ => {
                self.counters.refused.fetch_add(1, Ordering::Relaxed);
                Err(forbidden(who, &(database.map(String::from), privilege)))
            }
        }
    }

    /// A SQL session for `who`: it lists only the databases `who` may read.
    fn new_sql(&self, database: &str, who: &Principal) -> SqlSession {
        let (access, user) = (self.access.clone(), who.user.clone());
        let visible: crate::sql::catalog::Visible = Arc::new(move |name: &str| {
            let state = access.access();
            !state.has_users()
                || user.as_deref().is_some_and(|u| state.allows(u, Some(name), Privilege::Read))
        });
        let t = &self.target;
        SqlSession::on(t.shards.clone(), t.access.clone(), database)
            .limited(self.runtime.clone(), self.limits)
            .visible_to(visible)
            .as_user(who.user.as_deref())
    }

    /// A session of its own for `who` (a connection's, whose `SET`s last as long as it does),
    /// with `database` as its default database.
    pub fn open(self: &Arc<Self>, who: Principal, database: &str) -> Session {
        let sql = Arc::new(self.new_sql(database, &who));
        Session { door: self.clone(), who, sql, settings: Arc::default(), plans: Arc::default() }
    }

    /// A session for one stateless request of `who` that runs `sql`: shared with other
    /// requests of the same user on `database` (what a session lists depends on its user),
    /// unless `sql` changes session settings (`SET`), which gets one of its own.
    pub fn request_session(self: &Arc<Self>, who: Principal, database: &str, sql: &str) -> Session {
        let first = sql.trim_start().get(..4).unwrap_or("");
        if first.eq_ignore_ascii_case("set ") || first.eq_ignore_ascii_case("set\t") {
            return self.open(who, database);
        }
        let mut map = self.shared.lock();
        let key = (database.to_string(), who.user.clone());
        let (sql, plans) = match map.get(&key) {
            Some(s) => s.clone(),
            None => {
                if map.len() >= MAX_SHARED_SESSIONS {
                    map.clear();
                }
                let s = (Arc::new(self.new_sql(database, &who)), Arc::default());
                map.insert(key, s.clone());
                s
            }
        };
        Session { door: self.clone(), who, sql, settings: Arc::default(), plans }
    }

    /// Writes a line-protocol request of `who` to `database`: checked whole first (a bad line
    /// rejects it, nothing written), then applied (on a cluster, each series on its shard's
    /// leader). Needs `WRITE` on the database.
    pub async fn write_lines(
        &self,
        who: &Principal,
        database: &str,
        body: String,
        precision: Precision,
    ) -> Result<WriteSummary> {
        self.authorize(who, Some(database), Privilege::Write)?;
        let write = WriteRequest {
            database: database.to_string(),
            points: Points::Body(body),
            precision,
            now_ns: crate::now_ns(),
        };
        self.target.shards.write(write).await
    }
}

/// A SQL session opened at the front door, as one principal.
#[derive(Clone)]
pub struct Session {
    door: Arc<FrontDoor>,
    who: Principal,
    sql: Arc<SqlSession>,
    settings: Arc<Mutex<SessionSettings>>,
    /// Plans of queries sent as SQL, their literals made parameters (shared like `sql`).
    plans: Arc<PlanCache>,
}

impl Session {
    /// The session's default database.
    pub fn database(&self) -> &str {
        self.sql.database()
    }

    /// Who it runs as.
    pub fn principal(&self) -> &Principal {
        &self.who
    }

    /// The DataFusion context statements plan in (to describe a statement without running it;
    /// [`Session::authorize`] it first).
    pub fn context(&self) -> &SessionContext {
        self.sql.context()
    }

    /// The statements of `sql`, once it is within the server's bounds on SQL
    /// ([`crate::sql::bounds`]); for a protocol that plans a statement without running it.
    pub fn parse(&self, sql: &str) -> Result<std::collections::VecDeque<DfStatement>> {
        crate::sql::bounds::parse(sql, &self.door.limits.sql)
    }

    /// Plans `statement` (which the caller has authorized) without running it, on the statement
    /// threads, for a protocol that describes a statement's columns and parameters.
    pub async fn plan(
        &self,
        statement: DfStatement,
    ) -> Result<datafusion::logical_expr::LogicalPlan> {
        let this = self.clone();
        self.door.queries.run(async move { this.sql.plan(statement).await }).await
    }

    /// The tables of the session's database with their columns, sorted by name, once its
    /// principal may read the database (what `information_schema.columns` lists, as types).
    pub async fn tables(&self) -> Result<Vec<(String, datafusion::arrow::datatypes::SchemaRef)>> {
        self.door.authorize(&self.who, Some(self.database()), Privilege::Read)?;
        // On the statement threads, as a statement listing them would run.
        let this = self.clone();
        self.door.queries.run(async move { this.sql.tables().await }).await
    }

    /// Checks `sql` against the server's bounds on SQL text, for a protocol that splits a
    /// request's statements itself.
    pub fn check(&self, sql: &str) -> Result<()> {
        crate::sql::bounds::check_text(sql, &self.door.limits.sql)
    }

    /// Undoes the session's own settings (`RESET ALL`, `DISCARD ALL`).
    pub fn reset_settings(&self) {
        *self.settings.lock() = SessionSettings::default();
    }

    /// Checks that the session's principal may run `stmt`.
    pub fn authorize(&self, stmt: &DfStatement) -> Result<()> {
        if !self.door.auth_required() {
            return Ok(());
        }
        let state = self.sql.context().state();
        for (db, p) in authorize::needs(stmt, &state, self.database())? {
            self.door.authorize(&self.who, db.as_deref(), p)?;
        }
        Ok(())
    }

    /// A statement of this session starting now, for `system.queries`.
    fn running(&self) -> Running {
        let who = &self.who;
        Running::start(
            self.door.statements.clone(),
            who.protocol.name(),
            who.user.as_deref(),
            self.database(),
        )
    }

    /// The statements of `sql`, to run one at a time with [`Statements::next`]: the text is
    /// checked against the server's bounds and every statement authorized before any runs; each
    /// is planned only once the one before it has been asked for (a request's later statements
    /// see what its earlier ones did). Statements run on the statement threads
    /// ([`runtime::QueryRuntime`]).
    pub async fn statements(&self, sql: &str) -> Result<Statements> {
        let running = self.running();
        let (this, text, log) = (self.clone(), sql.to_string(), running.clone());
        let begun = self.door.queries.run(async move { this.begin(&text, &log).await }).await;
        match begun {
            Ok(mut pending) => {
                for p in &mut pending.0 {
                    if let Pending::Done(o) = p {
                        let stream = std::mem::replace(&mut o.stream, empty_stream());
                        o.stream = self.door.queries.drive(stream);
                    }
                }
                Ok(Statements {
                    session: self.clone(),
                    pending: pending.0,
                    slot: pending.1,
                    issuer: self.who.to_string(),
                })
            }
            Err(e) => {
                running.failed();
                Err(e)
            }
        }
    }

    /// What [`Session::statements`] checks and runs first: the statements of `sql` and the
    /// slot they hold among the running ones.
    async fn begin(
        &self,
        sql: &str,
        running: &Running,
    ) -> Result<(VecDeque<Pending>, Option<Arc<limits::Slot>>)> {
        let logged = |mut o: QueryOutput| {
            o.stream = running.clone().answer(&o.kind, o.stream);
            (VecDeque::from([Pending::Done(o)]), None)
        };
        let bounds = &self.door.limits.sql;
        crate::sql::bounds::check_text(sql, bounds)?;
        if is_access_statement(sql) {
            // Any client may create the first user of a server without users.
            return Ok(logged(self.door.run_access(&self.who, parse_access(sql)?).await?));
        }
        if settings::is_reset(sql) {
            self.settings.lock().statement_timeout = None;
            let out = crate::sql::command_output("RESET");
            return Ok((VecDeque::from([Pending::Done(out)]), None));
        }
        let statements = match Request::read(sql, bounds, self.database())? {
            Request::AlterCluster(stmt) => {
                self.door.authorize(&self.who, None, Privilege::Admin)?;
                let issuer = self.who.to_string();
                return Ok(logged(self.sql.alter_cluster(stmt, &issuer).await?));
            }
            Request::Backup(request) => {
                self.door.authorize(&self.who, None, Privilege::Admin)?;
                let issuer = self.who.to_string();
                return Ok(logged(self.sql.backup(request, &issuer).await?));
            }
            Request::Erase(stmt) => {
                let db = stmt.database.clone().unwrap_or_else(|| self.database().to_string());
                self.door.authorize(&self.who, Some(&db), Privilege::Delete)?;
                let issuer = self.who.to_string();
                return Ok(logged(self.sql.erase_by(stmt, &issuer).await?));
            }
            Request::Statements(statements) => statements,
        };
        if let (1, Some(c)) = (statements.len(), statements.front()) {
            if let (Class::Read, DfStatement::Statement(s)) = (&c.class, &c.statement) {
                if let Some(out) = self.run_parameterized(s, running).await? {
                    return Ok((VecDeque::from([Pending::Done(out)]), None));
                }
            }
        }
        // Every statement is checked before any runs.
        let mut pending = VecDeque::with_capacity(statements.len());
        for c in statements {
            let setting = match &c.statement {
                DfStatement::Statement(st) => settings::setting(st)?,
                _ => None,
            };
            pending.push_back(match setting {
                Some(setting) => Pending::Setting(setting),
                None => {
                    self.authorize(&c.statement)?;
                    Pending::Statement(Box::new(c))
                }
            });
        }
        // One slot of the server's running statements for the request, held until every
        // output is consumed or dropped.
        let runs = pending.iter().any(|p| matches!(p, Pending::Statement(_)));
        let slot = match runs {
            true => Some(limits::Slot::new(self.door.slot().await?)),
            false => None,
        };
        Ok((pending, slot))
    }

    /// Plans and starts one statement of a request on the statement threads.
    async fn run_one(
        &self,
        c: Classified,
        slot: Option<Arc<limits::Slot>>,
        issuer: String,
    ) -> Result<QueryOutput> {
        let running = self.running();
        let (this, log, held) = (self.clone(), running.clone(), slot.clone());
        let started = self
            .door
            .queries
            .run(async move {
                let reads = c.class.reads_only();
                let run = this.sql.run(c, &issuer);
                // Each statement of the request is timed from its own start.
                this.start(reads, held, run, log).await
            })
            .await;
        match started {
            Ok((mut o, timeout)) => {
                if let Some(slot) = &slot {
                    slot.release_after((timeout > Duration::ZERO).then_some(timeout));
                }
                let stream = std::mem::replace(&mut o.stream, empty_stream());
                o.stream = self.door.queries.drive(stream);
                Ok(o)
            }
            Err(e) => {
                running.failed();
                Err(e)
            }
        }
    }

    /// Starts one statement with `run`: if it only reads (`reads`), within the session's
    /// statement timeout, its rows cut off at the same deadline; its rows hold `slot` until they
    /// end, and it is recorded as `running` once they do. Returns its output and the timeout
    /// it runs under (zero: none).
    async fn start(
        &self,
        reads: bool,
        slot: Option<Arc<limits::Slot>>,
        run: impl std::future::Future<Output = Result<QueryOutput>>,
        running: Running,
    ) -> Result<(QueryOutput, Duration)> {
        let timeout = self.settings.lock().timeout(self.door.limits.statement_timeout);
        // Only reads are cut off: a write, delete or DDL goes on in the engine once begun, so
        // calling it canceled would be untrue.
        let deadline = timeout.filter(|_| reads).map(|t| (tokio::time::Instant::now() + t, t));
        let mut o = match deadline {
            Some((at, t)) => tokio::time::timeout_at(at, run)
                .await
                .map_err(|_| QueryError::from(limits::timed_out(t)))??,
            None => run.await?,
        };
        o.stream = running.answer(&o.kind, limits::with_deadline(o.stream, deadline, slot));
        Ok((o, deadline.map_or(Duration::ZERO, |(_, t)| t)))
    }

    /// Runs `sql`, which must hold exactly one statement.
    pub async fn execute(&self, sql: &str) -> Result<QueryOutput> {
        let mut statements = self.statements(sql).await?;
        match statements.remaining() {
            1 => statements.next().await.unwrap_or_else(|| Err(QueryError::invalid("empty query"))),
            0 => Err(QueryError::invalid("empty query")),
            n => Err(QueryError::invalid(format!("expected one statement, got {n}"))),
        }
    }
}

/// A statement of a request, before [`Statements::next`] runs it.
enum Pending {
    /// Run already (a statement EbbDB answers itself): its output.
    Done(QueryOutput),
    /// A session setting (`SET statement_timeout`).
    Setting(settings::SettingStatement),
    /// A statement to plan and run.
    Statement(Box<Classified>),
}

/// The statements of one request ([`Session::statements`]), run one at a time.
pub struct Statements {
    session: Session,
    pending: VecDeque<Pending>,
    slot: Option<Arc<limits::Slot>>,
    issuer: String,
}

impl Statements {
    /// How many statements are left to run.
    pub fn remaining(&self) -> usize {
        self.pending.len()
    }

    /// Runs the next statement: its output, or `None` once every statement has run. Consume
    /// (or drop) the previous output first: the next statement sees what it did.
    pub async fn next(&mut self) -> Option<Result<QueryOutput>> {
        Some(match self.pending.pop_front()? {
            Pending::Done(o) => Ok(o),
            Pending::Setting(setting) => {
                let server = self.session.door.limits.statement_timeout;
                Ok(settings::apply(setting, &mut self.session.settings.lock(), server))
            }
            Pending::Statement(s) => {
                let out = self.session.run_one(*s, self.slot.clone(), self.issuer.clone()).await;
                if out.is_err() {
                    // What is left does not run.
                    self.pending.clear();
                }
                out
            }
        })
    }
}

/// A stream without rows, standing in for one being moved.
fn empty_stream() -> datafusion::execution::SendableRecordBatchStream {
    let schema = Arc::new(datafusion::arrow::datatypes::Schema::empty());
    Box::pin(datafusion::physical_plan::stream::RecordBatchStreamAdapter::new(
        schema,
        futures::stream::empty(),
    ))
}
