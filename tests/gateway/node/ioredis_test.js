// ioredis (Node.js) against rkv-gateway's Redis listener: what an
// application does with it, checked value by value.
//
// Usage: node ioredis_test.js HOST PORT
// Exit status 0 when every check held; 1 with the failed check otherwise.
"use strict";

const Redis = require("ioredis");
const assert = require("assert");

const [host, portText] = process.argv.slice(2);
const port = Number(portText);

function connect() {
  // No retries: a refused connection fails the test at once.
  return new Redis({ host, port, maxRetriesPerRequest: 0, retryStrategy: () => null, lazyConnect: true });
}

async function main() {
  const redis = connect();
  await redis.connect();
  const prefix = `ioredis:${process.pid}:`;

  assert.strictEqual(await redis.ping(), "PONG");
  assert.strictEqual(await redis.set(prefix + "k", "v"), "OK");
  assert.strictEqual(await redis.get(prefix + "k"), "v");
  assert.strictEqual(await redis.get(prefix + "missing"), null);
  const binary = Buffer.from([0, 1, 2, 255, 13, 10]);
  await redis.set(prefix + "bin", binary);
  assert.ok((await redis.getBuffer(prefix + "bin")).equals(binary));

  // Several connections incrementing one counter at once: no increment lost.
  const clients = [];
  for (let i = 0; i < 6; i++) {
    const c = connect();
    await c.connect();
    clients.push(c);
  }
  const each = 150;
  await Promise.all(clients.map(async (c) => {
    for (let i = 0; i < each; i++) await c.incr(prefix + "counter");
  }));
  assert.strictEqual(await redis.get(prefix + "counter"), String(clients.length * each));

  // A pipeline: replies in order, an error in its place.
  const results = await redis.pipeline()
    .set(prefix + "p1", "1").incr(prefix + "p1").get(prefix + "p1").incr(prefix + "k").mget(prefix + "p1", prefix + "missing")
    .exec();
  assert.deepStrictEqual(results[0], [null, "OK"]);
  assert.deepStrictEqual(results[1], [null, 2]);
  assert.deepStrictEqual(results[2], [null, "2"]);
  assert.ok(results[3][0] instanceof Error);
  assert.strictEqual(results[3][0].message, "ERR value is not an integer or out of range");
  assert.deepStrictEqual(results[4], [null, ["2", null]]);

  // Expiry.
  assert.strictEqual(await redis.set(prefix + "t", "v", "EX", 100), "OK");
  const ttl = await redis.ttl(prefix + "t");
  assert.ok(ttl > 90 && ttl <= 100, `ttl ${ttl}`);
  assert.strictEqual(await redis.persist(prefix + "t"), 1);
  assert.strictEqual(await redis.ttl(prefix + "t"), -1);
  assert.strictEqual(await redis.ttl(prefix + "missing"), -2);

  // Errors reach the application as rejections.
  await assert.rejects(redis.call("LPUSH", prefix + "list", "x"), /ERR unknown command 'LPUSH'/);
  await assert.rejects(redis.keys("*"), /does not support keyspace scans/);

  assert.strictEqual(await redis.del(prefix + "k", prefix + "p1", prefix + "missing"), 2);
  for (const c of clients) c.disconnect();
  redis.disconnect();
  console.log("ioredis: every check held");
}

main().then(() => process.exit(0), (err) => {
  console.error("ioredis: FAILED:", err);
  process.exit(1);
});
