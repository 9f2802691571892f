-- idem_settle.lua: finish a claim, compare-and-set on the owner token.
-- KEYS: the claim key
-- ARGV: owner token, action ('done', 'release' or 'renew'), ms (done: the marker's TTL;
--       renew: the lease)
-- Touches: only a claim that still belongs to this token: 'done' turns it into the done
--          marker 'd:<token>' for the TTL; 'release' deletes it so a retry can run;
--          'renew' extends the lease. A claim taken over by another owner after this one's
--          lease lapsed is never touched: a late release cannot delete the new owner's claim.
-- Returns: 1 when the claim was still ours, 0 otherwise.
if redis.call('GET', KEYS[1]) ~= 'c:' .. ARGV[1] then return 0 end
if ARGV[2] == 'done' then
  redis.call('SET', KEYS[1], 'd:' .. ARGV[1], 'PX', ARGV[3])
elseif ARGV[2] == 'release' then
  redis.call('DEL', KEYS[1])
else
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
end
return 1
