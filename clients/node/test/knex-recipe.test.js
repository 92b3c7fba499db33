'use strict';
// The README's Knex recipe, run as pasted: written to a directory of its own (pg-idem-http
// linked into its node_modules, knex, express and pg found through NODE_PATH), started with
// DATABASE_URL and PORT against a database of its own, and asked over HTTP.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const net = require('node:net');
const { spawn } = require('node:child_process');
const db = require('./db');

const PACKAGE = path.join(__dirname, '..');
const MARK = /<!-- recipe: knex (\S+) -->\n```js\n([\s\S]*?)```/;

const freePort = () =>
  new Promise((resolve) => {
    const server = net.createServer().listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });

async function waitForPort(port, child, log) {
  for (let i = 0; i < 100; i += 1) {
    assert.equal(child.exitCode, null, `the recipe exited: ${log()}`);
    const open = await new Promise((resolve) => {
      const socket = net.connect(port, '127.0.0.1', () => socket.end(() => resolve(true)));
      socket.on('error', () => resolve(false));
    });
    if (open) return;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  assert.fail(`the recipe did not listen: ${log()}`);
}

test('the Knex recipe of the README runs as pasted', { skip: db.skip }, async () => {
  const [, file, code] = MARK.exec(fs.readFileSync(path.join(PACKAGE, 'README.md'), 'utf8'));
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pg-idem-knex-'));
  const scratch = await db.scratchDatabase();
  let child;
  let output = '';
  try {
    await db.sql('CREATE EXTENSION pg_idem', [], scratch.dsn);
    await db.sql('CREATE TABLE payments (id bigserial PRIMARY KEY, tenant text, amount bigint)', [], scratch.dsn);
    fs.writeFileSync(path.join(dir, file), code);
    fs.mkdirSync(path.join(dir, 'node_modules'));
    fs.symlinkSync(PACKAGE, path.join(dir, 'node_modules', 'pg-idem-http'));
    const port = await freePort();
    child = spawn(process.execPath, [file], {
      cwd: dir,
      env: { ...process.env, DATABASE_URL: scratch.dsn, PORT: String(port), NODE_PATH: path.join(PACKAGE, 'node_modules') },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    child.stdout.on('data', (d) => (output += d));
    child.stderr.on('data', (d) => (output += d));
    await waitForPort(port, child, () => output);

    const first = await db.post(port, '/payments', { amount: 5 }, { key: 'k1', tenant: 'acme' });
    assert.equal(first.status, 201, output);
    assert.deepEqual(db.values(first, 'idempotent-replayed'), []);
    const again = await db.post(port, '/payments', { amount: 5 }, { key: 'k1', tenant: 'acme' });
    assert.deepEqual([again.status, again.body, db.values(again, 'idempotent-replayed')], [201, first.body, ['true']]);
    assert.deepEqual(db.values(again, 'location'), db.values(first, 'location'));
    const other = await db.post(port, '/payments', { amount: 6 }, { key: 'k1', tenant: 'acme' });
    assert.equal(other.status, 422);
    const anonymous = await db.post(port, '/payments', { amount: 5 }, { key: 'k2' });
    assert.equal(anonymous.status, 400);
    assert.deepEqual(await db.sql('SELECT tenant, amount FROM payments', [], scratch.dsn), [{ tenant: 'acme', amount: '5' }]);
    const [stored] = await db.sql('SELECT response_code, response_body->>\'http\' AS http FROM idem.keys', [], scratch.dsn);
    assert.deepEqual(stored, { response_code: 201, http: '2' });
  } finally {
    if (child && child.exitCode === null) {
      child.kill();
      await new Promise((resolve) => child.once('exit', resolve));
    }
    await scratch.drop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
