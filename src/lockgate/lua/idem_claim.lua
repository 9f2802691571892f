-- idem_claim.lua: claim an idempotency key before a side effect.
-- KEYS: [1] the claim key, [2] optional: the same claim as lockgate 0.1 named it (job
--       claims were keyed by job id alone); its done marker or live claim is honoured
-- ARGV: owner token, lease in ms, scope (the task name tagging markers under KEYS[2]), the
--       done-marker buckets' prefix, mirror ('1': also claim KEYS[2], for 0.1 workers)
-- Touches and returns: see _take_claim.lua ({1, 0} claimed; {0, 0} already done;
-- {-1, ms left on the holder's lease} busy); reads the claim's done-marker bucket.
--#include _take_claim
return take_claim(KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5])
