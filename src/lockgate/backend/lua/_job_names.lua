-- _job_names.lua: a fragment, not a script. Included (--#include _job_names) by the
-- scripts that need a job's id and task name from its encoded form.
-- job_names(payload): the id and task name of an encoded job, read from its start
-- ({"id":...,"task":...}, as lockgate encodes it), else from decoding it; nil when it has
-- none.
local function job_names(payload)
  if not payload then return nil end
  local id, task = string.match(payload, '^{"id":"(.-)","task":"(.-)",')
  if id and not string.find(id, '\\', 1, true) and not string.find(task, '\\', 1, true) then
    return id, task
  end
  local ok, job = pcall(cjson.decode, payload)  -- escapes in a name: decode the whole job
  if ok and type(job) == 'table' and type(job.id) == 'string' and type(job.task) == 'string' then
    return job.id, job.task
  end
  return nil
end
