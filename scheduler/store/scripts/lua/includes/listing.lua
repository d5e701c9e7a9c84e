--- @include "keys"
--- @include "load_job"
--- @include "queue_score"

-- The namespaces a listing reads (`scope` as the API sends it, models/namespace.py
-- scope_text: ",team-a,," for team-a and the default): nil for every namespace (scope ""),
-- else the names as stored ("" for the default), at least one (a scope of none is answered
-- empty without a script).
local function namespaces_in(scope)
  if scope == "" then return nil end
  local names = {}
  for name in string.gmatch(string.sub(scope, 2), "([^,]*),") do names[#names + 1] = name end
  return names
end

-- A page of up to `limit` members of `index` from `from` (a ZRANGEBYSCORE bound), "asc" or
-- "desc", as {id, score, id, score...}.
local function index_page(index, from, order, limit)
  if order == "desc" then
    return redis.call("ZREVRANGEBYSCORE", index, from, "-inf", "WITHSCORES", "LIMIT", 0, limit)
  end
  return redis.call("ZRANGEBYSCORE", index, from, "+inf", "WITHSCORES", "LIMIT", 0, limit)
end

-- The first `limit` ids of several indexes' pages (index_page's, each in `order`) merged by
-- score: exact, as each page holds its index's first `limit` and no job is in two of them.
-- A pass over the pages' heads an id: a key is limited to at most 32 namespaces.
local function merged_ids(pages, order, limit)
  local out, at, heads, most = {}, {}, {}, tonumber(limit)
  local sign = order == "desc" and -1 or 1
  for i, page in ipairs(pages) do
    at[i] = 1
    heads[i] = page[2] and sign * tonumber(page[2])
  end
  while #out < most do
    local best = nil
    for i = 1, #pages do
      if heads[i] and (not best or heads[i] < heads[best]) then best = i end
    end
    if not best then break end
    local page, following = pages[best], at[best] + 2
    out[#out + 1] = page[at[best]]
    at[best] = following
    heads[best] = page[following + 1] and sign * tonumber(page[following + 1])
  end
  return out
end

-- The ids of `page` ({id, score...}) of a job in one of `namespaces`, without scores.
local function of_namespaces(page, namespaces)
  local out = {}
  for i = 1, #page, 2 do
    for _, ns in ipairs(namespaces) do
      if redis.call("ZSCORE", K.namespace_jobs(ns), page[i]) then
        out[#out + 1] = page[i]
        break
      end
    end
  end
  return out
end

-- The ids of the index answering GET /jobs with these filters (each may be ""): LIST's page,
-- and the jobs the UI's search looks through (SEARCH). In job number order ("asc": numbers
-- above `bound`), or newest first ("desc": below `bound`, 0 from the newest). A node's pending
-- jobs are listed in its queue's order instead (places.py queue_score: higher priority first,
-- oldest first within one; "desc" from the back), from the place of job-`bound` in it (its
-- number and priority: priority 0 for a job not stored), so a page starts just after the
-- last job of the one before. At most `limit` ids. A schedule's jobs (`schedule` not "") are
-- its index's, by number: the API takes no node or status with it (no index per schedule and
-- status: every change of status would have to keep one).
-- `scope` limits it to some namespaces (namespaces_in): their indexes (namespace_jobs, or
-- namespace_status with `status`) answer, merged by number when there are several. A
-- schedule's or a node's index has no namespace's own: its page keeps only the jobs of
-- those namespaces (a schedule's jobs are all of its namespace, so its page is whole or
-- empty; the API takes no node with a scope).
local function listing_ids(node, status, schedule, scope, bound, order, limit)
  local namespaces = namespaces_in(scope)
  local index = K.all_jobs
  if schedule ~= "" then
    index = K.schedule_jobs(schedule)
  elseif node ~= "" and status ~= "" then
    index = K.node_status(node, status)
  elseif node ~= "" then
    index = K.node_jobs(node)
  elseif namespaces then
    index = nil
  elseif status ~= "" then
    index = K.status(status)
  end
  local from = "(" .. bound
  if bound == "0" then
    from = order == "desc" and "+inf" or "-inf"
  elseif schedule == "" and node ~= "" and status == "pending" then
    local job = load_job("job-" .. bound)
    from = string.format("(%.17g", queue_score(tonumber(bound), job and job.priority))
  end
  if index and namespaces then
    return of_namespaces(index_page(index, from, order, limit), namespaces)
  elseif namespaces then
    local pages = {}
    for i, ns in ipairs(namespaces) do
      local of = status ~= "" and K.namespace_status(ns, status) or K.namespace_jobs(ns)
      pages[i] = index_page(of, from, order, limit)
    end
    return merged_ids(pages, order, limit)
  end
  if order == "desc" then
    return redis.call("ZREVRANGEBYSCORE", index, from, "-inf", "LIMIT", 0, limit)
  end
  return redis.call("ZRANGEBYSCORE", index, from, "+inf", "LIMIT", 0, limit)
end
