-- judge_owner.lua: whether the worker holding a claim whose lease lapsed is known dead (see
-- _liveness.lua), so that the claim may be taken over (idem_claim.lua's expect).
-- KEYS: a liveness set (the first partition's: every worker beats to each)
-- ARGV: the holder's consumer name, the caller's consumer name ('' outside a worker), quiet
--       ms and gap ms (the holder's liveness timing, read from its claim's value)
-- Touches: nothing (reads the set).
-- Returns: {1, 0} dead; {0, ms} alive or not yet judged: ms until it could be judged again.
--#include _clock
--#include _liveness
local now = now_ms()
local fate = owner_fate(KEYS[1], ARGV[1], ARGV[2], now, tonumber(ARGV[3]), tonumber(ARGV[4]))
if fate[1] then return {1, 0} end
return {0, math.max(1, fate[2] - now)}
