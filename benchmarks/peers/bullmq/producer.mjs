// The benchmark's BullMQ producer, one per measurement:
//   node producer.mjs --packages NPM_FOLDER --chunk N --normal-priority P
//
// Connects, prints "ready <bullmq version>", then runs one command per line of stdin and
// answers each with "ok" (or "error <message>") on stdout, so the adapter's timed calls
// leave Node's start-up and the connection out:
//   one N KIND      N jobs, one queue.add each, awaited one by one
//   bulk N KIND     N jobs through queue.addBulk, --chunk jobs per call
//   critical SENT   one critical job carrying SENT (the harness's wall-clock seconds)
// End of stdin: close the queue and exit.
//
// Jobs are removed when they complete; of the failed ones the latest FAILED_KEPT stay.
// BullMQ serves jobs without a priority before every prioritized one, so all three
// levels are prioritized (1 is BullMQ's highest): critical 1, normal (the no-op jobs)
// --normal-priority, low 3. --normal-priority 0 sends no-op jobs without a priority.

import { createInterface } from 'node:readline';

import { CONNECTION, QUEUE, loadPackages, options, wholeNumber } from './common.mjs';

const FAILED_KEPT = 100;

const args = options(['chunk', 'normal-priority']);
const { bullmq, version } = loadPackages(args.packages);
const chunk = wholeNumber('--chunk', args.chunk);
const PRIORITY = {
  critical: 1,
  noop: wholeNumber('--normal-priority', args['normal-priority'], 0),
  low: 3,
};
const queue = new bullmq.Queue(QUEUE, {
  connection: CONNECTION,
  defaultJobOptions: { removeOnComplete: true, removeOnFail: FAILED_KEPT },
});

function jobOptions(kind) {
  if (!(kind in PRIORITY)) throw new Error(`unknown task ${kind}`);
  return PRIORITY[kind] ? { priority: PRIORITY[kind] } : {};
}

async function one(n, kind) {
  const opts = jobOptions(kind);
  for (let i = 0; i < n; i++) await queue.add(kind, {}, opts);
}

async function bulk(n, kind) {
  const opts = jobOptions(kind);
  for (let start = 0; start < n; start += chunk) {
    const size = Math.min(chunk, n - start);
    await queue.addBulk(Array.from({ length: size }, () => ({ name: kind, data: {}, opts })));
  }
}

async function run(line) {
  const [command, ...rest] = line.trim().split(/\s+/);
  if (command === 'one') return one(wholeNumber('N', rest[0], 0), rest[1]);
  if (command === 'bulk') return bulk(wholeNumber('N', rest[0], 0), rest[1]);
  if (command === 'critical') {
    const sent = Number(rest[0]);
    if (!Number.isFinite(sent)) throw new Error(`not a time: ${rest[0]}`);
    return queue.add('critical', { sent }, jobOptions('critical'));
  }
  throw new Error(`unknown command: ${line}`);
}

await queue.waitUntilReady();
process.stdout.write(`ready ${version}\n`);
for await (const line of createInterface({ input: process.stdin })) {
  if (!line.trim()) continue;
  try {
    await run(line);
    process.stdout.write('ok\n');
  } catch (error) {
    process.stdout.write(`error ${String(error?.message ?? error).replace(/\s+/g, ' ')}\n`);
  }
}
await queue.close();
