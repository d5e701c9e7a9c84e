--- @include "codes"
--- @include "keys"

-- Who makes an agent call (AGENT_AUTH, docs/SECURITY.md); the API works it out, in process,
-- from the Authorization header and passes it as one argument, `caller`:
--   "open"  AGENT_AUTH=open: agent calls need nothing (the original Rust agent sends no key)
--   "key"   the request carries TINYAWS_API_KEY: the operator, allowed everywhere
--   "join"  the request carries AGENT_JOIN_KEY: may register a new id (REGISTER_NODE), no more
--   ""      no bearer token
--   else    the SHA-256 (hex) of the bearer token; Redis never sees a token itself
-- A node token reaches its own node only: its poll, its heartbeat, the jobs bound to it.

local function node_access(caller, node)
  if caller == "open" or caller == "key" then return OK end
  if caller == "" then return UNAUTHORIZED end
  local owner = redis.call("HGET", K.tokens, caller)
  if not owner then return UNAUTHORIZED end
  if owner ~= node then return FORBIDDEN end
  return OK
end

-- Whether `caller` may act on job `id` for a node (its report), decided before the record is
-- read: from the token and its node's index of jobs alone (one HGET, one ZSCORE), so a
-- refusal costs the same small work whatever the job holds (a record of MiBs is never copied
-- or decoded for a stranger). A caller without a valid token gets UNAUTHORIZED, a node token
-- NOT_FOUND for a job that is not its node's: each the same answer for an id that exists and
-- one that does not, so neither learns which jobs exist. Returns OK and the token's node
-- (nil for "open" and "key", who may act on any job: whether it exists is the caller's
-- business, the original's 404).
local function owned_access(caller, id, kind)
  if caller == "open" or caller == "key" then return OK end
  local owner = caller ~= "" and redis.call("HGET", K.tokens, caller)
  if not owner then return UNAUTHORIZED end
  local index = kind == "job" and K.node_jobs(owner) or K.node_services(owner)
  if not redis.call("ZSCORE", index, id) then return NOT_FOUND end
  return OK, owner
end

-- Whether `caller` may report on job `id` (CHECK_REPORT, TRANSITION). In a Redis that lost its
-- data (no `initialised` marker) a refusal is NOT_READY instead, as a job not found there is:
-- the token and the node's index went with the data, and the job may be in the snapshot.
-- Restored, the report is checked again (the token, never in the snapshot, is refused then:
-- its agent registers again and retries). Only a refusal pays the EXISTS.
local function job_access(caller, id)
  local access, owner = owned_access(caller, id, "job")
  if access ~= OK and redis.call("EXISTS", K.initialised) == 0 then return NOT_READY end
  return access, owner
end

-- The same for a service (PATCH /services/{id}): its node's index of services.
local function service_access(caller, id)
  return owned_access(caller, id, "service")
end

-- The named keys' next version (api/keyring.py: each API process reads the keys again when it
-- moves), at `at` (epoch s): one past the last, and never below the time in ms, so that a
-- Redis that lost its data (version gone, then counted again) never hands out a version a
-- process still holds from before.
local function next_keys_version(at)
  local last = tonumber(redis.call("GET", K.api_keys_version) or "0")
  local version = math.max(last + 1, math.floor(tonumber(at) * 1000))
  redis.call("SET", K.api_keys_version, version)
  return version
end
