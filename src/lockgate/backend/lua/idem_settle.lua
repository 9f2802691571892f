-- idem_settle.lua: finish a claim, compare-and-set on the owner token.
-- KEYS: [1] the claim key, [2], [3] optional: its older names (0.1's for a job claim, 0.2's
--       for a job or step claim; only with App(legacy_markers=True))
-- ARGV: owner token, action ('done', 'release', 'renew' or 'retake'), ms (done: the
--       marker's TTL; renew, retake: the lease), the done marker for the older names ('' when none), the done-marker
--       buckets' prefix, strings ('1': also leave the string marker 'd:<token>' under the
--       claim key, as lockgate 0.2 wrote it, for 0.2 workers of a rolling upgrade)
-- Touches: only a claim that still belongs to this token: 'done' deletes it (strings: turns
--          it into 'd:<token>' for the TTL) and writes its bucketed done marker for the TTL
--          (see _done_marker.lua); 'release' deletes it so a retry can run; 'renew'
--          extends the lease; 'retake' (the lease keeper's first renewal after renewals
--          failed) also takes the claim again when it is gone and not done (its lease
--          lapsed while Redis was away, e.g. restarted from its AOF past it: the live
--          holder keeps it unless another owner took it first; a plain renewal never
--          does, so one that lands after the claim's release cannot bring it back). A claim taken over by
--          another owner after this one's lease lapsed is never touched: a late release
--          cannot delete the new owner's claim.
--          The older names follow (see _legacy_claim.lua).
-- Returns: 1 when the claim was still ours, 0 otherwise.
--#include _legacy_claim
--#include _done_marker
local claim, token, action, ms = KEYS[1], ARGV[1], ARGV[2], ARGV[3]
local current = redis.call('GET', claim)
if action == 'retake' then
  if not current and not marker_done(ARGV[5], claim) then
    redis.call('SET', claim, 'c:' .. token, 'PX', ms)
    current = 'c:' .. token
  end
  action = 'renew'
end
if current ~= 'c:' .. token then return 0 end
if action == 'done' then
  if ARGV[6] == '1' then
    redis.call('SET', claim, 'd:' .. token, 'PX', ms)
  else
    redis.call('DEL', claim)
  end
  write_marker(ARGV[5], claim, ms)
elseif action == 'release' then
  redis.call('DEL', claim)
else
  redis.call('PEXPIRE', claim, ms)
end
for i = 2, #KEYS do settle_legacy(KEYS[i], token, action, ms, ARGV[4] or '') end
return 1
