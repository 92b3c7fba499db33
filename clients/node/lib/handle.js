'use strict';
// What a handler gets as req.idem.client: the claim's connection, through which it can query
// but not end the transaction. node-postgres has no transaction API of its own, so the
// "commit API" of this handle is what a handler would reach for: commit(), rollback() and
// release() exist and throw. COMMIT or ROLLBACK sent as SQL is caught by the completion's txid
// guard instead (500 transaction_ended).

function refuse(what) {
  return function refused() {
    throw new Error(
      `pg-idem-http: the handler cannot ${what} the claim's transaction: the package commits it ` +
        'with the stored response (answer a 5xx or throw to roll it back)',
    );
  };
}

/** The handle of a pg client: query, escapeIdentifier and escapeLiteral pass through. */
function handleFor(client) {
  return Object.freeze({
    query: (...args) => client.query(...args),
    escapeIdentifier: (text) => client.escapeIdentifier(text),
    escapeLiteral: (text) => client.escapeLiteral(text),
    commit: refuse('commit'),
    rollback: refuse('roll back'),
    release: refuse('release'),
  });
}

module.exports = { handleFor };
