-- server_time.lua: the server's clock, for readers whose cut-offs must agree with what
-- the workers wrote on it (the activity window), whatever the reader's own clock says.
-- KEYS: [1] the registry's index (Keys.workers), not read: it routes the call to the node
--       that keeps the registry and the activity counts
-- ARGV: none
-- Touches: nothing.
-- Returns: milliseconds since the epoch (TIME).
--#include _clock
return now_ms()
