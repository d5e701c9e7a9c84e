-- A key seen before (`seen`, the value of its key `dedup`): the job it made, MISMATCH for
-- another request, or passed on to a later shard. CREATE_JOB's, CREATE_AFTER's and
-- PASS_KEY's check.
if seen == ELSEWHERE then return unmade({NO_NODES}) end  -- made on a later shard
if seen then
  local id, seen_fingerprint = string.match(seen, "^(%S+) ?(.*)$")
  if seen_fingerprint ~= fingerprint then return unmade({MISMATCH}) end
  return unmade({DUPLICATE, redis.call("GET", K.job(id)) or ""})
end
