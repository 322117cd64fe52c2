//! The connection to Redis: one server (`redis://`, `rediss://` for TLS) or a Redis
//! Cluster (several seed nodes), each call bounded by a timeout.

use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::cluster_async::ClusterConnection;
use redis::{AsyncConnectionConfig, Pipeline, RedisResult};

/// Where the global rate limits keep their counts (`weir run --redis`).
#[derive(Clone, Debug)]
pub struct RedisSettings {
    /// Node URLs (`redis://host:port[/db]`, `rediss://…` for TLS, user and password in
    /// the URL): one server, or several seed nodes of a Redis Cluster.
    pub nodes: Vec<String>,
    /// Treat a single node as a seed of a Redis Cluster.
    pub cluster: bool,
    /// CA certificates (PEM) that sign the servers' TLS certificates, instead of the
    /// system's roots.
    pub ca_pem: Option<Vec<u8>>,
    /// Limit of each connect and each sync round trip; past it Redis counts as
    /// unreachable and the policies' fail mode applies.
    pub timeout: Duration,
    /// How often local counts are added to Redis and the global counts read back.
    pub sync_interval: Duration,
}

impl RedisSettings {
    /// Settings for these nodes with the default timeout (100 ms) and sync interval
    /// (20 ms).
    pub fn new(nodes: Vec<String>) -> RedisSettings {
        RedisSettings {
            nodes,
            cluster: false,
            ca_pem: None,
            timeout: Duration::from_millis(100),
            sync_interval: Duration::from_millis(20),
        }
    }

    fn is_cluster(&self) -> bool {
        self.cluster || self.nodes.len() > 1
    }
}

/// A live connection.
#[derive(Clone)]
pub(super) enum Conn {
    Single(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl Conn {
    /// Connects (bounded by the settings' timeout).
    pub(super) async fn connect(s: &RedisSettings) -> RedisResult<Conn> {
        let certs =
            || redis::TlsCertificates::new().root_cert(s.ca_pem.clone().unwrap_or_default());
        if s.is_cluster() {
            let mut b = redis::cluster::ClusterClientBuilder::new(s.nodes.clone())
                .connection_timeout(s.timeout)
                .response_timeout(s.timeout);
            if s.ca_pem.is_some() {
                b = b.certs(certs());
            }
            let client = b.build()?;
            Ok(Conn::Cluster(client.get_async_connection().await?))
        } else {
            let url = s.nodes.first().map(String::as_str).unwrap_or_default();
            let client = match s.ca_pem {
                Some(_) => redis::Client::build_with_tls(url, certs())?,
                None => redis::Client::open(url)?,
            };
            let config = AsyncConnectionConfig::new()
                .set_connection_timeout(Some(s.timeout))
                .set_response_timeout(Some(s.timeout));
            Ok(Conn::Single(
                client
                    .get_multiplexed_async_connection_with_config(&config)
                    .await?,
            ))
        }
    }

    /// Runs pipelines (each within one Cluster slot), concurrently; the replies in order.
    pub(super) async fn run(&self, pipes: Vec<Pipeline>) -> RedisResult<Vec<Vec<u64>>> {
        let calls = pipes.into_iter().map(|p| {
            let conn = self.clone();
            async move {
                match conn {
                    Conn::Single(mut c) => p.query_async::<Vec<u64>>(&mut c).await,
                    Conn::Cluster(mut c) => p.query_async::<Vec<u64>>(&mut c).await,
                }
            }
        });
        futures_util::future::join_all(calls)
            .await
            .into_iter()
            .collect()
    }

    /// A round trip without keys (to notice that Redis is back, or gone, when no
    /// limit has counts to write).
    pub(super) async fn ping(&self) -> RedisResult<()> {
        let cmd = redis::cmd("PING");
        match self.clone() {
            Conn::Single(mut c) => cmd.query_async::<()>(&mut c).await,
            Conn::Cluster(mut c) => cmd.query_async::<()>(&mut c).await,
        }
    }

    /// Whether pipelines may mix keys of several slots (one server) or not (Cluster).
    pub(super) fn is_cluster(&self) -> bool {
        matches!(self, Conn::Cluster(_))
    }
}
