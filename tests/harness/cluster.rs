//! Citus clusters.

use std::path::PathBuf;
use std::process::Command;

use crate::*;

/// Whether Citus is installed into the PostgreSQL under test (its citus.so in pkglibdir).
pub fn citus_available() -> bool {
    let pg_config = std::env::var("PG_CONFIG").unwrap_or_else(|_| "pg_config".into());
    let out = run_ok(
        Command::new(&pg_config).arg("--pkglibdir"),
        "pg_config --pkglibdir",
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
        .join("citus.so")
        .exists()
}

/// A Citus cluster of test servers: a coordinator and worker nodes, each its own server on a
/// free port, with pg_idem created on the coordinator (Citus propagates it) and distributed with
/// `idem_distribute(shard_count)`. Stopped when dropped.
pub struct Cluster {
    pub coordinator: Server,
    pub workers: Vec<Server>,
}

impl Cluster {
    /// `conf`: extra postgresql.conf lines for every node; `shard_count` None leaves pg_idem
    /// undistributed (the caller runs idem_distribute).
    pub fn start(workers: usize, shard_count: Option<i32>, conf: &[&str]) -> Cluster {
        let lines = [
            &[
                "shared_preload_libraries = 'citus,pg_idem'",
                "max_prepared_transactions = 100",
                "wal_level = logical",
            ],
            conf,
        ]
        .concat();
        let coordinator = Server::start_bare(&lines);
        let workers: Vec<Server> = (0..workers).map(|_| Server::start_bare(&lines)).collect();
        for node in std::iter::once(&coordinator).chain(&workers) {
            node.client()
                .batch_execute("CREATE EXTENSION citus")
                .expect("create extension citus");
        }
        let mut db = coordinator.client();
        db.execute(
            "SELECT citus_set_coordinator_host('127.0.0.1', $1)",
            &[&i32::from(coordinator.port)],
        )
        .expect("citus_set_coordinator_host");
        for worker in &workers {
            db.execute(
                "SELECT citus_add_node('127.0.0.1', $1)",
                &[&i32::from(worker.port)],
            )
            .expect("citus_add_node");
        }
        db.batch_execute("CREATE EXTENSION pg_idem")
            .expect("create extension pg_idem");
        if let Some(shard_count) = shard_count {
            db.execute("SELECT idem_distribute($1)", &[&shard_count])
                .expect("idem_distribute");
        }
        Cluster {
            coordinator,
            workers,
        }
    }

    /// The worker node that holds `tenant`'s keys.
    pub fn node_of(&self, tenant: &str) -> &Server {
        let port: i32 = self
            .coordinator
            .client()
            .query_one(
                "SELECT n.nodeport FROM pg_dist_placement p JOIN pg_dist_node n USING (groupid) \
                  WHERE p.shardid = get_shard_id_for_distribution_column('idem.keys', $1::text)",
                &[&tenant],
            )
            .expect("the node of a tenant")
            .get(0);
        self.workers
            .iter()
            .find(|w| i32::from(w.port) == port)
            .expect("a worker of this cluster")
    }

    /// Tenants named `{prefix}{n}` until one is found on each worker node, in worker order.
    pub fn tenant_per_worker(&self, prefix: &str) -> Vec<String> {
        let mut found: Vec<Option<String>> = vec![None; self.workers.len()];
        for n in 0..1000 {
            let tenant = format!("{prefix}{n}");
            let port = self.node_of(&tenant).port;
            let i = self
                .workers
                .iter()
                .position(|w| w.port == port)
                .expect("a worker");
            found[i].get_or_insert(tenant);
            if found.iter().all(Option::is_some) {
                break;
            }
        }
        found
            .into_iter()
            .map(|t| t.expect("a tenant on every worker"))
            .collect()
    }
}
