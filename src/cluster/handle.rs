//! The clusters berth drives ([`Fleet`]), one [`Cluster`] handle each: its name, its
//! client (every request bounded and retried, [`super::resilient`]), whether it answers,
//! and its kinds, discovered once for every app of it. A sync reaches its app's cluster
//! through its context; nothing holds a client of its own.

use std::sync::Arc;

use super::discovery::SharedKinds;
use super::resilient::Reach;
use super::ClusterError;
use crate::config::{AppConfig, ClusterConfig, Clusters};

/// One cluster: what every sync of its apps shares.
pub struct Cluster {
    /// Its name in the configuration (`default` for a lone `[cluster]`).
    pub name: String,
    /// The client: every request bounded in time and in number in flight, retried when it
    /// fails transiently.
    pub client: kube::Client,
    /// Whether its API server answers (said once when it stops and once when it is back),
    /// and the stop that cuts the client's requests short.
    pub reach: Arc<Reach>,
    /// Its kinds, discovered once for every app.
    pub kinds: SharedKinds,
}

impl Cluster {
    /// Connects to the cluster `config` names (no request is sent yet).
    ///
    /// # Errors
    /// No client could be made: the kubeconfig cannot be read or names no such context.
    pub async fn connect(config: &ClusterConfig) -> Result<Self, ClusterError> {
        let (client, reach) = super::client::connect_reaching(config).await?;
        Ok(Cluster {
            name: config.name().to_string(),
            kinds: SharedKinds::new(client.clone()),
            client,
            reach,
        })
    }
}

/// Every cluster berth drives, in the configuration's order.
pub struct Fleet {
    list: Vec<Arc<Cluster>>,
}

impl Fleet {
    /// Connects to each cluster of the configuration.
    ///
    /// # Errors
    /// A client could not be made; the error names the cluster when there are several.
    pub async fn connect(clusters: &Clusters) -> Result<Self, ClusterError> {
        let mut list = Vec::new();
        for config in clusters.list() {
            let cluster = Cluster::connect(config)
                .await
                .map_err(|e| match (clusters, e) {
                    (Clusters::Many(_), ClusterError::Connect(why)) => {
                        ClusterError::Connect(format!("cluster {}: {why}", config.name()))
                    }
                    (_, e) => e,
                })?;
            list.push(Arc::new(cluster));
        }
        Ok(Fleet { list })
    }

    /// The cluster that holds berth's shared state: the leader and membership Leases (the
    /// first one configured).
    pub fn first(&self) -> &Arc<Cluster> {
        &self.list[0]
    }

    /// The cluster `app` is synced to: the one it names, else the only one; `None` when it
    /// names one not configured, or none while there are several (an app removed from an
    /// older configuration: nothing of it may be touched in another cluster).
    pub fn find(&self, app: &AppConfig) -> Option<&Arc<Cluster>> {
        match &app.cluster {
            Some(name) => self.list.iter().find(|c| c.name == *name),
            None => (self.list.len() == 1).then(|| self.first()),
        }
    }

    /// The cluster of an app of the configuration the fleet was connected from, whose
    /// validation made sure [`Fleet::find`] finds it (else the first).
    pub fn of(&self, app: &AppConfig) -> &Arc<Cluster> {
        self.find(app).unwrap_or_else(|| self.first())
    }

    /// Every cluster, in the configuration's order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<Cluster>> {
        self.list.iter()
    }

    /// Stops every client's requests (shutdown).
    pub fn stop(&self) {
        self.list.iter().for_each(|c| c.reach.stop());
    }
}
