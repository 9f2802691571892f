-- _entry_ids.lua: a fragment, not a script. Included (--#include _entry_ids) by the
-- scripts that compare stream entry ids ('<ms>-<seq>', each part of any length).
-- later(a, b): whether entry id a comes after b (decimal parts compared exactly, as text;
-- false when either is not an id).
local function later(a, b)
  local ams, aseq = string.match(a, '^(%d+)-(%d+)$')
  local bms, bseq = string.match(b, '^(%d+)-(%d+)$')
  if not ams or not bms then return false end
  if #ams ~= #bms then return #ams > #bms end
  if ams ~= bms then return ams > bms end
  if #aseq ~= #bseq then return #aseq > #bseq end
  return aseq > bseq
end
