//! Citus: what this node knows of the cluster it belongs to, and what a coordinator asks of the
//! others. No policy: the key store, the tenant check and `idem_purge()` decide what to do with
//! it. With idem.keys distributed by tenant, every node purges and counts the shards placed on
//! it (`local_key_tables`); a purge asked for on the coordinator is sent on to every worker
//! node, so that one call purges the whole cluster.

use pgrx::datum::DatumWithOid;

use crate::errors;
use crate::pg::sql;

/// Whether the citus extension exists in this database.
pub fn citus_installed() -> bool {
    // SAFETY: a catalog look-up by a NUL-terminated name; InvalidOid when missing.
    let oid = unsafe { pgrx::pg_sys::get_extension_oid(c"citus".as_ptr(), true) };
    oid != pgrx::pg_sys::InvalidOid
}

/// Whether Citus manages idem.keys (the caller has checked `citus_installed`: the query reads
/// Citus's catalog).
fn keys_distributed() -> bool {
    const QUERY: &str = "SELECT 1::pg_catalog.int8 FROM pg_catalog.pg_dist_partition AS d \
          WHERE d.logicalrelid OPERATOR(pg_catalog.=) 'idem.keys'::pg_catalog.regclass";
    sql::with_client(|client| client.query_one_i64(QUERY, &[])) == Some(1)
}

/// Whether Citus is installed and distributes idem.keys.
pub fn keys_are_distributed() -> bool {
    citus_installed() && keys_distributed()
}

/// Whether this node is a Citus coordinator and idem.keys is distributed.
pub fn coordinator_of_distributed_keys() -> bool {
    const QUERY: &str = "SELECT 1::pg_catalog.int8 WHERE pg_catalog.citus_is_coordinator()";
    keys_are_distributed() && sql::with_client(|client| client.query_one_i64(QUERY, &[])) == Some(1)
}

/// Runs `idem_purge(max_rows)` on every worker node, each in its own transaction there, and
/// returns how many keys they deleted together. A node that fails (down, unreachable) gets a
/// WARNING naming it, and counts for nothing.
pub fn purge_worker_nodes(max_rows: Option<i32>) -> i64 {
    // the command names pg_idem's own schema; format() quotes it and the argument
    const QUERY: &str = "SELECT r.nodename OPERATOR(pg_catalog.||) ':' OPERATOR(pg_catalog.||) r.nodeport::pg_catalog.text, \
            r.success, r.result \
         FROM pg_catalog.run_command_on_workers(pg_catalog.format('SELECT %I.idem_purge(%L::pg_catalog.int4)', \
              (SELECT n.nspname FROM pg_catalog.pg_extension AS e \
                 JOIN pg_catalog.pg_namespace AS n ON n.oid OPERATOR(pg_catalog.=) e.extnamespace \
                WHERE e.extname OPERATOR(pg_catalog.=) 'pg_idem'), $1)) AS r \
         ORDER BY r.nodename, r.nodeport";
    let args: [DatumWithOid; 1] = [match max_rows {
        Some(n) => n.into(),
        None => DatumWithOid::null::<i32>(),
    }];
    sql::with_client(|client| {
        let rows = client.run(QUERY, &args);
        let mut total = 0i64;
        for row in rows {
            let get = |n: usize| {
                row.get::<String>(n)
                    .unwrap_or_else(|e| errors::internal("reading a node's answer", e).raise())
            };
            let node = get(1).unwrap_or_default();
            let success = row
                .get::<bool>(2)
                .unwrap_or_else(|e| errors::internal("reading a node's answer", e).raise())
                .unwrap_or(false);
            let result = get(3).unwrap_or_default();
            match result.parse::<i64>() {
                Ok(n) if success => total += n,
                _ => errors::node_failed("idem_purge", &node, &result).warn(),
            }
        }
        total
    })
}

/// What one node answered to `on_every_node`: its name (host:port), and the first column of
/// its result as text, None when it did not answer (down, unreachable, an error there).
pub struct NodeAnswer {
    pub node: String,
    pub result: Option<String>,
}

/// Runs a one-value query on every node of the Citus cluster (the coordinator included), each in
/// a transaction of its own there, and returns every node's answer. `command` is a format()
/// string whose one `%I` is pg_idem's schema: named as it is called now, found by the
/// extension's OID (the name written at CREATE EXTENSION could by now be another schema its
/// owner planted after renaming this one, and the command runs with the extension owner's
/// rights).
pub fn on_every_node(command: &str) -> Vec<NodeAnswer> {
    const QUERY: &str = "SELECT n.nodename OPERATOR(pg_catalog.||) ':' OPERATOR(pg_catalog.||) n.nodeport::pg_catalog.text, \
            CASE WHEN r.success THEN r.result END \
         FROM pg_catalog.run_command_on_all_nodes(pg_catalog.format($1, \
              (SELECT s.nspname FROM pg_catalog.pg_extension AS e \
                 JOIN pg_catalog.pg_namespace AS s ON s.oid OPERATOR(pg_catalog.=) e.extnamespace \
                WHERE e.extname OPERATOR(pg_catalog.=) 'pg_idem'))) AS r \
         JOIN pg_catalog.pg_dist_node AS n ON n.nodeid OPERATOR(pg_catalog.=) r.nodeid \
         ORDER BY n.groupid, n.nodeid";
    sql::with_client(|client| {
        client
            .run(QUERY, &[command.into()])
            .map(|row| {
                let get = |n: usize| {
                    row.get::<String>(n)
                        .unwrap_or_else(|e| errors::internal("reading a node's answer", e).raise())
                };
                NodeAnswer {
                    node: get(1).unwrap_or_default(),
                    result: get(2).filter(|r| !r.is_empty()),
                }
            })
            .collect()
    })
}

/// The tables that hold this node's keys: idem.keys, or, when Citus distributes it, the shards
/// of idem.keys placed on this node (a shard is a plain table where it lives: each node purges
/// and counts its own). Shard names come from Citus's shard_name(), quoted by it.
pub fn local_key_tables(client: &sql::Client<'_, '_>) -> Vec<String> {
    if !keys_are_distributed() {
        return vec!["idem.keys".to_string()];
    }
    const LOCAL_SHARDS: &str = "SELECT pg_catalog.shard_name(s.logicalrelid, s.shardid) \
         FROM pg_catalog.pg_dist_shard AS s \
         JOIN pg_catalog.pg_dist_placement AS p ON p.shardid OPERATOR(pg_catalog.=) s.shardid \
         WHERE s.logicalrelid OPERATOR(pg_catalog.=) 'idem.keys'::pg_catalog.regclass \
           AND p.groupid OPERATOR(pg_catalog.=) (SELECT g.groupid FROM pg_catalog.pg_dist_local_group AS g) \
         ORDER BY s.shardid";
    client
        .run(LOCAL_SHARDS, &[])
        .map(|row| {
            row.get::<String>(1)
                .unwrap_or_else(|e| errors::internal("reading a shard name", e).raise())
                .unwrap_or_else(|| errors::internal("reading a shard name", "NULL").raise())
        })
        .collect()
}
