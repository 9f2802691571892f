-- idem_settle.lua: finish a claim, compare-and-set on the owner token.
-- KEYS: [1] the claim key, [2] optional: its 0.1 name (job claims of idempotent tasks)
-- ARGV: owner token, action ('done', 'release' or 'renew'), ms (done: the marker's TTL;
--       renew: the lease), the done marker for the 0.1 name ('' when none)
-- Touches: only a claim that still belongs to this token: 'done' turns it into the done
--          marker 'd:<token>' for the TTL; 'release' deletes it so a retry can run;
--          'renew' extends the lease. A claim taken over by another owner after this one's
--          lease lapsed is never touched: a late release cannot delete the new owner's claim.
--          The 0.1 name follows (see _legacy_claim.lua).
-- Returns: 1 when the claim was still ours, 0 otherwise.
--#include _legacy_claim
if redis.call('GET', KEYS[1]) ~= 'c:' .. ARGV[1] then return 0 end
if ARGV[2] == 'done' then
  redis.call('SET', KEYS[1], 'd:' .. ARGV[1], 'PX', ARGV[3])
elseif ARGV[2] == 'release' then
  redis.call('DEL', KEYS[1])
else
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
end
settle_legacy(KEYS[2], ARGV[1], ARGV[2], ARGV[3], ARGV[4] or '')
return 1
