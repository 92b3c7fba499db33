'use strict';
// The HTTP contract's facts (header names, defaults, errors, SQLSTATE table, SQL text), read from
// the byte-identical copy of clients/contract.json this package ships: nothing here is re-typed.
module.exports = require('../contract.json');
