--- @include "keys"
--- @include "namespaces_in"

-- /metrics' and the dashboard's jobs per namespace: of each namespace `scope` covers
-- (listing.lua namespaces_in), or with none of the default and every other namespace in use
-- (keys_teams.py namespaces, at most `most` of them: SSCAN's order, a bound on the script
-- and the series), how many jobs it holds, and in each of `statuses`. A namespace in use
-- holding no job (emptied since) is left out; one `scope` names is not.
-- Returns {namespace (as stored), all, count of each status..., ...}
local namespaces = namespaces_in(scope)
if not namespaces then
  namespaces = {""}  -- the default's, always counted: a create of its jobs adds it nowhere
  local cursor = "0"
  repeat
    local step = redis.call("SSCAN", K.namespaces, cursor, "COUNT", 100)
    cursor = step[1]
    for _, ns in ipairs(step[2]) do
      if ns ~= "" and #namespaces < tonumber(most) then namespaces[#namespaces + 1] = ns end
    end
  until cursor == "0" or #namespaces >= tonumber(most)
end
local out = {}
for _, ns in ipairs(namespaces) do
  local all = redis.call("ZCARD", K.namespace_jobs(ns))
  if all > 0 or scope ~= "" then
    out[#out + 1] = ns
    out[#out + 1] = all
    for _, status in ipairs(statuses) do
      out[#out + 1] = redis.call("ZCARD", K.namespace_status(ns, status))
    end
  end
end
return out
