'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');

const copy = path.join(__dirname, '..', 'contract.json');
const source = path.join(__dirname, '..', '..', 'contract.json');

test('the shipped contract.json is a byte-identical copy of clients/contract.json', (t) => {
  if (!fs.existsSync(source)) return t.skip('not in the repository: no source to compare with');
  assert.ok(fs.readFileSync(copy).equals(fs.readFileSync(source)), 'stale copy: run clients/sync-contract.sh');
});

test('the package reads its own copy', () => {
  const { contract } = require('..');
  assert.deepEqual(contract, JSON.parse(fs.readFileSync(copy, 'utf8')));
  assert.equal(contract.contract_version, 2);
});
