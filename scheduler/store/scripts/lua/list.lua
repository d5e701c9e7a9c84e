--- @include "get_jobs"
--- @include "listing_ids"

-- A page of GET /jobs (listing.lua listing_ids says which jobs, in which order); it stops at
-- `limit` jobs or `budget` bytes.
-- Returns {1 if it left out jobs it was asked for, else 0; each job's head (get_jobs)...}
local ids = listing_ids(node, status, schedule, scope, bound, order, limit)
local page = get_jobs(ids, tonumber(budget))
table.insert(page, 1, #page < #ids and 1 or 0)
return page
