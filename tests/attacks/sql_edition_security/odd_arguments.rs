//! Arguments: every value a role may pass, nested bodies, infinite intervals.

use super::*;

/// Values a role may pass for each argument type: NULL, the extremes, the odd.
fn values_of(type_name: &str) -> Vec<String> {
    let v = |items: &[&str]| items.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let mut values = match type_name {
        "text" => v(&[
            "''",
            "'t'",
            "' '",
            "pg_catalog.repeat('x', 255)",
            "pg_catalog.repeat('x', 256)",
            "pg_catalog.repeat('é', 255)",
            "pg_catalog.repeat('🦀', 255)",
            "pg_catalog.repeat('x', 10000000)",
            "E'a\\\\b\\n\\t\"'",
            "'%s %I %L ''; SELECT 1; --'",
            "'urn:uuid:01890000-0000-7000-8000-000000000000'",
            "'01890000-0000-7000-8000-000000000000'",
            "'{00000000-0000-7000-8000-000000000000}'",
            "'ffffffffffff7fff8fffffffffffffff'",
        ]),
        "bigint" => v(&[
            "0",
            "-1",
            "(-9223372036854775807 - 1)",
            "9223372036854775807",
        ]),
        "integer" => v(&["0", "-1", "(-2147483647 - 1)", "2147483647"]),
        "interval" => v(&[
            "'1 mon'",
            "'-1 day +25 hours'",
            "'1 mon -31 days'",
            "'0'",
            "'1 microsecond'",
            "'0.4 microseconds'",
            "'36000 days'",
            "'36000 days 00:00:00.000001'",
            "'100 years'",
            "'178000000 years'",
            "'-178000000 years'",
            "'2147483647 days 2147483647 months'",
            "'-2147483648 days'",
        ]),
        "jsonb" => v(&[
            "'null'",
            "'{}'",
            "'[]'",
            "'\"\"'",
            "'1e131071'",
            "'-0.000000000000000000000000000001'",
            "'{\"a\": {\"b\": [1, 2, {\"c\": null}]}}'",
            "(pg_catalog.repeat('[', 400) || pg_catalog.repeat(']', 400))::jsonb",
            "pg_catalog.jsonb_build_object('x', pg_catalog.repeat('a', 2000000))",
            "pg_catalog.to_jsonb('NaN'::numeric)",
            "pg_catalog.to_jsonb('Infinity'::float8)",
        ]),
        "text[]" => v(&[
            "'{}'::text[]",
            "ARRAY[NULL]::text[]",
            "ARRAY['a', 'a']",
            "ARRAY['']",
            "'[0:1]={a,b}'::text[]",
            "ARRAY[['a', 'b'], ['c', 'd']]",
            "pg_catalog.array_fill('x'::text, ARRAY[1001])",
            "(SELECT pg_catalog.array_agg(g::text) FROM pg_catalog.generate_series(1, 100000) AS g)",
        ]),
        "bigint[]" => v(&[
            "'{}'::bigint[]",
            "ARRAY[NULL]::bigint[]",
            "'[5:5]={1}'::bigint[]",
            "ARRAY[[1, 2], [3, 4]]::bigint[]",
            "ARRAY[9223372036854775807]",
        ]),
        "integer[]" => v(&[
            "'{}'::integer[]",
            "ARRAY[NULL]::integer[]",
            "'[0:0]={200}'::integer[]",
            "ARRAY[2147483647]",
        ]),
        "jsonb[]" => v(&[
            "'{}'::jsonb[]",
            "ARRAY[NULL]::jsonb[]",
            "ARRAY[pg_catalog.jsonb_build_object('x', pg_catalog.repeat('a', 2000000))]",
        ]),
        "regrole" => v(&["'app_user'::regrole", "0::oid::regrole", "'pg_monitor'::regrole"]),
        other => panic!("no values for argument type {other}"),
    };
    values.push(format!("NULL::{type_name}"));
    values
}

/// A valid value of each type, for the arguments not varied.
fn base_value(type_name: &str) -> String {
    match type_name {
        "text" => "'t'",
        "bigint" => "1",
        "integer" => "200",
        "interval" => "'1 hour'",
        "jsonb" => "'{\"ok\": true}'",
        "text[]" => "ARRAY['a', 'b']",
        "bigint[]" => "ARRAY[1, 2]::bigint[]",
        "integer[]" => "ARRAY[200, 201]",
        "jsonb[]" => "ARRAY['{}'::jsonb, 'null']",
        "regrole" => "'app_user'::regrole",
        other => panic!("no base value for argument type {other}"),
    }
    .to_string()
}

/// Every public function of pg_idem, called by an application role and by the owner with
/// every argument in turn set to each odd value (the others valid), each in its own
/// transaction: nothing ends in an internal error (XX000) or a crash, nothing runs into the
/// statement timeout.
#[test]
fn no_argument_ends_in_an_internal_error_or_a_crash() {
    let server = plain_server(&[]);
    grant(&server, USER, "t");
    let mut admin = connect(&server, ADMIN, "postgres");
    let functions: Vec<(String, Vec<String>)> = admin
        .query(
            "SELECT p.proname::text, \
                    COALESCE((SELECT pg_catalog.array_agg(pg_catalog.format_type(t, NULL) ORDER BY i) \
                              FROM pg_catalog.unnest(p.proargtypes::oid[]) WITH ORDINALITY AS a(t, i)), '{}') \
             FROM pg_catalog.pg_proc p \
             WHERE p.pronamespace = 'public'::regnamespace AND p.proname LIKE 'idem\\_%' \
             ORDER BY 1, 2",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert!(functions.len() >= 25, "{functions:?}");
    let mut failures = Vec::new();
    let mut calls = 0;
    for grants in [false, true] {
        if grants {
            tenant_grants_on(&server);
        }
        for role in [USER, ADMIN] {
            let mut db = connect_with(&server, role, "postgres", "30s");
            for (name, types) in &functions {
                if name == "idem_distribute" {
                    continue; // needs Citus: refused with 0A000 whatever the arguments
                }
                let mut variants: Vec<Vec<String>> =
                    vec![types.iter().map(|t| base_value(t)).collect()];
                for (i, t) in types.iter().enumerate() {
                    for value in values_of(t) {
                        let mut args: Vec<String> = types.iter().map(|t| base_value(t)).collect();
                        args[i] = value;
                        variants.push(args);
                    }
                }
                for args in variants {
                    let sql = format!("SELECT * FROM public.{name}({})", args.join(", "));
                    db.batch_execute("BEGIN").unwrap();
                    let answer = ask(&mut db, &sql);
                    calls += 1;
                    if let Answer::Error { code, message } = &answer {
                        if code == "XX000" || code == "57014" || code == "client" {
                            failures.push(format!(
                                "{role} (tenant grants {grants}): {}: {code} {message}",
                                if sql.len() > 300 { &sql[..300] } else { &sql }
                            ));
                        }
                    }
                    if db.is_closed() {
                        db = connect_with(&server, role, "postgres", "30s");
                    } else {
                        let _ = ask(&mut db, "ROLLBACK");
                    }
                }
            }
        }
    }
    assert!(calls > 1000, "only {calls} calls");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_no_crash(&server);
}

/// Arrays with lower bounds other than 1, or with two dimensions, are ordinary arrays to
/// PostgreSQL, and the native edition takes their elements in order; the SQL edition indexes
/// them from 1 and reads NULL past the bounds: 22004 "keys[1] must not be null".
#[test]
fn batches_take_any_array_as_the_native_edition_does() {
    let server = plain_server(&[]);
    let mut db = connect(&server, USER, "postgres");
    for (sql, expected) in [
        (
            "SELECT pg_catalog.string_agg(k, ',') FROM idem_consume_many('t', '[0:1]={a,b}'::text[]) AS k",
            "a,b",
        ),
        (
            "SELECT pg_catalog.string_agg(k, ',') FROM idem_consume_many('t', ARRAY[['c', 'd'], ['e', 'f']]) AS k",
            "c,d,e,f",
        ),
        (
            "SELECT pg_catalog.string_agg(c.outcome, ',') FROM idem_claim_many('t', '[0:1]={k1,k2}'::text[], ARRAY['h', 'h']) AS c",
            "claimed,claimed",
        ),
    ] {
        assert_eq!(ask(&mut db, sql).first(), expected, "{sql}");
    }
    assert_no_crash(&server);
}

/// A request body nested a thousand levels deep (valid JSON, which jsonb stores) hashes
/// natively (its walk is iterative up to the stack limit, about 3,500 levels on a default
/// max_stack_depth); the SQL edition's idem.canonical_json recurses through PL/pgSQL, a few kB
/// of stack per level, and stops at about 600 with 54001, PostgreSQL's own error for a stack
/// too deep (docs/editions.md, "request fingerprints"). Both sides of that documented
/// difference: as deep as a request body gets, it hashes; deeper, a clean 54001.
#[test]
fn a_body_nested_past_600_levels_gets_54001_not_a_crash() {
    let server = plain_server(&[]);
    let mut db = connect(&server, USER, "postgres");
    let hash_of_depth = |depth: usize| {
        format!(
            "SELECT pg_catalog.length(idem_request_hash((pg_catalog.repeat('[', {depth}) \
             || pg_catalog.repeat(']', {depth}))::jsonb))"
        )
    };
    for depth in [100, 400] {
        assert_eq!(
            ask(&mut db, &hash_of_depth(depth)).first(),
            "64",
            "depth {depth}"
        );
    }
    for depth in [1000, 2000] {
        assert_eq!(
            ask(&mut db, &hash_of_depth(depth)).code(),
            Some("54001"),
            "depth {depth}"
        );
    }
    assert_eq!(
        ask(&mut db, &hash_of_depth(10)).first(),
        "64",
        "after the errors"
    );
    assert_no_crash(&server);
}

/// PostgreSQL 17 has infinite intervals. A lease or ttl of 'infinity' must be refused with
/// 22023 as natively (a lease longer than 100 years); the SQL edition reads EXTRACT(month FROM
/// 'infinity') as NULL, so idem.interval_us is NULL and check_duration lets it through: a
/// lease of 'infinity' claims the key with no lease at all (any retry takes it over at once),
/// '-infinity' is accepted as well, and a ttl of 'infinity' fails with 23502.
#[test]
fn infinite_intervals_are_refused() {
    if major() < 17 {
        eprintln!(
            "infinite intervals exist from PostgreSQL 17 on; this is {}",
            major()
        );
        return;
    }
    let server = plain_server(&[]);
    let mut db = connect(&server, USER, "postgres");
    for (i, call) in [
        "idem_claim('t', 'k$I', 'h', lease => 'infinity')",
        "idem_claim('t', 'k$I', 'h', lease => '-infinity')",
        "idem_claim('t', 'k$I', 'h', ttl => 'infinity')",
        "idem_claim('t', 'k$I', 'h', ttl => '-infinity')",
        "idem_claim_many('t', ARRAY['k$I'], ARRAY['h'], lease => 'infinity')",
        "idem_consume('t', 'k$I', 'infinity')",
    ]
    .into_iter()
    .enumerate()
    {
        let call = call.replace("$I", &i.to_string());
        assert_eq!(
            ask(&mut db, &format!("SELECT * FROM {call}")).code(),
            Some("22023"),
            "{call}"
        );
    }
    assert_eq!(
        claim_into(&mut db, "f", "idem_claim('t', 'hb', 'h')"),
        "claimed"
    );
    assert_eq!(
        ask(
            &mut db,
            &format!(
                "SELECT idem_heartbeat('t', 'hb', {}, 'infinity')",
                fence("f")
            )
        )
        .code(),
        Some("22023")
    );
    assert_no_crash(&server);
}
