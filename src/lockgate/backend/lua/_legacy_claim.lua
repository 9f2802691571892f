-- _legacy_claim.lua: a fragment, not a script. Included (--#include _legacy_claim) by
-- idem_settle.lua and _settle_claim.lua.
-- settle_legacy(legacy, token, action, ms, legacy_done) mirrors, under one of the claim's
-- older names (0.1's, or 0.2's and 0.3's), what happened to the claim, so older workers of
-- a rolling deploy see it: 'renew' extends our live claim 'c:<token>' there; 'release'
-- deletes it; 'done' writes the tagged marker legacy_done (over our claim, nothing, or a
-- done marker; never over another owner's live claim).
local function settle_legacy(legacy, token, action, ms, legacy_done)
  if not legacy then return end
  local old = redis.call('GET', legacy)
  local ours = old == 'c:' .. token
  if action == 'renew' then
    if ours then redis.call('PEXPIRE', legacy, ms) end
  elseif action == 'release' then
    if ours then redis.call('DEL', legacy) end
  elseif action == 'done' and legacy_done ~= '' then
    if ours or not old or string.sub(old, 1, 2) == 'd:' then
      redis.call('SET', legacy, legacy_done, 'PX', ms)
    end
  end
end
