// Node.js's `memcached` package against rkv-gateway's memcached side:
// strings, numbers, JSON and binary Buffers (the package's flags), gets/cas,
// add/replace/append/prepend, incr/decr, touch, del, getMulti, expiry and
// flush. Run by tests/gateway/memcached_clients_test.py:
//   node memcached_test.js HOST:PORT
// Prints "memcached_test.js: all checks passed" and exits 0, or the failed
// check and exits 1.
'use strict';

const assert = require('assert');
const Memcached = require('memcached');

const server = process.argv[2];
if (!server) {
  console.error('usage: node memcached_test.js HOST:PORT');
  process.exit(2);
}
// One connection in the pool and no retries: a failure shows at once.
const mc = new Memcached(server, { poolSize: 1, retries: 0, timeout: 30000, idle: 60000, maxValue: 1048576 });

function call(method, ...args) {
  return new Promise((resolve, reject) => {
    mc[method](...args, (err, result) => (err ? reject(err) : resolve(result)));
  });
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const prefix = `node:${process.pid}:`;
const k = (name) => prefix + name;

async function main() {
  // Strings, numbers, JSON objects and binary data round-trip with their
  // flags.
  assert.strictEqual(await call('set', k('s'), 'hello world', 0), true);
  assert.strictEqual(await call('get', k('s')), 'hello world');
  assert.strictEqual(await call('set', k('n'), 42, 0), true);
  assert.strictEqual(await call('get', k('n')), 42);
  const obj = { a: 1, b: ['x', 'y'], c: { d: null } };
  assert.strictEqual(await call('set', k('o'), obj, 0), true);
  assert.deepStrictEqual(await call('get', k('o')), obj);
  const bin = Buffer.from([0, 1, 2, 13, 10, 255, 13, 10, 0]);
  assert.strictEqual(await call('set', k('b'), bin, 0), true);
  assert.ok(bin.equals(await call('get', k('b'))), 'binary value');
  assert.strictEqual(await call('get', k('missing')), undefined);

  // getMulti.
  const multi = await call('getMulti', [k('s'), k('n'), k('missing')]);
  assert.deepStrictEqual(multi, { [k('s')]: 'hello world', [k('n')]: 42 });

  // add / replace.
  assert.strictEqual(await call('add', k('a'), 'first', 0), true);
  await assert.rejects(call('add', k('a'), 'second', 0), /Item is not stored/);
  assert.strictEqual(await call('replace', k('a'), 'third', 0), true);
  await assert.rejects(call('replace', k('nope'), 'x', 0), /Item is not stored/);
  assert.strictEqual(await call('get', k('a')), 'third');

  // append / prepend.
  assert.strictEqual(await call('append', k('a'), '-end'), true);
  assert.strictEqual(await call('prepend', k('a'), 'start-'), true);
  assert.strictEqual(await call('get', k('a')), 'start-third-end');

  // gets / cas.
  const g = await call('gets', k('a'));
  assert.strictEqual(g[k('a')], 'start-third-end');
  assert.ok(/^\d+$/.test(String(g.cas)), `cas unique ${g.cas}`);
  assert.strictEqual(await call('cas', k('a'), 'swapped', g.cas, 0), true);
  assert.strictEqual(await call('cas', k('a'), 'again', g.cas, 0), false);
  assert.strictEqual(await call('get', k('a')), 'swapped');

  // incr / decr.
  assert.strictEqual(await call('set', k('c'), '10', 0), true);
  assert.strictEqual(await call('incr', k('c'), 5), 15);
  assert.strictEqual(await call('decr', k('c'), 100), 0);
  assert.strictEqual(await call('incr', k('nocounter'), 1), false);

  // del.
  assert.strictEqual(await call('del', k('c')), true);
  assert.strictEqual(await call('get', k('c')), undefined);

  // Expiry: a 1 s lifetime ends; touch gives a key a new one.
  assert.strictEqual(await call('set', k('e'), 'short', 1), true);
  assert.strictEqual(await call('set', k('t'), 'touched', 1), true);
  assert.strictEqual(await call('touch', k('t'), 3600), true);
  let gone = false;
  for (let i = 0; i < 300 && !gone; ++i) {
    await sleep(100);
    gone = (await call('get', k('e'))) === undefined;
  }
  assert.ok(gone, 'a key set with a 1 s lifetime was still there after 30 s');
  assert.strictEqual(await call('get', k('t')), 'touched');

  // A value over the gateway's limit is refused, and the connection goes on.
  await assert.rejects(call('set', k('big'), 'x'.repeat(2 * 1024 * 1024), 0));
  assert.strictEqual(await call('get', k('s')), 'hello world');

  // The gateway answers version (the memcached protocol release it
  // follows, which the package parses) and stats.
  const version = await call('version');
  const v = Array.isArray(version) ? version[0] : version;
  assert.ok(Number(v.major) >= 1 && /^\d+\.\d+\.\d+$/.test(v.version), `version ${JSON.stringify(version)}`);
  const stats = await call('stats');
  const s = Array.isArray(stats) ? stats[0] : stats;
  assert.ok(Number(s.cmd_get) > 0, `stats ${JSON.stringify(s)}`);

  // flush_all (the test's gateway runs with --allow_flush).
  assert.strictEqual(await call('set', k('f'), 'before', 0), true);
  const flushed = await call('flush');
  assert.ok(JSON.stringify(flushed).includes('true'), `flush ${JSON.stringify(flushed)}`);
  assert.strictEqual(await call('get', k('f')), undefined);
  assert.strictEqual(await call('set', k('f'), 'after', 0), true);
  assert.strictEqual(await call('get', k('f')), 'after');
}

main().then(
  () => {
    mc.end();
    console.log('memcached_test.js: all checks passed');
  },
  (err) => {
    mc.end();
    console.error('memcached_test.js: FAILED:', err && err.stack ? err.stack : err);
    process.exit(1);
  },
);
