//! Leader election on a `coordination.k8s.io/v1` Lease, the way Kubernetes' own
//! components do it (client-go `leaderelection`): a candidate takes the Lease when it is
//! absent, free or expired; the holder renews it every `retry_period` and steps down as
//! soon as it has not renewed for `renew_deadline` (before the Lease can expire for
//! anyone else, since `renew_deadline < lease_duration`). Every write carries the Lease's
//! `resourceVersion`, so of two candidates racing for it exactly one wins.
//!
//! Expiry is judged on this process's clock, from when it last saw the Lease change, not
//! from the `renewTime` the holder wrote: replicas whose clocks disagree still agree on
//! who leads (client-go does the same).

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::PostParams;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Settings of the election. The defaults are Kubernetes' (kube-controller-manager,
/// kube-scheduler): a 15 s lease, renewed every 2 s, given up after 10 s without renewal.
#[derive(Clone, Debug)]
pub struct LeaseOptions {
    /// The Lease's namespace.
    pub namespace: String,
    /// The Lease's name (one per group of replicas that elect a leader).
    pub name: String,
    /// Who this replica is (`holderIdentity`; unique per replica: the Pod name).
    pub identity: String,
    /// How long a Lease that is not renewed keeps others from taking it.
    pub lease_duration: Duration,
    /// The leader steps down when it has not renewed for this long.
    pub renew_deadline: Duration,
    /// How often the leader renews and a candidate tries to acquire.
    pub retry_period: Duration,
}

impl LeaseOptions {
    /// Options with Kubernetes' default timings.
    pub fn new(namespace: String, name: String, identity: String) -> LeaseOptions {
        LeaseOptions {
            namespace,
            name,
            identity,
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// Why the timings cannot work.
#[derive(Debug, thiserror::Error)]
pub enum InvalidLeaseOptions {
    /// The leader would keep acting after others may take the Lease.
    #[error("the renew deadline ({0:?}) must be shorter than the lease duration ({1:?})")]
    DeadlineNotBeforeExpiry(Duration, Duration),
    /// The leader could not renew even once before its deadline.
    #[error("the retry period ({0:?}) must be shorter than the renew deadline ({1:?})")]
    RetryNotBeforeDeadline(Duration, Duration),
    /// A Lease's duration is whole seconds.
    #[error("the lease duration must be at least 1 s")]
    TooShort,
    /// No holder identity.
    #[error("the holder identity is empty")]
    NoIdentity,
}

impl LeaseOptions {
    fn validate(&self) -> Result<(), InvalidLeaseOptions> {
        if self.identity.is_empty() {
            return Err(InvalidLeaseOptions::NoIdentity);
        }
        if self.lease_duration < Duration::from_secs(1) {
            return Err(InvalidLeaseOptions::TooShort);
        }
        if self.renew_deadline >= self.lease_duration {
            return Err(InvalidLeaseOptions::DeadlineNotBeforeExpiry(
                self.renew_deadline,
                self.lease_duration,
            ));
        }
        if self.retry_period >= self.renew_deadline {
            return Err(InvalidLeaseOptions::RetryNotBeforeDeadline(
                self.retry_period,
                self.renew_deadline,
            ));
        }
        Ok(())
    }
}

/// A running election. `is_leader` turns true when this replica holds the Lease and false
/// the moment it may no longer act as leader. Dropping it stops the loop without
/// releasing the Lease (it then expires); [`Leadership::release`] hands it over at once.
pub struct Leadership {
    leader: watch::Receiver<bool>,
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
}

impl Drop for Leadership {
    fn drop(&mut self) {
        if let Some(t) = &self.task {
            t.abort();
        }
    }
}

impl Leadership {
    /// Starts campaigning for the Lease.
    pub fn start(
        client: kube::Client,
        opts: LeaseOptions,
    ) -> Result<Leadership, InvalidLeaseOptions> {
        opts.validate()?;
        let (tx, leader) = watch::channel(false);
        let (stop, stopped) = watch::channel(false);
        let api: Api<Lease> = Api::namespaced(client, &opts.namespace);
        let task = tokio::spawn(campaign(api, opts, tx, stopped));
        Ok(Leadership {
            leader,
            stop,
            task: Some(task),
        })
    }

    /// Whether this replica leads now, and its changes.
    pub fn watch(&self) -> watch::Receiver<bool> {
        self.leader.clone()
    }

    /// Stops campaigning; if this replica leads, it stops acting as leader and frees the
    /// Lease so that another replica takes over without waiting for it to expire.
    pub async fn release(mut self) {
        let _ = self.stop.send(true);
        if let Some(t) = self.task.take() {
            let _ = t.await;
        }
    }
}

/// What this replica last saw of the Lease, and when (on its own clock).
struct Observed {
    resource_version: String,
    at: Instant,
}

async fn campaign(
    api: Api<Lease>,
    opts: LeaseOptions,
    leader: watch::Sender<bool>,
    mut stop: watch::Receiver<bool>,
) {
    let mut observed: Option<Observed> = None;
    // When this replica last renewed successfully (while it leads).
    let mut renewed = Instant::now();
    loop {
        let leading = *leader.borrow();
        // A leader's attempt must end by its deadline; a candidate's within a period.
        let bound = if leading {
            opts.renew_deadline.saturating_sub(renewed.elapsed())
        } else {
            opts.renew_deadline
        };
        let attempt = tokio::select! {
            r = tokio::time::timeout(bound, try_acquire_or_renew(&api, &opts, &mut observed)) => r,
            _ = stop.wait_for(|s| *s) => break,
        };
        match attempt {
            Ok(Ok(true)) => {
                renewed = Instant::now();
                if !leading {
                    tracing::info!(lease = %format!("{}/{}", opts.namespace, opts.name), identity = %opts.identity, "became the leader");
                    leader.send_replace(true);
                }
            }
            Ok(Ok(false)) => {
                if leading {
                    tracing::warn!(lease = %format!("{}/{}", opts.namespace, opts.name), "another replica holds the lease; no longer the leader");
                    leader.send_replace(false);
                }
            }
            Ok(Err(e)) => {
                tracing::warn!(lease = %format!("{}/{}", opts.namespace, opts.name), error = %e, "lease request failed");
            }
            Err(_) => {
                tracing::warn!(lease = %format!("{}/{}", opts.namespace, opts.name), "lease request timed out");
            }
        }
        if *leader.borrow() && renewed.elapsed() >= opts.renew_deadline {
            tracing::warn!(lease = %format!("{}/{}", opts.namespace, opts.name), deadline_ms = opts.renew_deadline.as_millis() as u64, "could not renew the lease before the deadline; no longer the leader");
            leader.send_replace(false);
        }
        let wait = if *leader.borrow() {
            // Never sleep past the deadline: stepping down must happen on time.
            opts.retry_period
                .min(opts.renew_deadline.saturating_sub(renewed.elapsed()))
        } else {
            opts.retry_period
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop.wait_for(|s| *s) => break,
        }
    }
    if *leader.borrow() {
        leader.send_replace(false);
        tracing::info!(lease = %format!("{}/{}", opts.namespace, opts.name), "stepped down; releasing the lease");
        let _ = tokio::time::timeout(opts.retry_period, release(&api, &opts)).await;
    }
}

fn now() -> MicroTime {
    // From `SystemTime`: jiff's own clock needs its `std` feature.
    let us = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX));
    MicroTime(Timestamp::from_microsecond(us).unwrap_or(Timestamp::UNIX_EPOCH))
}

fn seconds(d: Duration) -> i32 {
    i32::try_from(d.as_secs()).unwrap_or(i32::MAX).max(1)
}

/// One round: `Ok(true)` if this replica holds the Lease afterwards.
async fn try_acquire_or_renew(
    api: &Api<Lease>,
    opts: &LeaseOptions,
    observed: &mut Option<Observed>,
) -> Result<bool, kube::Error> {
    let Some(mut lease) = api.get_opt(&opts.name).await? else {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(opts.name.clone()),
                namespace: Some(opts.namespace.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(opts.identity.clone()),
                lease_duration_seconds: Some(seconds(opts.lease_duration)),
                acquire_time: Some(now()),
                renew_time: Some(now()),
                lease_transitions: Some(0),
                ..LeaseSpec::default()
            }),
        };
        return match api.create(&PostParams::default(), &lease).await {
            Ok(_) => Ok(true),
            // Another replica created it first.
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e),
        };
    };
    let rv = lease.metadata.resource_version.clone().unwrap_or_default();
    if observed.as_ref().is_none_or(|o| o.resource_version != rv) {
        *observed = Some(Observed {
            resource_version: rv,
            at: Instant::now(),
        });
    }
    let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
    let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
    let ours = holder.as_deref() == Some(opts.identity.as_str());
    if let Some(other) = holder.as_deref().filter(|_| !ours) {
        let duration = Duration::from_secs(
            u64::try_from(spec.lease_duration_seconds.unwrap_or(0)).unwrap_or(0),
        );
        let seen = observed.as_ref().map_or_else(Instant::now, |o| o.at);
        if seen.elapsed() < duration {
            tracing::trace!(holder = other, "lease held by another replica");
            return Ok(false);
        }
        tracing::info!(holder = other, "lease expired; taking it over");
    }
    if !ours {
        spec.acquire_time = Some(now());
        spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
    }
    spec.holder_identity = Some(opts.identity.clone());
    spec.lease_duration_seconds = Some(seconds(opts.lease_duration));
    spec.renew_time = Some(now());
    match api
        .replace(&opts.name, &PostParams::default(), &lease)
        .await
    {
        Ok(l) => {
            *observed = Some(Observed {
                resource_version: l.metadata.resource_version.unwrap_or_default(),
                at: Instant::now(),
            });
            Ok(true)
        }
        // Someone else wrote the Lease since it was read: they renewed or took it.
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}

/// Frees the Lease if this replica still holds it: no holder, and a duration of 1 s, so
/// that a candidate that saw it change takes it on its next attempt.
async fn release(api: &Api<Lease>, opts: &LeaseOptions) -> Result<(), kube::Error> {
    let Some(mut lease) = api.get_opt(&opts.name).await? else {
        return Ok(());
    };
    let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
    if spec.holder_identity.as_deref() != Some(opts.identity.as_str()) {
        return Ok(());
    }
    spec.holder_identity = None;
    spec.lease_duration_seconds = Some(1);
    spec.renew_time = Some(now());
    api.replace(&opts.name, &PostParams::default(), &lease)
        .await
        .map(|_| ())
}

/// This replica's identity: `$POD_NAME` (from the downward API) if set, else the host
/// name and the process id.
pub fn default_identity() -> String {
    if let Ok(p) = std::env::var("POD_NAME")
        && !p.is_empty()
    {
        return p;
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default();
    let host = if host.is_empty() {
        "weir".to_string()
    } else {
        host
    };
    format!("{host}-{}", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timings_must_leave_the_leader_time_to_step_down() {
        let mut o = LeaseOptions::new("ns".into(), "l".into(), "me".into());
        assert!(o.validate().is_ok(), "Kubernetes' defaults are valid");
        o.renew_deadline = o.lease_duration;
        assert!(matches!(
            o.validate(),
            Err(InvalidLeaseOptions::DeadlineNotBeforeExpiry(..))
        ));
        o.renew_deadline = Duration::from_secs(1);
        o.retry_period = Duration::from_secs(1);
        assert!(matches!(
            o.validate(),
            Err(InvalidLeaseOptions::RetryNotBeforeDeadline(..))
        ));
        o.identity.clear();
        assert!(matches!(o.validate(), Err(InvalidLeaseOptions::NoIdentity)));
    }

    #[test]
    fn a_lease_duration_is_whole_seconds_and_never_zero() {
        assert_eq!(seconds(Duration::from_millis(1500)), 1);
        assert_eq!(seconds(Duration::from_millis(200)), 1);
        assert_eq!(seconds(Duration::from_secs(15)), 15);
    }
}
