//! [`LocalCluster`]: a controller and every aggregator of a cluster on threads of this process,
//! for examples, tests and applications that want a cluster without daemons. Endpoints join it
//! like any other ([`crate::endpoint::Endpoint::join`] with [`LocalCluster::controller_addr`]
//! and [`LocalCluster::join_options`]).
//!
//! It is protected as a cluster of daemons is (docs/SECURITY.md): unless the cluster says
//! `auth = "off"`, it makes a CA, a certificate for each of its members and a cluster secret
//! in memory; [`LocalCluster::join_options`] carries a process certificate.
//!
//! What it is not: a substitute for `onepipe up`, which runs every member as its own OS
//! process.

use crate::aggregator::{AggregatorDaemon, AggregatorReport, Fault};
use crate::auth::ClusterSecret;
use crate::cluster::{AuthConfig, Cluster, LocalLayout};
use crate::config::DriverConfig;
use crate::controller::{Controller, ControllerSecurity, HaOptions};
use crate::endpoint::JoinOptions;
use crate::tls::{Credentials, Pki, ANY_PROCESS, CONTROLLER};
use std::io;
use std::net::SocketAddr;

/// A controller and the aggregators of one cluster, on threads. Stops them on drop.
pub struct LocalCluster {
    controller: Controller,
    /// The aggregators, by name.
    aggregators: Vec<(String, AggregatorDaemon)>,
    /// The cluster's CA, when it is protected.
    pki: Option<Pki>,
    /// A certificate that may join as any process.
    process: Option<Credentials>,
}

impl LocalCluster {
    /// Starts the controller (on `layout.controller`: by default any free port of 127.0.0.1)
    /// and every aggregator of a cluster laid out as `layout` says. Its processes are expected
    /// to join.
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

    /// Starts the controller (on the cluster's `controller` address: port 0 takes any free
    /// port) and every aggregator of `cluster`.
    ///
    /// # Errors
    /// An invalid cluster (`InvalidInput`), or a socket or thread could not be had.
    pub fn with_cluster(mut cluster: Cluster) -> io::Result<LocalCluster> {
        let names: Vec<String> = cluster.aggregators.iter().map(|a| a.name.clone()).collect();
        let auth = cluster.auth.get_or_insert_with(|| AuthConfig::on(None));
        auth.pki = None;
        let pki = match auth.mode.seals() {
            true => Some(Pki::generate().map_err(io::Error::other)?),
            false => None,
        };
        let issue = |names: &[&str]| -> io::Result<Option<Credentials>> {
            pki.as_ref()
                .map(|p| p.issue(names).map_err(io::Error::other))
                .transpose()
        };
        let security = match issue(&[CONTROLLER])? {
            Some(credentials) => Some(ControllerSecurity {
                credentials,
                secret: ClusterSecret::generate()?,
            }),
            None => None,
        };
        let listen = cluster.controller;
        let controller = Controller::start_secured(cluster, listen, HaOptions::solo(), security)?;
        let cfg = DriverConfig {
            spin_ns: 0,
            ..DriverConfig::default()
        };
        let aggregators = names
            .iter()
            .map(|n| {
                let daemon =
                    AggregatorDaemon::start(controller.addr(), n, cfg.clone(), issue(&[n])?)?;
                Ok((n.clone(), daemon))
            })
            .collect::<io::Result<Vec<_>>>()?;
        let process = issue(&[ANY_PROCESS])?;
        Ok(LocalCluster {
            controller,
            aggregators,
            pki,
            process,
        })
    }

    /// [`JoinOptions`] for one of this cluster's processes: the defaults, with a certificate
    /// that may join as any process when the cluster is protected.
    pub fn join_options(&self) -> JoinOptions {
        JoinOptions {
            credentials: self.process.clone(),
            ..JoinOptions::default()
        }
    }

    /// A certificate of this cluster's CA for `names` (`p3`, `tor-0`,
    /// [`crate::tls::OPERATOR`]); `None` when the cluster is not protected.
    ///
    /// # Errors
    /// A name that is not a DNS name.
    pub fn credentials(&self, names: &[&str]) -> Result<Option<Credentials>, String> {
        self.pki.as_ref().map(|p| p.issue(names)).transpose()
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

    /// Test fault (the runtime's only loss injection; `onepipe up --blackhole`, `--cut`):
    /// applies `fault` at aggregator `name` and returns once its loop has taken it — every
    /// datagram that reaches it afterwards meets the fault ([`AggregatorDaemon::inject`]).
    ///
    /// # Errors
    /// No aggregator `name` (`NotFound`), or it did not take the fault within 60 s (it stopped,
    /// or never started: `TimedOut`).
    pub fn inject_fault(&self, name: &str, fault: Fault) -> io::Result<()> {
        let (_, daemon) = self
            .aggregators
            .iter()
            .find(|(n, _)| n == name)
            .ok_or_else(|| {
                io::Error::new(io::ErrorKind::NotFound, format!("no aggregator {name}"))
            })?;
        match daemon.inject(fault, std::time::Duration::from_secs(60)) {
            true => Ok(()),
            false => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("{name} did not take the fault {fault:?}"),
            )),
        }
    }

    /// Stops the aggregators and the controller; returns the aggregators' reports (those that
    /// joined).
    pub fn stop(self) -> Vec<AggregatorReport> {
        let LocalCluster {
            controller,
            aggregators,
            ..
        } = self;
        let reports = aggregators
            .into_iter()
            .filter_map(|(_, a)| a.stop().ok())
            .collect();
        controller.stop();
        reports
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_layouts_controller_address_is_where_the_controller_listens() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .unwrap()
            .port();
        let controller = SocketAddr::from(([127, 0, 0, 1], port));
        let local = LocalCluster::start(&LocalLayout {
            hosts: 1,
            layers: 1,
            controller,
            ..LocalLayout::default()
        })
        .unwrap();
        assert_eq!(local.controller_addr(), controller);
        local.stop();
    }
}
