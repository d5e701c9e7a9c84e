-- A shard's next job or service number (store/shards.py Numbering): its counter `key` kept
-- above `floor`, times the shard count, plus its index (unsharded: the counter itself); the
-- counter's new value; and whether the counter began with it (it was not there: a new
-- deployment's first, or a Redis that lost its data: CREATE_JOB's check, new_job_placed.lua).
local function draw_number(key, shards, shard, floor)
  local drawn = redis.call("INCR", key)
  local began = drawn == 1
  if floor ~= "0" and drawn <= tonumber(floor) then
    drawn = tonumber(floor) + 1
    redis.call("SET", key, drawn)
  end
  if shards == "1" then return drawn, drawn, began end
  return drawn * tonumber(shards) + tonumber(shard), drawn, began
end

-- A draw given back (nothing was made with it, in the same script): the counter as it was
-- before `counter` was drawn (gone, if it began with it; one raised to a shard's floor
-- stays at the floor: the numbers below it are never drawn).
local function undraw(key, counter, began)
  if began then
    redis.call("DEL", key)
  else
    redis.call("SET", key, counter - 1)
  end
end
