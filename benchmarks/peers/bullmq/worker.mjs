// One BullMQ worker process for the benchmark's three tasks:
//   node worker.mjs --packages NPM_FOLDER --concurrency N --batch B --low-batch L --low-ms M
//
// Reports to the harness's keys exactly as benchmarks/probe.py does (batched mode, one
// process; B and L are probe.BATCH and probe.LOW_BATCH, M is base.LOW_JOB_SECONDS in ms):
// the first no-op job stamps `first` (SET NX), every B-th no-op job adds B to `done`
// (INCRBY) and, when that reaches BENCH_TARGET, stamps `last` (SET NX); every L-th low
// job (each sleeps M ms first) adds L to `low`; a critical job pushes its
// enqueue-to-start wait in seconds to `latency` (RPUSH). Stamps are wall-clock seconds.
// The probe's commands go through a connection of their own, and a job that reports
// awaits its report before it finishes.
//
// The runner's environment: BENCH_URL, BENCH_NS, BENCH_KEYS, BENCH_TARGET. SIGTERM or
// SIGINT: close the worker (its active jobs finish), then exit.

import { setTimeout as sleep } from 'node:timers/promises';

import { CONNECTION, QUEUE, URL, harness, loadPackages, now, options, wholeNumber } from './common.mjs';

const args = options(['concurrency', 'batch', 'low-batch', 'low-ms']);
const { bullmq, IORedis } = loadPackages(args.packages);
const concurrency = wholeNumber('--concurrency', args.concurrency);
const BATCH = wholeNumber('--batch', args.batch);
const LOW_BATCH = wholeNumber('--low-batch', args['low-batch']);
const LOW_JOB_MS = Number(args['low-ms']);
if (!(LOW_JOB_MS >= 0)) throw new Error(`--low-ms must be a number >= 0, got ${args['low-ms']}`);
const { keys, target } = harness();
const probe = new IORedis(URL);
let noops = 0;
let lows = 0;

async function noopDone() {
  const n = ++noops;
  if (n === 1) await probe.set(keys.first, String(now()), 'NX');
  if (n % BATCH === 0) {
    const total = await probe.incrby(keys.done, BATCH);
    if (total >= target) await probe.set(keys.last, String(now()), 'NX');
  }
}

async function lowDone() {
  if (++lows % LOW_BATCH === 0) await probe.incrby(keys.low, LOW_BATCH);
}

async function criticalStarted(sent) {
  const waited = now() - sent;
  await probe.rpush(keys.latencies, String(waited));
}

const tasks = {
  noop: async () => noopDone(),
  low: async () => {
    await sleep(LOW_JOB_MS);
    await lowDone();
  },
  critical: async (job) => criticalStarted(job.data.sent),
};

const worker = new bullmq.Worker(
  QUEUE,
  async (job) => {
    const task = tasks[job.name];
    if (!task) throw new Error(`unknown task ${job.name}`);
    await task(job);
  },
  { connection: CONNECTION, concurrency },
);
worker.on('error', (error) => console.error('worker error:', error));
worker.on('failed', (job, error) => console.error(`job ${job?.id} failed:`, error?.message));

let closing = false;
async function shutdown(signal) {
  if (closing) return;
  closing = true;
  console.error(`${signal}: closing the worker`);
  try {
    await worker.close();
    await probe.quit();
  } finally {
    process.exit(0);
  }
}
process.on('SIGTERM', () => shutdown('SIGTERM'));
process.on('SIGINT', () => shutdown('SIGINT'));
