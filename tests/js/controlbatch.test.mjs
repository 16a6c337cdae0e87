// kafkajs against Sluice. Decision 0045's gate: kafkajs reads across control batches of types
// it does not know (KRaft's LEADER_CHANGE and a Sluice type), as one log per replica would keep
// Raft's own entries in the partition log. The broker (TEST_SLUICE_BIN, started here) runs with
// the failpoint `log.raft_control_batches`, which appends two such batches after every produce
// batch. Idempotent and transactional producers (one transaction aborted), read at both
// isolation levels: every record once, in order, and the offsets the control batches take are
// skipped. SLUICE_NO_FAILPOINT=1 starts the broker without the failpoint: the test must fail.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import kafkajs from 'kafkajs';

const { Kafka, logLevel } = kafkajs;
const BIN = process.env.TEST_SLUICE_BIN || fileURLToPath(new URL('../../target/debug/sluice', import.meta.url));

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

function connects(port) {
  return new Promise((resolve) => {
    const c = net.connect(port, '127.0.0.1');
    c.once('connect', () => { c.destroy(); resolve(true); });
    c.once('error', () => resolve(false));
  });
}

async function startBroker(failpoint) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-js-'));
  const port = await freePort();
  const log = fs.openSync(path.join(dir, 'broker.log'), 'a');
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('SLUICE_')));
  const args = ['--log-dirs', path.join(dir, 'data'), '--listeners', `PLAINTEXT://127.0.0.1:${port}`];
  if (failpoint) args.push('--testing-failpoints', 'log.raft_control_batches');
  const proc = spawn(BIN, args, { env, stdio: ['ignore', log, log] });
  const deadline = Date.now() + 20000;
  while (Date.now() < deadline) {
    if (proc.exitCode !== null) throw new Error(`broker exited: ${fs.readFileSync(path.join(dir, 'broker.log'), 'utf8')}`);
    if (await connects(port)) {
      return { bootstrap: `127.0.0.1:${port}`, stop: () => { proc.kill('SIGKILL'); fs.rmSync(dir, { recursive: true, force: true }); } };
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  proc.kill('SIGKILL');
  throw new Error('broker did not listen within 20 s');
}

async function readAll(kafka, topic, readUncommitted, want) {
  const consumer = kafka.consumer({ groupId: `${topic}-${readUncommitted ? 'ru' : 'rc'}`, readUncommitted });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  const out = [];
  let quietSince = null;
  await consumer.run({ eachMessage: async ({ message }) => { out.push(message); } });
  const deadline = Date.now() + 30000;
  while (Date.now() < deadline) {
    if (out.length >= want) {
      quietSince ??= Date.now();
      if (Date.now() - quietSince > 700) break;
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  await consumer.disconnect();
  return out;
}

test('kafkajs reads across Raft control batches', { timeout: 120000 }, async () => {
  const broker = await startBroker(!process.env.SLUICE_NO_FAILPOINT);
  try {
    const kafka = new Kafka({ clientId: 'sluice-js', brokers: [broker.bootstrap], logLevel: logLevel.NOTHING });
    const topic = `ctl-${Date.now()}`;
    const admin = kafka.admin();
    await admin.connect();
    await admin.createTopics({ topics: [{ topic, numPartitions: 1, replicationFactor: 1 }] });
    await admin.disconnect();
    const committed = [];
    const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
    await producer.connect();
    for (let i = 0; i < 200; i++) {
      const v = `i${i}`;
      await producer.send({ topic, acks: -1, messages: [{ partition: 0, value: v }] });
      committed.push(v);
    }
    await producer.disconnect();
    const tx = kafka.producer({ transactionalId: `${topic}-t`, idempotent: true, maxInFlightRequests: 1 });
    await tx.connect();
    for (const [round, commit] of [[0, false], [1, true]]) {
      const t = await tx.transaction();
      for (let i = 0; i < 20; i++) {
        const v = `t${round}-${i}`;
        await t.send({ topic, messages: [{ partition: 0, value: v }] });
        if (commit) committed.push(v);
      }
      if (commit) await t.commit(); else await t.abort();
    }
    await tx.disconnect();
    const rc = await readAll(kafka, topic, false, committed.length);
    assert.deepEqual(rc.map((m) => m.value.toString()), committed);
    const ru = await readAll(kafka, topic, true, committed.length + 20);
    assert.equal(ru.length, committed.length + 20);
    const offsets = ru.map((m) => Number(m.offset));
    for (let i = 1; i < offsets.length; i++) assert.ok(offsets[i] > offsets[i - 1], `offsets ascend at ${i}`);
    // every batch was followed by two control batches: the offsets have gaps
    assert.ok(offsets.at(-1) >= 3 * 200, `the control batches took no offsets: last offset ${offsets.at(-1)}`);
  } finally {
    broker.stop();
  }
});
