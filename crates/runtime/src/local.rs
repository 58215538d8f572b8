//! [`LocalCluster`]: a controller and every aggregator of a cluster on threads of this process,
//! for examples, tests and applications that want a cluster without daemons. Endpoints join it
//! like any other ([`crate::endpoint::Endpoint::join`] with [`LocalCluster::controller_addr`]).
//!
//! What it is not: a substitute for `onepipe up`, which runs every member as its own OS
//! process.

use crate::aggregator::{AggregatorDaemon, AggregatorReport};
use crate::cluster::{Cluster, LocalLayout};
use crate::config::DriverConfig;
use crate::controller::Controller;
use std::io;
use std::net::SocketAddr;

/// A controller and the aggregators of one cluster, on threads. Stops them on drop.
pub struct LocalCluster {
    controller: Controller,
    aggregators: Vec<AggregatorDaemon>,
}

impl LocalCluster {
    /// Starts the controller (on any free port of 127.0.0.1) and every aggregator of a cluster
    /// laid out as `layout` says. Its processes are expected to join.
    ///
    /// ```
    /// use onepipe_runtime::{cluster::LocalLayout, LocalCluster};
    /// let local = LocalCluster::start(&LocalLayout::default()).unwrap();
    /// assert_eq!(local.cluster().procs(), 4);
    /// local.stop();
    /// ```
    ///
    /// # Errors
    /// An impossible layout (`InvalidInput`), or a socket or thread could not be had.
    pub fn start(layout: &LocalLayout) -> io::Result<LocalCluster> {
        let cluster = Cluster::generate(layout)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        LocalCluster::with_cluster(cluster)
    }

    /// Starts the controller (on any free port of 127.0.0.1, whatever the cluster says) and
    /// every aggregator of `cluster`.
    ///
    /// # Errors
    /// An invalid cluster (`InvalidInput`), or a socket or thread could not be had.
    pub fn with_cluster(cluster: Cluster) -> io::Result<LocalCluster> {
        let names: Vec<String> = cluster.aggregators.iter().map(|a| a.name.clone()).collect();
        let controller = Controller::start(cluster, SocketAddr::from(([127, 0, 0, 1], 0)))?;
        let cfg = DriverConfig {
            spin_ns: 0,
            ..DriverConfig::default()
        };
        let aggregators = names
            .iter()
            .map(|n| AggregatorDaemon::start(controller.addr(), n, cfg.clone()))
            .collect::<io::Result<Vec<_>>>()?;
        Ok(LocalCluster {
            controller,
            aggregators,
        })
    }

    /// Where the controller listens: what endpoints join.
    pub fn controller_addr(&self) -> SocketAddr {
        self.controller.addr()
    }

    /// The cluster as the controller serves it (addresses as in the file).
    pub fn cluster(&self) -> Cluster {
        self.controller.cluster()
    }

    /// The controller.
    pub fn controller(&self) -> &Controller {
        &self.controller
    }

    /// Stops the aggregators and the controller; returns the aggregators' reports (those that
    /// joined).
    pub fn stop(self) -> Vec<AggregatorReport> {
        let LocalCluster {
            controller,
            aggregators,
        } = self;
        let reports = aggregators
            .into_iter()
            .filter_map(|a| a.stop().ok())
            .collect();
        controller.stop();
        reports
    }
}
