-- dlq_trim.lua: trim the dead-letter stream to a maximum length and age.
-- KEYS: the dead-letter stream
-- ARGV: max entries (0: no limit), max age in ms by the server's clock (0: no limit)
-- Touches: XTRIM MAXLEN ~ then XTRIM MINID ~ (see _dead_letter.lua): at most a bounded
--          amount per call, so the caller repeats until a call removes nothing.
-- Returns: how many entries were removed.
--#include _dead_letter
return trim_dead(KEYS[1], ARGV[1], ARGV[2])
