-- A shard's next job or service number (store/shards.py Numbering): its counter `key` kept
-- above `floor`, times the shard count, plus its index (unsharded: the counter itself).

local function draw_number(key, shards, shard, floor)
  local drawn = redis.call("INCR", key)
  if drawn <= tonumber(floor) then
    drawn = tonumber(floor) + 1
    redis.call("SET", key, drawn)
  end
  return drawn * tonumber(shards) + tonumber(shard)
end
