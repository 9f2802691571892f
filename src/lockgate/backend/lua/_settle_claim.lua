-- _settle_claim.lua: a fragment, not a script. Included (--#include _settle_claim) by
-- settle_stream.lua and settle_sorted.lua, which settle a job and its claim in one call.
-- settle_claim(claim, older, token, action, ttl_ms, legacy_done, done_prefix, strings)
-- applies a claim action, whatever the job entry's owner:
--   'done' writes the claim's done marker for ttl_ms (a member of its bucket, see
--     _done_marker.lua) and deletes the claim, when the claim is still ours or gone (its
--     lease lapsed while Redis was down: the work did happen), never over another owner's
--     live claim; with strings = '1' (App(legacy_markers=True), a claim with no older
--     name) the claim key becomes the string marker 'd:<token>' for ttl_ms instead of
--     going, for 0.2 workers; under each of the claim's older names (older: a list of
--     0.1's and 0.2/0.3's, passed only with legacy_markers) it also writes legacy_done
--     (never over a live claim of another owner), so older workers skip the job;
--   'release' deletes the claim only while it is ours;
--   'keep' leaves it (an abandoned sync run still holds it).
-- Returns 1 when the action applied (also when an earlier try already wrote the marker:
-- the claim is gone and its marker there, or the claim is our own 'd:<token>').
--#include _legacy_claim
--#include _done_marker
local function settle_older(older, token, action, ttl, legacy_done)
  for _, name in ipairs(older) do settle_legacy(name, token, action, ttl, legacy_done) end
end

local function settle_claim(claim, older, token, action, ttl, legacy_done, done_prefix, strings)
  if not claim or token == '' or action == 'keep' then return 0 end
  local current = redis.call('GET', claim)
  if action ~= 'done' then
    if current ~= 'c:' .. token then return 0 end
    redis.call('DEL', claim)
    settle_older(older, token, action, ttl, legacy_done)
    return 1
  end
  local ours = current == 'c:' .. token
  if current and not ours and current ~= 'd:' .. token then return 0 end
  if strings == '1' then
    if current ~= 'd:' .. token then redis.call('SET', claim, 'd:' .. token, 'PX', ttl) end
  elseif current then
    redis.call('DEL', claim)
  end
  if ours or not marker_done(done_prefix, claim) then write_marker(done_prefix, claim, ttl) end
  settle_older(older, token, action, ttl, legacy_done)
  return 1
end
