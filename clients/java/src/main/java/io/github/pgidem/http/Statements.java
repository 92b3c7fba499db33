package io.github.pgidem.http;

/** The contract's statements for one located schema. */
final class Statements {
    final Sql claimBody, claimFields, complete, failFinal, release, assertFence, heartbeat, checkpoint, downstreamKey;

    Statements(String schema) {
        String claim = Contract.sql("claim");
        claimBody = new Sql(claim, schema, Contract.sql("fingerprint_body"));
        claimFields = new Sql(claim, schema, Contract.sql("fingerprint_fields"));
        complete = new Sql(Contract.sql("complete"), schema);
        failFinal = new Sql(Contract.sql("fail_final"), schema);
        release = new Sql(Contract.sql("release"), schema);
        assertFence = new Sql(Contract.sql("assert_fence"), schema);
        heartbeat = new Sql(Contract.sql("heartbeat"), schema);
        checkpoint = new Sql(Contract.sql("checkpoint"), schema);
        downstreamKey = new Sql(Contract.sql("downstream_key"), schema);
    }
}
