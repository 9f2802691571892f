// What the BullMQ worker and producer share: their options, the packages, the queue.
//
// The npm packages live outside the repository (benchmarks/venvs.py installs them), in
// the folder given as --packages. bullmq is loaded through require, from that folder: it
// finds its optional ioredis peer that way.

import { createRequire } from 'node:module';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';

function env(name) {
  const value = process.env[name];
  if (value === undefined) throw new Error(`${name} is not set`);
  return value;
}

export function wholeNumber(name, text, min = 1) {
  const value = Number(text);
  if (text === undefined || text === '' || !Number.isInteger(value) || value < min) {
    throw new Error(`${name} must be a whole number >= ${min}, got ${JSON.stringify(text)}`);
  }
  return value;
}

// The command line: --packages FOLDER and the script's own options (all strings).
export function options(names) {
  const spec = { packages: { type: 'string' } };
  for (const name of names) spec[name] = { type: 'string' };
  const { values } = parseArgs({ options: spec, strict: true });
  for (const name of ['packages', ...names]) {
    if (values[name] === undefined) throw new Error(`--${name} is required`);
  }
  return values;
}

export function loadPackages(folder) {
  const require = createRequire(join(folder, 'package.json'));
  return {
    bullmq: require('bullmq'),
    IORedis: require('ioredis'),
    version: require('bullmq/package.json').version,
  };
}

export const URL = env('BENCH_URL');
export const QUEUE = `${process.env.BENCH_NS ?? 'bench'}-bullmq`;
export const CONNECTION = { url: URL, maxRetriesPerRequest: null };

// The harness's keys (BENCH_KEYS, as benchmarks/probe.py names them) and BENCH_TARGET.
export function harness() {
  const prefix = env('BENCH_KEYS');
  return {
    keys: {
      first: `${prefix}:first`,
      last: `${prefix}:last`,
      done: `${prefix}:done`,
      low: `${prefix}:low`,
      latencies: `${prefix}:latency`,
    },
    target: wholeNumber('BENCH_TARGET', env('BENCH_TARGET'), 0),
  };
}

// Wall-clock seconds with sub-millisecond digits (Date.now() has whole milliseconds),
// comparable with Python's time.time() in the harness.
export function now() {
  return (performance.timeOrigin + performance.now()) / 1000;
}
