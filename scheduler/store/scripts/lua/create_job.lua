--- @include "codes"
--- @include "keys"
--- @include "ELSEWHERE"
--- @include "REASON"
--- @include "count_minute"
--- @include "dedup_key_of"
--- @include "draw_number"
--- @include "enter_place"
--- @include "needs_fit"
--- @include "note_event"
--- @include "pick_node"
--- @include "quota_refusal"
--- @include "wake_node"

-- A new job (fragments/new_job.lua says what it takes), pending or delayed.
-- Returns {OK, head} | {DUPLICATE, the head of the job made ("": gone)} | {MISMATCH}
--   | {NOT_STAGED} (the staged spec is gone)
--   | {OVER_QUOTA, namespace, what, its limit, the count} (quota.lua quota_refusal)
--   | {NO_NODES} | {NOT_READY}
--- @insert "new_job"
--- @insert "new_job_placed"
local status = due == "" and "pending" or "delayed"
--- @insert "store_new"
return {OK, job}
