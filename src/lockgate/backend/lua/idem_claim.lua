-- idem_claim.lua: claim an idempotency key before a side effect.
-- KEYS: [1] the claim key, then optional: [2] the same claim as lockgate 0.1 named it (job
--       claims were keyed by job id alone), [last] when ARGV[6] is '1': the claim's other
--       name (its 0.2/0.3 name, see _take_claim.lua); done markers and live claims under
--       both are honoured
-- ARGV: owner token, lease in ms, scope (what tags this claim's markers under the older
--       names), the done-marker buckets' prefix, mirror ('1': also claim the older names,
--       for older workers), other ('1': the last key is the other name), expect (the
--       value of a worker's lapsed claim whose holder the caller judged dead, or '')
-- Touches and returns: see _take_claim.lua ({1, 0} claimed; {0, 0} already done;
-- {-1, ms left on the holder's lease} busy; {-2, 0, value} judge the holder of a worker's
-- lapsed claim first); reads the claim's done-marker buckets.
--#include _take_claim
local other, last = nil, #KEYS
if ARGV[6] == '1' then other, last = KEYS[last], last - 1 end
local legacy = last >= 2 and KEYS[2] or nil
return take_claim(KEYS[1], other, legacy, ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5],
  ARGV[7] or '')
