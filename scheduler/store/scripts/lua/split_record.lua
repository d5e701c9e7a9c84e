--- @include "keys"
--- @include "part_keys"

-- The upgrade from whole records (models/record.py): job `job_id`'s record, `whole` when
-- it was read, put in parts (head, spec, stdout, stderr; "": none), unless a script changed
-- it meanwhile (the next pass reads it again). Returns 1 if it was split, else 0.
if redis.call("GET", K.job(job_id)) ~= whole then return 0 end
redis.call("SET", K.job(job_id), head)
local parts = {spec, stdout, stderr}
local keys = {}
part_keys(job_id, keys)
for i = 2, #keys do
  if parts[i - 1] ~= "" then
    redis.call("SET", keys[i], parts[i - 1])
  else
    redis.call("DEL", keys[i])
  end
end
return 1
