//! Whether a node whose data directory is new creates a cluster or joins one.
//!
//! A node creates a cluster only when told to (`--cluster`, or `--init-cluster` to recover from
//! the loss of a whole cluster) or, as the initial node (`--init-node`, pod 0 of the Helm chart),
//! when it can prove that none exists: every seed answers that it is not a member of any
//! cluster. A seed that does not answer (paused, slow to start, partitioned) proves nothing, so
//! the initial node waits for it however long that takes: pod 0 whose volume was lost joins the
//! cluster its peers serve once they answer, and never starts a second one beside it.
//!
//! So that seeds can answer before they belong to a cluster, a node with a new data directory
//! serves the gRPC health service on its cluster port while it joins or decides
//! ([`Unjoined`]), reporting [`MEMBER_SERVICE`] as not serving; a member reports it serving. A
//! node of release 0.1.0 serves nothing until it has joined, and then not [`MEMBER_SERVICE`]
//! (the check answers `NotFound`), which also means a member.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::net::TcpListener;
use tonic::transport::ClientTlsConfig;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

use crate::error::Result;
use crate::tls::TlsSource;

/// The health service name a node reports serving once it is a member of a cluster.
pub const MEMBER_SERVICE: &str = "ebb.member";

/// How long one question to a seed may take.
const PROBE: Duration = Duration::from_secs(2);

/// What a seed says of itself.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    /// It is a member of a cluster.
    Member,
    /// It is not a member of any cluster (its data directory is new too).
    Empty,
    /// It did not answer (why).
    Silent(String),
}

/// What the initial node does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Every seed answered that no cluster exists: create one.
    Create,
    /// A seed is a member of a cluster: join it.
    Join,
}

/// Asks `seed` whether it is a member of a cluster.
async fn probe(seed: &str, tls: Option<ClientTlsConfig>) -> Seen {
    let ask = async {
        let ep = ebb_raft::transport::endpoint(seed, tls, PROBE).map_err(|e| e.to_string())?;
        let ch = ep.timeout(PROBE).connect().await.map_err(|e| e.to_string())?;
        let req = HealthCheckRequest { service: MEMBER_SERVICE.into() };
        match HealthClient::new(ch).check(req).await {
            Ok(r) if r.get_ref().status == ServingStatus::Serving as i32 => Ok(Seen::Member),
            Ok(_) => Ok(Seen::Empty),
            // A node of release 0.1.0 answers health checks only once it has joined.
            Err(s) if s.code() == tonic::Code::NotFound => Ok(Seen::Member),
            Err(s) => Err(s.message().to_string()),
        }
    };
    match tokio::time::timeout(PROBE * 2, ask).await {
        Ok(Ok(seen)) => seen,
        Ok(Err(why)) => Seen::Silent(why),
        Err(_) => Seen::Silent(format!("no answer within {:?}", PROBE * 2)),
    }
}

/// The initial node's decision: asks every seed until one says it is a member (join), or all
/// say they are not (create). Waits as long as any seed is silent and none is a member.
pub async fn decide(seeds: &[String], tls: Option<ClientTlsConfig>) -> Decision {
    let mut said = Instant::now() - Duration::from_secs(60);
    loop {
        let calls = seeds.iter().map(|s| probe(s, tls.clone()));
        let seen = futures::future::join_all(calls).await;
        if seen.contains(&Seen::Member) {
            tracing::info!("a seed is a member of a cluster: joining it");
            return Decision::Join;
        }
        if seen.iter().all(|s| *s == Seen::Empty) {
            tracing::info!(?seeds, "every seed answers that no cluster exists: creating one");
            return Decision::Create;
        }
        if said.elapsed() >= Duration::from_secs(10) {
            said = Instant::now();
            let silent: Vec<String> = seeds
                .iter()
                .zip(&seen)
                .filter_map(|(s, seen)| match seen {
                    Seen::Silent(why) => Some(format!("{s}: {why}")),
                    _ => None,
                })
                .collect();
            tracing::warn!(
                ?silent,
                "waiting for every seed to answer before deciding whether a cluster exists \
                 (a silent seed may hold one)"
            );
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// The cluster port of a node that is not a member yet: it answers health checks only, saying
/// so. [`Unjoined::close`] ends it; dropped, it stops accepting.
pub struct Unjoined {
    task: tokio::task::JoinHandle<()>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Unjoined {
    /// Serves on a copy of `listener` (returned, for the node's own server later): connections
    /// that arrive between the two wait in the listener's backlog.
    pub async fn serve(
        listener: TcpListener,
        tls: Option<Arc<TlsSource>>,
        max_connections: usize,
    ) -> Result<(TcpListener, Unjoined)> {
        let std = listener.into_std()?;
        let copy = TcpListener::from_std(std.try_clone()?)?;
        let listener = TcpListener::from_std(std)?;
        let (reporter, health) = tonic_health::server::health_reporter();
        reporter.set_service_status(MEMBER_SERVICE, tonic_health::ServingStatus::NotServing).await;
        let incoming = crate::tls::conn::incoming(copy, tls, max_connections)?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let _reporter = reporter;
            let res = crate::grpc::builder()
                .add_service(health)
                .serve_with_incoming_shutdown(incoming, async {
                    let _ = stopped.await;
                })
                .await;
            if let Err(e) = res {
                tracing::warn!(%e, "serving health checks before joining");
            }
        });
        Ok((listener, Unjoined { task, stop: Some(stop) }))
    }

    /// Stops serving and closes the connections it took (the cluster's leader may have
    /// connected to this node already; closed, it connects again, to the node's own server).
    pub async fn close(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if tokio::time::timeout(Duration::from_secs(5), &mut self.task).await.is_err() {
            tracing::warn!("the pre-join server did not close its connections within 5 s");
        }
    }
}

impl Drop for Unjoined {
    fn drop(&mut self) {
        self.task.abort();
    }
}
