-- _read_claim.lua: a fragment, not a script. Included (--#include _read_claim) by
-- read_stream.lua and take_sorted.lua, which claim the jobs of idempotent tasks as they
-- hand them out, so a claim costs no round trip of its own.
-- read_claims(first) reads the claim arguments from ARGV[first] on: the claim keys' prefix
-- ('' or absent: claim nothing), a token prefix unique to this read, the lease in ms, the
-- done-marker buckets' prefix, mirror ('1': also claim the 0.1 name,
-- App(legacy_markers=True)), then the names of the idempotent tasks (the rest).
-- claim_job(claims, ref, payload) claims the job of an encoded payload handed out as ref
-- (an entry id, a job id) with the token '<token prefix>:<ref>', under the claim key
-- '<prefix>job/<bytes of task>:<task>:<job id>' (Keys.job_claim_name), honouring its
-- 0.2/0.3 name '<prefix>job:<task>:<job id>' and its 0.1 name '<prefix>job:<job id>' (see
-- _take_claim.lua; with mirror = '1' both are claimed too). The names come from the start
-- of the encoded job ({"id":...,"task":...}), else from decoding it.
-- Returns: state, ms: 1 claimed, 0 already done, -1 busy (ms left on the holder's lease),
-- 2 not claimed here (no claims asked, not an idempotent task, names unreadable, or a full
-- memory refused the claim): the worker then claims the job alone.
--#include _take_claim
--#include _job_names
local function read_claims(first)
  local claims = {prefix = ARGV[first] or '', tasks = {}}
  if claims.prefix == '' then return claims end
  claims.token, claims.lease = ARGV[first + 1], ARGV[first + 2]
  claims.done, claims.mirror = ARGV[first + 3], ARGV[first + 4]
  for i = first + 5, #ARGV do claims.tasks[ARGV[i]] = true end
  return claims
end

local function claim_job(claims, ref, payload)
  if claims.prefix == '' then return 2, 0 end
  local id, task = job_names(payload)
  if not id or not claims.tasks[task] then return 2, 0 end
  local key = claims.prefix .. 'job/' .. #task .. ':' .. task .. ':' .. id
  local older, legacy = claims.prefix .. 'job:' .. task .. ':' .. id, claims.prefix .. 'job:' .. id
  local ok, answer = pcall(take_claim, key, older, legacy, claims.token .. ':' .. ref,
    claims.lease, task, claims.done, claims.mirror)
  if not ok then return 2, 0 end
  return answer[1], answer[2]
end
