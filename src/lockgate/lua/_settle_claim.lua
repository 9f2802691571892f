-- _settle_claim.lua: a fragment, not a script. Included (--#include _settle_claim) by
-- settle_stream.lua and settle_sorted.lua, which settle a job and its claim in one call.
-- settle_claim(claim, legacy, token, action, ttl_ms, legacy_done) applies a claim action,
-- whatever the job entry's owner:
--   'done' writes the done marker 'd:<token>' for ttl_ms when the claim is still ours or
--     gone (its lease lapsed while Redis was down: the work did happen), never over
--     another owner's live claim; with a 0.1 name (legacy), it also writes legacy_done
--     there (never over a live 0.1 claim), so 0.1 workers of a rolling deploy skip the job;
--   'release' deletes the claim only while it is ours;
--   'keep' leaves it (an abandoned sync run still holds it).
-- Returns 1 when the action applied (also when an earlier try already wrote our marker).
--#include _legacy_claim
local function settle_claim(claim, legacy, token, action, ttl, legacy_done)
  if not claim or token == '' or action == 'keep' then return 0 end
  local current = redis.call('GET', claim)
  if action ~= 'done' then
    if current ~= 'c:' .. token then return 0 end
    redis.call('DEL', claim)
    settle_legacy(legacy, token, action, ttl, legacy_done)
    return 1
  end
  if current ~= 'd:' .. token then
    if current and current ~= 'c:' .. token then return 0 end
    redis.call('SET', claim, 'd:' .. token, 'PX', ttl)
  end
  settle_legacy(legacy, token, action, ttl, legacy_done)
  return 1
end
