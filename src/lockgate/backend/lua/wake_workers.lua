-- wake_workers.lua: wake idle workers of a partitioned namespace, one per item pushed.
-- KEYS: wake-up lists (Keys.wakeup: one per queue, all under the namespace's own tag)
-- ARGV: [1] the most items a list keeps, then per list how many items to push
-- Touches: RPUSHes that many items (at most ARGV[1]) to each list, trims it to its last
--          ARGV[1] items (stale items, left while every worker was busy, cost an idle
--          worker one look each) and lets it expire after 10 minutes without a push.
-- Returns: how many items were pushed in all.
local most = tonumber(ARGV[1])
local pushed = 0
for i, list in ipairs(KEYS) do
  local count = math.min(tonumber(ARGV[1 + i]), most)
  if count > 0 then
    local items = {}
    for j = 1, count do items[j] = '1' end
    redis.call('RPUSH', list, unpack(items))
    redis.call('LTRIM', list, -most, -1)
    redis.call('PEXPIRE', list, 600000)
    pushed = pushed + count
  end
end
return pushed
